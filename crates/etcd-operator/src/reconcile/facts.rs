//! Pure readings of Kubernetes objects that the planner's input is made of:
//! node readiness and out-of-service taint, where a volume lives, what the
//! member guard said. Kept apart from I/O so each is tested on plain objects.

use k8s_openapi::api::core::v1::{Node, PersistentVolume, Pod};
use k8s_openapi::jiff::Timestamp;

/// The taint by which a person confirms a node is shut down.
pub const OUT_OF_SERVICE_TAINT: &str = "node.kubernetes.io/out-of-service";
/// Name of the init container that checks a member's data identity.
pub const MEMBER_GUARD_CONTAINER: &str = "member-guard";

/// Whether the node's Ready condition is True, and since when it is not.
pub fn node_readiness(node: &Node) -> (bool, Option<Timestamp>) {
    let ready = node
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == "Ready"));
    match ready {
        Some(c) if c.status == "True" => (true, None),
        Some(c) => (false, c.last_transition_time.as_ref().map(|t| t.0)),
        None => (false, None),
    }
}

/// Whether the node carries the out-of-service taint.
pub fn out_of_service(node: &Node) -> bool {
    node.spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .is_some_and(|t| t.iter().any(|t| t.key == OUT_OF_SERVICE_TAINT))
}

/// The node a volume is pinned to by its required node affinity (a local
/// volume), or `None` for a volume attachable anywhere.
pub fn pinned_node(volume: &PersistentVolume) -> Option<String> {
    let terms = &volume
        .spec
        .as_ref()?
        .node_affinity
        .as_ref()?
        .required
        .as_ref()?
        .node_selector_terms;
    terms
        .iter()
        .flat_map(|t| t.match_expressions.iter().flatten())
        .find(|e| e.key == "kubernetes.io/hostname" && e.operator == "In")
        .and_then(|e| e.values.as_ref()?.first().cloned())
}

/// The one-line refusal of the member guard, if its last run exited with
/// the refusal code and a message.
pub fn guard_refusal(pod: &Pod, refusal_exit_code: i32) -> Option<String> {
    let statuses = pod.status.as_ref()?.init_container_statuses.as_ref()?;
    let guard = statuses.iter().find(|s| s.name == MEMBER_GUARD_CONTAINER)?;
    [guard.state.as_ref(), guard.last_state.as_ref()]
        .into_iter()
        .flatten()
        .filter_map(|s| s.terminated.as_ref())
        .find(|t| t.exit_code == refusal_exit_code)
        .map(|t| t.message.clone().unwrap_or_default().trim().to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{
        ContainerState, ContainerStateTerminated, ContainerStatus, NodeCondition, NodeSelector,
        NodeSelectorRequirement, NodeSelectorTerm, NodeSpec, NodeStatus, PersistentVolumeSpec,
        PodStatus, Taint, VolumeNodeAffinity,
    };
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    fn node(ready: &str, taints: Vec<Taint>) -> Node {
        Node {
            spec: Some(NodeSpec {
                taints: Some(taints),
                ..Default::default()
            }),
            status: Some(NodeStatus {
                conditions: Some(vec![NodeCondition {
                    type_: "Ready".into(),
                    status: ready.into(),
                    last_transition_time: Some(Time(Timestamp::from_second(1000).expect("ts"))),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn reads_node_readiness_and_the_out_of_service_taint() {
        assert_eq!(node_readiness(&node("True", vec![])), (true, None));
        let (ready, since) = node_readiness(&node("Unknown", vec![]));
        assert!(!ready);
        assert_eq!(since, Some(Timestamp::from_second(1000).expect("ts")));
        assert_eq!(node_readiness(&Node::default()), (false, None));
        let taint = Taint {
            key: OUT_OF_SERVICE_TAINT.into(),
            effect: "NoExecute".into(),
            ..Default::default()
        };
        assert!(out_of_service(&node("False", vec![taint])));
        assert!(!out_of_service(&node("False", vec![])));
    }

    #[test]
    fn local_volumes_are_pinned_to_their_node() {
        let local = PersistentVolume {
            spec: Some(PersistentVolumeSpec {
                node_affinity: Some(VolumeNodeAffinity {
                    required: Some(NodeSelector {
                        node_selector_terms: vec![NodeSelectorTerm {
                            match_expressions: Some(vec![NodeSelectorRequirement {
                                key: "kubernetes.io/hostname".into(),
                                operator: "In".into(),
                                values: Some(vec!["node-2".into()]),
                            }]),
                            ..Default::default()
                        }],
                    }),
                }),
                ..Default::default()
            }),
            ..Default::default()
        };
        assert_eq!(pinned_node(&local).as_deref(), Some("node-2"));
        assert_eq!(pinned_node(&PersistentVolume::default()), None);
    }

    #[test]
    fn finds_the_guard_refusal_in_the_last_state() {
        let pod = Pod {
            status: Some(PodStatus {
                init_container_statuses: Some(vec![ContainerStatus {
                    name: MEMBER_GUARD_CONTAINER.into(),
                    last_state: Some(ContainerState {
                        terminated: Some(ContainerStateTerminated {
                            exit_code: 2,
                            message: Some("member-guard refused: foreign data\n".into()),
                            ..Default::default()
                        }),
                        ..Default::default()
                    }),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
            ..Default::default()
        };
        assert_eq!(
            guard_refusal(&pod, 2).as_deref(),
            Some("member-guard refused: foreign data")
        );
        assert_eq!(guard_refusal(&pod, 1), None);
        assert_eq!(guard_refusal(&Pod::default(), 2), None);
    }
}
