//! The node agent: registers the Node, renews its Lease, runs the pods bound
//! to it and reports their status, like a kubelet.

pub(crate) mod node;
mod pods;

pub use crate::config::{AgentConfig, ConfigError, NodeCapacity};

use etcd_lab_common::cgroup::{self, CgroupError, NodeCgroups};
use etcd_lab_common::kube_client::{self, KubeClientError, Timeouts};
use etcd_lab_common::{IoContext, IoError};

use crate::node_context::NodeContext;

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
/// its Lease, reports its status and runs the pods bound to it. Before any
/// pod starts, containers left by an earlier agent of this node are killed
/// and the volumes they had mounted released (a restarted node starts its
/// pods again from their volumes).
pub async fn run(config: AgentConfig) -> Result<(), AgentError> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let client = kube_client::from_kubeconfig(&config.kubeconfig, Timeouts::WATCH).await?;
    let root = match &config.cgroup_root {
        Some(root) => root.clone(),
        None => cgroup::detect_root()?,
    };
    let cgroups = NodeCgroups::new(&root, &config.node_name);
    for dir in [config.pods_dir(), config.node_log_dir()] {
        std::fs::create_dir_all(&dir).context(|| format!("create {}", dir.display()))?;
    }
    tracing::info!(node = %config.node_name, ip = %config.node_ip, "node agent starting");
    let ctx = std::sync::Arc::new(NodeContext::new(client, config, cgroups));
    // The node reports itself at once, as a kubelet does while it cleans
    // up: the clean-up below waits on the disks, which can be slow on a
    // busy machine, and no pod starts before it ends.
    let heartbeat = tokio::spawn(node::heartbeat(ctx.clone()));
    release_earlier_pods(&ctx).await;
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

/// Kills the containers an earlier agent of this node left and unmounts
/// the volumes their pods had: with the containers gone the pods hold no
/// volume (the pods still bound mount them again when they start).
async fn release_earlier_pods(ctx: &NodeContext) {
    let started = std::time::Instant::now();
    ctx.cgroups.kill_all_containers().await;
    if let Err(e) = crate::volume::unmount_claims(&ctx.config.pods_dir()).await {
        tracing::warn!("unmounting the volumes of earlier pods: {e}");
    }
    tracing::info!(
        took_ms = started.elapsed().as_millis() as u64,
        "containers and volumes of earlier pods released"
    );
}
