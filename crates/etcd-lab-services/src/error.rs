//! Errors of the services process.

use std::path::PathBuf;

use etcd_lab_common::IoError;

/// Why the services process could not start or had to stop.
#[derive(Debug, thiserror::Error)]
pub enum ServicesError {
    /// Reading the config file or installing a signal handler failed.
    #[error(transparent)]
    Io(#[from] IoError),
    #[error("cannot parse config {path}: {source}")]
    ParseConfig {
        path: PathBuf,
        source: serde_json::Error,
    },
    #[error("invalid config: {0}")]
    InvalidConfig(String),
    #[error(transparent)]
    Client(#[from] etcd_lab_common::kube_client::KubeClientError),
    #[error("storage: {0}")]
    Storage(#[from] crate::storage::StorageError),
    #[error("dns: {0}")]
    Dns(#[from] crate::dns::DnsError),
    #[error("service proxy: {0}")]
    Proxy(#[from] crate::proxy::ProxyError),
}
