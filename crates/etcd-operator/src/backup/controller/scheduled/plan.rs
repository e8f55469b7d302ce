//! The decisions of an `EtcdBackupSchedule` pass (pure): whether the cron
//! makes a backup due, what a backup (the cron's or the incremental
//! watcher's) changes in status, the retention to apply (and the chains
//! it keeps for the watcher), whether an
//! incremental watcher should run and with which settings, the
//! `BackupReady` condition, the Events, and when to look again.
//!
//! `BackupReady` is built here only ([`finish`]): true while the newest
//! backup is no older than twice the schedule's period and, with
//! incremental backup, while the loss window of the chain is at most three
//! intervals (a quiet cluster's is 0).

use std::time::Duration;

use chrono::{DateTime, Utc};
use kube::runtime::events::Event;
use sha2::{Digest, Sha256};

use crate::api::{
    EtcdBackupSchedule, EtcdBackupScheduleSpec, EtcdBackupScheduleStatus, IncrementalBackupStatus,
};
use crate::backup::incremental::{IncrementalNotice, IncrementalOptions, IncrementalProgress};
use crate::backup::kube_time::{from_kube, to_kube};
use crate::backup::{
    BackupError, BackupWriter, Credentials, CronSchedule, EncryptionKey, Freshness,
    SnapshotOptions, TakenBackup, freshness,
};
use crate::controller_kit::{conditions, events};
use crate::telemetry::{IncrementalGauges, ScheduleGauges};

/// Condition type of a schedule whose newest backup is recent enough.
pub const BACKUP_READY: &str = "BackupReady";
/// Action of the Events of schedules.
const ACTION: &str = "Backup";
/// A schedule is looked at at least this often, to keep staleness current.
const WAKE_AT_LEAST_EVERY: Duration = Duration::from_secs(300);
/// After a failed backup the next attempt comes this soon at the latest.
const RETRY_FAILED_BACKUP: Duration = Duration::from_secs(60);
/// The segment interval when the spec's is negative.
const DEFAULT_SEGMENT_INTERVAL: Duration = Duration::from_secs(4);
/// The period assumed when the cron has no next two fire times.
const DEFAULT_PERIOD: chrono::Duration = chrono::Duration::hours(1);

/// How a pass of a schedule begins.
pub enum Begin {
    /// The schedule never fires: say so in status (no next time) and, the
    /// first time only, as a Warning Event; wait for the spec to change.
    Invalid {
        /// The status to write.
        status: EtcdBackupScheduleStatus,
        /// The Event, unless status already says the same.
        warning: Option<Event>,
    },
    /// The schedule is valid: run the pass.
    Run(Run),
}

/// A pass of a valid schedule.
#[derive(Debug)]
pub struct Run {
    /// The parsed schedule.
    pub cron: CronSchedule,
    /// The status so far (with `lastScheduledTime` when a backup is due).
    pub status: EtcdBackupScheduleStatus,
    /// Whether the cron makes a backup due now.
    pub backup_due: bool,
    /// When the previous scheduled backup started.
    pub last_started: Option<DateTime<Utc>>,
}

/// How a pass of `schedule` begins at `now`: a backup is due when a fire
/// time has passed since the last one started (or since the schedule was
/// created) and the schedule is not suspended.
pub fn begin(schedule: &EtcdBackupSchedule, now: DateTime<Utc>) -> Begin {
    let mut status = schedule.status.clone().unwrap_or_default();
    status.observed_generation = schedule.metadata.generation;
    let cron = match CronSchedule::parse(&schedule.spec.schedule) {
        Ok(cron) => cron,
        Err(invalid) => {
            let message = invalid.to_string();
            // Admission refuses a schedule of the wrong shape; one with a
            // field out of range, one that never fires, or one stored
            // before admission checked the shape ends here.
            let reported = conditions::find(&status.conditions, BACKUP_READY)
                .is_some_and(|c| c.reason == "InvalidSchedule" && c.message == message);
            status.last_error = Some(message.clone());
            status.next_scheduled_time = None;
            set_ready(&mut status, false, "InvalidSchedule", &message, now);
            let warning = (!reported).then(|| events::warning(ACTION, "InvalidSchedule", &message));
            return Begin::Invalid { status, warning };
        }
    };
    let created = schedule
        .metadata
        .creation_timestamp
        .as_ref()
        .map_or(now, from_kube);
    let last_started = status.last_scheduled_time.as_ref().map(from_kube);
    let backup_due = !schedule.spec.suspend && cron.is_due(last_started, created, now);
    if backup_due {
        status.last_scheduled_time = Some(to_kube(now));
    }
    Begin::Run(Run {
        cron,
        status,
        backup_due,
        last_started,
    })
}

/// How many of its own backups a schedule keeps, and for how long.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Retention {
    /// The schedule: only the backups it wrote are counted and deleted.
    pub writer: BackupWriter,
    /// The newest this many are kept.
    pub count: usize,
    /// Older ones are deleted past this age, when set.
    pub max_age: Option<Duration>,
    /// Base names of the full backups whose chains the schedule's
    /// incremental watcher needs ([`chains_in_use`]): kept with their
    /// segments beyond `count` and `max_age`.
    pub chains_in_use: Vec<String>,
}

/// The retention of the schedule's own backups, keeping the chains its
/// incremental watcher needs; a negative `maxAge` means none.
pub fn retention(schedule: &EtcdBackupSchedule, chains_in_use: Vec<String>) -> Retention {
    let retention = &schedule.spec.retention;
    Retention {
        writer: BackupWriter::of(schedule),
        count: retention.count as usize,
        max_age: retention
            .max_age
            .as_ref()
            .and_then(|d| (!d.is_negative()).then(|| Duration::from(*d))),
        chains_in_use,
    }
}

/// The full backups (base names) whose chains retention must keep for the
/// schedule's incremental watcher: those its progress names (the chain it
/// extends, and the one it left until the new one reaches its end). A
/// watcher that has not named its base yet (starting, or not started in
/// this process yet) may resume the chain status last reported, so that
/// one is kept while incremental backup is on.
pub fn chains_in_use(
    spec: &EtcdBackupScheduleSpec,
    watcher: Option<&IncrementalProgress>,
    reported: Option<&IncrementalBackupStatus>,
) -> Vec<String> {
    if let Some(progress) = watcher.filter(|p| p.base.is_some()) {
        return progress.chains_in_use();
    }
    if watcher.is_none() && watcher_interval(spec).is_none() {
        return Vec::new();
    }
    reported.and_then(|r| r.base.clone()).into_iter().collect()
}

/// Whether a retention that kept `held` for the watcher is owed again: the
/// watcher no longer needs one of them (it moved to a newer full backup
/// and the new chain reached the old one's end).
pub fn retention_owed(held: &[String], chains_in_use: &[String]) -> bool {
    held.iter().any(|base| !chains_in_use.contains(base))
}

/// What became of the backup the cron made due.
pub enum ScheduledBackup<'a> {
    /// Stored and verified; then retention ran, with the backups it kept
    /// or its error.
    Stored {
        /// The backup.
        taken: &'a TakenBackup,
        /// The outcome of retention.
        retention: Result<usize, &'a BackupError>,
    },
    /// No backup was stored.
    Failed(&'a BackupError),
}

/// Records the cron's backup in status; returns its Event.
pub fn record_scheduled(status: &mut EtcdBackupScheduleStatus, backup: ScheduledBackup) -> Event {
    match backup {
        ScheduledBackup::Stored { taken, retention } => {
            record_success(status, taken);
            status.last_error = None;
            record_retention(status, retention);
            let note = format!(
                "revision {} to {} in {:.1}s",
                taken.metadata.revision,
                taken.location,
                taken.duration.as_secs_f64()
            );
            events::normal(ACTION, "BackupSucceeded", &note)
        }
        ScheduledBackup::Failed(error) => {
            let message = error.to_string();
            status.last_error = Some(message.clone());
            events::warning(ACTION, "BackupFailed", &message)
        }
    }
}

/// Whether `taken`, a full backup the incremental watcher took, is newer
/// than the schedule's newest known backup (and so counts as it).
pub fn is_newer(status: &EtcdBackupScheduleStatus, taken: &TakenBackup) -> bool {
    let known = status.last_successful_time.as_ref().map(from_kube);
    known.is_none_or(|at| at < taken.metadata.completed_at)
}

/// Records a full backup the incremental watcher took as the schedule's
/// newest, with the retention applied after it.
pub fn record_full_backup(
    status: &mut EtcdBackupScheduleStatus,
    taken: &TakenBackup,
    retention: Result<usize, &BackupError>,
) {
    record_success(status, taken);
    record_retention(status, retention);
}

fn record_success(status: &mut EtcdBackupScheduleStatus, taken: &TakenBackup) {
    let metadata = &taken.metadata;
    status.last_successful_time = Some(to_kube(metadata.completed_at));
    status.last_successful_location = Some(taken.location.clone());
    status.last_successful_revision = Some(metadata.revision);
    status.last_successful_stored_bytes = i64::try_from(metadata.stored_bytes).ok();
    status.last_successful_duration_seconds = Some(taken.duration.as_secs_f64());
}

/// Records what retention kept, or its error.
pub fn record_retention(
    status: &mut EtcdBackupScheduleStatus,
    retention: Result<usize, &BackupError>,
) {
    match retention {
        Ok(kept) => status.backups_kept = i32::try_from(kept).ok(),
        Err(error) => status.last_error = Some(format!("retention: {error}")),
    }
}

/// What a pass learnt of the schedule's incremental watcher.
#[derive(Debug, Clone)]
pub struct IncrementalPass {
    /// The watcher's progress.
    pub progress: IncrementalProgress,
    /// The schedule's segment interval.
    pub interval: Duration,
}

/// The segment interval of the schedule's incremental watcher, or `None`
/// when no watcher should run (incremental backup disabled, or the
/// schedule suspended).
pub fn watcher_interval(spec: &EtcdBackupScheduleSpec) -> Option<Duration> {
    if !spec.incremental.enabled || spec.suspend {
        return None;
    }
    let interval = spec.incremental.interval;
    Some(if interval.is_negative() {
        DEFAULT_SEGMENT_INTERVAL
    } else {
        Duration::from(interval).max(Duration::from_secs(1))
    })
}

/// The fingerprint of everything a watcher runs with: a watcher whose
/// fingerprint differs is restarted.
pub fn watcher_fingerprint(
    spec: &EtcdBackupScheduleSpec,
    credentials: &Credentials,
    key: Option<&EncryptionKey>,
    interval: Duration,
) -> String {
    let settings = serde_json::json!({
        "cluster": spec.cluster_name,
        "destination": spec.destination,
        "credentials": credentials,
        "encryption": key.map(EncryptionKey::fingerprint),
        "interval": interval.as_millis().to_string(),
        "maxSegmentBytes": spec.incremental.max_segment_bytes,
    });
    hex::encode(Sha256::digest(settings.to_string().as_bytes()))
}

/// The options of a watcher for the schedule in `namespace`; it counts the
/// gaps status already holds.
pub fn watcher_options(
    namespace: &str,
    spec: &EtcdBackupScheduleSpec,
    status: &EtcdBackupScheduleStatus,
    interval: Duration,
    snapshot: SnapshotOptions,
) -> IncrementalOptions {
    IncrementalOptions {
        interval,
        max_segment_bytes: usize::try_from(spec.incremental.max_segment_bytes).unwrap_or(16 << 20),
        snapshot,
        gaps_before: status
            .incremental
            .as_ref()
            .map_or(0, |i| u64::try_from(i.gaps).unwrap_or(0)),
        ..IncrementalOptions::new(namespace, &spec.cluster_name)
    }
}

/// A watcher that cannot start: status says why, and nothing is durable
/// beyond the full backups (`BackupReady` says so through the pass's empty
/// progress).
pub fn watcher_failed(
    status: &mut EtcdBackupScheduleStatus,
    error: &BackupError,
    interval: Duration,
) -> IncrementalPass {
    let message = format!("cannot start: {error}");
    status.incremental.get_or_insert_default().last_error = Some(message.clone());
    IncrementalPass {
        progress: IncrementalProgress {
            last_error: Some(message),
            ..IncrementalProgress::default()
        },
        interval,
    }
}

/// A running watcher's progress, into status at `now`.
pub fn watcher_progress(
    status: &mut EtcdBackupScheduleStatus,
    progress: IncrementalProgress,
    interval: Duration,
    now: DateTime<Utc>,
) -> IncrementalPass {
    status.incremental = Some(progress.status(now));
    IncrementalPass { progress, interval }
}

/// The Event of a watcher's notice.
pub fn notice_event(notice: &IncrementalNotice) -> Event {
    match notice {
        IncrementalNotice::Following {
            base,
            from_revision,
            segments,
        } => events::normal(
            ACTION,
            "IncrementalFollowing",
            &format!(
                "incremental backup follows {base} from revision {from_revision} ({segments} segments already)"
            ),
        ),
        IncrementalNotice::Gap(gap) => events::warning(
            ACTION,
            "IncrementalGap",
            &format!("{gap}; taking a full backup now"),
        ),
        IncrementalNotice::FullBackupTaken(taken) => events::normal(
            ACTION,
            "BackupSucceeded",
            &format!(
                "revision {} to {} in {:.1}s (to start a new incremental chain)",
                taken.metadata.revision,
                taken.location,
                taken.duration.as_secs_f64()
            ),
        ),
        IncrementalNotice::Failed(message) => events::warning(ACTION, "IncrementalFailed", message),
    }
}

/// How a pass ends.
#[derive(Debug)]
pub struct Finish {
    /// The status to write.
    pub status: EtcdBackupScheduleStatus,
    /// When to look at the schedule again.
    pub requeue_after: Duration,
    /// The schedule's period at the end of the pass.
    pub period: chrono::Duration,
}

/// The end of a pass at `now`: `BackupReady`, the next fire time, and the
/// next wake-up: at the next fire time, sooner after a failure (retry),
/// at least every 5 minutes to keep the staleness current, and with
/// incremental backup every interval (10 s to 1 minute) to keep the loss
/// window current.
pub fn finish(run: Run, incremental: Option<&IncrementalPass>, now: DateTime<Utc>) -> Finish {
    let Run {
        cron,
        mut status,
        last_started,
        ..
    } = run;
    let period = cron.period_at(now).unwrap_or(DEFAULT_PERIOD);
    let last_success = status.last_successful_time.as_ref().map(from_kube);
    let never_ran = last_success.is_none() && status.last_scheduled_time.is_none();
    let (ready, reason, message) = match (freshness(last_success, period, now), &status.last_error)
    {
        (Freshness::Fresh(message), None) => (true, "Fresh", message),
        (Freshness::Fresh(message), Some(error)) => (
            true,
            "FreshWithErrors",
            format!("{message}; last attempt: {error}"),
        ),
        (Freshness::Stale(message), error) => {
            let message = match error {
                Some(error) => format!("{message}; last attempt: {error}"),
                None => message,
            };
            (false, if never_ran { "Waiting" } else { "Stale" }, message)
        }
    };
    set_ready(&mut status, ready, reason, &message, now);
    if let Some(pass) = incremental {
        incremental_freshness(&mut status, pass, now);
    }
    let next = cron.next_after(now);
    status.next_scheduled_time = next.map(to_kube);

    let mut wait = next
        .and_then(|n| (n - now).to_std().ok())
        .unwrap_or(WAKE_AT_LEAST_EVERY)
        .min(WAKE_AT_LEAST_EVERY);
    if status.last_error.is_some() && last_started.is_some() {
        wait = wait.min(RETRY_FAILED_BACKUP);
    }
    if let Some(pass) = incremental {
        wait = wait.min(
            pass.interval
                .clamp(Duration::from_secs(10), Duration::from_secs(60)),
        );
    }
    Finish {
        status,
        requeue_after: wait.max(Duration::from_secs(1)),
        period,
    }
}

/// The schedule's gauges after a pass: what its status says, the period
/// its backups are judged by, and while a watcher should run, its interval.
pub fn gauges(
    spec: &EtcdBackupScheduleSpec,
    status: &EtcdBackupScheduleStatus,
    period: chrono::Duration,
) -> ScheduleGauges {
    let seconds = |at: &k8s_openapi::apimachinery::pkg::apis::meta::v1::Time| at.0.as_second();
    ScheduleGauges {
        last_success: status.last_successful_time.as_ref().map(seconds),
        last_attempt_failed: status.last_error.is_some(),
        period_seconds: period.num_seconds(),
        incremental: watcher_interval(spec).map(|interval| {
            let progress = status.incremental.as_ref();
            IncrementalGauges {
                interval_seconds: i64::try_from(interval.as_secs()).unwrap_or(i64::MAX),
                recovery_point: progress
                    .and_then(|i| i.recovery_point.as_ref())
                    .map(seconds),
                loss_window_seconds: progress.and_then(|i| i.loss_window_seconds),
            }
        }),
    }
}

/// `BackupReady` also turns false when the loss window of the incremental
/// chain exceeds three intervals: writes wait that long to be stored, or
/// etcd has not answered for that long. A watcher that is
/// starting (verifying its chain) says nothing yet: an operator restart
/// does not flip the condition.
fn incremental_freshness(
    status: &mut EtcdBackupScheduleStatus,
    pass: &IncrementalPass,
    now: DateTime<Utc>,
) {
    let progress = &pass.progress;
    if progress.durable_at.is_none() && progress.last_error.is_none() {
        return;
    }
    let interval = chrono::Duration::from_std(pass.interval).unwrap_or(chrono::Duration::MAX);
    let Freshness::Stale(message) = progress.freshness(interval, now) else {
        return;
    };
    if conditions::is_true(&status.conditions, BACKUP_READY) {
        set_ready(status, false, "IncrementalStale", &message, now);
    }
}

/// Sets `BackupReady`; it keeps its transition time while its status holds.
fn set_ready(
    status: &mut EtcdBackupScheduleStatus,
    ready: bool,
    reason: &str,
    message: &str,
    now: DateTime<Utc>,
) {
    let condition = conditions::condition(
        BACKUP_READY,
        ready,
        reason,
        message,
        status.observed_generation,
        to_kube(now),
    );
    conditions::set(&mut status.conditions, condition);
}

#[cfg(test)]
mod tests;
