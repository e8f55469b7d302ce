//! Full backups against a real S3-compatible server on loopback: the
//! pinned `tools/s3-server` (gofakes3) built by `tools/build-upstream.sh`.
//! Multipart upload of a snapshot larger than one part, listing,
//! verified download and restore with the pinned `etcdutl`, retention,
//! a corrupted object refused, a wrong bucket reported clearly.

mod backup_support;

use std::collections::BTreeMap;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use etcd_client::GetOptions;
use etcd_operator::api::{BackupDestination, S3Destination};
use etcd_operator::backup::{
    BackupErrorCategory, BackupStore, PART_SIZE, SnapshotOptions, apply_retention, download_backup,
    keys, list_backups, take_backup, verify_backup,
};
use object_store::{ObjectStoreExt, PutPayload};

use backup_support::{EtcdCluster, eventually, free_port, restore_and_start, upstream_set};

const BUCKET: &str = "etcd-backups";

/// The S3 server process; killed when dropped.
struct S3Server {
    endpoint: String,
    child: Child,
}

impl S3Server {
    async fn start() -> Self {
        let binary = upstream_set("s3-server").join("s3-server");
        let address = format!("127.0.0.1:{}", free_port());
        let child = Command::new(binary)
            .args(["-addr", &address, "-buckets", BUCKET])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start s3-server");
        let server = Self {
            endpoint: format!("http://{address}"),
            child,
        };
        eventually("s3-server listens", Duration::from_secs(30), || async {
            tokio::net::TcpStream::connect(&address).await
        })
        .await
        .expect("s3-server up");
        server
    }

    fn destination(&self, bucket: &str) -> BackupDestination {
        BackupDestination {
            s3: Some(S3Destination {
                bucket: bucket.to_string(),
                prefix: Some("etcd".to_string()),
                endpoint: Some(self.endpoint.clone()),
                region: None,
                credentials_secret: Some("s3-credentials".to_string()),
                force_path_style: true,
            }),
            ..BackupDestination::default()
        }
    }

    fn store(&self, bucket: &str) -> BackupStore {
        let credentials = BTreeMap::from([
            (keys::S3_ACCESS_KEY_ID.to_string(), "test".to_string()),
            (
                keys::S3_SECRET_ACCESS_KEY.to_string(),
                "test-secret".to_string(),
            ),
        ]);
        BackupStore::open(&self.destination(bucket), "prod", "main", &credentials)
            .expect("s3 store")
    }
}

impl Drop for S3Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Values that zstd cannot shrink much, so the stored object spans parts.
fn incompressible(i: usize, len: usize) -> Vec<u8> {
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_multipart_backup_in_s3_restores_every_key() {
    let server = S3Server::start().await;
    let cluster = EtcdCluster::start(3).await;
    let mut client = cluster.client().await;
    let keys_written = 1200;
    for i in 0..keys_written {
        client
            .put(format!("key-{i:06}"), incompressible(i, 16 * 1024), None)
            .await
            .expect("put");
    }

    let store = server.store(BUCKET);
    let taken = take_backup(
        &store,
        &cluster.endpoints(),
        "prod",
        "main",
        &SnapshotOptions::default(),
    )
    .await
    .expect("backup to s3");
    let metadata = taken.metadata.clone();
    assert!(
        metadata.stored_bytes > 2 * PART_SIZE as u64,
        "spans several parts: {metadata:?}"
    );
    assert!(
        taken
            .location
            .starts_with(&format!("s3://{BUCKET}/etcd/prod/main/full-")),
        "{}",
        taken.location
    );
    eprintln!(
        "s3 backup: {} bytes snapshot, {} stored, {:?}",
        metadata.snapshot_bytes, metadata.stored_bytes, taken.duration
    );
    assert_eq!(
        list_backups(&store).await.expect("list"),
        vec![metadata.clone()]
    );

    let root = tempfile::tempdir().expect("tempdir");
    let target = root.path().join("restore.db");
    download_backup(&store, &metadata, &target)
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
    let last = client
        .get(format!("key-{:06}", keys_written - 1), None)
        .await
        .expect("get");
    assert_eq!(
        last.kvs()[0].value(),
        incompressible(keys_written - 1, 16 * 1024)
    );

    // A corrupted object in the bucket is refused.
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
    let error = verify_backup(&store, &metadata)
        .await
        .expect_err("corrupt object refused");
    assert_eq!(error.category(), BackupErrorCategory::Corrupt, "{error}");
    assert!(error.to_string().contains("s3://"), "{error}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retention_in_s3_keeps_the_newest() {
    let server = S3Server::start().await;
    let cluster = EtcdCluster::start(1).await;
    let mut client = cluster.client().await;
    let store = server.store(BUCKET);
    for round in 0..3 {
        client
            .put(format!("round-{round}"), "x", None)
            .await
            .expect("put");
        take_backup(
            &store,
            &cluster.endpoints(),
            "prod",
            "main",
            &SnapshotOptions::default(),
        )
        .await
        .expect("backup");
    }
    let outcome = apply_retention(&store, 1, None, chrono::Utc::now())
        .await
        .expect("retention");
    assert_eq!((outcome.kept, outcome.deleted.len()), (1, 2));
    let left = list_backups(&store).await.expect("list");
    assert_eq!(left.len(), 1);
    verify_backup(&store, &left[0])
        .await
        .expect("kept backup intact");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_bucket_is_a_configuration_error_that_names_it() {
    let server = S3Server::start().await;
    let cluster = EtcdCluster::start(1).await;
    let store = server.store("no-such-bucket");
    let error = take_backup(
        &store,
        &cluster.endpoints(),
        "prod",
        "main",
        &SnapshotOptions::default(),
    )
    .await
    .expect_err("no bucket");
    eprintln!("{error}");
    assert_eq!(
        error.category(),
        BackupErrorCategory::Configuration,
        "{error}"
    );
    assert!(error.to_string().contains("no-such-bucket"), "{error}");
}
