//! Conditions on objects: an `EtcdCluster`'s, a Pod's or a Node's, and one
//! in the status of an object read untyped; waiting for them lives on the
//! [`Harness`](crate::e2e::Harness).

#[cfg(feature = "operator")]
use etcd_operator_api::api::EtcdClusterStatus;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::DynamicObject;
use serde_json::Value;

/// Whether the cluster's condition of this type is True.
#[cfg(feature = "operator")]
pub fn condition_true(status: &EtcdClusterStatus, type_: &str) -> bool {
    status
        .conditions
        .iter()
        .any(|c| c.type_ == type_ && c.status == "True")
}

/// Whether the Pod's Ready condition is True.
pub fn pod_ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// The status (`True`, `False`, `Unknown`) of the Node's condition of this
/// type, if it has one.
pub fn node_condition(node: &Node, type_: &str) -> Option<String> {
    node.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == type_)
        .map(|c| c.status.clone())
}

/// Whether the Node's Ready condition is True.
pub fn node_ready(node: &Node) -> bool {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// The condition of this type in `status.conditions` of an object read
/// untyped (one the operator's own types may not read).
pub fn untyped_condition(object: &DynamicObject, type_: &str) -> Option<Value> {
    object.data["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)
        .cloned()
}
