//! Whether an object is a cluster's: it names the cluster (its UID) as its
//! controller. An object under one of the cluster's names without that
//! reference is someone else's, and is never overwritten or adopted.

/// Whether `object` names the object with UID `uid` as its controller.
pub fn controlled_by(object: &impl kube::Resource, uid: &str) -> bool {
    object
        .meta()
        .owner_references
        .iter()
        .flatten()
        .any(|r| r.controller == Some(true) && r.uid == uid)
}
