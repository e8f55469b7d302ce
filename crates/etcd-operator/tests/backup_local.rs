//! Full backups of real etcd clusters into the local-path destination:
//! taken from a follower, verified, restored with the pinned `etcdutl` and
//! served again with every key; corrupted and truncated backups refused;
//! retention by count, of each schedule's own backups only. No mocks.

use etcd_operator::backup::{
    BackupError, BackupErrorCategory, SnapshotOptions, apply_retention, download_backup,
    list_backups, take_backup, verify_backup,
};

use test_kit::backup_scenarios::{backup_of, local_store, schedule_writer};
use test_kit::etcd_data::{count_under, write_keys};
use test_kit::etcd_process::{LocalCluster, restore_and_start};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backup_from_a_follower_restores_every_key_with_etcdutl() {
    let cluster = LocalCluster::start(3).await;
    let mut client = cluster.client().await;
    let last_revision = write_keys(&mut client, 500, 200).await;
    let status = client.status().await.expect("status");
    let leader = status.leader();

    let root = tempfile::tempdir().expect("tempdir");
    let store = local_store(root.path());
    let taken = backup_of(&store, &cluster.endpoints())
        .await
        .expect("backup");

    assert_ne!(
        taken.source.member_id, leader,
        "a follower serves the snapshot"
    );
    let metadata = &taken.metadata;
    assert!(metadata.revision >= last_revision, "{metadata:?}");
    assert_eq!(
        metadata.cluster_id,
        format!("{:x}", status.header().expect("header").cluster_id())
    );
    assert!(metadata.etcd_version.starts_with("3.6."), "{metadata:?}");
    assert!(metadata.snapshot_bytes > 100_000, "{metadata:?}");
    assert!(
        metadata.stored_bytes < metadata.snapshot_bytes,
        "compressed"
    );
    assert_eq!(metadata.sha256.len(), 64);
    assert!(taken.location.starts_with("file://"));
    assert!(taken.location.ends_with(".db.zst"));
    let snapshot_file = root.path().join("backups/prod/main").join(&metadata.object);
    assert_eq!(
        std::fs::metadata(&snapshot_file).expect("stored").len(),
        metadata.stored_bytes
    );

    let listed = list_backups(&store).await.expect("list");
    assert_eq!(listed, vec![metadata.clone()]);

    let target = root.path().join("restore.db");
    let verified = download_backup(&store, metadata, &target)
        .await
        .expect("download");
    assert_eq!(verified.size, metadata.snapshot_bytes);
    drop(cluster);

    let restored = restore_and_start(&target, root.path()).await;
    let mut client = restored.client().await;
    assert_eq!(count_under(&mut client, "key-").await, 500);
    let one = client.get("key-000499", None).await.expect("get");
    assert_eq!(one.kvs()[0].value_str().expect("utf8").len(), 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn corrupted_or_truncated_backups_are_refused_before_a_restore_uses_them() {
    let cluster = LocalCluster::start(1).await;
    let mut client = cluster.client().await;
    write_keys(&mut client, 200, 100).await;
    let root = tempfile::tempdir().expect("tempdir");
    let store = local_store(root.path());
    let taken = backup_of(&store, &cluster.endpoints())
        .await
        .expect("backup");
    let metadata = taken.metadata;
    verify_backup(&store, &metadata)
        .await
        .expect("intact backup verifies");
    let object = root.path().join("backups/prod/main").join(&metadata.object);
    let intact = std::fs::read(&object).expect("read");

    // One flipped byte in the middle of the compressed object.
    let mut flipped = intact.clone();
    let middle = flipped.len() / 2;
    flipped[middle] ^= 0x55;
    std::fs::write(&object, &flipped).expect("corrupt");
    let target = root.path().join("restore.db");
    let error = download_backup(&store, &metadata, &target)
        .await
        .expect_err("corrupt backup refused");
    assert_corrupt(&error);
    assert!(!target.exists(), "nothing left where a restore would look");
    assert!(!target.with_extension("partial").exists());

    // Truncated: the last 1000 bytes missing.
    std::fs::write(&object, &intact[..intact.len() - 1000]).expect("truncate");
    let error = verify_backup(&store, &metadata)
        .await
        .expect_err("truncated backup refused");
    assert_corrupt(&error);

    // A metadata that lies about the content (same object, other hash).
    std::fs::write(&object, &intact).expect("restore intact");
    let mut lying = metadata.clone();
    lying.sha256 = "0".repeat(64);
    let error = verify_backup(&store, &lying).await.expect_err("mismatch");
    assert_corrupt(&error);
    assert!(error.to_string().contains("the metadata says"), "{error}");
}

fn assert_corrupt(error: &BackupError) {
    assert_eq!(error.category(), BackupErrorCategory::Corrupt, "{error}");
    let message = error.to_string();
    assert!(message.contains("is corrupt"), "{message}");
    assert!(message.contains(".db.zst"), "names the object: {message}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retention_keeps_the_newest_backups() {
    let cluster = LocalCluster::start(1).await;
    let mut client = cluster.client().await;
    let root = tempfile::tempdir().expect("tempdir");
    let store = local_store(root.path());
    let mut revisions = Vec::new();
    for round in 0..4 {
        write_keys(&mut client, 10 * (round + 1), 10).await;
        let taken = backup_of(&store, &cluster.endpoints())
            .await
            .expect("backup");
        revisions.push(taken.metadata.revision);
    }
    let outcome = apply_retention(
        &store,
        &schedule_writer("nightly"),
        2,
        None,
        &[],
        chrono::Utc::now(),
    )
    .await
    .expect("retention");
    assert_eq!(outcome.kept, 2);
    assert_eq!(outcome.deleted.len(), 2);
    let left: Vec<i64> = list_backups(&store)
        .await
        .expect("list")
        .iter()
        .map(|b| b.revision)
        .collect();
    assert_eq!(left, revisions[2..]);
    let files = std::fs::read_dir(root.path().join("backups/prod/main"))
        .expect("dir")
        .count();
    assert_eq!(files, 4, "two snapshots and their metadata");
}

/// Two schedules back up one cluster into one destination, `count: 1`
/// each, in turns; a backup from before writers were recorded sits there
/// too. After each schedule's retention, each has exactly its newest
/// backup, and the unattributed one is untouched.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn neighbouring_schedules_keep_their_own_newest_backup() {
    let cluster = LocalCluster::start(1).await;
    let mut client = cluster.client().await;
    let root = tempfile::tempdir().expect("tempdir");
    let store = local_store(root.path());
    let schedules = [schedule_writer("nightly"), schedule_writer("hourly")];
    let legacy = take_backup(
        &store,
        &cluster.endpoints(),
        "prod",
        "main",
        &SnapshotOptions::default(),
    )
    .await
    .expect("backup without a writer")
    .metadata;
    let mut newest = [None, None];
    for round in 0..3 {
        for (index, writer) in schedules.iter().enumerate() {
            client
                .put(format!("round-{round}-{index}"), "x", None)
                .await
                .expect("put");
            let options = SnapshotOptions::default().written_by(writer.clone());
            let taken = take_backup(&store, &cluster.endpoints(), "prod", "main", &options)
                .await
                .expect("backup");
            assert_eq!(taken.metadata.written_by.as_ref(), Some(writer));
            let outcome = apply_retention(&store, writer, 1, None, &[], chrono::Utc::now())
                .await
                .expect("retention");
            assert_eq!(outcome.kept, 1, "{writer}: {outcome:?}");
            assert_eq!(outcome.unattributed, 1, "{writer}: {outcome:?}");
            assert_eq!(outcome.deleted.len(), usize::from(round > 0), "{outcome:?}");
            newest[index] = Some(taken.metadata);
        }
    }
    let mut left = list_backups(&store).await.expect("list");
    left.sort_by_key(|b| b.started_at);
    let mut expected: Vec<_> = std::iter::once(legacy)
        .chain(newest.into_iter().flatten())
        .collect();
    expected.sort_by_key(|b| b.started_at);
    assert_eq!(left, expected);
    for backup in &left {
        verify_backup(&store, backup).await.expect("intact");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_reachable_member_is_a_transient_error_naming_the_endpoints() {
    let root = tempfile::tempdir().expect("tempdir");
    let store = local_store(root.path());
    let endpoint = format!("http://127.0.0.1:{}", test_kit::loopback::free_port());
    let error = take_backup(
        &store,
        std::slice::from_ref(&endpoint),
        "prod",
        "main",
        &SnapshotOptions::default(),
    )
    .await
    .expect_err("nothing to back up from");
    assert_eq!(error.category(), BackupErrorCategory::Transient);
    assert!(error.to_string().contains(&endpoint), "{error}");
    assert!(list_backups(&store).await.expect("list").is_empty());
}
