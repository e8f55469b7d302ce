//! What the objects of one ordinal say about its member's data and Pod.
//! Rule 2 hangs on the difference between *gone* (known lost) and merely
//! *unreachable*: only [`data_gone`] may ever lead to removing a member or
//! deleting a PVC.

use k8s_openapi::jiff::SignedDuration;

use super::observed::{Observed, OrdinalObjects, PvcPhase, VolumeKind};

/// Evidence that the data of an ordinal is known lost, if there is any.
///
/// `has_member`: whether the ordinal has a member in etcd (a missing PVC
/// only means lost data for a member that had one).
pub fn data_gone(
    observed: &Observed,
    objects: &OrdinalObjects,
    has_member: bool,
) -> Option<String> {
    let Some(pvc) = &objects.pvc else {
        return has_member.then(|| "its PVC was deleted".to_string());
    };
    if pvc.phase == PvcPhase::Lost {
        return Some("its PersistentVolume is lost".to_string());
    }
    if let Some(evidence) = local_volume_on_deleted_node(observed, objects) {
        return Some(evidence);
    }
    if let Some(refusal) = objects.pod.as_ref().and_then(|p| p.guard_refusal.as_ref()) {
        return Some(format!("member-guard refused: {}", refusal.describe()));
    }
    // Damaged data (rule 15) is judged by `Context::data_gone`: it is gone
    // only once its volume is set aside or a person released it.
    None
}

/// What etcd said of the damaged data of an ordinal's member, if it did.
pub fn damaged_data(objects: &OrdinalObjects) -> Option<&str> {
    objects.pod.as_ref()?.damaged_data.as_deref()
}

/// The volume of an ordinal is node-local on a Node that is deleted. Alone
/// this is not proof (a Node object deleted while the machine lives is
/// registered again by its kubelet): the planner also waits for the member
/// to have been down for `memberFailureTimeout`.
pub fn local_volume_on_deleted_node(
    observed: &Observed,
    objects: &OrdinalObjects,
) -> Option<String> {
    match &objects.pvc.as_ref()?.volume {
        VolumeKind::Local { node } if observed.node_deleted(node) => Some(format!(
            "its node-local volume was on node {node}, which is deleted"
        )),
        _ => None,
    }
}

/// Why the Pod of an ordinal is not serving, as far as Kubernetes tells.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PodTrouble {
    /// No Pod.
    Missing,
    /// Terminating.
    Terminating,
    /// On a node that is not Ready, for this long (zero when unknown).
    NodeNotReady { node: String, for_: SignedDuration },
    /// On a node confirmed gone (deleted or out-of-service).
    NodeGone { node: String },
    /// Not ready for another reason (starting, crash looping).
    Unready,
}

/// The trouble of an ordinal's Pod, `None` when it is ready.
pub fn pod_trouble(observed: &Observed, objects: &OrdinalObjects) -> Option<PodTrouble> {
    let Some(pod) = &objects.pod else {
        return Some(PodTrouble::Missing);
    };
    if let Some(node) = &pod.node {
        if observed.node_confirmed_gone(node) {
            return Some(PodTrouble::NodeGone { node: node.clone() });
        }
        if let Some(state) = observed.nodes.get(node)
            && !state.ready
        {
            let for_ = state.not_ready_since.map_or(SignedDuration::ZERO, |since| {
                observed.now.duration_since(since)
            });
            return Some(PodTrouble::NodeNotReady {
                node: node.clone(),
                for_,
            });
        }
    }
    if pod.deleting {
        return Some(PodTrouble::Terminating);
    }
    if !pod.ready {
        return Some(PodTrouble::Unready);
    }
    None
}

impl PodTrouble {
    /// A short explanation for status.
    pub fn describe(&self) -> String {
        match self {
            Self::Missing => "no Pod".to_string(),
            Self::Terminating => "Pod terminating".to_string(),
            Self::NodeNotReady { node, for_ } => {
                format!("node {node} NotReady for {}s", for_.as_secs())
            }
            Self::NodeGone { node } => format!("node {node} confirmed gone"),
            Self::Unready => "Pod not ready".to_string(),
        }
    }
}
