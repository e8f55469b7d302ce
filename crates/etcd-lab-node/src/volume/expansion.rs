//! Offline volume expansion as Kubernetes records it on the claim (pure).
//!
//! The controller side (the lab's provisioner, as the external-resizer)
//! grows the disk, sets the volume's capacity and marks the claim
//! [`node_resize_pending`]: `allocatedResources` = the new size,
//! `allocatedResourceStatuses.storage = NodeResizePending` and the
//! `FileSystemResizePending` condition. The node side (the node agent, as
//! the kubelet) grows the filesystem the next time it mounts the volume for
//! a pod and then marks the claim [`resize_finished`]: `status.capacity` =
//! the volume's capacity, the condition and the resize status gone. A pod
//! that keeps running keeps the old size until it is started again.

use k8s_openapi::api::core::v1::{
    PersistentVolume, PersistentVolumeClaim, PersistentVolumeClaimCondition,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde_json::{Value, json};

use super::size::storage_bytes;

/// Condition: the disk grew, the filesystem grows at the next pod start.
pub const FILE_SYSTEM_RESIZE_PENDING: &str = "FileSystemResizePending";
/// Condition: the controller side of a resize is running.
pub const RESIZING: &str = "Resizing";
/// `allocatedResourceStatuses.storage` while the node side is pending.
pub const NODE_RESIZE_PENDING: &str = "NodeResizePending";
/// The message Kubernetes puts on [`FILE_SYSTEM_RESIZE_PENDING`].
pub const PENDING_MESSAGE: &str =
    "Waiting for user to (re-)start a pod to finish file system resize of volume on node.";

/// The claim's `status.capacity.storage`.
pub fn claim_capacity(claim: &PersistentVolumeClaim) -> Option<&Quantity> {
    claim.status.as_ref()?.capacity.as_ref()?.get("storage")
}

/// The volume's `spec.capacity.storage`.
pub fn volume_capacity(volume: &PersistentVolume) -> Option<&Quantity> {
    volume.spec.as_ref()?.capacity.as_ref()?.get("storage")
}

fn has_condition(claim: &PersistentVolumeClaim, kind: &str) -> bool {
    claim
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == kind))
}

fn resize_status(claim: &PersistentVolumeClaim) -> Option<&str> {
    claim
        .status
        .as_ref()?
        .allocated_resource_statuses
        .as_ref()?
        .get("storage")
        .map(String::as_str)
}

/// Whether the claim is marked as waiting for the node side of a resize
/// to `size`.
pub fn is_node_resize_pending(claim: &PersistentVolumeClaim, size: &Quantity) -> bool {
    let allocated = claim
        .status
        .as_ref()
        .and_then(|s| s.allocated_resources.as_ref())
        .and_then(|a| a.get("storage"));
    has_condition(claim, FILE_SYSTEM_RESIZE_PENDING)
        && resize_status(claim) == Some(NODE_RESIZE_PENDING)
        && allocated.and_then(storage_bytes) == storage_bytes(size)
}

/// The conditions other than the resize ones.
fn other_conditions(claim: &PersistentVolumeClaim) -> Vec<PersistentVolumeClaimCondition> {
    claim
        .status
        .as_ref()
        .and_then(|s| s.conditions.clone())
        .unwrap_or_default()
        .into_iter()
        .filter(|c| c.type_ != FILE_SYSTEM_RESIZE_PENDING && c.type_ != RESIZING)
        .collect()
}

/// The status merge patch marking the claim's disk grown to `size`, the
/// filesystem to grow on the node. An existing pending condition keeps its
/// transition time. Guarded by the claim's resourceVersion.
pub fn node_resize_pending(claim: &PersistentVolumeClaim, size: &Quantity, now: Time) -> Value {
    let existing = claim
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == FILE_SYSTEM_RESIZE_PENDING))
        .filter(|c| c.status == "True")
        .cloned();
    let mut conditions = other_conditions(claim);
    conditions.push(existing.unwrap_or(PersistentVolumeClaimCondition {
        type_: FILE_SYSTEM_RESIZE_PENDING.to_owned(),
        status: "True".to_owned(),
        last_transition_time: Some(now),
        message: Some(PENDING_MESSAGE.to_owned()),
        ..PersistentVolumeClaimCondition::default()
    }));
    json!({
        "metadata": {"resourceVersion": claim.metadata.resource_version},
        "status": {
            "allocatedResources": {"storage": size},
            "allocatedResourceStatuses": {"storage": NODE_RESIZE_PENDING},
            "conditions": conditions,
        }
    })
}

/// The status merge patch finishing a resize: the claim's capacity is
/// `capacity`, the resize condition and status are gone. Guarded by the
/// claim's resourceVersion.
pub fn resize_finished(claim: &PersistentVolumeClaim, capacity: &Quantity) -> Value {
    let conditions = other_conditions(claim);
    json!({
        "metadata": {"resourceVersion": claim.metadata.resource_version},
        "status": {
            "capacity": {"storage": capacity},
            "allocatedResourceStatuses": {"storage": null},
            "conditions": if conditions.is_empty() { Value::Null } else { json!(conditions) },
        }
    })
}

/// After a volume was mounted for a pod with a filesystem of
/// `filesystem_bytes`: the capacity to report on the claim when the
/// filesystem now covers a volume that grew (or a pending mark is left),
/// `None` when there is nothing to finish or the filesystem is still the
/// old size (another pod keeps it mounted).
pub fn finished_capacity(
    claim: &PersistentVolumeClaim,
    volume: &PersistentVolume,
    filesystem_bytes: u64,
) -> Option<Quantity> {
    let capacity = volume_capacity(volume)?;
    let capacity_bytes = storage_bytes(capacity)?;
    let reported = claim_capacity(claim).and_then(storage_bytes);
    let pending = has_condition(claim, FILE_SYSTEM_RESIZE_PENDING)
        || resize_status(claim) == Some(NODE_RESIZE_PENDING);
    let grew = reported.is_some_and(|r| r < capacity_bytes);
    ((grew || pending) && filesystem_bytes >= capacity_bytes).then(|| capacity.clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claim(status: Value) -> PersistentVolumeClaim {
        serde_json::from_value(json!({
            "metadata": {"name": "data", "namespace": "db", "resourceVersion": "42"},
            "spec": {"volumeName": "pvc-1", "resources": {"requests": {"storage": "128Mi"}}},
            "status": status
        }))
        .unwrap()
    }

    fn volume(capacity: &str) -> PersistentVolume {
        serde_json::from_value(json!({
            "metadata": {"name": "pvc-1"},
            "spec": {"capacity": {"storage": capacity}}
        }))
        .unwrap()
    }

    fn now() -> Time {
        Time(serde_json::from_value(json!("2025-01-01T00:00:00Z")).unwrap())
    }

    const MIB: u64 = 1 << 20;

    #[test]
    fn pending_mark_records_the_new_size_and_keeps_other_conditions() {
        let grown = claim(json!({
            "phase": "Bound", "capacity": {"storage": "64Mi"},
            "conditions": [
                {"type": "Resizing", "status": "True"},
                {"type": "ModifyingVolume", "status": "True"}
            ]
        }));
        let patch = node_resize_pending(&grown, &Quantity("128Mi".into()), now());
        assert_eq!(
            patch,
            json!({
                "metadata": {"resourceVersion": "42"},
                "status": {
                    "allocatedResources": {"storage": "128Mi"},
                    "allocatedResourceStatuses": {"storage": "NodeResizePending"},
                    "conditions": [
                        {"type": "ModifyingVolume", "status": "True"},
                        {"type": "FileSystemResizePending", "status": "True",
                         "lastTransitionTime": "2025-01-01T00:00:00Z", "message": PENDING_MESSAGE}
                    ]
                }
            })
        );
    }

    #[test]
    fn a_pending_condition_keeps_its_transition_time() {
        let pending = claim(json!({
            "phase": "Bound", "capacity": {"storage": "64Mi"},
            "conditions": [{"type": "FileSystemResizePending", "status": "True",
                            "lastTransitionTime": "2024-01-01T00:00:00Z"}]
        }));
        let patch = node_resize_pending(&pending, &Quantity("256Mi".into()), now());
        assert_eq!(
            patch["status"]["conditions"][0]["lastTransitionTime"],
            "2024-01-01T00:00:00Z"
        );
    }

    #[test]
    fn is_pending_only_for_the_size_it_was_marked_for() {
        let marked = claim(json!({
            "phase": "Bound", "capacity": {"storage": "64Mi"},
            "allocatedResources": {"storage": "128Mi"},
            "allocatedResourceStatuses": {"storage": "NodeResizePending"},
            "conditions": [{"type": "FileSystemResizePending", "status": "True"}]
        }));
        assert!(is_node_resize_pending(&marked, &Quantity("128Mi".into())));
        assert!(is_node_resize_pending(
            &marked,
            &Quantity("134217728".into())
        ));
        assert!(!is_node_resize_pending(&marked, &Quantity("256Mi".into())));
        let unmarked = claim(json!({"phase": "Bound", "capacity": {"storage": "64Mi"}}));
        assert!(!is_node_resize_pending(
            &unmarked,
            &Quantity("128Mi".into())
        ));
    }

    #[test]
    fn finishes_once_the_filesystem_covers_the_grown_volume() {
        let pending = claim(json!({
            "phase": "Bound", "capacity": {"storage": "64Mi"},
            "allocatedResourceStatuses": {"storage": "NodeResizePending"},
            "conditions": [{"type": "FileSystemResizePending", "status": "True"}]
        }));
        assert_eq!(
            finished_capacity(&pending, &volume("128Mi"), 128 * MIB),
            Some(Quantity("128Mi".into()))
        );
        // Still mounted elsewhere with the old size: not yet.
        assert_eq!(
            finished_capacity(&pending, &volume("128Mi"), 64 * MIB),
            None
        );
        // Nothing grew, nothing pending: nothing to write.
        let settled = claim(json!({"phase": "Bound", "capacity": {"storage": "128Mi"}}));
        assert_eq!(
            finished_capacity(&settled, &volume("128Mi"), 128 * MIB),
            None
        );
        // The mark was lost but the volume is larger than the claim says.
        let unmarked = claim(json!({"phase": "Bound", "capacity": {"storage": "64Mi"}}));
        assert_eq!(
            finished_capacity(&unmarked, &volume("128Mi"), 128 * MIB),
            Some(Quantity("128Mi".into()))
        );
    }

    #[test]
    fn finished_patch_clears_the_resize_marks() {
        let pending = claim(json!({
            "phase": "Bound", "capacity": {"storage": "64Mi"},
            "allocatedResourceStatuses": {"storage": "NodeResizePending"},
            "conditions": [{"type": "FileSystemResizePending", "status": "True"}]
        }));
        assert_eq!(
            resize_finished(&pending, &Quantity("128Mi".into())),
            json!({
                "metadata": {"resourceVersion": "42"},
                "status": {
                    "capacity": {"storage": "128Mi"},
                    "allocatedResourceStatuses": {"storage": null},
                    "conditions": null
                }
            })
        );
    }
}
