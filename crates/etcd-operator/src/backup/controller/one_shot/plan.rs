//! The decisions of an `EtcdBackup` pass (pure): whether an attempt
//! starts, and after it the status, the `Complete` condition, the Event,
//! and whether to retry (with back-off) or give up.

use std::time::Duration;

use chrono::{DateTime, Utc};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::runtime::events::Event;

use crate::api::{BackupPhase, EtcdBackupStatus};
use crate::backup::kube_time::{from_kube, to_kube};
use crate::backup::{BackupError, BackupErrorCategory, TakenBackup};
use crate::controller_kit::{conditions, events};

/// Attempts of a one-shot backup before it is `Failed`.
pub const MAX_ATTEMPTS: i32 = 5;
/// Condition type of a backup that is over: `True` once stored and
/// verified, `False` while retrying and after giving up.
pub const COMPLETE: &str = "Complete";
/// Action of the Events of backups.
const ACTION: &str = "Backup";

/// The status of the attempt starting at `now`, or `None` when the backup
/// is over (`Succeeded` or `Failed`) and waits for nothing.
pub fn start(current: Option<&EtcdBackupStatus>, now: DateTime<Utc>) -> Option<EtcdBackupStatus> {
    let current = current.cloned().unwrap_or_default();
    if matches!(
        current.phase,
        Some(BackupPhase::Succeeded | BackupPhase::Failed)
    ) {
        return None;
    }
    Some(EtcdBackupStatus {
        phase: Some(BackupPhase::Running),
        attempts: current.attempts + 1,
        start_time: Some(to_kube(now)),
        ..current
    })
}

/// How long a `Pending` backup still waits before its next attempt: the
/// back-off of its last failure (or [`WAITING_RETRY`]), counted from that
/// attempt's start. Every status write wakes the controller at once; this
/// keeps the back-off. `None`: an attempt may start now.
pub fn wait_before_next(status: Option<&EtcdBackupStatus>, now: DateTime<Utc>) -> Option<Duration> {
    let status = status?;
    if status.phase != Some(BackupPhase::Pending) {
        return None;
    }
    let started = from_kube(status.start_time.as_ref()?);
    let wait = match conditions::find(&status.conditions, COMPLETE)?
        .reason
        .as_str()
    {
        "Waiting" => WAITING_RETRY,
        "Retrying" => back_off(status.attempts, BackupErrorCategory::Transient),
        "Misconfigured" => back_off(status.attempts, BackupErrorCategory::Configuration),
        _ => return None,
    };
    let due = started + chrono::Duration::from_std(wait).ok()?;
    (now < due).then(|| (due - now).to_std().ok()).flatten()
}

/// What follows an attempt.
pub struct AfterAttempt {
    /// The status to write.
    pub status: EtcdBackupStatus,
    /// The Event to publish.
    pub event: Event,
    /// When to try again; `None` when the backup is over.
    pub retry_after: Option<Duration>,
}

/// The outcome of the attempt whose status is `running` (from [`start`]),
/// failed or not, at `now`.
pub fn after_attempt(
    running: &EtcdBackupStatus,
    result: Result<&TakenBackup, &BackupError>,
    now: DateTime<Utc>,
) -> AfterAttempt {
    match result {
        Ok(taken) => succeeded(running, taken),
        Err(error) => failed(running, error, now),
    }
}

fn succeeded(running: &EtcdBackupStatus, taken: &TakenBackup) -> AfterAttempt {
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
        start_time: Some(to_kube(metadata.started_at)),
        completion_time: Some(to_kube(metadata.completed_at)),
        duration_seconds: Some(taken.duration.as_secs_f64()),
        location: Some(taken.location.clone()),
        attempts: running.attempts,
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
    AfterAttempt {
        status,
        event: events::normal(ACTION, "BackupSucceeded", &note),
        retry_after: None,
    }
}

/// How often a backup waiting for something being set up is tried again.
pub const WAITING_RETRY: Duration = Duration::from_secs(10);

fn failed(running: &EtcdBackupStatus, error: &BackupError, now: DateTime<Utc>) -> AfterAttempt {
    if error.is_waiting() {
        return waiting(running, error, now);
    }
    let attempts = running.attempts;
    let category = error.category();
    let gave_up = attempts >= MAX_ATTEMPTS || category == BackupErrorCategory::Corrupt;
    let message = error.to_string();
    let status = EtcdBackupStatus {
        phase: Some(if gave_up {
            BackupPhase::Failed
        } else {
            BackupPhase::Pending
        }),
        error: Some(message.clone()),
        completion_time: gave_up.then(|| to_kube(now)),
        conditions: vec![complete(
            false,
            if gave_up {
                "Failed"
            } else if category == BackupErrorCategory::Configuration {
                "Misconfigured"
            } else {
                "Retrying"
            },
            &message,
            now,
        )],
        ..running.clone()
    };
    AfterAttempt {
        status,
        event: events::warning(
            ACTION,
            "BackupFailed",
            &format!("attempt {attempts}: {message}"),
        ),
        retry_after: (!gave_up).then(|| back_off(attempts, category)),
    }
}

/// Something the backup needs is being set up (the store Pod of a claim
/// starting, the certificates of a new TLS cluster): not an attempt, it
/// waits without using one up.
fn waiting(running: &EtcdBackupStatus, error: &BackupError, now: DateTime<Utc>) -> AfterAttempt {
    let message = error.to_string();
    let status = EtcdBackupStatus {
        phase: Some(BackupPhase::Pending),
        attempts: running.attempts.saturating_sub(1),
        error: Some(message.clone()),
        conditions: vec![complete(false, "Waiting", &message, now)],
        ..running.clone()
    };
    AfterAttempt {
        status,
        event: events::normal(ACTION, "BackupWaiting", &message),
        retry_after: Some(WAITING_RETRY),
    }
}

/// 15 s doubling per attempt, capped at 5 minutes; a configuration error
/// waits at least a minute (the spec or its Secret must change).
pub fn back_off(attempts: i32, category: BackupErrorCategory) -> Duration {
    let exponent = u32::try_from(attempts.clamp(1, 6) - 1).unwrap_or(0);
    let base = Duration::from_secs(15 * 2u64.pow(exponent)).min(Duration::from_secs(300));
    match category {
        BackupErrorCategory::Configuration => base.max(Duration::from_secs(60)),
        _ => base,
    }
}

/// The `Complete` condition, the one condition of a backup.
fn complete(ok: bool, reason: &str, message: &str, at: DateTime<Utc>) -> Condition {
    conditions::condition(COMPLETE, ok, reason, message, None, to_kube(at))
}

#[cfg(test)]
mod tests;
