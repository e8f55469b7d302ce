//! `etcd-operator backup-store`: the one Pod that mounts the
//! PersistentVolumeClaim of a `persistentVolumeClaim` backup destination
//! and serves it, as the subset of the S3 protocol the operator's
//! object-store client uses, to the operator (backups, continuous backup,
//! retention) and to restore Pods. What both sides agree on is
//! [`crate::pod_contract::backup_store`].
//!
//! Objects are plain files at their keys' paths under the mount ([`files`]):
//! written whole under `.uploads/` first and renamed into place, so a
//! reader never sees half an object, and a store that dies mid-upload
//! leaves only scratch files. Every request but the health check must
//! carry the claim's token. The program stops on SIGTERM or SIGINT.

pub mod files;
pub mod protocol;
pub mod server;

use std::net::SocketAddr;
use std::path::PathBuf;

use tokio::net::TcpListener;
use tokio::signal::unix::{SignalKind, signal};

use crate::pod_contract::backup_store::{STORE_MOUNT_PATH, STORE_PORT, TOKEN_ENV};

/// Arguments of `etcd-operator backup-store`.
#[derive(Debug, Clone, clap::Args)]
pub struct BackupStoreArgs {
    /// The directory served (the claim's mount).
    #[arg(long, env = "BACKUP_STORE_ROOT", default_value = STORE_MOUNT_PATH)]
    pub root: PathBuf,

    /// Address to serve on.
    #[arg(long, env = "BACKUP_STORE_LISTEN", default_value_t = SocketAddr::from(([0, 0, 0, 0], STORE_PORT)))]
    pub listen: SocketAddr,

    /// The token every request must carry (from the claim's Secret).
    #[arg(long, env = TOKEN_ENV, hide_env_values = true)]
    pub token: String,
}

/// The store could not start or stopped.
#[derive(Debug, thiserror::Error)]
pub enum BackupStoreError {
    /// The async runtime could not be built.
    #[error("cannot start the async runtime: {0}")]
    Runtime(#[source] std::io::Error),
    /// The address could not be bound.
    #[error("cannot listen on {address}: {source}")]
    Listen {
        /// The address.
        address: SocketAddr,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// The server stopped.
    #[error("the server stopped: {0}")]
    Serve(#[source] std::io::Error),
    /// A stop signal could not be listened for.
    #[error("cannot listen for stop signals: {0}")]
    Signal(#[source] std::io::Error),
    /// No token, or an empty one.
    #[error("the store needs a token ({TOKEN_ENV})")]
    NoToken,
}

/// Serves until SIGTERM or SIGINT.
pub fn run(args: BackupStoreArgs) -> Result<(), BackupStoreError> {
    if args.token.trim().is_empty() {
        return Err(BackupStoreError::NoToken);
    }
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(BackupStoreError::Runtime)?
        .block_on(serve_until_stopped(args))
}

async fn serve_until_stopped(args: BackupStoreArgs) -> Result<(), BackupStoreError> {
    let listener =
        TcpListener::bind(args.listen)
            .await
            .map_err(|source| BackupStoreError::Listen {
                address: args.listen,
                source,
            })?;
    let mut terminate = signal(SignalKind::terminate()).map_err(BackupStoreError::Signal)?;
    let mut interrupt = signal(SignalKind::interrupt()).map_err(BackupStoreError::Signal)?;
    tracing::info!(address = %args.listen, root = %args.root.display(), "serving backups");
    let app = server::router(
        files::ObjectFiles::new(args.root),
        args.token.trim().to_owned(),
    );
    tokio::select! {
        served = axum::serve(listener, app) => served.map_err(BackupStoreError::Serve)?,
        _ = terminate.recv() => tracing::info!("stopping on SIGTERM"),
        _ = interrupt.recv() => tracing::info!("stopping on SIGINT"),
    }
    Ok(())
}

#[cfg(test)]
mod tests;
