//! The StorageClasses and the CSIDriver object of the lab.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::storage::v1::{CSIDriver, CSIDriverSpec, StorageClass};
use kube::api::{ObjectMeta, Patch, PatchParams};
use kube::{Api, Resource};
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::{
    FIELD_MANAGER, LOCAL_CLASS, LOCAL_PROVISIONER, NETWORK_CLASS, NETWORK_DRIVER, StorageError,
};

const DEFAULT_CLASS_ANNOTATION: &str = "storageclass.kubernetes.io/is-default-class";

/// `lab-network`: the default class; CSI volumes attachable from any node,
/// bound at once, expandable.
pub fn network_class() -> StorageClass {
    StorageClass {
        metadata: ObjectMeta {
            name: Some(NETWORK_CLASS.to_owned()),
            annotations: Some(BTreeMap::from([(
                DEFAULT_CLASS_ANNOTATION.to_owned(),
                "true".to_owned(),
            )])),
            ..ObjectMeta::default()
        },
        provisioner: NETWORK_DRIVER.to_owned(),
        reclaim_policy: Some("Delete".to_owned()),
        volume_binding_mode: Some("Immediate".to_owned()),
        allow_volume_expansion: Some(true),
        ..StorageClass::default()
    }
}

/// `lab-local`: a disk on one node, bound once the scheduler picked the
/// node of the first consumer, expandable.
pub fn local_class() -> StorageClass {
    StorageClass {
        metadata: ObjectMeta {
            name: Some(LOCAL_CLASS.to_owned()),
            ..ObjectMeta::default()
        },
        provisioner: LOCAL_PROVISIONER.to_owned(),
        reclaim_policy: Some("Delete".to_owned()),
        volume_binding_mode: Some("WaitForFirstConsumer".to_owned()),
        allow_volume_expansion: Some(true),
        ..StorageClass::default()
    }
}

/// The CSIDriver of network volumes: the attach-detach controller creates
/// VolumeAttachments for them.
pub fn csi_driver() -> CSIDriver {
    CSIDriver {
        metadata: ObjectMeta {
            name: Some(NETWORK_DRIVER.to_owned()),
            ..ObjectMeta::default()
        },
        spec: CSIDriverSpec {
            attach_required: Some(true),
            pod_info_on_mount: Some(false),
            volume_lifecycle_modes: Some(vec!["Persistent".to_owned()]),
            ..CSIDriverSpec::default()
        },
    }
}

/// Applies the classes and the CSIDriver. Waits for the API server while it
/// is not reachable; an object that cannot be changed (StorageClass fields
/// are immutable) is reported and left as it is.
pub async fn ensure(client: &kube::Client) -> Result<(), StorageError> {
    apply_cluster_object(client, network_class()).await;
    apply_cluster_object(client, local_class()).await;
    apply_cluster_object(client, csi_driver()).await;
    Ok(())
}

async fn apply_cluster_object<K>(client: &kube::Client, mut object: K)
where
    K: Resource<DynamicType = (), Scope = k8s_openapi::ClusterResourceScope>
        + Clone
        + std::fmt::Debug
        + Serialize
        + DeserializeOwned,
{
    let api: Api<K> = Api::all(client.clone());
    let name = object.meta().name.clone().unwrap_or_default();
    object.meta_mut().managed_fields = None;
    let value = match serde_json::to_value(&object) {
        Ok(value) => value,
        Err(e) => {
            tracing::error!(%name, "cannot serialize {}: {e}", K::kind(&()));
            return;
        }
    };
    let params = PatchParams::apply(FIELD_MANAGER).force();
    let mut delay = Duration::from_millis(500);
    loop {
        match api.patch(&name, &params, &Patch::Apply(&value)).await {
            Ok(_) => {
                tracing::info!(%name, "{} applied", K::kind(&()));
                return;
            }
            Err(kube::Error::Api(status)) if (400..500).contains(&status.code) => {
                tracing::error!(%name, "cannot apply {}: {}", K::kind(&()), status.message);
                return;
            }
            Err(e) => {
                tracing::warn!(%name, "cannot apply {} yet, retrying: {e}", K::kind(&()));
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(Duration::from_secs(5));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn network_class_is_the_expandable_default() {
        let json = serde_json::to_value(network_class()).unwrap();
        assert_eq!(
            json,
            serde_json::json!({
                "apiVersion": "storage.k8s.io/v1",
                "kind": "StorageClass",
                "metadata": {"name": "lab-network", "annotations": {DEFAULT_CLASS_ANNOTATION: "true"}},
                "provisioner": "network.etcd-lab.dev",
                "reclaimPolicy": "Delete",
                "volumeBindingMode": "Immediate",
                "allowVolumeExpansion": true
            })
        );
    }

    #[test]
    fn local_class_waits_for_first_consumer_and_is_expandable() {
        let class = local_class();
        assert_eq!(
            class.volume_binding_mode.as_deref(),
            Some("WaitForFirstConsumer")
        );
        assert_eq!(class.provisioner, "local.etcd-lab.dev");
        assert_eq!(class.allow_volume_expansion, Some(true));
    }

    #[test]
    fn csi_driver_requires_attach() {
        let json = serde_json::to_value(csi_driver()).unwrap();
        assert_eq!(json["spec"]["attachRequired"], true);
        assert_eq!(json["spec"]["podInfoOnMount"], false);
    }
}
