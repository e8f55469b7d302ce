//! Attacher of `network.etcd-lab.dev`, as the external-attacher sidecar does
//! it: a VolumeAttachment created by the attach-detach controller gets the
//! attacher's finalizer and `status.attached: true`; a deleted one loses the
//! finalizer (the volume is detached).

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::storage::v1::VolumeAttachment;
use kube::api::{Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::{Api, ResourceExt};

use super::{ATTACHER_FINALIZER, Context, NETWORK_DRIVER, StorageError, controller, is_not_found};

/// The next write for a VolumeAttachment.
#[derive(Debug, PartialEq, Eq)]
pub enum AttachStep {
    /// Not ours, or nothing to change.
    Nothing,
    /// Put the finalizer on before attaching.
    AddFinalizer,
    /// Report the volume attached.
    MarkAttached,
    /// Being deleted: the volume is detached, the finalizer goes.
    Detach,
}

/// Decides the next step for a VolumeAttachment (pure).
pub fn plan_attachment(attachment: &VolumeAttachment) -> AttachStep {
    if attachment.spec.attacher != NETWORK_DRIVER {
        return AttachStep::Nothing;
    }
    let has_finalizer = attachment
        .finalizers()
        .iter()
        .any(|f| f == ATTACHER_FINALIZER);
    if attachment.metadata.deletion_timestamp.is_some() {
        return if has_finalizer {
            AttachStep::Detach
        } else {
            AttachStep::Nothing
        };
    }
    if !has_finalizer {
        return AttachStep::AddFinalizer;
    }
    let attached = attachment.status.as_ref().is_some_and(|s| s.attached);
    if attached {
        AttachStep::Nothing
    } else {
        AttachStep::MarkAttached
    }
}

/// Watches VolumeAttachments until the watch ends.
pub async fn run(ctx: Arc<Context>) {
    controller::run(ctx, "attacher", reconcile, Duration::from_secs(1), warn).await;
}

fn warn(attachment: &VolumeAttachment, error: &StorageError) {
    tracing::warn!(attachment = %attachment.name_any(), "attach failed: {error}");
}

async fn reconcile(
    attachment: Arc<VolumeAttachment>,
    ctx: Arc<Context>,
) -> Result<Action, StorageError> {
    let api: Api<VolumeAttachment> = Api::all(ctx.client.clone());
    let name = attachment.name_any();
    let volume = attachment
        .spec
        .source
        .persistent_volume_name
        .clone()
        .unwrap_or_default();
    let node = &attachment.spec.node_name;
    let result = match plan_attachment(&attachment) {
        AttachStep::Nothing => return Ok(Action::await_change()),
        AttachStep::AddFinalizer => {
            let mut finalizers = attachment.finalizers().to_vec();
            finalizers.push(ATTACHER_FINALIZER.to_owned());
            set_finalizers(&api, &attachment, finalizers).await
        }
        AttachStep::MarkAttached => {
            let patch = serde_json::json!({"status": {"attached": true}});
            let result = api
                .patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .map(|_| ());
            if result.is_ok() {
                tracing::info!(%volume, %node, "volume attached");
            }
            result
        }
        AttachStep::Detach => {
            let finalizers = attachment
                .finalizers()
                .iter()
                .filter(|f| *f != ATTACHER_FINALIZER)
                .cloned()
                .collect();
            let result = set_finalizers(&api, &attachment, finalizers).await;
            if result.is_ok() {
                tracing::info!(%volume, %node, "volume detached");
            }
            result
        }
    };
    match result {
        Ok(()) => Ok(Action::await_change()),
        Err(e) if is_not_found(&e) => Ok(Action::await_change()),
        Err(e) => Err(e.into()),
    }
}

async fn set_finalizers(
    api: &Api<VolumeAttachment>,
    attachment: &VolumeAttachment,
    finalizers: Vec<String>,
) -> Result<(), kube::Error> {
    let patch = serde_json::json!({"metadata": {
        "finalizers": finalizers,
        "resourceVersion": attachment.resource_version(),
    }});
    api.patch(
        &attachment.name_any(),
        &PatchParams::default(),
        &Patch::Merge(&patch),
    )
    .await
    .map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attachment(json: serde_json::Value) -> VolumeAttachment {
        serde_json::from_value(json).unwrap()
    }

    fn spec(attacher: &str) -> serde_json::Value {
        serde_json::json!({"attacher": attacher, "nodeName": "node-1", "source": {"persistentVolumeName": "pvc-1"}})
    }

    #[test]
    fn new_attachment_gets_finalizer_then_attached() {
        let fresh = attachment(
            serde_json::json!({"metadata": {"name": "csi-1"}, "spec": spec(NETWORK_DRIVER)}),
        );
        assert_eq!(plan_attachment(&fresh), AttachStep::AddFinalizer);
        let with_finalizer = attachment(serde_json::json!({
            "metadata": {"name": "csi-1", "finalizers": [ATTACHER_FINALIZER]},
            "spec": spec(NETWORK_DRIVER)
        }));
        assert_eq!(plan_attachment(&with_finalizer), AttachStep::MarkAttached);
        let attached = attachment(serde_json::json!({
            "metadata": {"name": "csi-1", "finalizers": [ATTACHER_FINALIZER]},
            "spec": spec(NETWORK_DRIVER),
            "status": {"attached": true}
        }));
        assert_eq!(plan_attachment(&attached), AttachStep::Nothing);
    }

    #[test]
    fn deleted_attachment_is_detached() {
        let deleted = attachment(serde_json::json!({
            "metadata": {"name": "csi-1", "finalizers": [ATTACHER_FINALIZER], "deletionTimestamp": "2025-01-01T00:00:00Z"},
            "spec": spec(NETWORK_DRIVER),
            "status": {"attached": true}
        }));
        assert_eq!(plan_attachment(&deleted), AttachStep::Detach);
    }

    #[test]
    fn other_drivers_are_left_alone() {
        let foreign = attachment(
            serde_json::json!({"metadata": {"name": "csi-2"}, "spec": spec("ebs.csi.aws.com")}),
        );
        assert_eq!(plan_attachment(&foreign), AttachStep::Nothing);
    }
}
