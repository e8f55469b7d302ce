//! The node agent: registers the Node, renews its Lease, runs the pods bound
//! to it and reports their status, like a kubelet.

pub(crate) mod node;
mod pods;

pub use crate::config::{AgentConfig, ConfigError, NodeCapacity};

/// Errors that stop the agent.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    #[error("kubeconfig {path}: {message}")]
    Kubeconfig {
        path: std::path::PathBuf,
        message: String,
    },
    #[error("kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    #[error("{context}: {source}")]
    Io {
        context: String,
        source: std::io::Error,
    },
}

/// Runs the agent until SIGTERM (or SIGINT): registers the Node, renews
/// its Lease, reports its status and runs the pods bound to it. Containers
/// left by an earlier agent of this node are killed first (a restarted node
/// starts its pods again from their volumes).
pub async fn run(config: AgentConfig) -> Result<(), AgentError> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let kubeconfig = kube::config::Kubeconfig::read_from(&config.kubeconfig).map_err(|e| {
        AgentError::Kubeconfig {
            path: config.kubeconfig.clone(),
            message: e.to_string(),
        }
    })?;
    let client_config = kube::Config::from_custom_kubeconfig(
        kubeconfig,
        &kube::config::KubeConfigOptions::default(),
    )
    .await
    .map_err(|e| AgentError::Kubeconfig {
        path: config.kubeconfig.clone(),
        message: e.to_string(),
    })?;
    let client = kube::Client::try_from(client_config)?;
    let root = config
        .cgroup_root
        .clone()
        .unwrap_or_else(crate::cgroup::detect_root);
    let cgroups = crate::cgroup::NodeCgroups::new(&root, &config.node_name);
    cgroups.kill_all_containers().await;
    for dir in [config.pods_dir(), config.node_log_dir()] {
        std::fs::create_dir_all(&dir).map_err(|source| AgentError::Io {
            context: format!("create {}", dir.display()),
            source,
        })?;
    }
    tracing::info!(node = %config.node_name, ip = %config.node_ip, "node agent starting");
    let ctx = std::sync::Arc::new(crate::node_context::NodeContext::new(
        client, config, cgroups,
    ));
    let heartbeat = tokio::spawn(node::heartbeat(ctx.clone()));
    let pods = tokio::spawn(pods::watch_pods(ctx.clone()));
    let logs = tokio::spawn(crate::kubelet_api::serve(ctx.clone()));
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .map_err(|source| AgentError::Io {
            context: "install SIGTERM handler".into(),
            source,
        })?;
    tokio::select! {
        _ = term.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
    tracing::info!("node agent stopping");
    heartbeat.abort();
    pods.abort();
    logs.abort();
    Ok(())
}
