//! The Kubernetes client and namespace, chosen the way kubectl chooses
//! them: `--kubeconfig`, else `KUBECONFIG`, else `~/.kube/config` (else
//! the in-cluster account); `--context`; `-n`, else the context's
//! namespace.

use kube::Client;
use kube::config::{Config, KubeConfigOptions, Kubeconfig};

use crate::args::Connection;
use crate::error::Failure;

/// A client and the namespace commands act in.
#[derive(Clone)]
pub struct Target {
    pub client: Client,
    pub namespace: String,
}

pub async fn connect(connection: &Connection) -> Result<Target, Failure> {
    let options = KubeConfigOptions {
        context: connection.context.clone(),
        ..KubeConfigOptions::default()
    };
    let config = match &connection.kubeconfig {
        Some(path) => {
            let kubeconfig = Kubeconfig::read_from(path).map_err(|e| {
                Failure::new(
                    format!("cannot read the kubeconfig {}: {e}", path.display()),
                    "check the path given to --kubeconfig",
                )
            })?;
            Config::from_custom_kubeconfig(kubeconfig, &options).await
        }
        None => Config::from_kubeconfig(&options).await,
    };
    let config = match (config, &connection.context) {
        (Ok(config), _) => config,
        (Err(error), Some(context)) => {
            return Err(Failure::new(
                format!("cannot use context {context}: {error}"),
                "`kubectl config get-contexts` lists the contexts of your kubeconfig",
            ));
        }
        (Err(error), None) => Config::incluster().map_err(|_| {
            Failure::new(
                format!("no usable kubeconfig: {error}"),
                "set KUBECONFIG or pass --kubeconfig (the file kubectl uses), or run inside a Pod with a service account",
            )
        })?,
    };
    let namespace = connection
        .namespace
        .clone()
        .unwrap_or_else(|| config.default_namespace.clone());
    let client = Client::try_from(config).map_err(|e| {
        Failure::new(
            format!("cannot build a client for the API server: {e}"),
            "check the server address and credentials of the context (`kubectl cluster-info`)",
        )
    })?;
    Ok(Target { client, namespace })
}
