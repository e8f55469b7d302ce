//! The kube-rs `Controller`: EtcdClusters and the objects they own (Pods,
//! PVCs, Services, PDBs), plus Nodes mapped to the clusters that have
//! members on them. Each pass runs the pipeline of [`super::pipeline`].

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, PersistentVolumeClaim, Pod, Service};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::runtime::controller::{self, Action};
use kube::runtime::events::{Recorder, Reporter};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::{Controller, watcher};
use kube::{Api, Client, ResourceExt};

use super::error::ReconcileError;
use super::node_index::{ClusterKey, NodeIndex};
use super::pipeline;
use crate::api::EtcdCluster;
use crate::api::identity::MANAGED_BY_LABEL;
use crate::etcd::ConnectSettings;
use crate::telemetry::{Health, Metrics};

/// Settings of the controller.
#[derive(Debug, Clone)]
pub struct ControllerConfig {
    /// Watch one namespace only; all namespaces when `None`.
    pub namespace: Option<String>,
    /// Longest time between two passes of a cluster (after a step, or
    /// while waiting on progress, the planner asks for sooner).
    pub idle_requeue: Duration,
    /// Timeouts of etcd requests.
    pub etcd: ConnectSettings,
    /// Clusters reconciled at the same time.
    pub concurrency: u16,
    /// Image of the `member-guard` init container of every member Pod: the
    /// operator's own image.
    pub operator_image: String,
    /// DNS domain of the Kubernetes cluster (member peer URLs).
    pub cluster_domain: String,
}

/// The operator image when none is configured.
pub const DEFAULT_OPERATOR_IMAGE: &str = "ghcr.io/durable-etcd/etcd-operator:dev";

impl Default for ControllerConfig {
    fn default() -> Self {
        Self {
            namespace: None,
            idle_requeue: Duration::from_secs(30),
            etcd: ConnectSettings::default(),
            concurrency: 4,
            operator_image: DEFAULT_OPERATOR_IMAGE.to_owned(),
            cluster_domain: crate::resources::names::DEFAULT_CLUSTER_DOMAIN.to_owned(),
        }
    }
}

/// The controller could not run.
#[derive(Debug, thiserror::Error)]
pub enum ControllerError {
    /// The EtcdCluster CRD is not installed or not readable.
    #[error(
        "cannot list EtcdClusters (is the CRD installed? `etcd-operator crd | kubectl apply -f -`): {0}"
    )]
    CrdMissing(#[source] kube::Error),
}

/// Shared state of every pass.
pub struct Context {
    /// API client.
    pub client: Client,
    /// Publishes Kubernetes Events.
    pub recorder: Recorder,
    /// Metrics.
    pub metrics: Metrics,
    /// Node -> clusters.
    pub nodes: NodeIndex,
    /// Settings.
    pub config: ControllerConfig,
}

/// Runs the controller until SIGTERM/SIGINT.
pub async fn run(
    client: Client,
    config: ControllerConfig,
    metrics: Metrics,
    health: Health,
) -> Result<(), ControllerError> {
    let clusters: Api<EtcdCluster> = scoped(&client, config.namespace.as_deref());
    clusters
        .list(&kube::api::ListParams::default().limit(1))
        .await
        .map_err(ControllerError::CrdMissing)?;

    let owned = watcher::Config::default().labels(&format!("{MANAGED_BY_LABEL}=etcd-operator"));
    let nodes = NodeIndex::default();
    let node_map = nodes.clone();
    let node_changes = super::node_changes::NodeChanges::default();
    let context = Arc::new(Context {
        recorder: Recorder::new(client.clone(), reporter()),
        client: client.clone(),
        metrics,
        nodes,
        config: config.clone(),
    });

    health.set_ready(true);
    tracing::info!(namespace = ?config.namespace, "controller running");
    Controller::new(clusters, watcher::Config::default())
        .owns(scoped::<Pod>(&client, config.namespace.as_deref()), owned.clone())
        .owns(
            scoped::<PersistentVolumeClaim>(&client, config.namespace.as_deref()),
            owned.clone(),
        )
        .owns(scoped::<Service>(&client, config.namespace.as_deref()), owned.clone())
        .owns(
            scoped::<PodDisruptionBudget>(&client, config.namespace.as_deref()),
            owned,
        )
        .watches(
            Api::<Node>::all(client.clone()),
            watcher::Config::default(),
            move |node: Node| {
                if node_changes.changed(&node) {
                    clusters_on_node(&node_map, &node)
                } else {
                    Vec::new()
                }
            },
        )
        .with_config(
            controller::Config::default()
                .debounce(Duration::from_millis(500))
                .concurrency(config.concurrency),
        )
        .shutdown_on_signal()
        .run(reconcile, error_policy, context)
        .for_each(|result| async move {
            match result {
                Ok((cluster, _)) => tracing::debug!(cluster = %cluster, "reconciled"),
                Err(controller::Error::ReconcilerFailed(error, cluster)) => {
                    tracing::warn!(cluster = %cluster, step = error.step(), category = error.category().as_str(), "{error}")
                }
                Err(error) => tracing::debug!("controller: {error}"),
            }
        })
        .await;
    health.set_ready(false);
    tracing::info!("controller stopped");
    Ok(())
}

fn scoped<K>(client: &Client, namespace: Option<&str>) -> Api<K>
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>,
{
    match namespace {
        Some(namespace) => Api::namespaced(client.clone(), namespace),
        None => Api::all(client.clone()),
    }
}

fn reporter() -> Reporter {
    Reporter {
        controller: "etcd-operator".into(),
        instance: std::env::var("POD_NAME").ok(),
    }
}

fn clusters_on_node(index: &NodeIndex, node: &Node) -> Vec<ObjectRef<EtcdCluster>> {
    index
        .clusters_on(&node.name_any())
        .into_iter()
        .map(|ClusterKey { namespace, name }| ObjectRef::new(&name).within(&namespace))
        .collect()
}

async fn reconcile(cluster: Arc<EtcdCluster>, ctx: Arc<Context>) -> Result<Action, ReconcileError> {
    ctx.metrics.reconcile_started();
    let started = std::time::Instant::now();
    let result = pipeline::pass(&ctx, &cluster).await;
    ctx.metrics
        .reconcile_finished(started.elapsed().as_secs_f64());
    result
}

fn error_policy(_cluster: Arc<EtcdCluster>, error: &ReconcileError, ctx: Arc<Context>) -> Action {
    let category = error.category();
    ctx.metrics
        .reconcile_failed(error.step(), category.as_str());
    Action::requeue(category.retry_after())
}
