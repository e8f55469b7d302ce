//! Pure decisions about claims: which PersistentVolume (and disk) to
//! provision for a claim, and how to follow a claim that grew.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::{
    CSIPersistentVolumeSource, LocalVolumeSource, NodeSelector, NodeSelectorRequirement,
    NodeSelectorTerm, ObjectReference, PersistentVolume, PersistentVolumeClaim,
    PersistentVolumeSpec, VolumeNodeAffinity,
};
use k8s_openapi::api::storage::v1::StorageClass;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::ObjectMeta;

use etcd_lab_node::volume::expansion::{
    claim_capacity, is_node_resize_pending, node_resize_pending, volume_capacity,
};
use etcd_lab_node::volume::size::{disk_bytes, disk_capacity, storage_bytes};

use super::layout::{is_plain_name, local_volume_dir, network_volume_dir};
use super::{
    ANN_BETA_STORAGE_PROVISIONER, ANN_PROVISIONED_BY, ANN_SELECTED_NODE, ANN_STORAGE_PROVISIONER,
    LOCAL_PROVISIONER, NETWORK_DRIVER, PROVISIONER_FINALIZER,
};

/// What to do for a claim.
#[derive(Debug, PartialEq)]
pub enum ClaimPlan {
    /// Not for this provisioner, already bound, or being deleted.
    Ignore,
    /// A `WaitForFirstConsumer` claim whose node the scheduler has not
    /// chosen yet.
    WaitForNode,
    /// Create the volume's directory and a disk of `disk_bytes` beside it,
    /// then this PersistentVolume (its capacity the disk's size).
    Provision {
        volume: Box<PersistentVolume>,
        data_dir: PathBuf,
        disk_bytes: u64,
    },
    /// The claim cannot be provisioned as it is; wait for it to change.
    Invalid(String),
}

/// Name of the PV provisioned for a claim, as the external-provisioner
/// names it: `pvc-<claim uid>`.
pub fn volume_name(claim: &PersistentVolumeClaim) -> Option<String> {
    claim.metadata.uid.as_ref().map(|uid| format!("pvc-{uid}"))
}

/// The provisioner the PV controller asked to act on a claim.
fn requested_provisioner(claim: &PersistentVolumeClaim) -> Option<&str> {
    let annotations = claim.metadata.annotations.as_ref()?;
    annotations
        .get(ANN_STORAGE_PROVISIONER)
        .or_else(|| annotations.get(ANN_BETA_STORAGE_PROVISIONER))
        .map(String::as_str)
}

/// The storage request of a claim.
pub fn requested_size(claim: &PersistentVolumeClaim) -> Option<&Quantity> {
    claim
        .spec
        .as_ref()?
        .resources
        .as_ref()?
        .requests
        .as_ref()?
        .get("storage")
}

/// Decides what to provision for `claim` of `class`.
pub fn plan_claim(
    claim: &PersistentVolumeClaim,
    class: &StorageClass,
    lab_dir: &Path,
) -> ClaimPlan {
    let Some(spec) = claim.spec.as_ref() else {
        return ClaimPlan::Ignore;
    };
    let ours = class.provisioner == NETWORK_DRIVER || class.provisioner == LOCAL_PROVISIONER;
    let bound = spec.volume_name.as_deref().is_some_and(|v| !v.is_empty());
    if !ours
        || bound
        || claim.metadata.deletion_timestamp.is_some()
        || requested_provisioner(claim) != Some(class.provisioner.as_str())
    {
        return ClaimPlan::Ignore;
    }
    let (Some(name), Some(namespace), Some(claim_name)) = (
        volume_name(claim),
        claim.metadata.namespace.as_ref(),
        claim.metadata.name.as_ref(),
    ) else {
        return ClaimPlan::Invalid("claim without uid, namespace or name".to_owned());
    };
    let Some(size) = requested_size(claim) else {
        return ClaimPlan::Invalid("claim requests no storage".to_owned());
    };
    let Some((capacity, disk_bytes)) = disk_capacity(size) else {
        return ClaimPlan::Invalid(format!("storage request {:?} is not a size", size.0));
    };
    if spec.selector.is_some() {
        return ClaimPlan::Invalid("claims with a selector cannot be provisioned".to_owned());
    }
    let mut volume_spec = PersistentVolumeSpec {
        access_modes: spec.access_modes.clone(),
        capacity: Some(BTreeMap::from([("storage".to_owned(), capacity)])),
        claim_ref: Some(ObjectReference {
            api_version: Some("v1".to_owned()),
            kind: Some("PersistentVolumeClaim".to_owned()),
            namespace: Some(namespace.clone()),
            name: Some(claim_name.clone()),
            uid: claim.metadata.uid.clone(),
            resource_version: claim.metadata.resource_version.clone(),
            ..ObjectReference::default()
        }),
        persistent_volume_reclaim_policy: Some(
            class
                .reclaim_policy
                .clone()
                .unwrap_or_else(|| "Delete".to_owned()),
        ),
        storage_class_name: class.metadata.name.clone(),
        mount_options: class.mount_options.clone(),
        volume_mode: spec.volume_mode.clone(),
        ..PersistentVolumeSpec::default()
    };
    let data_dir = if class.provisioner == NETWORK_DRIVER {
        volume_spec.csi = Some(CSIPersistentVolumeSource {
            driver: NETWORK_DRIVER.to_owned(),
            volume_handle: name.clone(),
            ..CSIPersistentVolumeSource::default()
        });
        network_volume_dir(lab_dir, &name)
    } else {
        let node = claim
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(ANN_SELECTED_NODE));
        let Some(node) = node else {
            return ClaimPlan::WaitForNode;
        };
        if !is_plain_name(node) {
            return ClaimPlan::Invalid(format!("selected node {node:?} is not a valid name"));
        }
        let dir = local_volume_dir(lab_dir, node, &name);
        volume_spec.local = Some(LocalVolumeSource {
            path: dir.to_string_lossy().into_owned(),
            fs_type: None,
        });
        volume_spec.node_affinity = Some(VolumeNodeAffinity {
            required: Some(NodeSelector {
                node_selector_terms: vec![NodeSelectorTerm {
                    match_expressions: Some(vec![NodeSelectorRequirement {
                        key: "kubernetes.io/hostname".to_owned(),
                        operator: "In".to_owned(),
                        values: Some(vec![node.clone()]),
                    }]),
                    match_fields: None,
                }],
            }),
        });
        dir
    };
    let volume = PersistentVolume {
        metadata: ObjectMeta {
            name: Some(name),
            annotations: Some(BTreeMap::from([(
                ANN_PROVISIONED_BY.to_owned(),
                class.provisioner.clone(),
            )])),
            finalizers: Some(vec![PROVISIONER_FINALIZER.to_owned()]),
            ..ObjectMeta::default()
        },
        spec: Some(volume_spec),
        status: None,
    };
    ClaimPlan::Provision {
        volume: Box::new(volume),
        data_dir,
        disk_bytes,
    }
}

/// The controller side of an offline expansion, as the external-resizer
/// does it: grow the disk, set the volume's capacity, mark the claim
/// `FileSystemResizePending` (the node grows the filesystem when a pod
/// mounts the volume next).
#[derive(Debug, PartialEq)]
pub struct Expansion {
    /// The disk grows to this size (it never shrinks).
    pub disk_bytes: u64,
    /// The volume's new `spec.capacity.storage`, when it grows.
    pub volume_capacity: Option<Quantity>,
    /// The claim's status merge patch.
    pub claim_status: serde_json::Value,
}

/// What to do for a bound claim of `volume`: an expansion when the claim
/// asks for a larger disk than the volume has, or when the volume grew but
/// the claim was not marked yet (a pass ended between the two writes);
/// `None` otherwise, also for a request smaller than the volume (disks do
/// not shrink).
pub fn plan_expansion(
    claim: &PersistentVolumeClaim,
    volume: &PersistentVolume,
    now: Time,
) -> Option<Expansion> {
    let bound = claim.status.as_ref()?.phase.as_deref() == Some("Bound");
    let volume_name = claim.spec.as_ref()?.volume_name.as_ref()?;
    let claim_ref = volume.spec.as_ref()?.claim_ref.as_ref()?;
    let ours = volume
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(ANN_PROVISIONED_BY))
        .is_some_and(|p| p == NETWORK_DRIVER || p == LOCAL_PROVISIONER);
    if !bound
        || !ours
        || volume.metadata.name.as_ref() != Some(volume_name)
        || claim_ref.uid.is_none()
        || claim_ref.uid != claim.metadata.uid
    {
        return None;
    }
    let (requested, requested_disk) = disk_capacity(requested_size(claim)?)?;
    let current = volume_capacity(volume);
    let current_bytes = current.and_then(storage_bytes).unwrap_or_default();
    if requested_disk > current_bytes {
        let claim_status = node_resize_pending(claim, &requested, now);
        return Some(Expansion {
            disk_bytes: requested_disk,
            volume_capacity: Some(requested),
            claim_status,
        });
    }
    let current = current?;
    let reported = claim_capacity(claim).and_then(storage_bytes)?;
    (reported < current_bytes && !is_node_resize_pending(claim, current)).then(|| Expansion {
        disk_bytes: disk_bytes(current_bytes),
        volume_capacity: None,
        claim_status: node_resize_pending(claim, current, now),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::classes;

    fn claim(json: serde_json::Value) -> PersistentVolumeClaim {
        serde_json::from_value(json).unwrap()
    }

    fn network_claim() -> PersistentVolumeClaim {
        claim(serde_json::json!({
            "metadata": {
                "name": "data-etcd-0", "namespace": "db", "uid": "1234", "resourceVersion": "7",
                "annotations": {ANN_STORAGE_PROVISIONER: NETWORK_DRIVER}
            },
            "spec": {
                "accessModes": ["ReadWriteOnce"],
                "storageClassName": "lab-network",
                "volumeMode": "Filesystem",
                "resources": {"requests": {"storage": "1Gi"}}
            }
        }))
    }

    fn local_claim(selected_node: Option<&str>) -> PersistentVolumeClaim {
        let mut annotations = serde_json::json!({ANN_STORAGE_PROVISIONER: LOCAL_PROVISIONER});
        if let Some(node) = selected_node {
            annotations[ANN_SELECTED_NODE] = node.into();
        }
        claim(serde_json::json!({
            "metadata": {"name": "data", "namespace": "db", "uid": "abcd", "annotations": annotations},
            "spec": {
                "accessModes": ["ReadWriteOnce"],
                "storageClassName": "lab-local",
                "resources": {"requests": {"storage": "2Gi"}}
            }
        }))
    }

    #[test]
    fn network_claim_gets_a_csi_volume_bound_to_it() {
        let plan = plan_claim(
            &network_claim(),
            &classes::network_class(),
            Path::new("/lab"),
        );
        let ClaimPlan::Provision {
            volume,
            data_dir,
            disk_bytes,
        } = plan
        else {
            panic!("expected a volume, got {plan:?}");
        };
        assert_eq!(data_dir, PathBuf::from("/lab/network-volumes/pvc-1234"));
        assert_eq!(disk_bytes, 1 << 30);
        let expected: PersistentVolume = serde_json::from_value(serde_json::json!({
            "metadata": {
                "name": "pvc-1234",
                "annotations": {ANN_PROVISIONED_BY: NETWORK_DRIVER},
                "finalizers": [PROVISIONER_FINALIZER]
            },
            "spec": {
                "accessModes": ["ReadWriteOnce"],
                "capacity": {"storage": "1Gi"},
                "claimRef": {
                    "apiVersion": "v1", "kind": "PersistentVolumeClaim",
                    "namespace": "db", "name": "data-etcd-0", "uid": "1234", "resourceVersion": "7"
                },
                "persistentVolumeReclaimPolicy": "Delete",
                "storageClassName": "lab-network",
                "volumeMode": "Filesystem",
                "csi": {"driver": NETWORK_DRIVER, "volumeHandle": "pvc-1234"}
            }
        }))
        .unwrap();
        assert_eq!(*volume, expected);
    }

    #[test]
    fn local_claim_waits_for_the_scheduler_then_gets_a_local_volume_on_that_node() {
        let class = classes::local_class();
        assert_eq!(
            plan_claim(&local_claim(None), &class, Path::new("/lab")),
            ClaimPlan::WaitForNode
        );
        let plan = plan_claim(&local_claim(Some("node-2")), &class, Path::new("/lab"));
        let ClaimPlan::Provision {
            volume, data_dir, ..
        } = plan
        else {
            panic!("expected a volume, got {plan:?}");
        };
        assert_eq!(
            data_dir,
            PathBuf::from("/lab/nodes/node-2/volumes/pvc-abcd")
        );
        let spec = volume.spec.unwrap();
        assert_eq!(
            spec.local.unwrap().path,
            "/lab/nodes/node-2/volumes/pvc-abcd"
        );
        let affinity = serde_json::to_value(spec.node_affinity.unwrap()).unwrap();
        assert_eq!(
            affinity,
            serde_json::json!({"required": {"nodeSelectorTerms": [{"matchExpressions": [
                {"key": "kubernetes.io/hostname", "operator": "In", "values": ["node-2"]}
            ]}]}})
        );
        assert_eq!(spec.storage_class_name.as_deref(), Some("lab-local"));
        assert_eq!(spec.csi, None);
    }

    #[test]
    fn claims_not_handed_to_us_or_already_bound_are_ignored() {
        let class = classes::network_class();
        let mut not_annotated = network_claim();
        not_annotated.metadata.annotations = None;
        assert_eq!(
            plan_claim(&not_annotated, &class, Path::new("/lab")),
            ClaimPlan::Ignore
        );
        let mut bound = network_claim();
        if let Some(spec) = bound.spec.as_mut() {
            spec.volume_name = Some("pvc-1234".to_owned());
        }
        assert_eq!(
            plan_claim(&bound, &class, Path::new("/lab")),
            ClaimPlan::Ignore
        );
        let mut foreign = class.clone();
        foreign.provisioner = "ebs.csi.aws.com".to_owned();
        assert_eq!(
            plan_claim(&network_claim(), &foreign, Path::new("/lab")),
            ClaimPlan::Ignore
        );
    }

    #[test]
    fn a_selected_node_that_is_not_a_name_is_refused() {
        let plan = plan_claim(
            &local_claim(Some("../etc")),
            &classes::local_class(),
            Path::new("/lab"),
        );
        assert!(matches!(plan, ClaimPlan::Invalid(_)), "{plan:?}");
    }

    #[test]
    fn a_request_that_is_not_whole_mib_gets_the_disk_it_rounds_up_to() {
        let mut odd = network_claim();
        if let Some(spec) = odd.spec.as_mut() {
            spec.resources =
                serde_json::from_value(serde_json::json!({"requests": {"storage": "1G"}})).unwrap();
        }
        let plan = plan_claim(&odd, &classes::network_class(), Path::new("/lab"));
        let ClaimPlan::Provision {
            volume, disk_bytes, ..
        } = plan
        else {
            panic!("expected a volume, got {plan:?}");
        };
        assert_eq!(disk_bytes, 954 << 20);
        let capacity = volume.spec.unwrap().capacity.unwrap();
        assert_eq!(capacity["storage"], Quantity("954Mi".into()));
    }

    fn bound_claim(status: serde_json::Value) -> PersistentVolumeClaim {
        claim(serde_json::json!({
            "metadata": {"name": "data", "namespace": "db", "uid": "1234", "resourceVersion": "9"},
            "spec": {"volumeName": "pvc-1234", "resources": {"requests": {"storage": "128Mi"}}},
            "status": status
        }))
    }

    fn volume_of_size(size: &str) -> PersistentVolume {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "pvc-1234", "annotations": {ANN_PROVISIONED_BY: NETWORK_DRIVER}},
            "spec": {"capacity": {"storage": size}, "claimRef": {"uid": "1234"}}
        }))
        .unwrap()
    }

    fn now() -> Time {
        Time(serde_json::from_value(serde_json::json!("2025-01-01T00:00:00Z")).unwrap())
    }

    const MIB: u64 = 1 << 20;

    #[test]
    fn a_grown_claim_grows_disk_and_volume_and_waits_for_the_node() {
        let grown =
            bound_claim(serde_json::json!({"phase": "Bound", "capacity": {"storage": "64Mi"}}));
        let expansion = plan_expansion(&grown, &volume_of_size("64Mi"), now()).unwrap();
        assert_eq!(expansion.disk_bytes, 128 * MIB);
        assert_eq!(expansion.volume_capacity, Some(Quantity("128Mi".into())));
        assert_eq!(
            expansion.claim_status["status"]["allocatedResourceStatuses"]["storage"],
            "NodeResizePending"
        );
        assert_eq!(
            expansion.claim_status["status"]["conditions"][0]["type"],
            "FileSystemResizePending"
        );
        assert_eq!(expansion.claim_status["metadata"]["resourceVersion"], "9");
    }

    #[test]
    fn a_volume_grown_without_its_claim_marked_gets_the_mark() {
        let unmarked =
            bound_claim(serde_json::json!({"phase": "Bound", "capacity": {"storage": "64Mi"}}));
        let expansion = plan_expansion(&unmarked, &volume_of_size("128Mi"), now()).unwrap();
        assert_eq!(expansion.volume_capacity, None);
        assert_eq!(expansion.disk_bytes, 128 * MIB);
        let marked = bound_claim(serde_json::json!({
            "phase": "Bound", "capacity": {"storage": "64Mi"},
            "allocatedResources": {"storage": "128Mi"},
            "allocatedResourceStatuses": {"storage": "NodeResizePending"},
            "conditions": [{"type": "FileSystemResizePending", "status": "True"}]
        }));
        assert_eq!(
            plan_expansion(&marked, &volume_of_size("128Mi"), now()),
            None
        );
    }

    #[test]
    fn settled_shrunk_or_foreign_claims_need_nothing() {
        let settled =
            bound_claim(serde_json::json!({"phase": "Bound", "capacity": {"storage": "128Mi"}}));
        assert_eq!(
            plan_expansion(&settled, &volume_of_size("128Mi"), now()),
            None
        );
        // A request below the volume's size: disks do not shrink.
        let shrunk =
            bound_claim(serde_json::json!({"phase": "Bound", "capacity": {"storage": "256Mi"}}));
        assert_eq!(
            plan_expansion(&shrunk, &volume_of_size("256Mi"), now()),
            None
        );
        let pending = bound_claim(serde_json::json!({"phase": "Pending"}));
        assert_eq!(
            plan_expansion(&pending, &volume_of_size("64Mi"), now()),
            None
        );
        let mut foreign = volume_of_size("64Mi");
        foreign.metadata.annotations = None;
        let grown =
            bound_claim(serde_json::json!({"phase": "Bound", "capacity": {"storage": "64Mi"}}));
        assert_eq!(plan_expansion(&grown, &foreign, now()), None);
        let mut other_claim = volume_of_size("64Mi");
        if let Some(spec) = other_claim.spec.as_mut() {
            spec.claim_ref = serde_json::from_value(serde_json::json!({"uid": "5678"})).unwrap();
        }
        assert_eq!(plan_expansion(&grown, &other_claim, now()), None);
    }
}
