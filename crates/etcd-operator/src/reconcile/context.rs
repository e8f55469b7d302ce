//! What every pass of the cluster reconciler shares: the API client, the
//! Event recorder, metrics, the Node index, the controller's settings, the
//! watch-fed copies of objects and the remembered certificates.

use std::time::Duration;

use kube::Client;
use kube::runtime::events::Recorder;

use super::node_index::NodeIndex;
use super::tls_memory::TlsMemory;
use super::watched::WatchedObjects;
use crate::etcd::ConnectSettings;
use crate::resources::network_policy::OperatorPods;
use crate::telemetry::Metrics;

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
    /// Where the operator's own Pods run: each cluster's NetworkPolicy
    /// lets them in.
    pub operator_pods: OperatorPods,
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
            cluster_domain: crate::addressing::DEFAULT_CLUSTER_DOMAIN.to_owned(),
            operator_pods: OperatorPods::default(),
        }
    }
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
    /// Watch-fed copies of the objects passes read.
    pub watched: WatchedObjects,
    /// The certificates of TLS clusters as last read.
    pub certificates: TlsMemory,
}
