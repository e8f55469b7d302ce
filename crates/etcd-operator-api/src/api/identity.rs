//! Labels and annotations that tie Kubernetes objects to a cluster and to
//! the identity of an etcd member (durability rule 1: identity ⇔ data).

/// Label with the name of the `EtcdCluster` that owns an object.
pub const CLUSTER_LABEL: &str = "durable-etcd.io/cluster";
/// The label selector of every object of `cluster` (its member Pods and
/// PVCs, its restore Pod).
pub fn cluster_selector(cluster: &str) -> String {
    format!("{CLUSTER_LABEL}={cluster}")
}

/// Label with the ordinal of the member a Pod or PVC belongs to.
pub const ORDINAL_LABEL: &str = "durable-etcd.io/ordinal";
/// Standard label naming the application.
pub const NAME_LABEL: &str = "app.kubernetes.io/name";
/// Standard label naming the instance (the cluster).
pub const INSTANCE_LABEL: &str = "app.kubernetes.io/instance";
/// Standard label naming the manager.
pub const MANAGED_BY_LABEL: &str = "app.kubernetes.io/managed-by";
/// Value of [`NAME_LABEL`].
pub const APP_NAME: &str = "etcd";
/// Value of [`MANAGED_BY_LABEL`], also the server-side apply field manager.
pub const MANAGER: &str = "etcd-operator";

/// PVC annotation: the incarnation token of the cluster the data belongs to.
pub const CLUSTER_TOKEN_ANNOTATION: &str = "durable-etcd.io/cluster-token";
/// PVC annotation: the etcd cluster ID (hex) the data belongs to.
pub const CLUSTER_ID_ANNOTATION: &str = "durable-etcd.io/cluster-id";
/// PVC annotation: the etcd member ID (hex) the data belongs to.
pub const MEMBER_ID_ANNOTATION: &str = "durable-etcd.io/member-id";
/// Set to `"true"` on a PVC that a restore kept (it holds a survivor's data
/// of a lost incarnation) to let the operator delete it.
pub const RELEASE_DATA_ANNOTATION: &str = "durable-etcd.io/release-retained-data";
/// PersistentVolume annotation: the volume holds a member's data that etcd
/// found damaged, with the evidence. The operator sets it, with the reclaim
/// policy `Retain`, before the member is rebuilt on a new volume: the
/// damaged volume is kept until a person deletes the PersistentVolume.
pub const DAMAGED_DATA_ANNOTATION: &str = "durable-etcd.io/damaged-data";
/// PersistentVolume annotation set with [`DAMAGED_DATA_ANNOTATION`]: the
/// claim (`<namespace>/<name>`) and member the volume was set aside from.
pub const SET_ASIDE_FROM_ANNOTATION: &str = "durable-etcd.io/set-aside-from";

/// The identity a member's data carries: written to the PVC annotations and
/// to the marker file next to the data dir.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MemberIdentity {
    /// Incarnation token of the cluster (unique per bootstrap).
    pub cluster_token: String,
    /// etcd cluster ID, once known.
    pub cluster_id: Option<u64>,
    /// etcd member ID, once known.
    pub member_id: Option<u64>,
}

pub use crate::addressing::{format_id, parse_id};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_round_trip_as_hex() {
        assert_eq!(format_id(0x8e9e05c52164694d), "8e9e05c52164694d");
        assert_eq!(parse_id("8e9e05c52164694d"), Some(0x8e9e05c52164694d));
        assert_eq!(parse_id("not-hex"), None);
    }
}
