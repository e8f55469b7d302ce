//! The `EtcdBackup` controller: one backup of a cluster, retried with
//! back-off up to [`plan::MAX_ATTEMPTS`] attempts (a corrupt snapshot is
//! not retried). A pass writes `Running` with the attempt's number, takes
//! the backup, then writes the outcome ([`plan`]) and publishes its Event.

pub mod plan;

use std::sync::Arc;

use chrono::Utc;
use kube::api::DynamicObject;
use kube::runtime::controller::Action;
use kube::{Api, Resource, ResourceExt};

use super::{BackupControllerError, Context, WRITER, act, decoded};
use crate::api::EtcdBackup;
use crate::backup::BackupWriter;
use crate::controller_kit::{Replaces, events};

/// One pass for an `EtcdBackup`.
pub(super) async fn pass(
    object: Arc<DynamicObject>,
    ctx: Arc<Context>,
) -> Result<Action, BackupControllerError> {
    let backup: EtcdBackup = decoded(&ctx, &object, "backup").await?;
    if let Some(wait) = plan::wait_before_next(backup.status.as_ref(), Utc::now()) {
        return Ok(Action::requeue(wait));
    }
    let Some(running) = plan::start(backup.status.as_ref(), Utc::now()) else {
        return Ok(Action::await_change());
    };
    let namespace = backup.namespace().unwrap_or_default();
    let name = backup.name_any();
    let api: Api<EtcdBackup> = Api::namespaced(ctx.client.clone(), &namespace);
    WRITER
        .write(
            &api,
            &name,
            backup.status.as_ref(),
            running.clone(),
            Replaces::Any,
        )
        .await?;

    let spec = &backup.spec;
    let writer = BackupWriter::of(&backup);
    let result = act::back_up(&ctx, writer, &spec.cluster_name, &spec.destination).await;
    let after = plan::after_attempt(
        &running,
        result.as_ref().map(|(taken, _)| taken),
        Utc::now(),
    );
    WRITER
        .write(&api, &name, Some(&running), after.status, Replaces::Any)
        .await?;
    events::publish(&ctx.recorder, &backup.object_ref(&()), &after.event).await;
    Ok(after
        .retry_after
        .map_or_else(Action::await_change, Action::requeue))
}
