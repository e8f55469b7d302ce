//! Pure builders of the Kubernetes objects of a cluster: Services, PVCs,
//! member Pods and the PodDisruptionBudget. No I/O: spec in, objects out.


mod objects;
pub mod restore;
pub mod scheduling;

#[cfg(test)]
mod tests;

pub use crate::addressing::MemberAddressing;
pub use objects::{
    DATA_DIR, DATA_MOUNT, ETCD_USER, MemberPodFacts, client_service, container_security_context,
    etcd_args, guard_args, identity_annotations, member_labels, member_pod, member_pod_with, pdb,
    peer_service, pod_security_context, pvc, selector_labels,
};
pub use scheduling::{PlacementFacts, VolumeLocality};
