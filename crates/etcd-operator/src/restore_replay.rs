//! `restore-volume replay`: serve the freshly restored data dir with etcd on
//! loopback only (no peer can reach it, no client but this one), apply the
//! fetched incremental segments, and stop etcd cleanly so that the data dir
//! holds every replayed revision when the member starts on it.

use std::net::TcpListener;
use std::path::Path;
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use object_store::local::LocalFileSystem;
use tokio::process::{Child, Command};

use crate::backup::{BackupStore, EncryptionKey};
use crate::restore_backup::{FetchPlan, RestoreBackupError};
use crate::restore_volume::RestoreLayout;

/// Largest replay transaction etcd accepts (one source revision).
const MAX_REQUEST_BYTES: u64 = 256 * 1024 * 1024;

/// How long etcd may take to serve the restored data dir.
const START_TIMEOUT: Duration = Duration::from_secs(120);

/// Replays the segments of `plan` on the restored data dir; returns the
/// revision the data dir holds afterwards.
pub async fn replay_on_loopback(
    etcd_binary: &Path,
    member_name: &str,
    layout: &RestoreLayout,
    plan: &FetchPlan,
    key: Option<EncryptionKey>,
) -> Result<i64, RestoreBackupError> {
    let failed = |what: String| RestoreBackupError::Replay(what);
    let client_port = free_loopback_port().map_err(|e| failed(format!("no free port: {e}")))?;
    let peer_port = free_loopback_port().map_err(|e| failed(format!("no free port: {e}")))?;
    let client_url = format!("http://127.0.0.1:{client_port}");
    let peer_url = format!("http://127.0.0.1:{peer_port}");
    // The data dir already holds its membership (written by etcdutl with
    // the member's real peer URL); the loopback URLs only say where this
    // temporary server listens.
    let mut etcd = Command::new(etcd_binary)
        .arg(format!("--name={member_name}"))
        .arg(format!("--data-dir={}", layout.staging.display()))
        .arg(format!("--listen-client-urls={client_url}"))
        .arg(format!("--advertise-client-urls={client_url}"))
        .arg(format!("--listen-peer-urls={peer_url}"))
        .arg(format!("--initial-advertise-peer-urls={peer_url}"))
        .arg(format!("--initial-cluster={member_name}={peer_url}"))
        // One transaction per source revision: a lease revoked in the
        // source deleted all its keys in one revision.
        .arg("--max-txn-ops=1000000")
        .arg(format!("--max-request-bytes={MAX_REQUEST_BYTES}"))
        .arg("--log-level=warn")
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| failed(format!("starting {}: {e}", etcd_binary.display())))?;

    let result = replay_against(&client_url, &mut etcd, layout, plan, key).await;
    stop(&mut etcd).await;
    result
}

async fn replay_against(
    client_url: &str,
    etcd: &mut Child,
    layout: &RestoreLayout,
    plan: &FetchPlan,
    key: Option<EncryptionKey>,
) -> Result<i64, RestoreBackupError> {
    let failed = |what: String| RestoreBackupError::Replay(what);
    let mut client = connect(client_url, etcd).await?;
    let local = LocalFileSystem::new_with_prefix(&layout.segments)
        .map_err(|e| failed(format!("opening {}: {e}", layout.segments.display())))?;
    let store = BackupStore::from_parts(
        Arc::new(local),
        object_store::path::Path::from(""),
        format!("file://{}", layout.segments.display()),
    )
    .with_encryption(key);
    let chain = crate::backup::incremental::segment_chain(&store, &plan.base).await?;
    let outcome = crate::backup::incremental::replay_segments(
        &store,
        &chain,
        Some(plan.target_revision),
        &mut client,
    )
    .await?;
    Ok(outcome.revision)
}

/// A client once etcd answers; fails early when etcd exits.
async fn connect(
    client_url: &str,
    etcd: &mut Child,
) -> Result<etcd_client::Client, RestoreBackupError> {
    let started = Instant::now();
    loop {
        if let Ok(Some(status)) = etcd.try_wait() {
            return Err(RestoreBackupError::Replay(format!(
                "etcd exited on the restored data dir ({status})"
            )));
        }
        let options = etcd_client::ConnectOptions::new()
            .with_connect_timeout(Duration::from_secs(2))
            .with_timeout(Duration::from_secs(5));
        if let Ok(mut client) = etcd_client::Client::connect([client_url], Some(options)).await
            && client.status().await.is_ok()
        {
            return Ok(client);
        }
        if started.elapsed() > START_TIMEOUT {
            return Err(RestoreBackupError::Replay(format!(
                "etcd did not serve the restored data dir within {START_TIMEOUT:?}"
            )));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// SIGTERM (etcd flushes and exits), then SIGKILL after a grace period.
async fn stop(etcd: &mut Child) {
    if let Some(pid) = etcd.id().and_then(|p| i32::try_from(p).ok()) {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGTERM,
        );
    }
    if tokio::time::timeout(Duration::from_secs(30), etcd.wait())
        .await
        .is_err()
    {
        let _ = etcd.kill().await;
    }
}

fn free_loopback_port() -> std::io::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}
