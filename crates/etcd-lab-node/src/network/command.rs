//! Runs `ip` and `nft`.

use std::process::Command;

use etcd_lab_common::IoContext;

use super::NetworkError;

/// Runs a command; fails with its stderr when it exits non-zero.
pub(crate) fn run(program: &str, args: &[&str]) -> Result<String, NetworkError> {
    let output = Command::new(program)
        .args(args)
        .output()
        .context(|| format!("run {program}"))?;
    if output.status.success() {
        Ok(String::from_utf8_lossy(&output.stdout).into_owned())
    } else {
        Err(NetworkError::Command {
            command: format!("{program} {}", args.join(" ")),
            stderr: String::from_utf8_lossy(&output.stderr).trim().to_owned(),
        })
    }
}

/// `ip ARGS`.
pub(crate) fn ip(args: &[&str]) -> Result<String, NetworkError> {
    run("ip", args)
}

/// `ip ARGS`, ignoring failure (used in teardown, where "already gone" is fine).
pub(crate) fn ip_quiet(args: &[&str]) {
    if let Err(e) = ip(args) {
        tracing::debug!("ignored: {e}");
    }
}

/// Feeds a script to `nft -f -` inside network namespace `netns`.
pub(crate) fn nft_script(netns: &str, script: &str) -> Result<(), NetworkError> {
    use std::io::Write;
    let mut child = Command::new("ip")
        .args(["netns", "exec", netns, "nft", "-f", "-"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .context(|| format!("run nft in {netns}"))?;
    if let Some(mut stdin) = child.stdin.take() {
        stdin
            .write_all(script.as_bytes())
            .context(|| format!("send the script to nft in {netns}"))?;
    }
    let output = child
        .wait_with_output()
        .context(|| format!("wait for nft in {netns}"))?;
    if output.status.success() {
        Ok(())
    } else {
        Err(NetworkError::Command {
            command: format!("nft -f - (in {netns}): {}", script.trim()),
            stderr: String::from_utf8_lossy(&output.stderr).trim().to_owned(),
        })
    }
}

/// Names of the existing network namespaces.
pub(crate) fn netns_list() -> Result<Vec<String>, NetworkError> {
    let out = ip(&["netns", "list"])?;
    Ok(out
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .map(str::to_owned)
        .collect())
}
