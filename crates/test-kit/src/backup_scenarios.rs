//! The checks every object-store destination must pass, against real etcd
//! processes and whichever store the test opened (S3, GCS, Azure): a
//! multipart backup restored with the pinned `etcdutl` with every key,
//! retention, a corrupted object refused, a missing bucket or container
//! reported as a configuration error that names it; and the destinations
//! the backup tests write to.

use std::collections::BTreeMap;

use std::path::Path;

use etcd_operator::backup::{
    BackupError, BackupErrorCategory, BackupStore, BackupWriter, PART_SIZE, SnapshotOptions,
    TakenBackup, apply_retention, download_backup, keys, list_backups, take_backup, verify_backup,
};
use etcd_operator_api::api::{BackupDestination, LocalDestination, S3Destination};
use object_store::{ObjectStoreExt, PutPayload};

use crate::etcd_data::{count_under, incompressible};
use crate::etcd_process::{LocalCluster, restore_and_start};

/// A local-path destination in `root/backups`.
pub fn local_destination(root: &Path) -> BackupDestination {
    BackupDestination {
        local: Some(LocalDestination {
            path: root.join("backups").display().to_string(),
        }),
        ..BackupDestination::default()
    }
}

/// The local-path destination in `root/backups` for cluster `prod/main`.
pub fn local_store(root: &Path) -> BackupStore {
    BackupStore::open(&local_destination(root), "prod", "main", &BTreeMap::new())
        .expect("local store")
}

/// The schedule the backup tests write as: `EtcdBackupSchedule
/// prod/<name>`.
pub fn schedule_writer(name: &str) -> BackupWriter {
    BackupWriter {
        kind: "EtcdBackupSchedule".to_string(),
        namespace: "prod".to_string(),
        name: name.to_string(),
        uid: format!("uid-of-{name}"),
    }
}

/// The snapshot options of the tests' schedule `prod/nightly`.
pub fn nightly_options() -> SnapshotOptions {
    SnapshotOptions::default().written_by(schedule_writer("nightly"))
}

/// A full backup of cluster `prod/main` served by `endpoints`, with the
/// default snapshot options, written by schedule `prod/nightly`.
pub async fn backup_of(
    store: &BackupStore,
    endpoints: &[String],
) -> Result<TakenBackup, BackupError> {
    take_backup(store, endpoints, "prod", "main", &nightly_options()).await
}

/// The S3 server at `url` as a user's destination (bucket `bucket`, prefix
/// `etcd`, path-style requests) for cluster `namespace/cluster`, opened
/// with the keys its Secret would hold.
pub fn s3_store(
    url: &str,
    bucket: &str,
    namespace: &str,
    cluster: &str,
) -> Result<BackupStore, etcd_operator::backup::BackupError> {
    let destination = BackupDestination {
        s3: Some(S3Destination {
            bucket: bucket.to_string(),
            prefix: Some("etcd".to_string()),
            endpoint: Some(url.to_string()),
            region: None,
            credentials_secret: Some("s3-credentials".to_string()),
            force_path_style: true,
        }),
        ..BackupDestination::default()
    };
    let credentials = BTreeMap::from([
        (keys::S3_ACCESS_KEY_ID.to_string(), "test".to_string()),
        (
            keys::S3_SECRET_ACCESS_KEY.to_string(),
            "test-secret".to_string(),
        ),
    ]);
    BackupStore::open(&destination, namespace, cluster, &credentials)
}

/// A 3-member cluster with 1,200 keys of 16 KiB (about 20 MB stored, more
/// than two parts) backed up to `store` for `prod/main`; the backup is
/// listed, downloaded, restored with `etcdutl` and served with every key;
/// then its object is corrupted in the store and verification refuses it.
/// `location_prefix` is what the backup's location must start with.
pub async fn a_multipart_backup_restores_every_key(store: &BackupStore, location_prefix: &str) {
    let cluster = LocalCluster::start(3).await;
    let mut client = cluster.client().await;
    let keys_written = 1200;
    for i in 0..keys_written {
        client
            .put(format!("key-{i:06}"), incompressible(i, 16 * 1024), None)
            .await
            .expect("put");
    }

    let taken = backup_of(store, &cluster.endpoints())
        .await
        .expect("backup");
    let metadata = taken.metadata.clone();
    assert!(
        metadata.stored_bytes > 2 * PART_SIZE as u64,
        "spans several parts: {metadata:?}"
    );
    assert!(
        taken.location.starts_with(location_prefix),
        "{} does not start with {location_prefix}",
        taken.location
    );
    eprintln!(
        "backup to {}: {} bytes snapshot, {} stored, {:?}",
        taken.location, metadata.snapshot_bytes, metadata.stored_bytes, taken.duration
    );
    assert_eq!(
        list_backups(store).await.expect("list"),
        vec![metadata.clone()]
    );
    verify_backup(store, &metadata).await.expect("verify");

    let root = tempfile::tempdir().expect("tempdir");
    let target = root.path().join("restore.db");
    download_backup(store, &metadata, &target)
        .await
        .expect("download");
    drop(cluster);
    let restored = restore_and_start(&target, root.path()).await;
    let mut client = restored.client().await;
    assert_eq!(count_under(&mut client, "key-").await, keys_written as i64);
    for i in 0..keys_written {
        let response = client.get(format!("key-{i:06}"), None).await.expect("get");
        assert_eq!(
            response.kvs()[0].value(),
            incompressible(i, 16 * 1024),
            "key-{i:06}"
        );
    }

    // A corrupted object in the store is refused, naming it.
    let path = store.path(&metadata.object);
    let mut bytes = store
        .store()
        .get(&path)
        .await
        .expect("get")
        .bytes()
        .await
        .expect("bytes")
        .to_vec();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0x01;
    store
        .store()
        .put(&path, PutPayload::from(bytes))
        .await
        .expect("overwrite");
    let error = verify_backup(store, &metadata)
        .await
        .expect_err("corrupt object refused");
    assert_eq!(error.category(), BackupErrorCategory::Corrupt, "{error}");
    assert!(error.to_string().contains(&store.url(&path)), "{error}");
}

/// Three backups of a 1-member cluster, retention by count 1: the newest
/// is kept intact, the two others are gone.
pub async fn retention_keeps_the_newest(store: &BackupStore) {
    let cluster = LocalCluster::start(1).await;
    let mut client = cluster.client().await;
    let mut taken = Vec::new();
    for round in 0..3 {
        client
            .put(format!("round-{round}"), "x", None)
            .await
            .expect("put");
        taken.push(
            backup_of(store, &cluster.endpoints())
                .await
                .expect("backup")
                .metadata,
        );
    }
    assert_eq!(list_backups(store).await.expect("list").len(), 3);
    let outcome = apply_retention(
        store,
        &schedule_writer("nightly"),
        1,
        None,
        &[],
        chrono::Utc::now(),
    )
    .await
    .expect("retention");
    assert_eq!((outcome.kept, outcome.deleted.len()), (1, 2));
    let left = list_backups(store).await.expect("list");
    assert_eq!(left, vec![taken[2].clone()]);
    verify_backup(store, &left[0])
        .await
        .expect("kept backup intact");
    for deleted in &taken[..2] {
        let gone = store.store().head(&store.path(&deleted.object)).await;
        assert!(
            matches!(gone, Err(object_store::Error::NotFound { .. })),
            "{} still stored: {gone:?}",
            deleted.object
        );
    }
}

/// A backup into a bucket or container that does not exist fails as a
/// configuration error (wait for a spec change, no quick retries) whose
/// message holds each of `must_contain` (the name, the service's code).
pub async fn a_missing_location_is_a_configuration_error(
    store: &BackupStore,
    must_contain: &[&str],
) {
    let cluster = LocalCluster::start(1).await;
    let error = backup_of(store, &cluster.endpoints())
        .await
        .expect_err("no bucket or container");
    eprintln!("{error}");
    assert_eq!(
        error.category(),
        BackupErrorCategory::Configuration,
        "{error}"
    );
    for text in must_contain {
        assert!(error.to_string().contains(text), "no {text:?} in: {error}");
    }
}
