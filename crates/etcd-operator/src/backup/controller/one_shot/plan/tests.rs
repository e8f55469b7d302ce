use chrono::{DateTime, TimeZone, Utc};
use kube::runtime::events::EventType;

use super::*;
use crate::backup::controller::tests::taken;

fn at(minute: u32, second: u32) -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 3, 1, 10, minute, second)
        .single()
        .expect("time")
}

fn no_member() -> BackupError {
    BackupError::NoHealthyMember("no member Pod of main has an IP".into())
}

fn complete_condition(status: &EtcdBackupStatus) -> &Condition {
    conditions::find(&status.conditions, COMPLETE).expect("a Complete condition")
}

#[test]
fn a_backup_that_is_over_starts_no_attempt() {
    for phase in [BackupPhase::Succeeded, BackupPhase::Failed] {
        let status = EtcdBackupStatus {
            phase: Some(phase),
            attempts: 2,
            ..Default::default()
        };
        assert_eq!(start(Some(&status), at(0, 0)), None);
    }
}

#[test]
fn an_attempt_runs_and_counts() {
    let first = start(None, at(0, 0)).expect("an attempt");
    assert_eq!(first.phase, Some(BackupPhase::Running));
    assert_eq!(first.attempts, 1);
    assert_eq!(first.start_time, Some(to_kube(at(0, 0))));

    let pending = EtcdBackupStatus {
        phase: Some(BackupPhase::Pending),
        attempts: 2,
        error: Some("no healthy member".into()),
        ..Default::default()
    };
    let third = start(Some(&pending), at(1, 0)).expect("an attempt");
    assert_eq!(third.attempts, 3);
    assert_eq!(
        third.error.as_deref(),
        Some("no healthy member"),
        "the last error stays until the attempt ends"
    );
}

#[test]
fn a_stored_backup_succeeds_with_what_was_stored() {
    let running = start(None, at(0, 0)).expect("an attempt");
    let backup = taken(42, at(0, 3));
    let after = after_attempt(&running, Ok(&backup), at(0, 4));

    let status = &after.status;
    assert_eq!(status.phase, Some(BackupPhase::Succeeded));
    assert_eq!(status.revision, Some(42));
    assert_eq!(status.member.as_deref(), Some("http://10.0.0.2:2379"));
    assert_eq!(status.cluster_id.as_deref(), Some("c1"));
    assert_eq!(status.size_bytes, Some(4096));
    assert_eq!(status.stored_bytes, Some(1024));
    assert_eq!(status.location.as_deref(), Some(backup.location.as_str()));
    assert_eq!(status.completion_time, Some(to_kube(at(0, 3))));
    assert_eq!(status.duration_seconds, Some(2.5));
    assert_eq!(status.attempts, 1);
    assert_eq!(status.error, None);
    let complete = complete_condition(status);
    assert_eq!(
        (complete.status.as_str(), complete.reason.as_str()),
        ("True", "Succeeded")
    );
    assert_eq!(complete.last_transition_time, to_kube(at(0, 3)));

    assert_eq!(after.event.type_, EventType::Normal);
    assert_eq!(after.event.reason, "BackupSucceeded");
    assert!(
        after
            .event
            .note
            .as_deref()
            .is_some_and(|n| n.starts_with("revision 42 (4096 bytes, 1024 stored) to file:///")),
        "{:?}",
        after.event.note
    );
    assert_eq!(after.retry_after, None, "a backup that succeeded is over");
}

#[test]
fn a_failed_attempt_is_retried_with_back_off_until_the_limit() {
    let mut status = None;
    for attempt in 1..MAX_ATTEMPTS {
        let running = start(status.as_ref(), at(attempt as u32, 0)).expect("an attempt");
        let after = after_attempt(&running, Err(&no_member()), at(attempt as u32, 1));
        assert_eq!(after.status.phase, Some(BackupPhase::Pending));
        assert_eq!(after.status.attempts, attempt);
        assert_eq!(after.status.completion_time, None);
        assert_eq!(
            after.retry_after,
            Some(back_off(attempt, BackupErrorCategory::Transient))
        );
        let retrying = complete_condition(&after.status);
        assert_eq!(
            (retrying.status.as_str(), retrying.reason.as_str()),
            ("False", "Retrying")
        );
        assert!(retrying.message.contains("no member Pod of main has an IP"));
        assert_eq!(after.event.type_, EventType::Warning);
        assert_eq!(
            after.event.note.as_deref(),
            Some(
                format!(
                    "attempt {attempt}: no healthy member to take a snapshot from: no member Pod of main has an IP"
                )
                .as_str()
            )
        );
        status = Some(after.status);
    }

    let last = start(status.as_ref(), at(30, 0)).expect("the last attempt");
    assert_eq!(last.attempts, MAX_ATTEMPTS);
    let after = after_attempt(&last, Err(&no_member()), at(30, 1));
    assert_eq!(after.status.phase, Some(BackupPhase::Failed));
    assert_eq!(after.status.completion_time, Some(to_kube(at(30, 1))));
    assert_eq!(complete_condition(&after.status).reason, "Failed");
    assert_eq!(
        after.retry_after, None,
        "gave up after {MAX_ATTEMPTS} attempts"
    );
    assert_eq!(start(Some(&after.status), at(31, 0)), None);
}

#[test]
fn a_corrupt_snapshot_gives_up_at_once() {
    let running = start(None, at(0, 0)).expect("an attempt");
    let corrupt = BackupError::Corrupt {
        location: "http://10.0.0.2:2379".into(),
        reason: "SHA-256 trailer does not match".into(),
    };
    let after = after_attempt(&running, Err(&corrupt), at(0, 5));
    assert_eq!(after.status.phase, Some(BackupPhase::Failed));
    assert_eq!(after.status.attempts, 1);
    assert_eq!(after.retry_after, None);
}

#[test]
fn a_configuration_error_is_retried_no_sooner_than_a_minute() {
    let running = start(None, at(0, 0)).expect("an attempt");
    let missing = BackupError::Destination("Secret prod/s3 does not exist".into());
    let after = after_attempt(&running, Err(&missing), at(0, 1));
    assert_eq!(after.status.phase, Some(BackupPhase::Pending));
    assert_eq!(after.retry_after, Some(Duration::from_secs(60)));
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
fn waiting_for_the_store_or_the_certificates_uses_up_no_attempt() {
    let mut status = start(None, at(0, 0)).expect("an attempt");
    for minute in 1..=20 {
        let error = BackupError::StoreNotReady("Pod backup-store-x is Pending".into());
        let after = after_attempt(&status, Err(&error), at(minute, 0));
        assert_eq!(after.status.phase, Some(BackupPhase::Pending));
        assert_eq!(after.status.attempts, 0);
        assert_eq!(after.retry_after, Some(WAITING_RETRY));
        assert_eq!(complete_condition(&after.status).reason, "Waiting");
        status = start(Some(&after.status), at(minute, 1)).expect("another attempt");
    }
    let error = BackupError::ClusterTls("Secret prod/main-operator-tls does not exist yet".into());
    let after = after_attempt(&status, Err(&error), at(30, 0));
    assert_eq!(after.status.phase, Some(BackupPhase::Pending));
    let failed = after_attempt(&status, Err(&no_member()), at(31, 0));
    assert_eq!(failed.status.attempts, 1, "a real failure still counts");
}

#[test]
fn the_next_attempt_waits_out_the_back_off_whatever_wakes_the_controller() {
    let running = start(None, at(0, 0)).expect("an attempt");
    let after = after_attempt(&running, Err(&no_member()), at(0, 1));
    // A status write wakes the controller at once: not due before 15 s.
    assert_eq!(
        wait_before_next(Some(&after.status), at(0, 2)),
        Some(Duration::from_secs(13))
    );
    assert_eq!(wait_before_next(Some(&after.status), at(0, 15)), None);
    let missing = BackupError::Destination("Secret prod/s3 does not exist".into());
    let misconfigured = after_attempt(&running, Err(&missing), at(0, 1));
    assert_eq!(
        complete_condition(&misconfigured.status).reason,
        "Misconfigured"
    );
    assert_eq!(
        wait_before_next(Some(&misconfigured.status), at(0, 30)),
        Some(Duration::from_secs(30))
    );
    let store = BackupError::StoreNotReady("starting".into());
    let waiting = after_attempt(&running, Err(&store), at(0, 1));
    assert_eq!(
        wait_before_next(Some(&waiting.status), at(0, 4)),
        Some(Duration::from_secs(6))
    );
    assert_eq!(
        wait_before_next(None, at(0, 4)),
        None,
        "a new backup starts at once"
    );
}
