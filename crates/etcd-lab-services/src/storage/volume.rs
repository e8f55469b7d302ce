//! Pure decisions about claims: which PersistentVolume to provision for a
//! claim, and how to follow a claim that grew.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::{
    CSIPersistentVolumeSource, LocalVolumeSource, NodeSelector, NodeSelectorRequirement,
    NodeSelectorTerm, ObjectReference, PersistentVolume, PersistentVolumeClaim,
    PersistentVolumeSpec, VolumeNodeAffinity,
};
use k8s_openapi::api::storage::v1::StorageClass;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::api::ObjectMeta;

use super::layout::{is_plain_name, local_volume_dir, network_volume_dir};
use super::quantity::is_larger;
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
    /// Create this directory, then this volume.
    Provision {
        volume: Box<PersistentVolume>,
        data_dir: PathBuf,
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
    if spec.selector.is_some() {
        return ClaimPlan::Invalid("claims with a selector cannot be provisioned".to_owned());
    }
    let mut volume_spec = PersistentVolumeSpec {
        access_modes: spec.access_modes.clone(),
        capacity: Some(BTreeMap::from([("storage".to_owned(), size.clone())])),
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
    }
}

/// What to write when a bound claim asks for more storage than it has.
#[derive(Debug, Default, PartialEq)]
pub struct ExpansionPlan {
    /// New `spec.capacity.storage` of the volume.
    pub volume_capacity: Option<Quantity>,
    /// New `status.capacity.storage` of the claim.
    pub claim_capacity: Option<Quantity>,
}

/// Whether a bound claim grew beyond what its status reports.
pub fn needs_expansion(claim: &PersistentVolumeClaim) -> bool {
    let Some(request) = requested_size(claim) else {
        return false;
    };
    let status_capacity = claim
        .status
        .as_ref()
        .filter(|s| s.phase.as_deref() == Some("Bound"))
        .and_then(|s| s.capacity.as_ref())
        .and_then(|c| c.get("storage"));
    status_capacity.is_some_and(|capacity| is_larger(request, capacity))
}

/// Follows a claim that grew: first the volume, then the claim's status.
pub fn plan_expansion(claim: &PersistentVolumeClaim, volume: &PersistentVolume) -> ExpansionPlan {
    let mut plan = ExpansionPlan::default();
    if !needs_expansion(claim) {
        return plan;
    }
    let Some(request) = requested_size(claim) else {
        return plan;
    };
    let ours = volume
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(ANN_PROVISIONED_BY))
        .is_some_and(|p| p == NETWORK_DRIVER || p == LOCAL_PROVISIONER);
    if !ours {
        return plan;
    }
    let volume_capacity = volume
        .spec
        .as_ref()
        .and_then(|s| s.capacity.as_ref())
        .and_then(|c| c.get("storage"));
    if volume_capacity.is_none_or(|capacity| is_larger(request, capacity)) {
        plan.volume_capacity = Some(request.clone());
    }
    plan.claim_capacity = Some(request.clone());
    plan
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
        let ClaimPlan::Provision { volume, data_dir } = plan else {
            panic!("expected a volume, got {plan:?}");
        };
        assert_eq!(data_dir, PathBuf::from("/lab/network-volumes/pvc-1234"));
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
        let ClaimPlan::Provision { volume, data_dir } = plan else {
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

    fn bound_claim(request: &str, capacity: &str) -> PersistentVolumeClaim {
        claim(serde_json::json!({
            "metadata": {"name": "data", "namespace": "db", "uid": "1234"},
            "spec": {"volumeName": "pvc-1234", "resources": {"requests": {"storage": request}}},
            "status": {"phase": "Bound", "capacity": {"storage": capacity}}
        }))
    }

    fn volume_of_size(size: &str) -> PersistentVolume {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "pvc-1234", "annotations": {ANN_PROVISIONED_BY: NETWORK_DRIVER}},
            "spec": {"capacity": {"storage": size}}
        }))
        .unwrap()
    }

    #[test]
    fn a_grown_claim_resizes_the_volume_then_the_claim_status() {
        let q = |s: &str| Quantity(s.to_owned());
        let claim = bound_claim("2Gi", "1Gi");
        assert!(needs_expansion(&claim));
        assert_eq!(
            plan_expansion(&claim, &volume_of_size("1Gi")),
            ExpansionPlan {
                volume_capacity: Some(q("2Gi")),
                claim_capacity: Some(q("2Gi"))
            }
        );
        assert_eq!(
            plan_expansion(&claim, &volume_of_size("2Gi")),
            ExpansionPlan {
                volume_capacity: None,
                claim_capacity: Some(q("2Gi"))
            }
        );
        let unchanged = bound_claim("1Gi", "1Gi");
        assert!(!needs_expansion(&unchanged));
        assert_eq!(
            plan_expansion(&unchanged, &volume_of_size("1Gi")),
            ExpansionPlan::default()
        );
    }
}
