//! Which Node updates matter to the clusters on the node. A kubelet updates
//! its Node every few seconds (heartbeats, images, resource figures); only a
//! change of what the planner reads (the Ready condition, taints such as
//! `out-of-service`, unschedulable, deletion) triggers a reconcile. Anything
//! else waits for the next periodic pass, as does the removal of a Node
//! object (the watch hands over the last state, which did not change): every
//! pass lists the Nodes, so a deleted Node is seen within the idle requeue.

use std::collections::HashMap;
use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex};

use k8s_openapi::api::core::v1::Node;
use kube::ResourceExt;

/// The fingerprint of the planner-relevant state of each Node seen.
#[derive(Debug, Clone, Default)]
pub struct NodeChanges {
    seen: Arc<Mutex<HashMap<String, u64>>>,
}

impl NodeChanges {
    /// Whether `node` differs from its last seen state in anything the
    /// planner reads; records it. The first sight of a node counts as a
    /// change.
    pub fn changed(&self, node: &Node) -> bool {
        let fingerprint = fingerprint(node);
        let mut seen = match self.seen.lock() {
            Ok(seen) => seen,
            Err(poisoned) => poisoned.into_inner(),
        };
        seen.insert(node.name_any(), fingerprint) != Some(fingerprint)
    }
}

fn fingerprint(node: &Node) -> u64 {
    let mut hasher = DefaultHasher::new();
    node.metadata.deletion_timestamp.is_some().hash(&mut hasher);
    if let Some(spec) = &node.spec {
        spec.unschedulable.hash(&mut hasher);
        for taint in spec.taints.iter().flatten() {
            (&taint.key, &taint.value, &taint.effect).hash(&mut hasher);
        }
    }
    let ready = node
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == "Ready"));
    if let Some(ready) = ready {
        (&ready.status, &ready.reason).hash(&mut hasher);
    }
    hasher.finish()
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::{NodeCondition, NodeSpec, NodeStatus, Taint};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    use super::*;

    fn node(ready: &str, heartbeat: i64, taints: Vec<Taint>) -> Node {
        let mut node = Node::default();
        node.metadata.name = Some("n1".into());
        node.spec = Some(NodeSpec {
            taints: (!taints.is_empty()).then_some(taints),
            ..NodeSpec::default()
        });
        node.status = Some(NodeStatus {
            conditions: Some(vec![NodeCondition {
                type_: "Ready".into(),
                status: ready.into(),
                reason: Some("KubeletReady".into()),
                last_heartbeat_time: Some(Time(
                    k8s_openapi::jiff::Timestamp::from_second(heartbeat).expect("time"),
                )),
                ..NodeCondition::default()
            }]),
            ..NodeStatus::default()
        });
        node
    }

    #[test]
    fn heartbeats_are_not_changes_but_readiness_and_taints_are() {
        let changes = NodeChanges::default();
        assert!(changes.changed(&node("True", 1, vec![])), "first sight");
        assert!(
            !changes.changed(&node("True", 11, vec![])),
            "heartbeat only"
        );
        assert!(changes.changed(&node("Unknown", 21, vec![])), "NotReady");
        let out_of_service = Taint {
            key: "node.kubernetes.io/out-of-service".into(),
            effect: "NoExecute".into(),
            ..Taint::default()
        };
        assert!(changes.changed(&node("Unknown", 31, vec![out_of_service.clone()])));
        assert!(!changes.changed(&node("Unknown", 41, vec![out_of_service])));
        let mut deleting = node("Unknown", 51, vec![]);
        deleting.metadata.deletion_timestamp = Some(Time(
            k8s_openapi::jiff::Timestamp::from_second(51).expect("time"),
        ));
        assert!(changes.changed(&deleting));
    }
}
