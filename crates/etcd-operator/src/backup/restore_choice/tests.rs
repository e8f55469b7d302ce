use std::sync::Arc;

use chrono::{Duration, TimeZone};
use object_store::memory::InMemory;
use object_store::{ObjectStoreExt, PutPayload};

use super::*;

use crate::backup::incremental::SegmentMetadata;
use crate::backup::incremental::segment::{
    SEGMENT_FORMAT, object_path, segment_metadata_name, segment_object_name,
};
use crate::backup::metadata::{FORMAT, SNAPSHOT_SUFFIX, backup_base_name};

fn at(millis: i64) -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 12, 2, 17, 3, 0)
        .single()
        .expect("time")
        + Duration::milliseconds(millis)
}

fn full(cluster_id: &str, revision: i64, started_ms: i64) -> BackupMetadata {
    let started_at = at(started_ms);
    BackupMetadata {
        format: FORMAT,
        namespace: "ns".into(),
        cluster: "c".into(),
        cluster_id: cluster_id.into(),
        member_id: "2".into(),
        revision,
        etcd_version: "3.6.16".into(),
        snapshot_bytes: 1,
        sha256: String::new(),
        object: format!(
            "{}{SNAPSHOT_SUFFIX}",
            backup_base_name(started_at, revision)
        ),
        compression: "zstd".into(),
        encryption: None,
        stored_bytes: 1,
        stored_sha256: String::new(),
        started_at,
        completed_at: started_at,
        written_by: None,
    }
}

fn reach(backup: &BackupMetadata, last_revision: i64) -> Reach<'_> {
    Reach {
        backup,
        last_revision,
    }
}

fn store() -> BackupStore {
    BackupStore::from_parts(Arc::new(InMemory::new()), "ns/c".into(), "mem:///b".into())
}

async fn put_json(store: &BackupStore, relative: &str, json: Vec<u8>) {
    store
        .store()
        .put(&object_path(store, relative), PutPayload::from(json))
        .await
        .expect("put");
}

/// Records a full backup's metadata (its snapshot object is not needed to
/// choose it).
async fn record_full(store: &BackupStore, backup: &BackupMetadata) {
    let json = serde_json::to_vec(backup).expect("json");
    put_json(store, &backup.metadata_name(), json).await;
}

/// Records the metadata of segments after `base` covering each span.
async fn record_segments(store: &BackupStore, base: &BackupMetadata, spans: &[(i64, i64)]) {
    for &(first, last) in spans {
        let object = segment_object_name(&base.name(), first, last);
        let segment = SegmentMetadata {
            format: SEGMENT_FORMAT,
            base: base.name(),
            base_revision: base.revision,
            cluster_id: base.cluster_id.clone(),
            first_revision: first,
            last_revision: last,
            events: (last - first + 1) as u64,
            object: object.clone(),
            compression: "zstd".into(),
            encryption: None,
            encoded_bytes: 1,
            stored_bytes: 1,
            stored_sha256: String::new(),
            opened_at: base.started_at,
            closed_at: base.started_at,
        };
        let json = serde_json::to_vec(&segment).expect("json");
        put_json(store, &segment_metadata_name(&object), json).await;
    }
}

#[test]
fn the_furthest_reach_wins_over_the_backup_started_last() {
    let chain_base = full("c1", 101, 0);
    let copy = full("c1", 101, 5);
    let chosen = furthest([reach(&chain_base, 401), reach(&copy, 101)], None).expect("chosen");
    assert_eq!(chosen.backup, &chain_base);
}

#[test]
fn at_equal_reach_the_newer_full_backup_wins_then_the_later_one() {
    let chain_base = full("c1", 101, 0);
    let later_full = full("c1", 401, 60_000);
    let chosen = furthest([reach(&chain_base, 401), reach(&later_full, 401)], None);
    assert_eq!(chosen.expect("chosen").backup, &later_full);

    let first = full("c1", 101, 0);
    let second = full("c1", 101, 5);
    let chosen = furthest([reach(&second, 101), reach(&first, 101)], None);
    assert_eq!(chosen.expect("chosen").backup, &second);
}

#[test]
fn a_wanted_revision_caps_every_reach() {
    let early = full("c1", 101, 0);
    let late = full("c1", 200, 30_000);
    // Both reach 250: the newer full backup has less to replay.
    let chosen = furthest([reach(&early, 401), reach(&late, 300)], Some(250));
    assert_eq!(chosen.expect("chosen").backup, &late);
}

#[test]
fn only_the_newest_clusters_backups_are_eligible() {
    let earlier_cluster = full("old", 9_000, 0);
    let current = full("new", 50, 60_000);
    let backups = [earlier_cluster, current.clone()];
    assert_eq!(eligible(&backups, None), vec![&current]);
}

#[test]
fn a_wanted_revision_leaves_out_later_full_backups_or_keeps_the_oldest() {
    let early = full("c1", 101, 0);
    let late = full("c1", 401, 60_000);
    let backups = [late.clone(), early.clone()];
    assert_eq!(eligible(&backups, Some(300)), vec![&early]);
    assert_eq!(eligible(&backups, None), vec![&early, &late]);
    // Nothing at or before revision 50: the oldest is kept, for the
    // restore to refuse the revision naming it.
    assert_eq!(eligible(&backups, Some(50)), vec![&early]);
    assert!(eligible(&[], None).is_empty());
}

#[tokio::test]
async fn a_copy_started_after_a_chains_base_does_not_hide_the_chains_writes() {
    // The scenario of two schedules sharing a folder: the continuous one's
    // full backup at revision 101 and segments up to 401; a scheduled copy
    // at the same revision started 5 ms later.
    let store = store();
    let chain_base = full("c1", 101, 0);
    let copy = full("c1", 101, 5);
    record_full(&store, &chain_base).await;
    record_segments(&store, &chain_base, &[(102, 250), (251, 401)]).await;
    record_full(&store, &copy).await;
    let chosen = backup_for_restore(&store, None).await.expect("chosen");
    assert_eq!(chosen, chain_base);
    // Up to revision 200, the chain's base too.
    let chosen = backup_for_restore(&store, Some(200)).await.expect("chosen");
    assert_eq!(chosen, chain_base);
    // A later full backup at the chain's end restores as much with nothing
    // to replay.
    let later = full("c1", 401, 60_000);
    record_full(&store, &later).await;
    let chosen = backup_for_restore(&store, None).await.expect("chosen");
    assert_eq!(chosen, later);
}

#[tokio::test]
async fn a_hole_in_a_chain_stops_its_reach() {
    let store = store();
    let chain_base = full("c1", 101, 0);
    let copy = full("c1", 150, 30_000);
    record_full(&store, &chain_base).await;
    // Revisions 121..=129 are in no segment: the chain reaches 120 only,
    // although a segment's name says 401.
    record_segments(&store, &chain_base, &[(102, 120), (130, 401)]).await;
    record_full(&store, &copy).await;
    let chosen = backup_for_restore(&store, None).await.expect("chosen");
    assert_eq!(chosen, copy);
}

#[tokio::test]
async fn an_empty_folder_is_not_found() {
    let error = backup_for_restore(&store(), None)
        .await
        .expect_err("nothing to restore");
    assert!(matches!(error, BackupError::NotFound(_)), "{error}");
}
