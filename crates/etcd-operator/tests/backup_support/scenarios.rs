//! The checks every object-store destination must pass, against real etcd
//! processes and whichever store the test opened (S3, GCS, Azure): a
//! multipart backup restored with the pinned `etcdutl` with every key,
//! retention, a corrupted object refused, a missing bucket or container
//! reported as a configuration error that names it.

use etcd_client::GetOptions;
use etcd_operator::backup::{
    BackupErrorCategory, BackupStore, PART_SIZE, SnapshotOptions, apply_retention, download_backup,
    list_backups, take_backup, verify_backup,
};
use object_store::{ObjectStoreExt, PutPayload};

use super::{EtcdCluster, restore_and_start};

/// Values that zstd cannot shrink much, so the stored object spans parts.
pub fn incompressible(i: usize, len: usize) -> Vec<u8> {
    let mut state = (i as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    (0..len)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state & 0xff) as u8
        })
        .collect()
}

/// A 3-member cluster with 1,200 keys of 16 KiB (about 20 MB stored, more
/// than two parts) backed up to `store` for `prod/main`; the backup is
/// listed, downloaded, restored with `etcdutl` and served with every key;
/// then its object is corrupted in the store and verification refuses it.
/// `location_prefix` is what the backup's location must start with.
pub async fn a_multipart_backup_restores_every_key(store: &BackupStore, location_prefix: &str) {
    let cluster = EtcdCluster::start(3).await;
    let mut client = cluster.client().await;
    let keys_written = 1200;
    for i in 0..keys_written {
        client
            .put(format!("key-{i:06}"), incompressible(i, 16 * 1024), None)
            .await
            .expect("put");
    }

    let taken = take_backup(
        store,
        &cluster.endpoints(),
        "prod",
        "main",
        &SnapshotOptions::default(),
    )
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
    let count = client
        .get(
            "key-",
            Some(GetOptions::new().with_prefix().with_count_only()),
        )
        .await
        .expect("count")
        .count();
    assert_eq!(count, keys_written as i64);
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
    let cluster = EtcdCluster::start(1).await;
    let mut client = cluster.client().await;
    let mut taken = Vec::new();
    for round in 0..3 {
        client
            .put(format!("round-{round}"), "x", None)
            .await
            .expect("put");
        taken.push(
            take_backup(
                store,
                &cluster.endpoints(),
                "prod",
                "main",
                &SnapshotOptions::default(),
            )
            .await
            .expect("backup")
            .metadata,
        );
    }
    assert_eq!(list_backups(store).await.expect("list").len(), 3);
    let outcome = apply_retention(store, 1, None, chrono::Utc::now())
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
    let cluster = EtcdCluster::start(1).await;
    let error = take_backup(
        store,
        &cluster.endpoints(),
        "prod",
        "main",
        &SnapshotOptions::default(),
    )
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
