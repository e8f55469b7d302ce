//! The node agent: registers the Node, renews its Lease, runs the pods bound
//! to it and reports their status, like a kubelet.

pub(crate) mod node;
mod pods;

pub use crate::config::{AgentConfig, ConfigError, NodeCapacity};

use etcd_lab_common::cgroup::{self, CgroupError, NodeCgroups};
use etcd_lab_common::kube_client::{self, KubeClientError, Timeouts};
use etcd_lab_common::{IoContext, IoError};

/// Errors that stop the agent.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    #[error(transparent)]
    Client(#[from] KubeClientError),
    #[error("cgroups: {0}")]
    Cgroup(#[from] CgroupError),
    #[error(transparent)]
    Io(#[from] IoError),
}

/// Runs the agent until SIGTERM (or SIGINT): registers the Node, renews
/// its Lease, reports its status and runs the pods bound to it. Containers
/// left by an earlier agent of this node are killed first and the volumes
/// they had mounted released (a restarted node starts its pods again from
/// their volumes).
pub async fn run(config: AgentConfig) -> Result<(), AgentError> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let client = kube_client::from_kubeconfig(&config.kubeconfig, Timeouts::WATCH).await?;
    let root = match &config.cgroup_root {
        Some(root) => root.clone(),
        None => cgroup::detect_root()?,
    };
    let cgroups = NodeCgroups::new(&root, &config.node_name);
    cgroups.kill_all_containers().await;
    // With its containers gone, the node's pods hold no volume: their
    // mounts go (the pods still bound mount them again when they start).
    if let Err(e) = crate::volume::unmount_claims(&config.pods_dir()).await {
        tracing::warn!("unmounting the volumes of earlier pods: {e}");
    }
    for dir in [config.pods_dir(), config.node_log_dir()] {
        std::fs::create_dir_all(&dir).context(|| format!("create {}", dir.display()))?;
    }
    tracing::info!(node = %config.node_name, ip = %config.node_ip, "node agent starting");
    let ctx = std::sync::Arc::new(crate::node_context::NodeContext::new(
        client, config, cgroups,
    ));
    let heartbeat = tokio::spawn(node::heartbeat(ctx.clone()));
    let pods = tokio::spawn(pods::watch_pods(ctx.clone()));
    let logs = tokio::spawn(crate::kubelet_api::serve(ctx.clone()));
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .context(|| "install SIGTERM handler".into())?;
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
