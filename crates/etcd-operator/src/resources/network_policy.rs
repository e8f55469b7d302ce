//! The NetworkPolicy `<cluster>-members`: who may open connections to the
//! member Pods, port by port (see `api::NetworkPolicySpec` for the rules a
//! user sees). Pure: the `EtcdCluster` and where the operator runs in, the
//! policy out.
//!
//! Who talks to the members, and so what the policy lets through:
//!
//! | port | who connects |
//! | --- | --- |
//! | peer 2380, and 2382 while peers move to TLS | the other members (raft, snapshots to new members) |
//! | client 2379 | clients; the operator (health, membership, backups: full snapshots and the incremental watch run in the operator); a member's own `member-guard` runs in its Pod |
//! | metrics 2381 | probes (the kubelet, from the member's node), scrapers |
//! | volume usage 2383 | the operator |
//!
//! Restore Pods read and write volumes and run etcd on loopback only;
//! the store Pod of a `persistentVolumeClaim` backup destination is not a
//! member: neither needs a member's port.

use std::collections::BTreeMap;

use k8s_openapi::api::networking::v1::{
    NetworkPolicy, NetworkPolicyIngressRule, NetworkPolicyPeer, NetworkPolicyPort,
    NetworkPolicySpec as PolicySpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::{Resource, ResourceExt};

use super::labels::{labels, selector_labels};
use crate::addressing::{CLIENT_PORT, METRICS_PORT, PEER_PORT, network_policy_name};
use crate::api::EtcdCluster;
use crate::pod_contract::VOLUME_USAGE_PORT;
use crate::transport::BRIDGE_PEER_PORT;

/// The label the API server gives every namespace: its own name.
pub const NAMESPACE_NAME_LABEL: &str = "kubernetes.io/metadata.name";

/// The namespace the operator installs into (`deploy/`).
pub const DEFAULT_OPERATOR_NAMESPACE: &str = "etcd-operator-system";

/// The labels of the operator's Pods in `deploy/operator.yaml`.
pub fn default_operator_pod_labels() -> BTreeMap<String, String> {
    BTreeMap::from([(
        "app.kubernetes.io/name".to_string(),
        "etcd-operator".to_string(),
    )])
}

/// Where the operator's own Pods run: the policy lets them reach the
/// client and volume-usage ports. An operator run outside the cluster has
/// no Pod; it reaches the members only where its network path is allowed
/// by other means (an `ipBlock` in `clientsFrom`, or a network plugin that
/// lets a node's own traffic through).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OperatorPods {
    /// Their namespace.
    pub namespace: String,
    /// Labels every one of them carries (empty: every Pod of the
    /// namespace).
    pub labels: BTreeMap<String, String>,
}

impl Default for OperatorPods {
    fn default() -> Self {
        Self {
            namespace: DEFAULT_OPERATOR_NAMESPACE.to_string(),
            labels: default_operator_pod_labels(),
        }
    }
}

impl OperatorPods {
    /// The peer selecting them.
    fn peer(&self) -> NetworkPolicyPeer {
        NetworkPolicyPeer {
            namespace_selector: Some(match_labels(BTreeMap::from([(
                NAMESPACE_NAME_LABEL.to_string(),
                self.namespace.clone(),
            )]))),
            pod_selector: Some(match_labels(self.labels.clone())),
            ip_block: None,
        }
    }
}

/// The cluster's NetworkPolicy, or `None` when `spec.networkPolicy.enabled`
/// is false.
pub fn network_policy(cluster: &EtcdCluster, operator: &OperatorPods) -> Option<NetworkPolicy> {
    let spec = &cluster.spec.network_policy;
    if !spec.enabled {
        return None;
    }
    let name = cluster.name_any();
    let members = NetworkPolicyPeer {
        pod_selector: Some(match_labels(selector_labels(&name))),
        ..NetworkPolicyPeer::default()
    };
    let same_namespace = NetworkPolicyPeer {
        pod_selector: Some(LabelSelector::default()),
        ..NetworkPolicyPeer::default()
    };
    let clients = [same_namespace, operator.peer()]
        .into_iter()
        .chain(spec.clients_from.iter().cloned())
        .collect();
    let mut ingress = vec![
        rule(Some(vec![members]), &[PEER_PORT, BRIDGE_PEER_PORT]),
        rule(Some(clients), &[CLIENT_PORT]),
        rule(Some(vec![operator.peer()]), &[VOLUME_USAGE_PORT]),
    ];
    match &spec.metrics_from {
        // No `from`: every source.
        None => ingress.push(rule(None, &[METRICS_PORT])),
        // An empty `from` would also mean every source: no rule instead.
        Some(peers) if peers.is_empty() => {}
        Some(peers) => ingress.push(rule(Some(peers.clone()), &[METRICS_PORT])),
    }
    Some(NetworkPolicy {
        metadata: ObjectMeta {
            name: Some(network_policy_name(&name)),
            namespace: cluster.namespace(),
            labels: Some(labels(&name, None)),
            owner_references: cluster.controller_owner_ref(&()).map(|r| vec![r]),
            ..ObjectMeta::default()
        },
        spec: Some(PolicySpec {
            pod_selector: Some(match_labels(selector_labels(&name))),
            policy_types: Some(vec!["Ingress".to_string()]),
            ingress: Some(ingress),
            egress: None,
        }),
    })
}

fn match_labels(labels: BTreeMap<String, String>) -> LabelSelector {
    LabelSelector {
        match_labels: Some(labels).filter(|l| !l.is_empty()),
        match_expressions: None,
    }
}

/// TCP `ports` from `from` (`None`: from anywhere).
fn rule(from: Option<Vec<NetworkPolicyPeer>>, ports: &[u16]) -> NetworkPolicyIngressRule {
    NetworkPolicyIngressRule {
        from,
        ports: Some(
            ports
                .iter()
                .map(|&port| NetworkPolicyPort {
                    protocol: Some("TCP".to_string()),
                    port: Some(IntOrString::Int(i32::from(port))),
                    end_port: None,
                })
                .collect(),
        ),
    }
}

#[cfg(test)]
mod tests;
