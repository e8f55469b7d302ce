use chrono::TimeZone;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::runtime::events::EventType;
use serde_json::{Value, json};

use super::*;
use crate::backup::controller::tests::taken;
use crate::backup::incremental::GapKind;
use crate::backup::incremental::progress::SupersededChain;
use crate::backup::incremental::progress::answer_within;
use crate::backup::incremental::segment::base_name;
use crate::backup::{BackupMetadata, ChainGap, EncryptionKey, Selection, select};

fn at(hour: u32, minute: u32, second: u32) -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 3, 1, hour, minute, second)
        .single()
        .expect("time")
}

/// An hourly schedule created at 09:00, with `spec` merged over the
/// defaults.
fn schedule(spec: Value) -> EtcdBackupSchedule {
    let mut value = json!({
        "apiVersion": "durable-etcd.io/v1alpha1",
        "kind": "EtcdBackupSchedule",
        "metadata": {
            "name": "hourly", "namespace": "prod", "generation": 3,
            "creationTimestamp": "2026-03-01T09:00:00Z"
        },
        "spec": {
            "clusterName": "main",
            "schedule": "0 * * * *",
            "destination": { "local": { "path": "/backups" } }
        }
    });
    if let (Some(base), Value::Object(extra)) = (value["spec"].as_object_mut(), spec) {
        base.extend(extra);
    }
    serde_json::from_value(value).expect("a schedule")
}

fn with_status(
    mut schedule: EtcdBackupSchedule,
    status: EtcdBackupScheduleStatus,
) -> EtcdBackupSchedule {
    schedule.status = Some(status);
    schedule
}

fn run(begin: Begin) -> Run {
    match begin {
        Begin::Run(run) => run,
        Begin::Invalid { status, .. } => panic!("an invalid schedule: {status:?}"),
    }
}

fn ready(status: &EtcdBackupScheduleStatus) -> &Condition {
    conditions::find(&status.conditions, BACKUP_READY).expect("BackupReady")
}

fn ready_is(status: &EtcdBackupScheduleStatus) -> (&str, &str) {
    let condition = ready(status);
    (condition.status.as_str(), condition.reason.as_str())
}

fn no_member() -> BackupError {
    BackupError::NoHealthyMember("no member Pod of main has an IP".into())
}

#[test]
fn a_backup_is_due_once_a_fire_time_passed_since_the_last_one_started() {
    let started = EtcdBackupScheduleStatus {
        last_scheduled_time: Some(to_kube(at(10, 0, 5))),
        ..Default::default()
    };
    let hourly = with_status(schedule(json!({})), started);
    let not_yet = run(begin(&hourly, at(10, 59, 0)));
    assert!(!not_yet.backup_due);
    assert_eq!(
        not_yet.status.last_scheduled_time,
        Some(to_kube(at(10, 0, 5)))
    );
    assert_eq!(not_yet.last_started, Some(at(10, 0, 5)));

    let due = run(begin(&hourly, at(11, 0, 1)));
    assert!(due.backup_due);
    assert_eq!(due.status.last_scheduled_time, Some(to_kube(at(11, 0, 1))));
    assert_eq!(due.status.observed_generation, Some(3));

    // A new schedule counts from its creation.
    assert!(!run(begin(&schedule(json!({})), at(9, 30, 0))).backup_due);
    assert!(run(begin(&schedule(json!({})), at(10, 0, 0))).backup_due);
}

#[test]
fn a_suspended_schedule_takes_no_backup() {
    let suspended = schedule(json!({ "suspend": true }));
    let pass = run(begin(&suspended, at(12, 0, 0)));
    assert!(!pass.backup_due);
    assert_eq!(pass.status.last_scheduled_time, None);
}

#[test]
fn an_invalid_schedule_says_so_in_status_and_warns_once() {
    let invalid = schedule(json!({ "schedule": "61 * * * *" }));
    let Begin::Invalid { status, warning } = begin(&invalid, at(10, 0, 0)) else {
        panic!("a valid schedule");
    };
    assert_eq!(ready_is(&status), ("False", "InvalidSchedule"));
    assert!(
        status
            .last_error
            .as_deref()
            .is_some_and(|e| e.starts_with("invalid cron schedule \"61 * * * *\"")),
        "{status:?}"
    );
    assert_eq!(status.next_scheduled_time, None);
    let warning = warning.expect("a Warning Event the first time");
    assert_eq!(warning.type_, EventType::Warning);
    assert_eq!(warning.reason, "InvalidSchedule");

    let again = with_status(invalid, status);
    let Begin::Invalid { status, warning } = begin(&again, at(10, 5, 0)) else {
        panic!("a valid schedule");
    };
    assert!(warning.is_none(), "status already says so");
    assert_eq!(
        ready(&status).last_transition_time,
        to_kube(at(10, 0, 0)),
        "the condition did not change"
    );
}

#[test]
fn retention_keeps_the_count_of_the_schedules_own_backups_and_ignores_a_negative_max_age() {
    let mut keeping = schedule(json!({ "retention": { "count": 3, "maxAge": "168h" } }));
    keeping.metadata.uid = Some("u-1".into());
    let own = BackupWriter {
        kind: "EtcdBackupSchedule".into(),
        namespace: "prod".into(),
        name: "hourly".into(),
        uid: "u-1".into(),
    };
    assert_eq!(
        retention(&keeping, vec!["full-a".into()]),
        Retention {
            writer: own,
            count: 3,
            max_age: Some(Duration::from_secs(168 * 3600)),
            chains_in_use: vec!["full-a".into()],
        }
    );
    let negative = schedule(json!({ "retention": { "count": 2, "maxAge": "-1h" } }));
    assert_eq!(retention(&negative, Vec::new()).max_age, None);
    let defaults = retention(&schedule(json!({})), Vec::new());
    assert_eq!((defaults.count, defaults.max_age), (7, None));
    assert_eq!(
        defaults.writer.to_string(),
        "EtcdBackupSchedule prod/hourly"
    );
}

/// A schedule with incremental backup and `retention`, whose uid is
/// recorded in its backups.
fn continuous(retention: Value) -> EtcdBackupSchedule {
    let mut continuous = schedule(json!({
        "retention": retention,
        "incremental": { "enabled": true }
    }));
    continuous.metadata.uid = Some("u-1".into());
    continuous
}

/// A full backup `schedule` took at `completed_at`.
fn full_backup_of(
    schedule: &EtcdBackupSchedule,
    revision: i64,
    completed_at: DateTime<Utc>,
) -> BackupMetadata {
    BackupMetadata {
        written_by: Some(BackupWriter::of(schedule)),
        ..taken(revision, completed_at).metadata
    }
}

/// What `retention` deletes and keeps among `backups` at `now`.
fn selected<'a>(
    retention: &Retention,
    backups: &'a [BackupMetadata],
    now: DateTime<Utc>,
) -> Selection<'a> {
    select(
        backups,
        &retention.writer,
        retention.count,
        retention.max_age,
        &retention.chains_in_use,
        now,
    )
}

fn objects(selected: &[&BackupMetadata]) -> Vec<String> {
    selected.iter().map(|b| b.object.clone()).collect()
}

/// The cron's full backup at 11:00 starts a new chain; the watcher still
/// extends the chain after the 10:00 one until it is told, and then needs
/// it until the new chain reaches its end. Retention keeps it (and so its
/// segments) through both, whatever `retention` says, and deletes it once
/// the watcher no longer needs it.
fn the_chain_the_watcher_needs_outlives(retention_spec: Value) {
    let continuous = continuous(retention_spec);
    let spec = &continuous.spec;
    let first = full_backup_of(&continuous, 100, at(10, 0, 3));
    let second = full_backup_of(&continuous, 180, at(11, 0, 3));
    let backups = [first.clone(), second.clone()];
    let now = at(11, 0, 5);
    let mut progress = IncrementalProgress {
        base: Some(base_name(&first)),
        durable_revision: Some(190),
        ..IncrementalProgress::default()
    };

    // Right after the new full backup: the watcher still extends the
    // first chain.
    let in_use = chains_in_use(spec, Some(&progress), None);
    let kept = selected(&retention(&continuous, in_use), &backups, now);
    assert!(kept.expired.is_empty(), "{:?}", objects(&kept.expired));
    assert_eq!(objects(&kept.held), [first.object.as_str()]);
    assert_eq!(kept.kept, 2);
    let held = vec![base_name(&first)];

    // The watcher moved to the new full backup; its chain holds nothing
    // after 180 yet, the first one holds up to 190.
    progress.base = Some(base_name(&second));
    progress.superseded = Some(SupersededChain {
        base: base_name(&first),
        last_revision: 190,
    });
    progress.chain_durable_to(185);
    assert_eq!(progress.durable_revision, Some(190));
    let in_use = chains_in_use(spec, Some(&progress), None);
    assert!(!retention_owed(&held, &in_use));
    let kept = selected(&retention(&continuous, in_use), &backups, now);
    assert!(kept.expired.is_empty(), "{:?}", objects(&kept.expired));

    // The new chain reached 190: the first chain is no longer needed.
    progress.chain_durable_to(190);
    let in_use = chains_in_use(spec, Some(&progress), None);
    assert!(retention_owed(&held, &in_use));
    let owed = selected(&retention(&continuous, in_use), &backups, now);
    assert_eq!(objects(&owed.expired), [first.object.as_str()]);
    assert!(owed.held.is_empty());
}

#[test]
fn retention_count_1_keeps_the_chain_the_watcher_still_extends() {
    the_chain_the_watcher_needs_outlives(json!({ "count": 1 }));
}

#[test]
fn retention_max_age_keeps_the_chain_the_watcher_still_extends() {
    the_chain_the_watcher_needs_outlives(json!({ "count": 7, "maxAge": "30m" }));
}

#[test]
fn a_watcher_not_yet_following_keeps_the_chain_status_last_reported() {
    let continuous = continuous(json!({ "count": 1 }));
    let reported = IncrementalBackupStatus {
        base: Some("full-a".into()),
        ..Default::default()
    };
    let starting = IncrementalProgress::default();
    for watcher in [None, Some(&starting)] {
        assert_eq!(
            chains_in_use(&continuous.spec, watcher, Some(&reported)),
            ["full-a"]
        );
    }
    let following = IncrementalProgress {
        base: Some("full-b".into()),
        ..IncrementalProgress::default()
    };
    assert_eq!(
        chains_in_use(&continuous.spec, Some(&following), Some(&reported)),
        ["full-b"]
    );
    // Without incremental backup and no watcher, no chain is extended.
    let plain = schedule(json!({ "retention": { "count": 1 } }));
    assert!(chains_in_use(&plain.spec, None, Some(&reported)).is_empty());
    assert!(!retention_owed(&[], &[]));
}

#[test]
fn a_stored_backup_becomes_the_newest_and_clears_the_last_error() {
    let mut status = EtcdBackupScheduleStatus {
        last_error: Some("no healthy member".into()),
        ..Default::default()
    };
    let backup = taken(42, at(11, 0, 3));
    let event = record_scheduled(
        &mut status,
        ScheduledBackup::Stored {
            taken: &backup,
            retention: Ok(4),
        },
    );
    assert_eq!(status.last_successful_time, Some(to_kube(at(11, 0, 3))));
    assert_eq!(status.last_successful_revision, Some(42));
    assert_eq!(
        status.last_successful_location,
        Some(backup.location.clone())
    );
    assert_eq!(status.last_successful_stored_bytes, Some(1024));
    assert_eq!(status.last_successful_duration_seconds, Some(2.5));
    assert_eq!(status.backups_kept, Some(4));
    assert_eq!(status.last_error, None);
    assert_eq!(event.type_, EventType::Normal);
    assert_eq!(event.reason, "BackupSucceeded");

    let store_down = BackupError::NotFound("backups".into());
    record_scheduled(
        &mut status,
        ScheduledBackup::Stored {
            taken: &backup,
            retention: Err(&store_down),
        },
    );
    assert!(
        status
            .last_error
            .as_deref()
            .is_some_and(|e| e.starts_with("retention: ")),
        "{status:?}"
    );
    assert_eq!(status.backups_kept, Some(4), "the last count stays");
}

#[test]
fn a_failed_backup_is_the_last_error_and_retried_within_a_minute() {
    let started = EtcdBackupScheduleStatus {
        last_scheduled_time: Some(to_kube(at(10, 0, 0))),
        last_successful_time: Some(to_kube(at(10, 0, 4))),
        ..Default::default()
    };
    let hourly = with_status(schedule(json!({})), started);
    let mut pass = run(begin(&hourly, at(11, 0, 0)));
    let event = record_scheduled(&mut pass.status, ScheduledBackup::Failed(&no_member()));
    assert_eq!(event.type_, EventType::Warning);
    assert_eq!(event.reason, "BackupFailed");

    let finish = finish(pass, None, at(11, 0, 2));
    assert_eq!(finish.requeue_after, RETRY_FAILED_BACKUP);
    assert_eq!(ready_is(&finish.status), ("True", "FreshWithErrors"));
    assert!(
        ready(&finish.status)
            .message
            .ends_with("; last attempt: no healthy member to take a snapshot from: no member Pod of main has an IP"),
        "{:?}",
        ready(&finish.status)
    );
}

#[test]
fn backup_ready_is_waiting_then_fresh_then_stale() {
    let hourly = schedule(json!({}));
    let waiting = finish(run(begin(&hourly, at(9, 30, 0))), None, at(9, 30, 0));
    assert_eq!(ready_is(&waiting.status), ("False", "Waiting"));

    let fresh = EtcdBackupScheduleStatus {
        last_scheduled_time: Some(to_kube(at(10, 0, 0))),
        last_successful_time: Some(to_kube(at(10, 0, 4))),
        ..Default::default()
    };
    let hourly = with_status(hourly, fresh);
    let done = finish(run(begin(&hourly, at(10, 30, 0))), None, at(10, 30, 0));
    assert_eq!(ready_is(&done.status), ("True", "Fresh"));
    assert_eq!(ready(&done.status).observed_generation, Some(3));

    // Two periods without a backup (suspended, say).
    let stale = with_status(hourly, done.status);
    let stale = finish(run(begin(&stale, at(12, 30, 0))), None, at(12, 30, 0));
    assert_eq!(ready_is(&stale.status), ("False", "Stale"));
}

#[test]
fn backup_ready_keeps_its_transition_time_while_it_holds() {
    let fresh = EtcdBackupScheduleStatus {
        last_scheduled_time: Some(to_kube(at(10, 0, 0))),
        last_successful_time: Some(to_kube(at(10, 0, 4))),
        ..Default::default()
    };
    let hourly = with_status(schedule(json!({})), fresh);
    let first = finish(run(begin(&hourly, at(10, 10, 0))), None, at(10, 10, 0));
    let hourly = with_status(hourly, first.status);
    let second = finish(run(begin(&hourly, at(10, 20, 0))), None, at(10, 20, 0));
    assert_eq!(second.status.conditions.len(), 1);
    assert_eq!(
        ready(&second.status).last_transition_time,
        to_kube(at(10, 10, 0))
    );
    assert_eq!(ready(&second.status).message, "newest backup is 19m old");
    let hourly = with_status(hourly, second.status);
    let stale = finish(run(begin(&hourly, at(12, 10, 0))), None, at(12, 10, 0));
    assert_eq!(
        ready(&stale.status).last_transition_time,
        to_kube(at(12, 10, 0))
    );
}

#[test]
fn the_next_wake_up_is_the_next_fire_time_or_five_minutes_at_most() {
    let hourly = schedule(json!({}));
    let early = finish(run(begin(&hourly, at(10, 58, 30))), None, at(10, 58, 30));
    assert_eq!(early.requeue_after, Duration::from_secs(90));
    assert_eq!(
        early.status.next_scheduled_time,
        Some(to_kube(at(11, 0, 0)))
    );
    let long = finish(run(begin(&hourly, at(10, 30, 0))), None, at(10, 30, 0));
    assert_eq!(long.requeue_after, WAKE_AT_LEAST_EVERY);
}

#[test]
fn a_watcher_runs_only_when_enabled_and_not_suspended() {
    assert_eq!(watcher_interval(&schedule(json!({})).spec), None);
    let enabled = schedule(json!({ "incremental": { "enabled": true } }));
    assert_eq!(
        watcher_interval(&enabled.spec),
        Some(Duration::from_secs(4))
    );
    assert_eq!(
        watcher_interval(&enabled.spec),
        Some(crate::backup::incremental::IncrementalOptions::new("ns", "c").interval),
        "the API's default is the watcher's"
    );
    assert_eq!(DEFAULT_SEGMENT_INTERVAL, Duration::from_secs(4));
    let suspended = schedule(json!({ "incremental": { "enabled": true }, "suspend": true }));
    assert_eq!(watcher_interval(&suspended.spec), None);
    let fast = schedule(json!({ "incremental": { "enabled": true, "interval": "200ms" } }));
    assert_eq!(watcher_interval(&fast.spec), Some(Duration::from_secs(1)));
    let negative = schedule(json!({ "incremental": { "enabled": true, "interval": "-5s" } }));
    assert_eq!(
        watcher_interval(&negative.spec),
        Some(DEFAULT_SEGMENT_INTERVAL)
    );
}

#[test]
fn a_watcher_restarts_when_its_settings_change() {
    let spec = schedule(json!({ "incremental": { "enabled": true } })).spec;
    let credentials = Credentials::from([("accessKeyId".to_string(), "a".to_string())]);
    let key = EncryptionKey::from_bytes([7u8; 32]);
    let interval = Duration::from_secs(20);
    let base = watcher_fingerprint(&spec, &credentials, Some(&key), interval);
    assert_eq!(
        base,
        watcher_fingerprint(&spec, &credentials, Some(&key), interval),
        "the same settings keep the watcher"
    );
    let rotated = Credentials::from([("accessKeyId".to_string(), "b".to_string())]);
    let other_key = EncryptionKey::from_bytes([8u8; 32]);
    let mut larger = spec.clone();
    larger.incremental.max_segment_bytes *= 2;
    for changed in [
        watcher_fingerprint(&spec, &rotated, Some(&key), interval),
        watcher_fingerprint(&spec, &credentials, Some(&other_key), interval),
        watcher_fingerprint(&spec, &credentials, None, interval),
        watcher_fingerprint(&spec, &credentials, Some(&key), Duration::from_secs(10)),
        watcher_fingerprint(&larger, &credentials, Some(&key), interval),
    ] {
        assert_ne!(changed, base);
    }
}

#[test]
fn a_watcher_counts_the_gaps_status_already_holds() {
    let spec =
        schedule(json!({ "incremental": { "enabled": true, "maxSegmentBytes": 65536 } })).spec;
    let status = EtcdBackupScheduleStatus {
        incremental: Some(crate::api::IncrementalBackupStatus {
            gaps: 2,
            ..Default::default()
        }),
        ..Default::default()
    };
    let options = watcher_options(
        "prod",
        &spec,
        &status,
        Duration::from_secs(20),
        SnapshotOptions::default(),
    );
    assert_eq!(options.gaps_before, 2);
    assert_eq!(options.max_segment_bytes, 65536);
    assert_eq!(
        (options.namespace.as_str(), options.cluster.as_str()),
        ("prod", "main")
    );
    assert_eq!(options.interval, Duration::from_secs(20));
}

#[test]
fn a_full_backup_of_the_watcher_counts_when_it_is_newer() {
    let mut status = EtcdBackupScheduleStatus {
        last_successful_time: Some(to_kube(at(11, 0, 3))),
        last_error: Some("retention: store down".into()),
        ..Default::default()
    };
    assert!(!is_newer(&status, &taken(40, at(10, 0, 0))));
    assert!(!is_newer(&status, &taken(42, at(11, 0, 3))));
    let newer = taken(50, at(11, 20, 0));
    assert!(is_newer(&status, &newer));
    record_full_backup(&mut status, &newer, Ok(5));
    assert_eq!(status.last_successful_revision, Some(50));
    assert_eq!(status.last_successful_time, Some(to_kube(at(11, 20, 0))));
    assert_eq!(status.backups_kept, Some(5));
    assert!(
        status.last_error.is_some(),
        "the cron's last error stays until its next backup"
    );
}

fn incremental_pass(
    now: DateTime<Utc>,
    durable_ago: Option<i64>,
    error: Option<&str>,
) -> IncrementalPass {
    IncrementalPass {
        progress: IncrementalProgress {
            durable_at: durable_ago.map(|s| now - chrono::Duration::seconds(s)),
            last_error: error.map(str::to_string),
            ..IncrementalProgress::default()
        },
        interval: Duration::from_secs(20),
    }
}

/// A schedule whose newest full backup is 1 minute old at `now`.
fn fresh_run(now: DateTime<Utc>) -> Run {
    let fresh = EtcdBackupScheduleStatus {
        last_scheduled_time: Some(to_kube(now - chrono::Duration::seconds(60))),
        last_successful_time: Some(to_kube(now - chrono::Duration::seconds(60))),
        ..Default::default()
    };
    let spec = json!({ "incremental": { "enabled": true } });
    run(begin(&with_status(schedule(spec), fresh), now))
}

#[test]
fn backup_ready_turns_false_when_nothing_is_durable_for_three_intervals() {
    let now = at(10, 30, 0);
    let done = finish(
        fresh_run(now),
        Some(&incremental_pass(now, Some(59), None)),
        now,
    );
    assert_eq!(ready_is(&done.status), ("True", "Fresh"));

    let done = finish(
        fresh_run(now),
        Some(&incremental_pass(now, Some(61), None)),
        now,
    );
    assert_eq!(ready_is(&done.status), ("False", "IncrementalStale"));

    let done = finish(
        fresh_run(now),
        Some(&incremental_pass(now, None, None)),
        now,
    );
    assert_eq!(
        ready_is(&done.status).0,
        "True",
        "a starting watcher says nothing"
    );

    let failing = incremental_pass(now, None, Some("Secret missing"));
    let done = finish(fresh_run(now), Some(&failing), now);
    assert_eq!(ready_is(&done.status), ("False", "IncrementalStale"));
    assert!(ready(&done.status).message.contains("Secret missing"));
}

#[test]
fn a_quiet_cluster_answered_by_etcd_stays_ready_with_nothing_to_lose() {
    let now = at(10, 30, 0);
    let interval = Duration::from_secs(20);
    // No write since the full backup an hour ago; etcd answered 5 s ago.
    let quiet = IncrementalProgress {
        durable_revision: Some(42),
        durable_at: Some(now - chrono::Duration::seconds(5)),
        answer_within: answer_within(interval),
        ..IncrementalProgress::default()
    };
    let mut pass = fresh_run(now);
    let incremental = watcher_progress(&mut pass.status, quiet.clone(), interval, now);
    let status = pass.status.incremental.clone().expect("incremental status");
    assert_eq!(status.loss_window_seconds, Some(0));
    assert_eq!(status.durable_revision, Some(42));
    let done = finish(pass, Some(&incremental), now);
    assert_eq!(ready_is(&done.status), ("True", "Fresh"));

    // A write delivered 61 s ago still not stored: stale, and says so.
    let waiting = IncrementalProgress {
        pending_since: Some(now - chrono::Duration::seconds(61)),
        last_error: Some("upload: connection refused".into()),
        ..quiet
    };
    let mut pass = fresh_run(now);
    let incremental = watcher_progress(&mut pass.status, waiting, interval, now);
    let done = finish(pass, Some(&incremental), now);
    assert_eq!(ready_is(&done.status), ("False", "IncrementalStale"));
    let message = &ready(&done.status).message;
    assert!(
        message.contains("not yet stored is 61s") && message.contains("connection refused"),
        "{message}"
    );
}

#[test]
fn a_watcher_that_cannot_start_says_why_and_backup_ready_turns_false() {
    let now = at(10, 30, 0);
    let mut pass = fresh_run(now);
    let missing = BackupError::Destination("Secret prod/s3 does not exist".into());
    let incremental = watcher_failed(&mut pass.status, &missing, Duration::from_secs(20));
    assert_eq!(
        pass.status
            .incremental
            .as_ref()
            .and_then(|i| i.last_error.as_deref()),
        Some("cannot start: invalid backup destination: Secret prod/s3 does not exist")
    );
    let done = finish(pass, Some(&incremental), now);
    assert_eq!(ready_is(&done.status), ("False", "IncrementalStale"));
}

#[test]
fn with_incremental_backup_the_pass_wakes_every_interval() {
    let now = at(10, 30, 0);
    let mut pass = fresh_run(now);
    let progress = incremental_pass(now, Some(5), None).progress;
    let incremental = watcher_progress(&mut pass.status, progress, Duration::from_secs(20), now);
    assert_eq!(
        pass.status
            .incremental
            .as_ref()
            .and_then(|i| i.loss_window_seconds),
        Some(5)
    );
    let done = finish(pass, Some(&incremental), now);
    assert_eq!(done.requeue_after, Duration::from_secs(20));

    let fast = IncrementalPass {
        interval: Duration::from_secs(1),
        ..incremental
    };
    let done = finish(fresh_run(now), Some(&fast), now);
    assert_eq!(done.requeue_after, Duration::from_secs(10));
}

#[test]
fn notices_become_events() {
    let following = notice_event(&IncrementalNotice::Following {
        base: "full-20260301T100000Z-r42".into(),
        from_revision: 43,
        segments: 0,
    });
    assert_eq!(
        (following.type_, following.reason.as_str()),
        (EventType::Normal, "IncrementalFollowing")
    );
    let gap = notice_event(&IncrementalNotice::Gap(ChainGap {
        kind: GapKind::Compacted,
        after_revision: 42,
        message: "etcd compacted revision 40..=60".into(),
    }));
    assert_eq!(
        (gap.type_, gap.reason.as_str()),
        (EventType::Warning, "IncrementalGap")
    );
    assert!(
        gap.note
            .as_deref()
            .is_some_and(|n| n.ends_with("; taking a full backup now"))
    );
    let full = notice_event(&IncrementalNotice::FullBackupTaken(Box::new(taken(
        42,
        at(10, 0, 3),
    ))));
    assert_eq!(full.reason, "BackupSucceeded");
    let failed = notice_event(&IncrementalNotice::Failed("store down".into()));
    assert_eq!(
        (failed.type_, failed.reason.as_str(), failed.note.as_deref()),
        (EventType::Warning, "IncrementalFailed", Some("store down"))
    );
}

#[test]
fn gauges_show_the_newest_backup_the_period_and_the_recovery_point() {
    let now = at(10, 30, 0);
    let interval = Duration::from_secs(20);
    let quiet = IncrementalProgress {
        durable_revision: Some(42),
        durable_at: Some(now - chrono::Duration::seconds(5)),
        answer_within: answer_within(interval),
        ..IncrementalProgress::default()
    };
    let mut pass = fresh_run(now);
    let incremental = watcher_progress(&mut pass.status, quiet, interval, now);
    let done = finish(pass, Some(&incremental), now);
    let spec = schedule(json!({ "incremental": { "enabled": true } })).spec;
    let gauges = gauges(&spec, &done.status, done.period);
    assert_eq!(gauges.last_success, Some(now.timestamp() - 60));
    assert!(!gauges.last_attempt_failed);
    assert_eq!(gauges.period_seconds, 3600, "hourly");
    assert_eq!(
        gauges.incremental,
        Some(IncrementalGauges {
            interval_seconds: 4,
            recovery_point: Some(now.timestamp() - 5),
            loss_window_seconds: Some(0),
        })
    );

    // Suspended, no watcher runs: no continuous-backup figures.
    let suspended = schedule(json!({ "incremental": { "enabled": true }, "suspend": true })).spec;
    assert_eq!(
        super::gauges(&suspended, &done.status, done.period).incremental,
        None
    );
}
