//! Errors of the services process.

use std::path::PathBuf;

/// Why the services process could not start or had to stop.
#[derive(Debug, thiserror::Error)]
pub enum ServicesError {
    #[error("cannot read config {path}: {source}")]
    ReadConfig {
        path: PathBuf,
        source: std::io::Error,
    },
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
    #[error("cannot install signal handler: {0}")]
    Signal(#[source] std::io::Error),
}
