//! The backup controllers: one-shot `EtcdBackup`s ([`one_shot`]) and cron
//! `EtcdBackupSchedule`s with their continuous incremental backup
//! ([`scheduled`]). Each pass has the reconciler's shape:
//!
//! - observe ([`observe`]): the cluster to back up, read untyped; the
//!   destination's Secrets; the member Pods, dialled by pod IP;
//! - plan (`one_shot::plan`, `scheduled::plan`, pure): whether a backup is
//!   due, retry or give up, retention, status and conditions, Events, the
//!   next wake-up;
//! - act ([`act`]): take the backup, apply retention, start or stop the
//!   incremental watcher; then one status write with server-side apply
//!   (this controller is the only writer of these statuses) and the Events.
//!
//! Both kinds are watched as untyped objects, as the `EtcdCluster`
//! controller does ([`crate::controller_kit::scope`]). Each pass decodes its
//! own object; one this operator cannot read gets a Warning Event and an
//! `Unreadable` condition ([`crate::controller_kit::unreadable`]) and no
//! backup is taken for it, while every other object goes on. An
//! incremental watcher that a schedule started before it became unreadable
//! keeps its last settings until the schedule is readable again or deleted.

mod act;
mod observe;
mod one_shot;
mod scheduled;

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::api::{ApiResource, DynamicObject};
use kube::runtime::controller::Action;
use kube::runtime::events::{Recorder, Reporter};
use kube::runtime::{Controller, watcher};
use kube::{Api, Client, Resource, ResourceExt};

use super::SnapshotOptions;
use super::incremental::supervisor::Supervisor;
use super::volume_store::VolumeStoreSettings;
use crate::api::{EtcdBackup, EtcdBackupSchedule, EtcdBackupScheduleStatus, EtcdBackupStatus};
use crate::controller_kit::unreadable::{self, Unreadable};
use crate::controller_kit::{Category, StatusError, StatusWriter, WithConditions, scope};
use crate::telemetry::Metrics;

pub use one_shot::plan::MAX_ATTEMPTS;
pub use scheduled::plan::BACKUP_READY;

/// Field manager of the backup controllers' status writes.
const STATUS_MANAGER: &str = "etcd-operator-backup";

/// The writer of `EtcdBackup` and `EtcdBackupSchedule` statuses.
const WRITER: StatusWriter = StatusWriter::new(STATUS_MANAGER);

/// A pass may take a snapshot: a failed one runs again after 30 s at the
/// soonest, whatever its category.
const RETRY_AT_LEAST: Duration = Duration::from_secs(30);

/// A pass of a backup controller failed before it could finish.
#[derive(Debug, thiserror::Error)]
pub enum BackupControllerError {
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
    /// The status write failed.
    #[error(transparent)]
    Status(#[from] StatusError),
}

impl BackupControllerError {
    /// Category of the error.
    pub fn category(&self) -> Category {
        match self {
            // A change of the object triggers a pass by itself.
            BackupControllerError::Unreadable { .. } => Category::InvalidSpec,
            BackupControllerError::Status(error) => error.category(),
        }
    }
}

/// What every pass of the backup controllers shares.
struct Context {
    client: Client,
    recorder: Recorder,
    options: SnapshotOptions,
    /// The incremental-backup watchers of the schedules.
    incremental: Supervisor,
    /// What the stores of `persistentVolumeClaim` destinations run.
    store_settings: VolumeStoreSettings,
    /// The operator's metrics: each schedule's backup figures.
    metrics: Metrics,
}

/// Runs both backup controllers until SIGTERM/SIGINT.
pub async fn run(
    client: Client,
    namespace: Option<String>,
    store_settings: VolumeStoreSettings,
    metrics: Metrics,
) {
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
        incremental: Supervisor::default(),
        store_settings,
        metrics,
    });
    let backup_resource = ApiResource::erase::<EtcdBackup>(&());
    let backups = Controller::new_with(
        scope::untyped(&client, namespace.as_deref(), &backup_resource),
        watcher::Config::default(),
        backup_resource,
    )
    .shutdown_on_signal()
    .run(one_shot::pass, requeue_on_error, context.clone())
    .for_each(|result| async move {
        if let Err(error) = result {
            tracing::warn!("backup controller: {error}");
        }
    });
    let schedule_resource = ApiResource::erase::<EtcdBackupSchedule>(&());
    let schedules = Controller::new_with(
        scope::untyped(&client, namespace.as_deref(), &schedule_resource),
        watcher::Config::default(),
        schedule_resource,
    );
    let sweeper = tokio::spawn(scheduled::incremental::sweep(
        context.clone(),
        schedules.store(),
    ));
    let schedules = schedules
        .shutdown_on_signal()
        .run(scheduled::pass, requeue_on_error, context.clone())
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
    requeue_after(error)
}

/// When a failed pass runs again: by the error's category, not sooner
/// than [`RETRY_AT_LEAST`].
fn requeue_after(error: &BackupControllerError) -> Action {
    error.category().requeue(RETRY_AT_LEAST)
}

impl WithConditions for EtcdBackupStatus {
    fn conditions(&self) -> &[Condition] {
        &self.conditions
    }

    fn conditions_mut(&mut self) -> &mut Vec<Condition> {
        &mut self.conditions
    }
}

impl WithConditions for EtcdBackupScheduleStatus {
    fn conditions(&self) -> &[Condition] {
        &self.conditions
    }

    fn conditions_mut(&mut self) -> &mut Vec<Condition> {
        &mut self.conditions
    }
}

#[cfg(test)]
mod tests;
