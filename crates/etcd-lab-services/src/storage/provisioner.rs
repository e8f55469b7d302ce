//! Dynamic provisioning and expansion of claims, as the external-provisioner
//! and external-resizer sidecars of a CSI driver do.
//!
//! Provisioning creates the volume's disk: a sparse image of the claim's
//! size beside the volume's directory (the node agent makes the filesystem
//! when a pod first mounts it). Expansion is offline: the disk and the
//! volume's capacity grow at once and the claim is marked
//! `FileSystemResizePending`; the filesystem grows when a pod mounts the
//! volume next, and the node agent then reports the new capacity on the
//! claim. kube-controller-manager's expand controller leaves these volumes
//! to us: it finds no in-tree plugin able to expand a `local` or CSI volume
//! and only records an `ExternalExpanding` event on the claim.

use std::sync::Arc;
use std::time::Duration;

use etcd_lab_node::volume::disk;
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::StorageClass;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Patch, PatchParams, PostParams};
use kube::runtime::controller::Action;
use kube::{Api, ResourceExt};

use super::layout::data_dir;
use super::volume::{ClaimPlan, plan_claim, plan_expansion};
use super::{Context, StorageError, controller, is_already_exists, is_not_found};

/// Watches claims in all namespaces until the watch ends.
pub async fn run(ctx: Arc<Context>) {
    controller::run(ctx, "provisioner", reconcile, Duration::from_secs(2), warn).await;
}

fn warn(claim: &PersistentVolumeClaim, error: &StorageError) {
    tracing::warn!(claim = %claim.name_any(), namespace = ?claim.namespace(), "provisioning or expansion failed: {error}");
}

async fn reconcile(
    claim: Arc<PersistentVolumeClaim>,
    ctx: Arc<Context>,
) -> Result<Action, StorageError> {
    let Some(class_name) = claim
        .spec
        .as_ref()
        .and_then(|s| s.storage_class_name.clone())
    else {
        return Ok(Action::await_change());
    };
    let classes: Api<StorageClass> = Api::all(ctx.client.clone());
    let Some(class) = classes.get_opt(&class_name).await? else {
        return Ok(Action::requeue(Duration::from_secs(5)));
    };
    match plan_claim(&claim, &class, &ctx.lab_dir) {
        ClaimPlan::Provision {
            volume,
            data_dir,
            disk_bytes,
        } => {
            let dir = data_dir.clone();
            tokio::task::spawn_blocking(move || disk::ensure_image(&dir, disk_bytes)).await??;
            let volumes: Api<PersistentVolume> = Api::all(ctx.client.clone());
            match volumes.create(&PostParams::default(), &volume).await {
                Ok(created) => tracing::info!(
                    claim = %claim.name_any(),
                    namespace = ?claim.namespace(),
                    volume = %created.name_any(),
                    path = %data_dir.display(),
                    disk_bytes,
                    "volume provisioned"
                ),
                Err(e) if is_already_exists(&e) => {}
                Err(e) => return Err(e.into()),
            }
        }
        ClaimPlan::Invalid(reason) => {
            tracing::warn!(claim = %claim.name_any(), namespace = ?claim.namespace(), "cannot provision: {reason}");
        }
        ClaimPlan::WaitForNode | ClaimPlan::Ignore => {}
    }
    expand(&claim, &ctx).await?;
    Ok(Action::await_change())
}

/// Follows a bound claim that grew: the disk, then the volume's capacity,
/// then the claim's status (each step is repeated harmlessly when a pass
/// ends half way).
async fn expand(claim: &PersistentVolumeClaim, ctx: &Context) -> Result<(), StorageError> {
    let Some(volume_name) = claim.spec.as_ref().and_then(|s| s.volume_name.clone()) else {
        return Ok(());
    };
    let volumes: Api<PersistentVolume> = Api::all(ctx.client.clone());
    let volume = match volumes.get(&volume_name).await {
        Ok(volume) => volume,
        Err(e) if is_not_found(&e) => return Ok(()),
        Err(e) => return Err(e.into()),
    };
    let now = Time(k8s_openapi::jiff::Timestamp::now());
    let Some(expansion) = plan_expansion(claim, &volume, now) else {
        return Ok(());
    };
    let Some(dir) = data_dir(&volume, &ctx.lab_dir) else {
        return Ok(());
    };
    let disk_bytes = expansion.disk_bytes;
    tokio::task::spawn_blocking(move || disk::grow_image(&dir, disk_bytes)).await??;
    if let Some(capacity) = &expansion.volume_capacity {
        let patch = serde_json::json!({"spec": {"capacity": {"storage": capacity}}});
        volumes
            .patch(&volume_name, &PatchParams::default(), &Patch::Merge(&patch))
            .await?;
        tracing::info!(volume = %volume_name, capacity = %capacity.0, "volume expanded; the filesystem grows when a pod mounts it next");
    }
    let namespace = claim.namespace().unwrap_or_default();
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(ctx.client.clone(), &namespace);
    claims
        .patch_status(
            &claim.name_any(),
            &PatchParams::default(),
            &Patch::Merge(&expansion.claim_status),
        )
        .await?;
    tracing::info!(claim = %claim.name_any(), %namespace, "claim marked FileSystemResizePending");
    Ok(())
}
