//! The backup controllers: one-shot `EtcdBackup`s and cron
//! `EtcdBackupSchedule`s. Each pass reads the cluster's member Pods (dialled
//! by pod IP, as the cluster reconciler does) and the destination's Secret,
//! takes the backup, applies retention and writes status with a merge
//! patch of the status subresource (this controller is its only writer),
//! plus an Event.
//!
//! Both kinds are watched as untyped objects (`DynamicObject`), as the
//! `EtcdCluster` controller does: a typed list or watch fails as a whole
//! when one object does not decode (a newer CRD version, a field of
//! another type), and then no backup or schedule at all would be
//! reconciled. Each pass decodes its own object; one this operator cannot
//! read gets a Warning Event and an `Unreadable` condition
//! ([`crate::reconcile::unreadable`]) and no backup is taken for it, while
//! every other object goes on. An incremental watcher that a schedule
//! started before it became unreadable keeps its last settings until the
//! schedule is readable again or deleted.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Pod, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::api::{ApiResource, DynamicObject, ListParams, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::runtime::{Controller, watcher};
use kube::{Api, Client, Resource, ResourceExt};

use super::schedule::{CronSchedule, freshness};

/// Field manager of the backup controllers' status writes.
const STATUS_MANAGER: &str = "etcd-operator-backup";
use super::{
    BackupError, BackupErrorCategory, BackupStore, Credentials, EncryptionKey, SnapshotOptions,
    TakenBackup, apply_retention, take_backup,
};
use crate::api::{
    BackupDestination, BackupEncryption, BackupPhase, EtcdBackup, EtcdBackupSchedule,
    EtcdBackupScheduleStatus, EtcdBackupStatus, EtcdCluster,
};
use crate::reconcile::unreadable::{self, Unreadable};
use crate::reconcile::{CLIENT_PORT, cluster_selector, pod_endpoints};

/// Attempts of a one-shot backup before it is `Failed`.
pub const MAX_ATTEMPTS: i32 = 5;
/// Condition type of a schedule whose newest backup is recent enough.
pub const BACKUP_READY: &str = "BackupReady";

/// A pass of a backup controller failed before it could write status.
#[derive(Debug, thiserror::Error)]
pub enum BackupControllerError {
    /// Reading or patching an object failed.
    #[error("Kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    /// The object does not decode into this operator's type; it was
    /// reported on the object and waits for a change.
    #[error("{kind} {name} is unreadable at {source}")]
    Unreadable {
        /// `EtcdBackup` or `EtcdBackupSchedule`.
        kind: String,
        /// `namespace/name` of the object.
        name: String,
        /// The field at fault.
        #[source]
        source: Unreadable,
    },
}

mod incremental;

struct Context {
    client: Client,
    recorder: Recorder,
    options: SnapshotOptions,
    /// The incremental-backup watchers of the schedules.
    incremental: super::incremental::supervisor::Supervisor,
}

/// Runs both backup controllers until SIGTERM/SIGINT.
pub async fn run(client: Client, namespace: Option<String>) {
    let context = Arc::new(Context {
        recorder: Recorder::new(
            client.clone(),
            Reporter {
                controller: "etcd-operator-backup".into(),
                instance: std::env::var("POD_NAME").ok(),
            },
        ),
        client: client.clone(),
        options: SnapshotOptions::default(),
        incremental: Default::default(),
    });
    let backups = Controller::new_with(
        untyped::<EtcdBackup>(&client, namespace.as_deref()),
        watcher::Config::default(),
        ApiResource::erase::<EtcdBackup>(&()),
    )
    .shutdown_on_signal()
    .run(reconcile_backup, requeue_on_error, context.clone())
    .for_each(|result| async move {
        if let Err(error) = result {
            tracing::warn!("backup controller: {error}");
        }
    });
    let schedules = Controller::new_with(
        untyped::<EtcdBackupSchedule>(&client, namespace.as_deref()),
        watcher::Config::default(),
        ApiResource::erase::<EtcdBackupSchedule>(&()),
    );
    let sweeper = tokio::spawn(incremental::sweep(context.clone(), schedules.store()));
    let schedules = schedules
        .shutdown_on_signal()
        .run(reconcile_schedule, requeue_on_error, context.clone())
        .for_each(|result| async move {
            if let Err(error) = result {
                tracing::warn!("backup schedule controller: {error}");
            }
        });
    futures::join!(backups, schedules);
    sweeper.abort();
    // Each incremental watcher writes the segment it holds.
    context.incremental.stop_all().await;
}

/// Objects of kind `K`, untyped: one that does not decode cannot fail the
/// list or watch of the others.
fn untyped<K>(client: &Client, namespace: Option<&str>) -> Api<DynamicObject>
where
    K: Resource<DynamicType = ()>,
{
    let resource = ApiResource::erase::<K>(&());
    match namespace {
        Some(namespace) => Api::namespaced_with(client.clone(), namespace, &resource),
        None => Api::all_with(client.clone(), &resource),
    }
}

/// Decodes the object a pass is for. One this operator cannot read is
/// reported on that object alone (a Warning Event, the `Unreadable`
/// condition) and ends its pass with an error.
async fn decoded<K>(
    ctx: &Context,
    object: &DynamicObject,
    noun: &str,
) -> Result<K, BackupControllerError>
where
    K: Resource<DynamicType = ()> + serde::de::DeserializeOwned,
{
    let error = match unreadable::decode::<K>(object) {
        Ok(decoded) => return Ok(decoded),
        Err(error) => error,
    };
    let resource = ApiResource::erase::<K>(&());
    let namespace = object.namespace().unwrap_or_default();
    let objects = Api::namespaced_with(ctx.client.clone(), &namespace, &resource);
    unreadable::report(&ctx.recorder, &objects, &resource, noun, object, &error).await;
    Err(BackupControllerError::Unreadable {
        kind: resource.kind,
        name: format!("{namespace}/{}", object.name_any()),
        source: error,
    })
}

fn requeue_on_error(
    _: Arc<DynamicObject>,
    error: &BackupControllerError,
    _: Arc<Context>,
) -> Action {
    match error {
        BackupControllerError::Kube(_) => Action::requeue(Duration::from_secs(30)),
        // A change of the object triggers a pass by itself; this is only a
        // slow safety net.
        BackupControllerError::Unreadable { .. } => Action::requeue(Duration::from_secs(300)),
    }
}

/// Reads the destination's Secret and the cluster's endpoints, then takes
/// a backup. Every failure is a [`BackupError`] for status.
async fn backup_once(
    ctx: &Context,
    namespace: &str,
    cluster: &str,
    destination: &BackupDestination,
) -> Result<(TakenBackup, BackupStore), BackupError> {
    // Untyped: a cluster this operator cannot read is reported as such.
    let clusters: Api<DynamicObject> = Api::namespaced_with(
        ctx.client.clone(),
        namespace,
        &ApiResource::erase::<EtcdCluster>(&()),
    );
    cluster_to_back_up(namespace, cluster, clusters.get_opt(cluster).await)?;
    let credentials = read_credentials(ctx, namespace, destination).await?;
    let key = read_encryption_key(ctx, namespace, destination).await?;
    let store =
        BackupStore::open(destination, namespace, cluster, &credentials)?.with_encryption(key);
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), namespace);
    let pods = pods
        .list(&ListParams::default().labels(&cluster_selector(cluster)))
        .await
        .map_err(|e| BackupError::NoHealthyMember(format!("list the member Pods: {e}")))?;
    let endpoints = pod_endpoints(&pods.items, "http", CLIENT_PORT);
    if endpoints.is_empty() {
        return Err(BackupError::NoHealthyMember(format!(
            "no member Pod of {cluster} has an IP"
        )));
    }
    let taken = take_backup(&store, &endpoints, namespace, cluster, &ctx.options).await?;
    Ok((taken, store))
}

/// The cluster to back up, from a read of it (pure): one that is gone is a
/// configuration error, one this operator cannot decode is
/// [`BackupError::UnreadableCluster`].
fn cluster_to_back_up(
    namespace: &str,
    cluster: &str,
    read: Result<Option<DynamicObject>, kube::Error>,
) -> Result<EtcdCluster, BackupError> {
    let object = match read {
        Ok(Some(object)) => object,
        Ok(None) => {
            return Err(BackupError::Destination(format!(
                "EtcdCluster {namespace}/{cluster} does not exist"
            )));
        }
        Err(error) => {
            return Err(BackupError::NoHealthyMember(format!(
                "read the cluster: {error}"
            )));
        }
    };
    unreadable::decode(&object).map_err(|unreadable| BackupError::UnreadableCluster {
        cluster: format!("{namespace}/{cluster}"),
        path: unreadable.path,
        message: unreadable.message,
    })
}

async fn read_credentials(
    ctx: &Context,
    namespace: &str,
    destination: &BackupDestination,
) -> Result<Credentials, BackupError> {
    let Some(name) = destination.credentials_secret() else {
        return Ok(BTreeMap::new());
    };
    let secrets: Api<Secret> = Api::namespaced(ctx.client.clone(), namespace);
    let secret = secrets
        .get_opt(name)
        .await
        .map_err(|e| BackupError::NoHealthyMember(format!("read Secret {name}: {e}")))?
        .ok_or_else(|| {
            BackupError::Destination(format!("Secret {namespace}/{name} does not exist"))
        })?;
    Ok(secret
        .data
        .unwrap_or_default()
        .into_iter()
        .filter_map(|(k, v)| {
            String::from_utf8(v.0)
                .ok()
                .map(|v| (k, v.trim().to_string()))
        })
        .collect())
}

/// The key of `destination.encryption` from its Secret; `None` when the
/// destination is not encrypted.
async fn read_encryption_key(
    ctx: &Context,
    namespace: &str,
    destination: &BackupDestination,
) -> Result<Option<EncryptionKey>, BackupError> {
    let Some(encryption) = &destination.encryption else {
        return Ok(None);
    };
    let name = &encryption.secret_name;
    let secrets: Api<Secret> = Api::namespaced(ctx.client.clone(), namespace);
    let secret = secrets
        .get_opt(name)
        .await
        .map_err(|e| BackupError::NoHealthyMember(format!("read Secret {name}: {e}")))?;
    encryption_key_from(namespace, encryption, secret.as_ref()).map(Some)
}

/// The encryption key in `secret` (pure): a missing Secret, a missing key
/// or a value that is not 256 bits is a configuration error.
fn encryption_key_from(
    namespace: &str,
    encryption: &BackupEncryption,
    secret: Option<&Secret>,
) -> Result<EncryptionKey, BackupError> {
    let name = &encryption.secret_name;
    let secret = secret.ok_or_else(|| {
        BackupError::EncryptionKey(format!("Secret {namespace}/{name} does not exist"))
    })?;
    let value = secret
        .data
        .as_ref()
        .and_then(|data| data.get(&encryption.key))
        .ok_or_else(|| {
            BackupError::EncryptionKey(format!(
                "Secret {namespace}/{name} has no key {}",
                encryption.key
            ))
        })?;
    EncryptionKey::from_secret_value(&value.0).map_err(|error| {
        BackupError::EncryptionKey(format!(
            "Secret {namespace}/{name} key {}: {error}",
            encryption.key
        ))
    })
}

/// A Kubernetes timestamp from a chrono time (millisecond precision).
pub(crate) fn time(at: DateTime<Utc>) -> Time {
    Time(
        k8s_openapi::jiff::Timestamp::from_millisecond(at.timestamp_millis())
            .unwrap_or(k8s_openapi::jiff::Timestamp::UNIX_EPOCH),
    )
}

/// A chrono time from a Kubernetes timestamp.
fn from_time(at: &Time) -> DateTime<Utc> {
    DateTime::from_timestamp_millis(at.0.as_millisecond()).unwrap_or_default()
}

// ---------------------------------------------------------------------------
// EtcdBackup

async fn reconcile_backup(
    object: Arc<DynamicObject>,
    ctx: Arc<Context>,
) -> Result<Action, BackupControllerError> {
    let backup: EtcdBackup = decoded(&ctx, &object, "backup").await?;
    let status = backup.status.clone().unwrap_or_default();
    if matches!(
        status.phase,
        Some(BackupPhase::Succeeded | BackupPhase::Failed)
    ) {
        return Ok(Action::await_change());
    }
    let namespace = backup.namespace().unwrap_or_default();
    let api: Api<EtcdBackup> = Api::namespaced(ctx.client.clone(), &namespace);
    let started_at = Utc::now();
    let attempts = status.attempts + 1;
    let running = EtcdBackupStatus {
        phase: Some(BackupPhase::Running),
        attempts,
        start_time: Some(time(started_at)),
        ..status.clone()
    };
    patch_status(&api, &backup.name_any(), &running).await?;

    let outcome = backup_once(
        &ctx,
        &namespace,
        &backup.spec.cluster_name,
        &backup.spec.destination,
    )
    .await;
    let reference = backup.object_ref(&());
    let (next, action, event) = match outcome {
        Ok((taken, _)) => {
            let metadata = &taken.metadata;
            let status = EtcdBackupStatus {
                phase: Some(BackupPhase::Succeeded),
                cluster_id: Some(metadata.cluster_id.clone()),
                member: Some(taken.source.endpoint.clone()),
                revision: Some(metadata.revision),
                etcd_version: Some(metadata.etcd_version.clone()),
                size_bytes: i64::try_from(metadata.snapshot_bytes).ok(),
                stored_bytes: i64::try_from(metadata.stored_bytes).ok(),
                sha256: Some(metadata.sha256.clone()),
                start_time: Some(time(metadata.started_at)),
                completion_time: Some(time(metadata.completed_at)),
                duration_seconds: Some(taken.duration.as_secs_f64()),
                location: Some(taken.location.clone()),
                attempts,
                error: None,
                conditions: vec![complete(
                    true,
                    "Succeeded",
                    "stored and verified",
                    metadata.completed_at,
                )],
            };
            let note = format!(
                "revision {} ({} bytes, {} stored) to {} in {:.1}s",
                metadata.revision,
                metadata.snapshot_bytes,
                metadata.stored_bytes,
                taken.location,
                taken.duration.as_secs_f64()
            );
            (
                status,
                Action::await_change(),
                event(EventType::Normal, "BackupSucceeded", note),
            )
        }
        Err(error) => {
            let gave_up =
                attempts >= MAX_ATTEMPTS || error.category() == BackupErrorCategory::Corrupt;
            let phase = if gave_up {
                BackupPhase::Failed
            } else {
                BackupPhase::Pending
            };
            let now = Utc::now();
            let status = EtcdBackupStatus {
                phase: Some(phase),
                attempts,
                error: Some(error.to_string()),
                completion_time: gave_up.then_some(time(now)),
                conditions: vec![complete(
                    false,
                    if gave_up { "Failed" } else { "Retrying" },
                    &error.to_string(),
                    now,
                )],
                ..running
            };
            let action = if gave_up {
                Action::await_change()
            } else {
                Action::requeue(back_off(attempts, error.category()))
            };
            (
                status,
                action,
                event(
                    EventType::Warning,
                    "BackupFailed",
                    format!("attempt {attempts}: {error}"),
                ),
            )
        }
    };
    patch_status(&api, &backup.name_any(), &next).await?;
    if let Err(error) = ctx.recorder.publish(&event, &reference).await {
        tracing::warn!("cannot publish event: {error}");
    }
    Ok(action)
}

/// 15 s doubling per attempt, capped at 5 minutes; a configuration error
/// waits at least a minute (the spec or its Secret must change).
fn back_off(attempts: i32, category: BackupErrorCategory) -> Duration {
    let exponent = u32::try_from(attempts.clamp(1, 6) - 1).unwrap_or(0);
    let base = Duration::from_secs(15 * 2u64.pow(exponent)).min(Duration::from_secs(300));
    match category {
        BackupErrorCategory::Configuration => base.max(Duration::from_secs(60)),
        _ => base,
    }
}

fn complete(ok: bool, reason: &str, message: &str, at: DateTime<Utc>) -> Condition {
    Condition {
        type_: "Complete".to_string(),
        status: if ok { "True" } else { "False" }.to_string(),
        reason: reason.to_string(),
        message: message.to_string(),
        last_transition_time: time(at),
        observed_generation: None,
    }
}

fn event(type_: EventType, reason: &str, note: String) -> Event {
    Event {
        type_,
        reason: reason.to_string(),
        note: Some(note),
        action: "Backup".to_string(),
        secondary: None,
    }
}

/// Writes the whole status with server-side apply: a field the new status
/// leaves out (an error that is over, say) is removed, which a merge patch
/// would keep.
async fn patch_status<K>(
    api: &Api<K>,
    name: &str,
    status: &impl serde::Serialize,
) -> Result<(), kube::Error>
where
    K: Resource<DynamicType = ()> + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let patch = serde_json::json!({
        "apiVersion": K::api_version(&()),
        "kind": K::kind(&()),
        "status": status,
    });
    api.patch_status(
        name,
        &PatchParams::apply(STATUS_MANAGER).force(),
        &Patch::Apply(&patch),
    )
    .await
    .map(|_| ())
}

// ---------------------------------------------------------------------------
// EtcdBackupSchedule

async fn reconcile_schedule(
    object: Arc<DynamicObject>,
    ctx: Arc<Context>,
) -> Result<Action, BackupControllerError> {
    let schedule: EtcdBackupSchedule = decoded(&ctx, &object, "schedule").await?;
    let namespace = schedule.namespace().unwrap_or_default();
    let name = schedule.name_any();
    let api: Api<EtcdBackupSchedule> = Api::namespaced(ctx.client.clone(), &namespace);
    let mut status = schedule.status.clone().unwrap_or_default();
    status.observed_generation = schedule.metadata.generation;
    let now = Utc::now();
    let reference = schedule.object_ref(&());

    let cron = match CronSchedule::parse(&schedule.spec.schedule) {
        Ok(cron) => cron,
        Err(message) => {
            // Admission refuses a schedule of the wrong shape; one with a
            // field out of range, one that never fires, or one stored
            // before admission checked the shape ends here. No backup is
            // due: say so in status (no next time) and once as an Event,
            // until the spec changes.
            let reported = status.conditions.iter().any(|c| {
                c.type_ == BACKUP_READY && c.reason == "InvalidSchedule" && c.message == message
            });
            status.last_error = Some(message.clone());
            status.next_scheduled_time = None;
            set_ready(&mut status, false, "InvalidSchedule", &message, now);
            patch_status(&api, &name, &status).await?;
            if !reported {
                let warning = event(EventType::Warning, "InvalidSchedule", message);
                if let Err(error) = ctx.recorder.publish(&warning, &reference).await {
                    tracing::warn!("cannot publish event: {error}");
                }
            }
            return Ok(Action::await_change());
        }
    };
    let created = schedule
        .metadata
        .creation_timestamp
        .as_ref()
        .map_or(now, from_time);
    let last_started = status.last_scheduled_time.as_ref().map(from_time);
    let mut new_base = None;

    if !schedule.spec.suspend && cron.is_due(last_started, created, now) {
        status.last_scheduled_time = Some(time(now));
        let outcome = backup_once(
            &ctx,
            &namespace,
            &schedule.spec.cluster_name,
            &schedule.spec.destination,
        )
        .await;
        let event = match outcome {
            Ok((taken, store)) => {
                let metadata = &taken.metadata;
                new_base = Some(metadata.clone());
                status.last_successful_time = Some(time(metadata.completed_at));
                status.last_successful_location = Some(taken.location.clone());
                status.last_successful_revision = Some(metadata.revision);
                status.last_successful_stored_bytes = i64::try_from(metadata.stored_bytes).ok();
                status.last_successful_duration_seconds = Some(taken.duration.as_secs_f64());
                status.last_error = None;
                let retention = &schedule.spec.retention;
                let max_age = retention
                    .max_age
                    .as_ref()
                    .and_then(|d| (!d.is_negative()).then(|| std::time::Duration::from(*d)));
                match apply_retention(&store, retention.count as usize, max_age, Utc::now()).await {
                    Ok(kept) => status.backups_kept = i32::try_from(kept.kept).ok(),
                    Err(error) => status.last_error = Some(format!("retention: {error}")),
                }
                event(
                    EventType::Normal,
                    "BackupSucceeded",
                    format!(
                        "revision {} to {} in {:.1}s",
                        metadata.revision,
                        taken.location,
                        taken.duration.as_secs_f64()
                    ),
                )
            }
            Err(error) => {
                status.last_error = Some(error.to_string());
                event(EventType::Warning, "BackupFailed", error.to_string())
            }
        };
        if let Err(error) = ctx.recorder.publish(&event, &reference).await {
            tracing::warn!("cannot publish event: {error}");
        }
    }

    let incremental =
        incremental::reconcile_incremental(&ctx, &schedule, &mut status, new_base).await;
    let now = Utc::now();
    let period = cron
        .period_at(now)
        .unwrap_or_else(|| chrono::Duration::hours(1));
    let last_success = status.last_successful_time.as_ref().map(from_time);
    let last_error = status.last_error.clone();
    match (freshness(last_success, period, now), last_error) {
        (Ok(message), None) => set_ready(&mut status, true, "Fresh", &message, now),
        (Ok(message), Some(error)) => set_ready(
            &mut status,
            true,
            "FreshWithErrors",
            &format!("{message}; last attempt: {error}"),
            now,
        ),
        (Err(message), error) => {
            let message = match error {
                Some(error) => format!("{message}; last attempt: {error}"),
                None => message,
            };
            let reason = if last_success.is_none() && status.last_scheduled_time.is_none() {
                "Waiting"
            } else {
                "Stale"
            };
            set_ready(&mut status, false, reason, &message, now)
        }
    }
    if let Some(pass) = &incremental {
        incremental::apply_freshness(&mut status, pass, now);
    }
    let next = cron.next_after(now);
    status.next_scheduled_time = next.map(time);
    patch_status(&api, &name, &status).await?;

    // Wake at the next fire time; sooner after a failure (retry), and at
    // least every 5 minutes to keep the staleness current.
    let mut wait = next
        .and_then(|n| (n - now).to_std().ok())
        .unwrap_or(Duration::from_secs(300))
        .min(Duration::from_secs(300));
    if status.last_error.is_some() && last_started.is_some() {
        wait = wait.min(Duration::from_secs(60));
    }
    if let Some(pass) = &incremental {
        // Keep the loss window and the incremental staleness current.
        wait = wait.min(
            pass.interval
                .clamp(Duration::from_secs(10), Duration::from_secs(60)),
        );
    }
    Ok(Action::requeue(wait.max(Duration::from_secs(1))))
}

fn set_ready(
    status: &mut EtcdBackupScheduleStatus,
    ready: bool,
    reason: &str,
    message: &str,
    now: DateTime<Utc>,
) {
    let value = if ready { "True" } else { "False" };
    let since = status
        .conditions
        .iter()
        .find(|c| c.type_ == BACKUP_READY && c.status == value)
        .map_or(time(now), |c| c.last_transition_time.clone());
    status.conditions.retain(|c| c.type_ != BACKUP_READY);
    status.conditions.push(Condition {
        type_: BACKUP_READY.to_string(),
        status: value.to_string(),
        reason: reason.to_string(),
        message: message.to_string(),
        last_transition_time: since,
        observed_generation: status.observed_generation,
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn object(value: serde_json::Value) -> DynamicObject {
        serde_json::from_value(value).expect("a dynamic object")
    }

    fn cluster(retention_policy: &str) -> DynamicObject {
        object(json!({
            "apiVersion": "durable-etcd.io/v1alpha1",
            "kind": "EtcdCluster",
            "metadata": { "name": "main", "namespace": "prod" },
            "spec": {
                "replicas": 3,
                "storage": { "size": "1Gi", "retentionPolicy": retention_policy }
            }
        }))
    }

    #[test]
    fn an_unreadable_cluster_is_reported_as_such_not_as_no_healthy_member() {
        let error = cluster_to_back_up("prod", "main", Ok(Some(cluster("Archive"))))
            .expect_err("unreadable");
        assert!(
            matches!(
                &error,
                BackupError::UnreadableCluster { cluster, path, .. }
                    if cluster == "prod/main" && path == "spec.storage.retentionPolicy"
            ),
            "{error:?}"
        );
        let message = error.to_string();
        assert!(
            message.starts_with(
                "this operator cannot read EtcdCluster prod/main at spec.storage.retentionPolicy: unknown variant `Archive`"
            ),
            "{message}"
        );
        // Waits for a change of the object, with the configuration back-off.
        assert_eq!(error.category(), BackupErrorCategory::Configuration);

        let readable = cluster_to_back_up("prod", "main", Ok(Some(cluster("Keep"))))
            .expect("a readable cluster");
        assert_eq!(readable.spec.replicas, 3);
        let gone = cluster_to_back_up("prod", "main", Ok(None)).expect_err("gone");
        assert!(
            gone.to_string()
                .contains("EtcdCluster prod/main does not exist"),
            "{gone}"
        );
    }

    #[test]
    fn backups_and_schedules_of_a_newer_crd_are_unreadable_with_their_path() {
        let backup = object(json!({
            "apiVersion": "durable-etcd.io/v1alpha1",
            "kind": "EtcdBackup",
            "metadata": { "name": "nightly", "namespace": "prod" },
            "spec": { "clusterName": "main", "destination": { "local": { "path": "/backups" } } },
            "status": { "phase": "Archived", "attempts": 1 }
        }));
        let error = unreadable::decode::<EtcdBackup>(&backup).expect_err("unreadable");
        assert_eq!(error.path, "status.phase");
        assert_eq!(error.reason(), "UnreadableStatus");

        let schedule = |max_segment_bytes: serde_json::Value| {
            object(json!({
                "apiVersion": "durable-etcd.io/v1alpha1",
                "kind": "EtcdBackupSchedule",
                "metadata": { "name": "hourly", "namespace": "prod" },
                "spec": {
                    "clusterName": "main",
                    "schedule": "0 * * * *",
                    "destination": { "local": { "path": "/backups" } },
                    "incremental": { "enabled": true, "maxSegmentBytes": max_segment_bytes }
                }
            }))
        };
        let error = unreadable::decode::<EtcdBackupSchedule>(&schedule(json!("32Mi")))
            .expect_err("unreadable");
        assert_eq!(error.path, "spec.incremental.maxSegmentBytes");
        assert_eq!(error.reason(), "UnreadableSpec");
        let readable = unreadable::decode::<EtcdBackupSchedule>(&schedule(json!(33_554_432)))
            .expect("readable");
        assert_eq!(readable.spec.incremental.max_segment_bytes, 33_554_432);

        let condition = unreadable::unreadable_conditions(
            backup.data.get("status"),
            &error,
            "schedule",
            Some(1),
            k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
        )
        .expect("a condition");
        assert!(
            condition[0]["message"]
                .as_str()
                .is_some_and(|m| m.ends_with("no action on this schedule until the object changes")),
            "{condition:?}"
        );
    }

    #[test]
    fn the_encryption_key_comes_from_its_secret_or_is_a_configuration_error() {
        use k8s_openapi::ByteString;
        let encryption = BackupEncryption {
            secret_name: "backup-key".into(),
            key: "encryptionKey".into(),
        };
        let secret = |key: &str, value: &[u8]| Secret {
            data: Some([(key.to_string(), ByteString(value.to_vec()))].into()),
            ..Secret::default()
        };
        let key = encryption_key_from(
            "prod",
            &encryption,
            Some(&secret("encryptionKey", &[7u8; 32])),
        )
        .expect("raw key");
        assert_eq!(key, EncryptionKey::from_bytes([7u8; 32]));

        let cases = [
            (None, "Secret prod/backup-key does not exist"),
            (
                Some(secret("other", &[7u8; 32])),
                "Secret prod/backup-key has no key encryptionKey",
            ),
            (
                Some(secret("encryptionKey", b"too short")),
                "Secret prod/backup-key key encryptionKey: an encryption key must be 32 raw bytes",
            ),
        ];
        for (secret, message) in cases {
            let error =
                encryption_key_from("prod", &encryption, secret.as_ref()).expect_err(message);
            assert!(error.to_string().contains(message), "{error}");
            assert_eq!(error.category(), BackupErrorCategory::Configuration);
            assert_eq!(
                back_off(1, error.category()),
                Duration::from_secs(60),
                "retried with the configuration back-off"
            );
        }
    }

    #[test]
    fn back_off_doubles_and_configuration_errors_wait_longer() {
        assert_eq!(
            back_off(1, BackupErrorCategory::Transient),
            Duration::from_secs(15)
        );
        assert_eq!(
            back_off(3, BackupErrorCategory::Transient),
            Duration::from_secs(60)
        );
        assert_eq!(
            back_off(9, BackupErrorCategory::Transient),
            Duration::from_secs(300)
        );
        assert_eq!(
            back_off(1, BackupErrorCategory::Configuration),
            Duration::from_secs(60)
        );
    }

    #[test]
    fn ready_condition_keeps_its_transition_time() {
        let mut status = EtcdBackupScheduleStatus::default();
        let t0 = Utc::now();
        set_ready(&mut status, true, "Fresh", "a", t0);
        set_ready(
            &mut status,
            true,
            "Fresh",
            "b",
            t0 + chrono::Duration::seconds(60),
        );
        assert_eq!(status.conditions.len(), 1);
        assert_eq!(status.conditions[0].last_transition_time, time(t0));
        assert_eq!(status.conditions[0].message, "b");
        set_ready(
            &mut status,
            false,
            "Stale",
            "c",
            t0 + chrono::Duration::seconds(90),
        );
        assert_eq!(
            status.conditions[0].last_transition_time,
            time(t0 + chrono::Duration::seconds(90))
        );
    }
}
