//! Network isolation of a cluster's members: who may reach which port. The
//! operator keeps one NetworkPolicy per cluster from this part of the spec
//! (built by `resources::network_policy`).

use k8s_openapi::api::networking::v1::NetworkPolicyPeer;
use kube::KubeSchema;
use serde::{Deserialize, Serialize};

use super::rules;

/// The longest list of peers a field accepts (it bounds the cost of the
/// validation rules the API server runs on each).
pub const MAX_PEERS: usize = 32;

/// Who may reach the members. The operator keeps the NetworkPolicy
/// `<cluster>-members`, owned by the cluster, selecting its member Pods
/// (ingress only; what the members send is not limited):
///
/// - peer port 2380 (and 2382, where peers move to TLS): the cluster's
///   own members only;
/// - client port 2379: every Pod of the cluster's namespace, the operator's
///   Pods, and the peers `clientsFrom` names;
/// - metrics port 2381: `metricsFrom` (default: from anywhere);
/// - the members' volume-usage port 2383: the operator's Pods only.
///
/// Every other port of the members refuses new connections. The policy is
/// enforced only where the cluster's network plugin enforces
/// NetworkPolicy.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct NetworkPolicySpec {
    /// Keep the NetworkPolicy (default `true`). `false` deletes it: every
    /// Pod of the Kubernetes cluster may then reach every port of the
    /// members.
    #[serde(default = "enabled_by_default")]
    pub enabled: bool,

    /// Who may reach the client port besides the cluster's own namespace
    /// and the operator, as NetworkPolicy peers: `namespaceSelector` (all
    /// Pods of the namespaces it selects), `podSelector` (those Pods of the
    /// cluster's namespace; with `namespaceSelector`, of the namespaces it
    /// selects), or `ipBlock` (addresses outside the Pod network, e.g. a
    /// client on a node's host network).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = MAX_PEERS))]
    #[x_kube(validation = peers_name_something("clientsFrom"))]
    #[x_kube(validation = ip_block_stands_alone("clientsFrom"))]
    pub clients_from: Vec<NetworkPolicyPeer>,

    /// Who may reach the metrics port (`/metrics`, `/livez`, `/readyz`:
    /// plain HTTP, no keys). Unset: anyone, so that a scraper in any
    /// namespace works. A list: only those peers (same forms as
    /// `clientsFrom`); an empty list closes the port to every Pod.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Vec<NetworkPolicyPeer>", length(max = MAX_PEERS))]
    #[x_kube(validation = peers_name_something("metricsFrom"))]
    #[x_kube(validation = ip_block_stands_alone("metricsFrom"))]
    pub metrics_from: Option<Vec<NetworkPolicyPeer>>,
}

fn enabled_by_default() -> bool {
    true
}

impl Default for NetworkPolicySpec {
    fn default() -> Self {
        Self {
            enabled: enabled_by_default(),
            clients_from: Vec::new(),
            metrics_from: None,
        }
    }
}

/// Each peer names pods, namespaces or addresses: a peer with none of them
/// is refused by the NetworkPolicy API, so it is refused here first.
fn peers_name_something(field: &str) -> kube::core::Rule {
    rules::rule(
        "self.all(p, has(p.podSelector) || has(p.namespaceSelector) || has(p.ipBlock))",
        format!(
            "each entry of networkPolicy.{field} needs podSelector, namespaceSelector or ipBlock"
        ),
    )
}

/// An `ipBlock` peer carries no selector (the NetworkPolicy API's rule).
fn ip_block_stands_alone(field: &str) -> kube::core::Rule {
    rules::rule(
        "self.all(p, !has(p.ipBlock) || !(has(p.podSelector) || has(p.namespaceSelector)))",
        format!(
            "an entry of networkPolicy.{field} with ipBlock cannot also have podSelector or namespaceSelector"
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn absent_means_enabled_with_metrics_open() {
        let spec: NetworkPolicySpec = serde_json::from_str("{}").expect("decodes");
        assert_eq!(spec, NetworkPolicySpec::default());
        assert!(spec.enabled);
        assert!(spec.metrics_from.is_none());
    }

    #[test]
    fn an_empty_metrics_list_is_kept_apart_from_an_absent_one() {
        let spec: NetworkPolicySpec =
            serde_json::from_str(r#"{"metricsFrom": []}"#).expect("decodes");
        assert_eq!(spec.metrics_from, Some(Vec::new()));
        let json = serde_json::to_value(&spec).expect("encodes");
        assert_eq!(json["metricsFrom"], serde_json::json!([]));
    }

    #[test]
    fn the_bound_of_the_schema_is_the_constant() {
        let schema = serde_json::to_value(schemars::schema_for!(NetworkPolicySpec))
            .expect("schema serialises");
        for field in ["clientsFrom", "metricsFrom"] {
            assert_eq!(
                schema["properties"][field]["maxItems"],
                serde_json::json!(MAX_PEERS),
                "{field}"
            );
        }
    }
}
