//! Kubernetes clients of the lab and the health checks of its components.

use std::path::Path;
use std::time::Duration;

use etcd_lab_common::kube_client::{self, KubeClientError, Timeouts};

/// Why a component's health check failed.
#[derive(Debug, thiserror::Error)]
pub enum HealthError {
    #[error(transparent)]
    Client(#[from] KubeClientError),
    #[error("{base}: {source}")]
    InvalidUri {
        base: String,
        #[source]
        source: http::uri::InvalidUri,
    },
    #[error("client for {base}: {source}")]
    BuildClient {
        base: String,
        #[source]
        source: kube::Error,
    },
    #[error("GET {path}: {source}")]
    Request {
        path: String,
        #[source]
        source: http::Error,
    },
    #[error("GET {path}: {source}")]
    Get {
        path: String,
        #[source]
        source: kube::Error,
    },
    #[error(transparent)]
    Io(#[from] etcd_lab_common::IoError),
    #[error("GET {url} timed out")]
    Timeout { url: String },
    #[error("GET {url}: {status_line}")]
    Status { url: String, status_line: String },
    #[error("{url} answered {body}")]
    Unhealthy { url: String, body: String },
}

/// An admin client from a kubeconfig file; it gives up on an unreachable
/// API server after 3 s and on a silent one after 30 s.
pub async fn admin_client(kubeconfig: &Path) -> Result<kube::Client, KubeClientError> {
    kube_client::from_kubeconfig(kubeconfig, Timeouts::REQUEST).await
}

/// GET `path` as text.
pub async fn get_text(client: &kube::Client, path: &str) -> Result<String, HealthError> {
    let request = http::Request::get(path)
        .body(Vec::new())
        .map_err(|source| HealthError::Request {
            path: path.to_owned(),
            source,
        })?;
    client
        .request_text(request)
        .await
        .map_err(|source| HealthError::Get {
            path: path.to_owned(),
            source,
        })
}

/// GET `<base>/healthz` of a component serving a self-signed certificate
/// (kube-controller-manager, kube-scheduler allow `/healthz` anonymously).
pub async fn insecure_healthz(base: &str) -> Result<(), HealthError> {
    let uri: http::Uri = base.parse().map_err(|source| HealthError::InvalidUri {
        base: base.to_owned(),
        source,
    })?;
    let mut config = kube::Config::new(uri);
    config.accept_invalid_certs = true;
    config.connect_timeout = Some(Duration::from_secs(2));
    config.read_timeout = Some(Duration::from_secs(5));
    let client = kube::Client::try_from(config).map_err(|source| HealthError::BuildClient {
        base: base.to_owned(),
        source,
    })?;
    let body = get_text(&client, "/healthz").await?;
    if body.trim() == "ok" {
        Ok(())
    } else {
        Err(HealthError::Unhealthy {
            url: format!("{base}/healthz"),
            body,
        })
    }
}
