//! Which Pods of a cluster's namespace are its members: those with the
//! operator's ordinal label. Nothing else there serves etcd's client port
//! (a claim's backup store, a restore Pod).

use kube::api::ListParams;

/// The label every member Pod carries (the operator's
/// `durable-etcd.io/ordinal`) and no other Pod of a cluster's namespace
/// does.
pub const MEMBER_POD_LABEL: &str = "durable-etcd.io/ordinal";

/// Selects the member Pods of a namespace.
pub fn member_pods() -> ListParams {
    ListParams::default().labels(MEMBER_POD_LABEL)
}
