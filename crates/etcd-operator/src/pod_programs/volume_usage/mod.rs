//! `etcd-operator volume-usage`: the sidecar of every member Pod. It
//! serves how full the member's volume is — the real filesystem, so that
//! a volume filled by anything, not only by etcd, shows before etcd fails
//! to write — as the [`VolumeUsage`](crate::pod_contract::VolumeUsage)
//! document of [`crate::pod_contract::volume_usage`].
//!
//! Each request measures afresh ([`measure`]): one `statvfs` and a `stat`
//! of each of etcd's files. The volume is mounted read-only and nothing is
//! ever written to it. The program never exits on its own ([`server`]
//! retries an address it cannot bind): its container has no probe, and a
//! container that exits would make the member Pod unready. It stops on
//! SIGTERM or SIGINT.

pub mod measure;
pub mod server;

use std::net::SocketAddr;
use std::path::PathBuf;

use tokio::signal::unix::{SignalKind, signal};

/// Arguments of `etcd-operator volume-usage`.
#[derive(Debug, Clone, clap::Args)]
pub struct VolumeUsageArgs {
    /// etcd's data directory (`--data-dir` of etcd), on the member's volume.
    #[arg(long, env = "VOLUME_USAGE_DATA_DIR")]
    pub data_dir: PathBuf,

    /// Address to serve `/volume-usage` on.
    #[arg(long, env = "VOLUME_USAGE_LISTEN", default_value = "0.0.0.0:2383")]
    pub listen: SocketAddr,
}

/// The sidecar could not start.
#[derive(Debug, thiserror::Error)]
pub enum VolumeUsageProgramError {
    /// The async runtime could not be built.
    #[error("cannot start the async runtime: {0}")]
    Runtime(#[source] std::io::Error),
    /// A stop signal could not be listened for.
    #[error("cannot listen for stop signals: {0}")]
    Signal(#[source] std::io::Error),
}

/// Serves until SIGTERM or SIGINT, on one thread (and one more while a
/// measurement runs).
pub fn run(args: VolumeUsageArgs) -> Result<(), VolumeUsageProgramError> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .max_blocking_threads(1)
        .build()
        .map_err(VolumeUsageProgramError::Runtime)?
        .block_on(serve_until_stopped(args))
}

async fn serve_until_stopped(args: VolumeUsageArgs) -> Result<(), VolumeUsageProgramError> {
    let mut terminate = signal(SignalKind::terminate()).map_err(VolumeUsageProgramError::Signal)?;
    let mut interrupt = signal(SignalKind::interrupt()).map_err(VolumeUsageProgramError::Signal)?;
    tokio::select! {
        () = server::serve_forever(args.listen, args.data_dir) => {}
        _ = terminate.recv() => tracing::info!("stopping on SIGTERM"),
        _ = interrupt.recv() => tracing::info!("stopping on SIGINT"),
    }
    Ok(())
}

#[cfg(test)]
mod tests;
