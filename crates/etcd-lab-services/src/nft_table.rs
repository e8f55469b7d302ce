//! Loads an nft script into the router namespace.

use std::process::Stdio;

use etcd_lab_common::IoContext;
use tokio::io::AsyncWriteExt;
use tokio::process::Command;

use super::ProxyError;

/// Runs `ip netns exec NETNS nft -f -` with `script` on stdin.
pub async fn load(netns: &str, script: &str) -> Result<(), ProxyError> {
    let mut child = Command::new("ip")
        .args(["netns", "exec", netns, "nft", "-f", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .context(|| format!("run nft in {netns}"))?;
    if let Some(mut stdin) = child.stdin.take() {
        stdin
            .write_all(script.as_bytes())
            .await
            .context(|| format!("send the ruleset to nft in {netns}"))?;
    }
    let output = child
        .wait_with_output()
        .await
        .context(|| format!("wait for nft in {netns}"))?;
    if output.status.success() {
        Ok(())
    } else {
        Err(ProxyError::Nft {
            netns: netns.to_owned(),
            stderr: String::from_utf8_lossy(&output.stderr).trim().to_owned(),
        })
    }
}
