//! Tests of the backup controllers' decoding and error handling, and the
//! backups the plan tests start from.

use chrono::{DateTime, Utc};
use serde_json::json;

use super::*;
use crate::backup::{BackupMetadata, SnapshotSource, TakenBackup};
use crate::controller_kit::category::tests::api_error;

/// A backup of revision `revision` stored and verified at `completed_at`,
/// taken in 2.5 s.
pub(super) fn taken(revision: i64, completed_at: DateTime<Utc>) -> TakenBackup {
    let started_at = completed_at - chrono::Duration::milliseconds(2500);
    let stamp = started_at.format("%Y%m%dT%H%M%SZ");
    TakenBackup {
        metadata: BackupMetadata {
            format: 1,
            namespace: "prod".into(),
            cluster: "main".into(),
            cluster_id: "c1".into(),
            member_id: "m2".into(),
            revision,
            etcd_version: "3.6.5".into(),
            snapshot_bytes: 4096,
            sha256: "ab".repeat(32),
            object: format!("full-{stamp}-r{revision}.db.zst"),
            compression: "zstd".into(),
            encryption: None,
            stored_bytes: 1024,
            stored_sha256: "cd".repeat(32),
            started_at,
            completed_at,
            written_by: None,
        },
        location: format!("file:///backups/prod/main/full-{stamp}-r{revision}.db.zst"),
        source: SnapshotSource {
            endpoint: "http://10.0.0.2:2379".into(),
            member_id: 2,
            cluster_id: 1,
            leader: 1,
            revision,
            version: "3.6.5".into(),
            db_size: 4096,
            is_learner: false,
        },
        duration: std::time::Duration::from_millis(2500),
        completion: std::time::Duration::from_millis(100),
        store_completion: std::time::Duration::from_millis(90),
    }
}

fn object(value: serde_json::Value) -> DynamicObject {
    serde_json::from_value(value).expect("a dynamic object")
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
    let error =
        unreadable::decode::<EtcdBackupSchedule>(&schedule(json!("32Mi"))).expect_err("unreadable");
    assert_eq!(error.path, "spec.incremental.maxSegmentBytes");
    assert_eq!(error.reason(), "UnreadableSpec");
    let readable =
        unreadable::decode::<EtcdBackupSchedule>(&schedule(json!(33_554_432))).expect("readable");
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
fn an_unreadable_object_waits_for_a_change_and_api_errors_are_not_retried_at_once() {
    let unreadable = BackupControllerError::Unreadable {
        kind: "EtcdBackup".into(),
        name: "prod/nightly".into(),
        source: Unreadable {
            path: "status.phase".into(),
            message: "unknown variant `Archived`".into(),
        },
    };
    assert_eq!(
        requeue_after(&unreadable),
        Action::requeue(Duration::from_secs(300))
    );
    let unavailable = BackupControllerError::Status(StatusError::Patch {
        object: "nightly".into(),
        source: api_error(503),
    });
    assert_eq!(requeue_after(&unavailable), Action::requeue(RETRY_AT_LEAST));
}
