//! Reclaim of released volumes: the disk is removed and the PV deleted, as
//! the external-provisioner does for `persistentVolumeReclaimPolicy: Delete`.
//! A disk still mounted for a pod is not removed (the step fails and is
//! retried), as a CSI driver refuses to delete a volume in use.

use std::sync::Arc;
use std::time::Duration;

use etcd_lab_node::volume::disk;
use k8s_openapi::api::core::v1::PersistentVolume;
use kube::api::{DeleteParams, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::{Api, ResourceExt};

use super::layout::data_dir;
use super::{Context, PROVISIONER_FINALIZER, StorageError, controller, is_not_found};

/// What to do with a PV of this process.
#[derive(Debug, PartialEq, Eq)]
pub enum ReclaimStep {
    Nothing,
    /// Released with policy Delete: remove the disk, then delete the PV.
    DeleteVolume,
    /// Being deleted: remove the disk if the policy says so, then the
    /// provisioner's finalizer.
    Finalize {
        remove_data: bool,
    },
}

/// Decides the reclaim step of a PV (pure).
pub fn plan_reclaim(volume: &PersistentVolume) -> ReclaimStep {
    let delete_policy = volume
        .spec
        .as_ref()
        .and_then(|s| s.persistent_volume_reclaim_policy.as_deref())
        == Some("Delete");
    if volume.metadata.deletion_timestamp.is_some() {
        return if volume
            .finalizers()
            .iter()
            .any(|f| f == PROVISIONER_FINALIZER)
        {
            ReclaimStep::Finalize {
                remove_data: delete_policy,
            }
        } else {
            ReclaimStep::Nothing
        };
    }
    let released = volume.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Released");
    if released && delete_policy {
        ReclaimStep::DeleteVolume
    } else {
        ReclaimStep::Nothing
    }
}

/// Watches PVs until the watch ends.
pub async fn run(ctx: Arc<Context>) {
    controller::run(ctx, "reclaim", reconcile, Duration::from_secs(2), warn).await;
}

fn warn(volume: &PersistentVolume, error: &StorageError) {
    tracing::warn!(volume = %volume.name_any(), "reclaim failed: {error}");
}

async fn reconcile(
    volume: Arc<PersistentVolume>,
    ctx: Arc<Context>,
) -> Result<Action, StorageError> {
    // Only volumes this process provisioned have a directory and disk.
    let Some(dir) = data_dir(&volume, &ctx.lab_dir) else {
        return Ok(Action::await_change());
    };
    let api: Api<PersistentVolume> = Api::all(ctx.client.clone());
    let name = volume.name_any();
    match plan_reclaim(&volume) {
        ReclaimStep::Nothing => {}
        ReclaimStep::DeleteVolume => {
            remove(&dir).await?;
            match api.delete(&name, &DeleteParams::default()).await {
                Ok(_) => {
                    tracing::info!(volume = %name, path = %dir.display(), "released volume deleted")
                }
                Err(e) if is_not_found(&e) => {}
                Err(e) => return Err(e.into()),
            }
        }
        ReclaimStep::Finalize { remove_data } => {
            if remove_data {
                remove(&dir).await?;
            }
            let finalizers: Vec<&String> = volume
                .finalizers()
                .iter()
                .filter(|f| *f != PROVISIONER_FINALIZER)
                .collect();
            let patch = serde_json::json!({"metadata": {
                "finalizers": finalizers,
                "resourceVersion": volume.resource_version(),
            }});
            match api
                .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
            {
                Ok(_) => tracing::info!(volume = %name, "volume finalized"),
                Err(e) if is_not_found(&e) => {}
                Err(e) => return Err(e.into()),
            }
        }
    }
    Ok(Action::await_change())
}

async fn remove(dir: &std::path::Path) -> Result<(), StorageError> {
    let dir = dir.to_owned();
    tokio::task::spawn_blocking(move || disk::remove(&dir)).await??;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn volume(json: serde_json::Value) -> PersistentVolume {
        serde_json::from_value(json).unwrap()
    }

    #[test]
    fn released_volume_with_delete_policy_is_deleted() {
        let v = volume(serde_json::json!({
            "metadata": {"name": "pvc-1"},
            "spec": {"persistentVolumeReclaimPolicy": "Delete"},
            "status": {"phase": "Released"}
        }));
        assert_eq!(plan_reclaim(&v), ReclaimStep::DeleteVolume);
    }

    #[test]
    fn bound_or_retained_volumes_stay() {
        let bound = volume(serde_json::json!({
            "metadata": {"name": "pvc-1"},
            "spec": {"persistentVolumeReclaimPolicy": "Delete"},
            "status": {"phase": "Bound"}
        }));
        assert_eq!(plan_reclaim(&bound), ReclaimStep::Nothing);
        let retained = volume(serde_json::json!({
            "metadata": {"name": "pvc-1"},
            "spec": {"persistentVolumeReclaimPolicy": "Retain"},
            "status": {"phase": "Released"}
        }));
        assert_eq!(plan_reclaim(&retained), ReclaimStep::Nothing);
    }

    #[test]
    fn deleted_volume_loses_data_then_finalizer() {
        let v = volume(serde_json::json!({
            "metadata": {
                "name": "pvc-1",
                "deletionTimestamp": "2025-01-01T00:00:00Z",
                "finalizers": ["kubernetes.io/pv-protection", PROVISIONER_FINALIZER]
            },
            "spec": {"persistentVolumeReclaimPolicy": "Delete"},
            "status": {"phase": "Released"}
        }));
        assert_eq!(
            plan_reclaim(&v),
            ReclaimStep::Finalize { remove_data: true }
        );
    }
}
