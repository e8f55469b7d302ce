//! A Kubernetes client from a kubeconfig file, for every lab process.

use std::path::{Path, PathBuf};
use std::time::Duration;

use kube::config::{KubeConfigOptions, Kubeconfig};

/// Errors while building a client from a kubeconfig.
#[derive(Debug, thiserror::Error)]
pub enum KubeClientError {
    #[error("cannot load kubeconfig {path}: {source}")]
    Kubeconfig {
        path: PathBuf,
        #[source]
        source: kube::config::KubeconfigError,
    },
    #[error("cannot build a Kubernetes client from {path}: {source}")]
    Client {
        path: PathBuf,
        #[source]
        source: kube::Error,
    },
}

/// How long a client waits for the API server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timeouts {
    pub connect: Duration,
    /// Per read (`None`: no limit, as watches need).
    pub read: Option<Duration>,
}

impl Timeouts {
    /// For long-running processes that watch (node agent, cluster
    /// services): kube's defaults, no limit on reads.
    pub const WATCH: Self = Self {
        connect: Duration::from_secs(30),
        read: None,
    };
    /// For the CLI and readiness checks: a stopped API server is noticed
    /// quickly.
    pub const REQUEST: Self = Self {
        connect: Duration::from_secs(3),
        read: Some(Duration::from_secs(30)),
    };
}

/// A client for the cluster, user and CA of the current context of the
/// kubeconfig at `path`.
pub async fn from_kubeconfig(
    path: &Path,
    timeouts: Timeouts,
) -> Result<kube::Client, KubeClientError> {
    let kubeconfig_error = |source| KubeClientError::Kubeconfig {
        path: path.to_owned(),
        source,
    };
    let kubeconfig = Kubeconfig::read_from(path).map_err(kubeconfig_error)?;
    let mut config =
        kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
            .await
            .map_err(kubeconfig_error)?;
    config.connect_timeout = Some(timeouts.connect);
    config.read_timeout = timeouts.read;
    kube::Client::try_from(config).map_err(|source| KubeClientError::Client {
        path: path.to_owned(),
        source,
    })
}
