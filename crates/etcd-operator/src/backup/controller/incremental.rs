//! The incremental part of the `EtcdBackupSchedule` controller: one
//! watcher per schedule with `spec.incremental.enabled`, started by the
//! reconcile, restarted when its settings (cluster, destination, its
//! Secrets, interval, size) change or it ended, stopped when the schedule
//! is suspended, disabled or deleted. The watcher restarts itself with
//! back-off after errors. Its progress becomes `status.incremental`; the
//! full backups it takes after a gap count as the schedule's backups
//! (status, retention); its notices become Events.

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::{ObjectReference, Pod};
use kube::api::{ApiResource, DynamicObject, ListParams};
use kube::runtime::events::EventType;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Api, Client, Resource, ResourceExt};
use sha2::{Digest, Sha256};
use tokio::sync::mpsc;

use super::{Context, event, from_time, read_credentials, read_encryption_key, set_ready, time};
use crate::api::{EtcdBackupSchedule, EtcdBackupScheduleStatus};
use crate::backup::incremental::supervisor::{STOP_GRACE, ScheduleKey};
use crate::backup::incremental::{
    EndpointsFn, IncrementalNotice, IncrementalOptions, IncrementalProgress, spawn,
};
use crate::backup::verify::hex;
use crate::backup::{BackupError, BackupMetadata, BackupStore, apply_retention};
use crate::reconcile::{CLIENT_PORT, cluster_selector, pod_endpoints};

/// How often watchers of deleted schedules are looked for.
const SWEEP_EVERY: Duration = Duration::from_secs(15);

/// What the reconcile needs from a running watcher.
pub(super) struct IncrementalPass {
    /// The watcher's progress.
    pub progress: IncrementalProgress,
    /// The schedule's segment interval.
    pub interval: Duration,
}

fn key_of(schedule: &EtcdBackupSchedule) -> ScheduleKey {
    (
        schedule.namespace().unwrap_or_default(),
        schedule.name_any(),
    )
}

/// Starts, keeps or stops the schedule's watcher; tells it about the full
/// backup the cron just took (`new_base`); folds its progress into status.
pub(super) async fn reconcile_incremental(
    ctx: &Context,
    schedule: &EtcdBackupSchedule,
    status: &mut EtcdBackupScheduleStatus,
    new_base: Option<BackupMetadata>,
) -> Option<IncrementalPass> {
    let key = key_of(schedule);
    let spec = &schedule.spec;
    if !spec.incremental.enabled || spec.suspend {
        if let Some(handle) = ctx.incremental.remove(&key) {
            handle.stop(STOP_GRACE).await;
        }
        return None;
    }
    let interval = if spec.incremental.interval.is_negative() {
        Duration::from_secs(20)
    } else {
        Duration::from(spec.incremental.interval).max(Duration::from_secs(1))
    };
    let started = start_or_keep(ctx, schedule, status, interval).await;
    let store = match started {
        Ok(store) => store,
        Err(error) => {
            // Nothing is durable beyond the full backups: `BackupReady`
            // says so (through the pass's empty progress).
            let message = format!("cannot start: {error}");
            let incremental = status.incremental.get_or_insert_default();
            incremental.last_error = Some(message.clone());
            let progress = IncrementalProgress {
                last_error: Some(message),
                ..IncrementalProgress::default()
            };
            return Some(IncrementalPass { progress, interval });
        }
    };
    if let Some(base) = new_base {
        ctx.incremental.announce_base(&key, base);
    }
    let progress = ctx.incremental.progress(&key)?;
    if let Some(taken) = &progress.last_full {
        record_full_backup(schedule, status, &store, taken).await;
    }
    status.incremental = Some(progress.status(Utc::now()));
    Some(IncrementalPass { progress, interval })
}

/// `BackupReady` also turns false when the newest durable point of the
/// incremental chain is older than three intervals.
pub(super) fn apply_freshness(
    status: &mut EtcdBackupScheduleStatus,
    pass: &IncrementalPass,
    now: DateTime<Utc>,
) {
    let progress = &pass.progress;
    if progress.durable_at.is_none() && progress.last_error.is_none() {
        // A watcher that is starting (verifying its chain) says nothing
        // yet: an operator restart does not flip the condition.
        return;
    }
    let interval = chrono::Duration::from_std(pass.interval).unwrap_or(chrono::Duration::MAX);
    let Err(message) = progress.freshness(interval, now) else {
        return;
    };
    let ready = status
        .conditions
        .iter()
        .any(|c| c.type_ == super::BACKUP_READY && c.status == "True");
    if ready {
        set_ready(status, false, "IncrementalStale", &message, now);
    }
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
    let credentials = read_credentials(ctx, namespace, &spec.destination).await?;
    let encryption = read_encryption_key(ctx, namespace, &spec.destination).await?;
    let settings = serde_json::json!({
        "cluster": spec.cluster_name,
        "destination": spec.destination,
        "credentials": credentials,
        "encryption": encryption.as_ref().map(|k| k.fingerprint()),
        "interval": interval.as_millis().to_string(),
        "maxSegmentBytes": spec.incremental.max_segment_bytes,
    });
    let fingerprint = hex(&Sha256::digest(settings.to_string().as_bytes()));
    let store = BackupStore::open(
        &spec.destination,
        namespace,
        &spec.cluster_name,
        &credentials,
    )?
    .with_encryption(encryption);
    if ctx.incremental.running(&key).as_deref() == Some(fingerprint.as_str()) {
        return Ok(store);
    }
    if let Some(previous) = ctx.incremental.remove(&key) {
        previous.stop(STOP_GRACE).await;
    }
    let options = IncrementalOptions {
        interval,
        max_segment_bytes: usize::try_from(spec.incremental.max_segment_bytes).unwrap_or(16 << 20),
        snapshot: ctx.options.clone(),
        gaps_before: status
            .incremental
            .as_ref()
            .map_or(0, |i| u64::try_from(i.gaps).unwrap_or(0)),
        ..IncrementalOptions::new(namespace, &spec.cluster_name)
    };
    let endpoints = member_endpoints(ctx.client.clone(), namespace, &spec.cluster_name);
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

/// The member Pods' client URLs, listed at each (re)connection.
fn member_endpoints(client: Client, namespace: &str, cluster: &str) -> EndpointsFn {
    let namespace = namespace.to_string();
    let cluster = cluster.to_string();
    Arc::new(
        move || -> BoxFuture<'static, Result<Vec<String>, BackupError>> {
            let pods: Api<Pod> = Api::namespaced(client.clone(), &namespace);
            let cluster = cluster.clone();
            Box::pin(async move {
                let pods = pods
                    .list(&ListParams::default().labels(&cluster_selector(&cluster)))
                    .await
                    .map_err(|e| {
                        BackupError::NoHealthyMember(format!("list the member Pods: {e}"))
                    })?;
                let endpoints = pod_endpoints(&pods.items, "http", CLIENT_PORT);
                if endpoints.is_empty() {
                    return Err(BackupError::NoHealthyMember(format!(
                        "no member Pod of {cluster} has an IP"
                    )));
                }
                Ok(endpoints)
            })
        },
    )
}

/// A full backup the watcher took counts as the schedule's newest backup;
/// retention applies as after a scheduled one.
async fn record_full_backup(
    schedule: &EtcdBackupSchedule,
    status: &mut EtcdBackupScheduleStatus,
    store: &BackupStore,
    taken: &crate::backup::TakenBackup,
) {
    let metadata = &taken.metadata;
    let known = status.last_successful_time.as_ref().map(from_time);
    if known.is_some_and(|at| at >= metadata.completed_at) {
        return;
    }
    status.last_successful_time = Some(time(metadata.completed_at));
    status.last_successful_location = Some(taken.location.clone());
    status.last_successful_revision = Some(metadata.revision);
    status.last_successful_stored_bytes = i64::try_from(metadata.stored_bytes).ok();
    status.last_successful_duration_seconds = Some(taken.duration.as_secs_f64());
    let retention = &schedule.spec.retention;
    let max_age = retention
        .max_age
        .as_ref()
        .and_then(|d| (!d.is_negative()).then(|| Duration::from(*d)));
    match apply_retention(store, retention.count as usize, max_age, Utc::now()).await {
        Ok(kept) => status.backups_kept = i32::try_from(kept.kept).ok(),
        Err(error) => status.last_error = Some(format!("retention: {error}")),
    }
}

/// Publishes the watcher's notices as Events of the schedule.
async fn publish_notices(
    recorder: kube::runtime::events::Recorder,
    reference: ObjectReference,
    mut notices: mpsc::Receiver<IncrementalNotice>,
) {
    while let Some(notice) = notices.recv().await {
        let event = match notice {
            IncrementalNotice::Following {
                base,
                from_revision,
                segments,
            } => event(
                EventType::Normal,
                "IncrementalFollowing",
                format!(
                    "incremental backup follows {base} from revision {from_revision} ({segments} segments already)"
                ),
            ),
            IncrementalNotice::Gap(gap) => event(
                EventType::Warning,
                "IncrementalGap",
                format!("{gap}; taking a full backup now"),
            ),
            IncrementalNotice::FullBackupTaken(taken) => event(
                EventType::Normal,
                "BackupSucceeded",
                format!(
                    "revision {} to {} in {:.1}s (to start a new incremental chain)",
                    taken.metadata.revision,
                    taken.location,
                    taken.duration.as_secs_f64()
                ),
            ),
            IncrementalNotice::Failed(message) => {
                event(EventType::Warning, "IncrementalFailed", message)
            }
        };
        if let Err(error) = recorder.publish(&event, &reference).await {
            tracing::warn!("cannot publish event: {error}");
        }
    }
}

/// Stops the watchers of schedules that no longer exist (a deleted
/// schedule is not reconciled: it has no finalizer, its segments stay). A
/// schedule that exists but cannot be decoded keeps its watcher.
pub(super) async fn sweep(ctx: Arc<Context>, schedules: Store<DynamicObject>) {
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
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ready(status: &EtcdBackupScheduleStatus) -> (String, String) {
        let condition = status
            .conditions
            .iter()
            .find(|c| c.type_ == super::super::BACKUP_READY)
            .expect("condition");
        (condition.status.clone(), condition.reason.clone())
    }

    #[test]
    fn backup_ready_turns_false_when_nothing_is_durable_for_three_intervals() {
        let now = Utc::now();
        let fresh_status = || {
            let mut status = EtcdBackupScheduleStatus::default();
            set_ready(&mut status, true, "Fresh", "newest backup is 1m old", now);
            status
        };
        let pass = |durable_ago: Option<i64>, error: Option<&str>| IncrementalPass {
            progress: IncrementalProgress {
                durable_at: durable_ago.map(|s| now - chrono::Duration::seconds(s)),
                last_error: error.map(str::to_string),
                ..IncrementalProgress::default()
            },
            interval: Duration::from_secs(20),
        };

        let mut status = fresh_status();
        apply_freshness(&mut status, &pass(Some(59), None), now);
        assert_eq!(ready(&status), ("True".into(), "Fresh".into()));

        apply_freshness(&mut status, &pass(Some(61), None), now);
        assert_eq!(ready(&status), ("False".into(), "IncrementalStale".into()));

        let mut status = fresh_status();
        apply_freshness(&mut status, &pass(None, None), now);
        assert_eq!(ready(&status).0, "True", "a starting watcher says nothing");
        apply_freshness(&mut status, &pass(None, Some("Secret missing")), now);
        assert_eq!(ready(&status), ("False".into(), "IncrementalStale".into()));
        let message = &status.conditions[0].message;
        assert!(message.contains("Secret missing"), "{message}");
    }
}
