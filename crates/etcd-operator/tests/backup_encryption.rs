//! Client-side encryption of full backups and incremental segments,
//! against real etcd processes and the pinned `etcdutl`: the stored objects
//! hold no plaintext, a download with the key restores every key, a wrong
//! or missing key is refused before anything is read or created, a
//! tampered or truncated object is refused before a restore could use it,
//! and a new key starts a new chain from a full backup. No mocks.

use std::path::Path;
use std::time::Duration;

use etcd_operator::backup::encryption::SCHEME;
use etcd_operator::backup::incremental::{
    IncrementalNotice, IncrementalOptions, fixed_endpoints, load_segment, spawn,
};
use etcd_operator::backup::{
    BackupError, BackupErrorCategory, BackupStore, EncryptionKey, SnapshotOptions, download_backup,
    list_backups, segment_chain, take_backup, verify_backup,
};
use sha2::{Digest, Sha256};

use test_kit::backup_scenarios::{backup_of, local_store};
use test_kit::etcd_data::{count_under, write_keys};
use test_kit::etcd_process::{LocalCluster, restore_and_start};

/// A value that must never appear in what the store holds.
const MARKER: &str = "plaintext-marker-Zq8vXw3LkP0sRt7yUe2iOa9";

fn store(root: &Path, key: Option<EncryptionKey>) -> BackupStore {
    local_store(root).with_encryption(key)
}

fn contains(haystack: &[u8], needle: &str) -> bool {
    haystack
        .windows(needle.len())
        .any(|window| window == needle.as_bytes())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_encrypted_backup_hides_the_data_and_restores_every_key_with_its_key() {
    let cluster = LocalCluster::start(1).await;
    let mut client = cluster.client().await;
    write_keys(&mut client, 400, 200).await;
    client.put("marker", MARKER, None).await.expect("put");

    let root = tempfile::tempdir().expect("tempdir");
    let key_bytes: [u8; 32] = std::array::from_fn(|i| (i * 7 + 3) as u8);
    let key = EncryptionKey::from_bytes(key_bytes);
    let encrypted = store(root.path(), Some(key.clone()));
    let taken = backup_of(&encrypted, &cluster.endpoints())
        .await
        .expect("encrypted backup");
    let metadata = &taken.metadata;
    let info = metadata.encryption.as_ref().expect("recorded as encrypted");
    assert_eq!(info.scheme, SCHEME);
    assert_eq!(info.key_fingerprint, key.fingerprint());
    assert!(
        taken.location.ends_with(".db.zst.enc"),
        "{}",
        taken.location
    );

    // The stored object: ciphertext only, hashed as stored.
    let folder = root.path().join("backups/prod/main");
    let stored = std::fs::read(folder.join(&metadata.object)).expect("stored object");
    assert_eq!(stored.len() as u64, metadata.stored_bytes);
    assert_eq!(hex::encode(Sha256::digest(&stored)), metadata.stored_sha256);
    assert!(stored.starts_with(b"ETCD-ENC"));
    assert!(!contains(&stored, MARKER), "the marker is stored in clear");
    assert!(
        !contains(&stored, "key-000123"),
        "a key name is stored in clear"
    );
    let json = std::fs::read(folder.join(metadata.metadata_name())).expect("metadata");
    let key_hex = hex::encode(key_bytes);
    assert!(
        !contains(&json, &key_hex[..16]),
        "the metadata holds the key"
    );
    assert!(
        !stored.windows(32).any(|w| w == key_bytes),
        "the key is stored"
    );

    // Control: the same data without encryption shows the marker, so the
    // check above can fail.
    let plain_root = tempfile::tempdir().expect("tempdir");
    let plain = store(plain_root.path(), None);
    let plain_taken = backup_of(&plain, &cluster.endpoints())
        .await
        .expect("plain backup");
    assert_eq!(plain_taken.metadata.encryption, None);
    let plain_target = plain_root.path().join("plain.db");
    download_backup(&plain, &plain_taken.metadata, &plain_target)
        .await
        .expect("plain download");
    assert!(contains(
        &std::fs::read(&plain_target).expect("plain db"),
        MARKER
    ));

    assert_eq!(
        list_backups(&encrypted).await.expect("list"),
        vec![metadata.clone()]
    );
    let target = root.path().join("restore.db");
    let verified = download_backup(&encrypted, metadata, &target)
        .await
        .expect("download with the key");
    assert_eq!(verified.sha256, metadata.sha256);
    assert_eq!(verified.size, metadata.snapshot_bytes);
    drop(cluster);

    let restored = restore_and_start(&target, root.path()).await;
    let mut client = restored.client().await;
    assert_eq!(count_under(&mut client, "key-").await, 400);
    let marker = client.get("marker", None).await.expect("get");
    assert_eq!(marker.kvs()[0].value_str().expect("utf8"), MARKER);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_or_missing_key_is_refused_before_anything_is_read_or_created() {
    let cluster = LocalCluster::start(1).await;
    let mut client = cluster.client().await;
    write_keys(&mut client, 50, 100).await;
    let root = tempfile::tempdir().expect("tempdir");
    let key = EncryptionKey::from_bytes([1; 32]);
    let taken = take_backup(
        &store(root.path(), Some(key.clone())),
        &cluster.endpoints(),
        "prod",
        "main",
        &SnapshotOptions::default(),
    )
    .await
    .expect("backup");
    let metadata = taken.metadata;

    // The object moved away: a refusal that still names the key proves
    // the check comes before any read of it.
    let folder = root.path().join("backups/prod/main");
    let object = folder.join(&metadata.object);
    let aside = root.path().join("aside");
    std::fs::rename(&object, &aside).expect("move aside");
    let target = root.path().join("restore.db");

    let other = EncryptionKey::from_bytes([2; 32]);
    let wrong = store(root.path(), Some(other.clone()));
    let error = download_backup(&wrong, &metadata, &target)
        .await
        .expect_err("wrong key");
    assert_eq!(
        error.to_string(),
        format!(
            "backup {} was encrypted with key {}, the Secret's key is {}",
            metadata.name(),
            key.fingerprint(),
            other.fingerprint()
        )
    );
    assert_eq!(error.category(), BackupErrorCategory::Configuration);
    assert!(matches!(error, BackupError::WrongKey { .. }));
    assert!(!target.exists());
    assert!(!target.with_extension("partial").exists());

    let error = verify_backup(&store(root.path(), None), &metadata)
        .await
        .expect_err("no key");
    assert!(matches!(error, BackupError::KeyNeeded { .. }), "{error}");
    assert!(
        error.to_string().contains(&key.fingerprint()),
        "names the key needed: {error}"
    );

    std::fs::rename(&aside, &object).expect("move back");
    verify_backup(&store(root.path(), Some(key)), &metadata)
        .await
        .expect("the right key opens it");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tampered_or_truncated_encrypted_backup_is_refused_before_a_restore_uses_it() {
    let cluster = LocalCluster::start(1).await;
    let mut client = cluster.client().await;
    // Values that do not compress, so that the object spans many chunks.
    for i in 0..80u32 {
        let value: String = (0..256u32)
            .map(|j| hex::encode(Sha256::digest([i.to_be_bytes(), j.to_be_bytes()].concat())))
            .collect();
        client
            .put(format!("noise-{i:03}"), value, None)
            .await
            .expect("put");
    }
    let root = tempfile::tempdir().expect("tempdir");
    let key = EncryptionKey::from_bytes([3; 32]);
    let encrypted = store(root.path(), Some(key));
    let taken = backup_of(&encrypted, &cluster.endpoints())
        .await
        .expect("backup");
    let metadata = taken.metadata;
    let object = root.path().join("backups/prod/main").join(&metadata.object);
    let intact = std::fs::read(&object).expect("read");
    assert!(
        intact.len() > 3 * 65_552,
        "several chunks: {}",
        intact.len()
    );
    let target = root.path().join("restore.db");

    let mut flipped = intact.clone();
    let middle = flipped.len() / 2;
    flipped[middle] ^= 0x01;
    std::fs::write(&object, &flipped).expect("tamper");
    let error = download_backup(&encrypted, &metadata, &target)
        .await
        .expect_err("tampered");
    assert_corrupt(&error, "does not authenticate");
    assert!(!target.exists() && !target.with_extension("partial").exists());

    // The last chunk (whatever its size) cut off at a chunk boundary.
    let chunks_end = 36 + (intact.len() - 36 - 1) / 65_552 * 65_552;
    std::fs::write(&object, &intact[..chunks_end]).expect("truncate");
    let error = download_backup(&encrypted, &metadata, &target)
        .await
        .expect_err("truncated");
    assert_corrupt(&error, "final chunk is missing");
    assert!(!target.exists() && !target.with_extension("partial").exists());

    std::fs::write(&object, &intact).expect("intact again");
    download_backup(&encrypted, &metadata, &target)
        .await
        .expect("intact object downloads");
}

fn assert_corrupt(error: &BackupError, reason: &str) {
    assert_eq!(error.category(), BackupErrorCategory::Corrupt, "{error}");
    let message = error.to_string();
    assert!(message.contains("is corrupt: cannot decrypt"), "{message}");
    assert!(message.contains(reason), "{message}");
    assert!(
        message.contains(".db.zst.enc"),
        "names the object: {message}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn incremental_segments_are_sealed_like_their_full_backup_and_a_new_key_starts_a_new_chain() {
    let cluster = LocalCluster::start(1).await;
    let mut client = cluster.client().await;
    write_keys(&mut client, 20, 50).await;
    let root = tempfile::tempdir().expect("tempdir");
    let key = EncryptionKey::from_bytes([4; 32]);
    let encrypted = store(root.path(), Some(key.clone()));
    let options = || IncrementalOptions {
        interval: Duration::from_millis(500),
        min_back_off: Duration::from_millis(200),
        max_back_off: Duration::from_secs(2),
        ..IncrementalOptions::new("prod", "main")
    };

    let mut handle = spawn(
        encrypted.clone(),
        fixed_endpoints(cluster.endpoints()),
        options(),
    );
    let mut notices = handle.take_notices().expect("notices");
    let base = loop {
        match tokio::time::timeout(Duration::from_secs(30), notices.recv()).await {
            Ok(Some(IncrementalNotice::FullBackupTaken(taken))) => break taken.metadata,
            Ok(Some(_)) => continue,
            other => panic!("no full backup: {other:?}"),
        }
    };
    assert_eq!(
        base.encryption.as_ref().map(|i| i.key_fingerprint.clone()),
        Some(key.fingerprint())
    );
    let written = client
        .put("segment-marker", MARKER, None)
        .await
        .expect("put")
        .header()
        .expect("header")
        .revision();
    let mut progress = handle.subscribe();
    tokio::time::timeout(Duration::from_secs(30), async {
        while progress
            .borrow_and_update()
            .durable_revision
            .is_none_or(|r| r < written)
        {
            progress.changed().await.expect("watcher alive");
        }
    })
    .await
    .expect("the marker is durable");
    handle.stop(Duration::from_secs(5)).await;

    // Segments: sealed, named .enc, no plaintext, the key's fingerprint.
    let chain = segment_chain(&encrypted, &base).await.expect("chain");
    assert!(chain.gap.is_none(), "{:?}", chain.gap);
    assert!(chain.last_revision >= written);
    let mut seen_marker = false;
    for segment in &chain.segments {
        assert!(
            segment.object.ends_with(".seg.zst.enc"),
            "{}",
            segment.object
        );
        assert_eq!(
            segment
                .encryption
                .as_ref()
                .map(|i| i.key_fingerprint.clone()),
            Some(key.fingerprint())
        );
        let stored = std::fs::read(root.path().join("backups/prod/main").join(&segment.object))
            .expect("segment object");
        assert!(stored.starts_with(b"ETCD-ENC"));
        assert!(!contains(&stored, MARKER), "the marker is stored in clear");
        let events = load_segment(&encrypted, segment).await.expect("opens");
        seen_marker |= events.iter().any(|e| e.value == MARKER.as_bytes());
    }
    assert!(seen_marker, "the marker's event is in a segment");

    // Another key cannot read the chain, and says why.
    let other = EncryptionKey::from_bytes([5; 32]);
    let rotated = store(root.path(), Some(other.clone()));
    let error = segment_chain(&rotated, &base).await.expect_err("wrong key");
    assert!(matches!(error, BackupError::WrongKey { .. }), "{error}");
    assert_eq!(error.category(), BackupErrorCategory::Configuration);

    // A watcher with the new key does not extend the old chain: it starts
    // a new one from a full backup sealed with the new key.
    let mut handle = spawn(
        rotated.clone(),
        fixed_endpoints(cluster.endpoints()),
        options(),
    );
    let mut notices = handle.take_notices().expect("notices");
    let new_base = loop {
        match tokio::time::timeout(Duration::from_secs(30), notices.recv()).await {
            Ok(Some(IncrementalNotice::FullBackupTaken(taken))) => break taken.metadata,
            Ok(Some(IncrementalNotice::Following { base: name, .. })) => {
                assert_ne!(name, base.name(), "followed the chain of the old key");
            }
            Ok(Some(_)) => continue,
            other => panic!("no full backup with the new key: {other:?}"),
        }
    };
    handle.stop(Duration::from_secs(5)).await;
    assert_eq!(
        new_base
            .encryption
            .as_ref()
            .map(|i| i.key_fingerprint.clone()),
        Some(other.fingerprint())
    );
    assert!(new_base.revision >= written);
}
