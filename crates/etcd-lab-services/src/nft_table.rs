//! nft tables of the router namespace, computed from watched objects: a
//! table is loaded in one transaction and loaded again whenever what it is
//! computed from changes (and every [`RESYNC`], in case the router
//! namespace was recreated under it).

use std::future::Future;
use std::process::Stdio;
use std::time::Duration;

use etcd_lab_common::{IoContext, IoError};
use tokio::io::AsyncWriteExt;
use tokio::process::Command;
use tokio::sync::Notify;

/// How long a burst of changes may last before the table is rewritten.
const DEBOUNCE: Duration = Duration::from_millis(200);
/// The table is rewritten at least this often.
const RESYNC: Duration = Duration::from_secs(10);
/// Retry delay after a failed load.
const RETRY: Duration = Duration::from_secs(1);

/// Why a script could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum NftError {
    /// Running `nft` or feeding it the script failed.
    #[error(transparent)]
    Io(#[from] IoError),
    #[error("nft in netns {netns} failed: {stderr}")]
    Nft { netns: String, stderr: String },
}

/// A table script and a few words on what it holds, for the log.
pub struct Rendered {
    pub script: String,
    pub summary: String,
}

/// Runs `ip netns exec NETNS nft -f -` with `script` on stdin.
pub async fn load(netns: &str, script: &str) -> Result<(), NftError> {
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
        Err(NftError::Nft {
            netns: netns.to_owned(),
            stderr: String::from_utf8_lossy(&output.stderr).trim().to_owned(),
        })
    }
}

/// Once `ready` resolves to true, loads what `render` returns into `netns`
/// and again after every burst of `changed` notifications in which the
/// script changed, forever. `what` names the table in the log.
pub async fn keep_loaded(
    netns: &str,
    what: &str,
    changed: &Notify,
    ready: impl Future<Output = bool>,
    mut render: impl FnMut() -> Rendered,
) {
    // Rules from a partial list would cut working traffic: wait for every
    // initial list.
    if !ready.await {
        return;
    }
    let mut applied: Option<String> = None;
    let mut last_write = tokio::time::Instant::now();
    loop {
        let Rendered { script, summary } = render();
        let stale = last_write.elapsed() >= RESYNC;
        if applied.as_deref() != Some(script.as_str()) || stale {
            match load(netns, &script).await {
                Ok(()) => {
                    if applied.as_deref() != Some(script.as_str()) {
                        tracing::info!("{what}: rules updated ({summary})");
                    }
                    applied = Some(script);
                    last_write = tokio::time::Instant::now();
                }
                Err(e) => {
                    tracing::warn!("{what}: {e}");
                    applied = None;
                }
            }
        }
        let retry = if applied.is_some() { RESYNC } else { RETRY };
        tokio::select! {
            () = changed.notified() => tokio::time::sleep(DEBOUNCE).await,
            () = tokio::time::sleep(retry) => {}
        }
    }
}
