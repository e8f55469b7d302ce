//! The `EtcdBackupSchedule` controller: a full backup each time the cron
//! fires, retention of the schedule's own backups after each, and with
//! `spec.incremental.enabled` a watcher that makes every write durable
//! between them ([`incremental`]). A pass: begin ([`plan::begin`]: is a backup due?) →
//! take it and apply retention (keeping the chains the watcher needs,
//! [`plan::chains_in_use`]) → start, keep or stop the watcher, and apply
//! the retention owed once it no longer needs a chain kept for it → finish
//! ([`plan::finish`]: `BackupReady`, next fire time, next wake-up) → one
//! status write.

pub mod incremental;
pub mod plan;

use std::sync::Arc;

use chrono::{DateTime, Utc};
use kube::api::DynamicObject;
use kube::runtime::controller::Action;
use kube::{Api, Resource, ResourceExt};

use super::{BackupControllerError, Context, WRITER, act, decoded};
use crate::api::EtcdBackupSchedule;
use crate::backup::incremental::supervisor::ScheduleKey;
use crate::backup::{BackupError, BackupStore, BackupWriter, apply_retention};
use crate::controller_kit::{Replaces, events};
use plan::{Begin, Retention, ScheduledBackup};

/// One pass for an `EtcdBackupSchedule`.
pub(super) async fn pass(
    object: Arc<DynamicObject>,
    ctx: Arc<Context>,
) -> Result<Action, BackupControllerError> {
    let schedule: EtcdBackupSchedule = decoded(&ctx, &object, "schedule").await?;
    let namespace = schedule.namespace().unwrap_or_default();
    let name = schedule.name_any();
    let api: Api<EtcdBackupSchedule> = Api::namespaced(ctx.client.clone(), &namespace);
    let reference = schedule.object_ref(&());
    let current = schedule.status.as_ref();

    let mut run = match plan::begin(&schedule, Utc::now()) {
        Begin::Invalid { status, warning } => {
            WRITER
                .write(&api, &name, current, status, Replaces::Any)
                .await?;
            if let Some(warning) = warning {
                events::publish(&ctx.recorder, &reference, &warning).await;
            }
            return Ok(Action::await_change());
        }
        Begin::Run(run) => run,
    };

    let spec = &schedule.spec;
    let mut new_base = None;
    if run.backup_due {
        let writer = BackupWriter::of(&schedule);
        let event = match act::back_up(&ctx, writer, &spec.cluster_name, &spec.destination).await {
            Ok((taken, store)) => {
                // The watcher still extends the chain of the previous full
                // backup until it is told about this one (below): that
                // chain is kept.
                let key = incremental::key_of(&schedule);
                let in_use = plan::chains_in_use(
                    spec,
                    ctx.incremental.progress(&key).as_ref(),
                    run.status.incremental.as_ref(),
                );
                let retention = retain(
                    &ctx,
                    &key,
                    &store,
                    &plan::retention(&schedule, in_use),
                    Utc::now(),
                )
                .await;
                let event = plan::record_scheduled(
                    &mut run.status,
                    ScheduledBackup::Stored {
                        taken: &taken,
                        retention: retention.as_ref().copied(),
                    },
                );
                new_base = Some(taken.metadata);
                event
            }
            Err(error) => plan::record_scheduled(&mut run.status, ScheduledBackup::Failed(&error)),
        };
        events::publish(&ctx.recorder, &reference, &event).await;
    }

    let incremental = incremental::reconcile(&ctx, &schedule, &mut run.status, new_base).await;
    let finish = plan::finish(run, incremental.as_ref(), Utc::now());
    let gauges = plan::gauges(spec, &finish.status, finish.period);
    ctx.metrics
        .set_backup_schedule(&namespace, &name, &spec.cluster_name, gauges);
    WRITER
        .write(&api, &name, current, finish.status, Replaces::Any)
        .await?;
    Ok(Action::requeue(finish.requeue_after))
}

/// Applies `retention` to the schedule's own backups in `store` at `now`
/// and remembers what it kept only for the watcher; returns how many of
/// them are kept.
async fn retain(
    ctx: &Context,
    key: &ScheduleKey,
    store: &BackupStore,
    retention: &Retention,
    now: DateTime<Utc>,
) -> Result<usize, BackupError> {
    let outcome = apply_retention(
        store,
        &retention.writer,
        retention.count,
        retention.max_age,
        &retention.chains_in_use,
        now,
    )
    .await?;
    ctx.incremental.hold_for_retention(key, outcome.held);
    Ok(outcome.kept)
}
