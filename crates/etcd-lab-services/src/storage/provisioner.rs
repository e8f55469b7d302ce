//! Dynamic provisioning and expansion of claims, as the external-provisioner
//! and external-resizer sidecars of a CSI driver do.

use std::sync::Arc;
use std::time::Duration;

use etcd_lab_common::IoContext;
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::api::{Patch, PatchParams, PostParams};
use kube::runtime::controller::Action;
use kube::{Api, ResourceExt};

use super::volume::{ClaimPlan, needs_expansion, plan_claim, plan_expansion};
use super::{Context, FIELD_MANAGER, StorageError, controller, is_already_exists, is_not_found};

/// Watches claims in all namespaces until the watch ends.
pub async fn run(ctx: Arc<Context>) {
    controller::run(ctx, "provisioner", reconcile, Duration::from_secs(2), warn).await;
}

fn warn(claim: &PersistentVolumeClaim, error: &StorageError) {
    tracing::warn!(claim = %claim.name_any(), namespace = ?claim.namespace(), "provisioning failed: {error}");
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
        ClaimPlan::Provision { volume, data_dir } => {
            std::fs::create_dir_all(&data_dir)
                .context(|| format!("create volume data {}", data_dir.display()))?;
            let volumes: Api<PersistentVolume> = Api::all(ctx.client.clone());
            match volumes.create(&PostParams::default(), &volume).await {
                Ok(created) => tracing::info!(
                    claim = %claim.name_any(),
                    namespace = ?claim.namespace(),
                    volume = %created.name_any(),
                    path = %data_dir.display(),
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
    if needs_expansion(&claim) {
        expand(&claim, &ctx).await?;
    }
    Ok(Action::await_change())
}

/// Grows the volume of a bound claim, then reports the new size on the claim.
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
    let plan = plan_expansion(claim, &volume);
    let params = PatchParams::apply(FIELD_MANAGER).force();
    if let Some(capacity) = &plan.volume_capacity {
        let patch = serde_json::json!({"spec": {"capacity": {"storage": capacity}}});
        volumes
            .patch(&volume_name, &PatchParams::default(), &Patch::Merge(&patch))
            .await?;
        tracing::info!(volume = %volume_name, capacity = %capacity.0, "volume expanded");
    }
    if let Some(capacity) = &plan.claim_capacity {
        let namespace = claim.namespace().unwrap_or_default();
        let claims: Api<PersistentVolumeClaim> = Api::namespaced(ctx.client.clone(), &namespace);
        let patch = serde_json::json!({
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "status": {
                "capacity": {"storage": capacity},
                "allocatedResources": {"storage": capacity},
            }
        });
        claims
            .patch_status(&claim.name_any(), &params, &Patch::Apply(&patch))
            .await?;
        tracing::info!(claim = %claim.name_any(), %namespace, capacity = %capacity.0, "claim expanded");
    }
    Ok(())
}
