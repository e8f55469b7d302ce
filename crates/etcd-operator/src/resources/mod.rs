//! Pure builders of the Kubernetes objects of a cluster: Services, PVCs,
//! member Pods, the PodDisruptionBudget and the NetworkPolicy. No I/O: spec
//! in, objects out.

pub mod backup_store;
pub mod cert_manager;
mod labels;
pub mod network_policy;
mod objects;
pub mod restore;
pub mod scheduling;
pub mod tls;

#[cfg(test)]
mod tests;

pub use crate::addressing::MemberAddressing;
pub use labels::{member_labels, selector_labels};
pub use objects::{
    CORRUPT_CHECK_INTERVAL, DATA_DIR, DATA_MOUNT, ETCD_CONTAINER, ETCD_USER, MemberPodFacts,
    VOLUME_USAGE_CONTAINER, client_service, container_security_context, etcd_args,
    feature_and_corruption_check_flags, guard_args, identity_annotations, member_pod,
    member_pod_with, pdb, peer_service, pod_security_context, pvc,
};
pub use scheduling::{PlacementFacts, VolumeLocality};
