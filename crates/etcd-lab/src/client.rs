//! Kubernetes clients of the lab.

use std::path::Path;
use std::time::Duration;

use kube::config::{KubeConfigOptions, Kubeconfig};

use crate::error::{LabError, Result};

/// A client from a kubeconfig file.
pub async fn admin_client(kubeconfig: &Path) -> Result<kube::Client> {
    let config = Kubeconfig::read_from(kubeconfig).map_err(|e| LabError::Kubeconfig {
        path: kubeconfig.to_owned(),
        message: e.to_string(),
    })?;
    let mut config = kube::Config::from_custom_kubeconfig(config, &KubeConfigOptions::default())
        .await
        .map_err(|e| LabError::Kubeconfig {
            path: kubeconfig.to_owned(),
            message: e.to_string(),
        })?;
    config.connect_timeout = Some(Duration::from_secs(3));
    config.read_timeout = Some(Duration::from_secs(30));
    Ok(kube::Client::try_from(config)?)
}

/// GET `path` as text; the error is a one-line reason.
pub async fn get_text(client: &kube::Client, path: &str) -> std::result::Result<String, String> {
    let request = http::Request::get(path)
        .body(Vec::new())
        .map_err(|e| e.to_string())?;
    client
        .request_text(request)
        .await
        .map_err(|e| format!("GET {path}: {e}"))
}

/// GET `<base>/healthz` of a component serving a self-signed certificate
/// (kube-controller-manager, kube-scheduler allow `/healthz` anonymously).
pub async fn insecure_healthz(base: &str) -> std::result::Result<(), String> {
    let uri: http::Uri = base.parse().map_err(|e| format!("{base}: {e}"))?;
    let mut config = kube::Config::new(uri);
    config.accept_invalid_certs = true;
    config.connect_timeout = Some(Duration::from_secs(2));
    config.read_timeout = Some(Duration::from_secs(5));
    let client = kube::Client::try_from(config).map_err(|e| e.to_string())?;
    let body = get_text(&client, "/healthz").await?;
    if body.trim() == "ok" {
        Ok(())
    } else {
        Err(format!("{base}/healthz answered {body}"))
    }
}
