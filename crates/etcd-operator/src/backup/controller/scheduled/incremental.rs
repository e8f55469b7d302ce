//! The incremental watchers of the schedules: one per schedule with
//! `spec.incremental.enabled`, started by the pass, restarted when its
//! settings (cluster, destination, its Secrets, interval, size) change or
//! it ended, stopped when the schedule is suspended, disabled or deleted.
//! The watcher restarts itself with back-off after errors. Its progress
//! becomes `status.incremental`; the full backups it takes after a gap
//! count as the schedule's backups (status, retention); retention keeps
//! the chains it needs and runs again once it no longer needs one it kept;
//! its notices become Events. What to run and what it means for status is decided in
//! [`super::plan`].

use std::sync::Arc;
use std::time::Duration;

use chrono::Utc;
use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::ObjectReference;
use kube::api::{ApiResource, DynamicObject};
use kube::runtime::events::Recorder;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Resource, ResourceExt};
use tokio::sync::mpsc;

use super::super::{Context, observe};
use super::plan::{self, IncrementalPass};
use crate::api::{EtcdBackupSchedule, EtcdBackupScheduleStatus};
use crate::backup::incremental::supervisor::{STOP_GRACE, ScheduleKey};
use crate::backup::incremental::{EndpointsFn, IncrementalNotice, MemberEndpoints, spawn};
use crate::backup::{BackupError, BackupMetadata, BackupStore, BackupWriter};
use crate::controller_kit::events;

/// How often watchers of deleted schedules are looked for.
const SWEEP_EVERY: Duration = Duration::from_secs(15);

/// The key of the schedule's watcher.
pub(super) fn key_of(schedule: &EtcdBackupSchedule) -> ScheduleKey {
    (
        schedule.namespace().unwrap_or_default(),
        schedule.name_any(),
    )
}

/// Starts, keeps or stops the schedule's watcher; tells it about the full
/// backup the cron just took (`new_base`); folds its progress into status.
pub(super) async fn reconcile(
    ctx: &Context,
    schedule: &EtcdBackupSchedule,
    status: &mut EtcdBackupScheduleStatus,
    new_base: Option<BackupMetadata>,
) -> Option<IncrementalPass> {
    let key = key_of(schedule);
    let Some(interval) = plan::watcher_interval(&schedule.spec) else {
        if let Some(handle) = ctx.incremental.remove(&key) {
            handle.stop(STOP_GRACE).await;
        }
        return None;
    };
    let store = match start_or_keep(ctx, schedule, status, interval).await {
        Ok(store) => store,
        Err(error) => return Some(plan::watcher_failed(status, &error, interval)),
    };
    if let Some(base) = new_base {
        ctx.incremental.announce_base(&key, base);
    }
    let progress = ctx.incremental.progress(&key)?;
    let in_use = plan::chains_in_use(&schedule.spec, Some(&progress), status.incremental.as_ref());
    if let Some(taken) = &progress.last_full
        && plan::is_newer(status, taken)
    {
        let retention = plan::retention(schedule, in_use);
        let kept = super::retain(ctx, &key, &store, &retention, Utc::now()).await;
        plan::record_full_backup(status, taken, kept.as_ref().copied());
    } else if plan::retention_owed(&ctx.incremental.held_for_retention(&key), &in_use) {
        // The watcher no longer needs a chain retention kept for it.
        let retention = plan::retention(schedule, in_use);
        let kept = super::retain(ctx, &key, &store, &retention, Utc::now()).await;
        plan::record_retention(status, kept.as_ref().copied());
    }
    Some(plan::watcher_progress(
        status,
        progress,
        interval,
        Utc::now(),
    ))
}

/// Opens the destination and starts the watcher unless one runs with the
/// same settings. Returns the store.
async fn start_or_keep(
    ctx: &Context,
    schedule: &EtcdBackupSchedule,
    status: &EtcdBackupScheduleStatus,
    interval: Duration,
) -> Result<BackupStore, BackupError> {
    let key = key_of(schedule);
    let (namespace, _) = &key;
    let spec = &schedule.spec;
    let secrets = observe::destination_secrets(
        &ctx.client,
        namespace,
        &spec.destination,
        &ctx.store_settings,
    )
    .await?;
    let fingerprint =
        plan::watcher_fingerprint(spec, &secrets.credentials, secrets.key.as_ref(), interval);
    let store = secrets.open(&spec.destination, namespace, &spec.cluster_name)?;
    if ctx.incremental.running(&key).as_deref() == Some(fingerprint.as_str()) {
        return Ok(store);
    }
    if let Some(previous) = ctx.incremental.remove(&key) {
        previous.stop(STOP_GRACE).await;
    }
    let snapshot = ctx.options.written_by(BackupWriter::of(schedule));
    let options = plan::watcher_options(namespace, spec, status, interval, snapshot);
    let endpoints = member_endpoints(ctx, namespace, &spec.cluster_name);
    let mut handle = spawn(store.clone(), endpoints, options);
    if let Some(notices) = handle.take_notices() {
        let recorder = ctx.recorder.clone();
        let reference = schedule.object_ref(&());
        tokio::spawn(publish_notices(recorder, reference, notices));
    }
    tracing::info!(schedule = ?key, "incremental backup started");
    if let Some(replaced) = ctx.incremental.insert(key, fingerprint, handle) {
        replaced.stop(STOP_GRACE).await;
    }
    Ok(store)
}

/// The member Pods' client URLs and the operator's TLS for the cluster,
/// read at each (re)connection.
fn member_endpoints(ctx: &Context, namespace: &str, cluster: &str) -> EndpointsFn {
    let client = ctx.client.clone();
    let domain = ctx.store_settings.cluster_domain.clone();
    let namespace = namespace.to_string();
    let cluster = cluster.to_string();
    Arc::new(
        move || -> BoxFuture<'static, Result<MemberEndpoints, BackupError>> {
            let client = client.clone();
            let domain = domain.clone();
            let namespace = namespace.clone();
            let cluster = cluster.clone();
            Box::pin(async move {
                let object = observe::cluster(&client, &namespace, &cluster).await?;
                let tls = observe::cluster_tls(&client, &object, &domain).await?;
                let scheme = crate::etcd::scheme(tls.as_deref());
                let urls = observe::member_endpoints(&client, &namespace, &cluster, scheme).await?;
                Ok(MemberEndpoints { urls, tls })
            })
        },
    )
}

/// Publishes the watcher's notices as Events of the schedule.
async fn publish_notices(
    recorder: Recorder,
    reference: ObjectReference,
    mut notices: mpsc::Receiver<IncrementalNotice>,
) {
    while let Some(notice) = notices.recv().await {
        events::publish(&recorder, &reference, &plan::notice_event(&notice)).await;
    }
}

/// Stops the watchers of schedules that no longer exist (a deleted
/// schedule is not reconciled: it has no finalizer, its segments stay) and
/// drops their metrics. A schedule that exists but cannot be decoded keeps
/// its watcher.
pub(in crate::backup::controller) async fn sweep(
    ctx: Arc<Context>,
    schedules: Store<DynamicObject>,
) {
    let resource = ApiResource::erase::<EtcdBackupSchedule>(&());
    if schedules.wait_until_ready().await.is_err() {
        return;
    }
    loop {
        tokio::time::sleep(SWEEP_EVERY).await;
        let gone = ctx.incremental.remove_unless(|(namespace, name)| {
            schedules
                .get(&ObjectRef::new_with(name, resource.clone()).within(namespace))
                .is_some_and(|s| s.metadata.deletion_timestamp.is_none())
        });
        for handle in gone {
            tracing::info!("incremental backup stopped: its schedule is gone");
            handle.stop(STOP_GRACE).await;
        }
        ctx.metrics.retain_backup_schedules(|namespace, name| {
            schedules
                .get(&ObjectRef::new_with(name, resource.clone()).within(namespace))
                .is_some()
        });
    }
}
