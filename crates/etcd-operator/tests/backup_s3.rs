//! Full backups against a real S3-compatible server on loopback: the
//! pinned `tools/s3-server` (gofakes3) built by `tools/build-upstream.sh`.
//! Multipart upload of a snapshot larger than one part, listing,
//! verified download and restore with the pinned `etcdutl`, retention,
//! a corrupted object refused, a wrong bucket reported clearly.

mod backup_support;

use std::collections::BTreeMap;
use std::process::Command;

use etcd_operator::api::{BackupDestination, S3Destination};
use etcd_operator::backup::{BackupStore, keys};

use backup_support::scenarios;
use backup_support::server::ServerProcess;
use backup_support::upstream_set;

const BUCKET: &str = "etcd-backups";

/// gofakes3 with the bucket [`BUCKET`] created.
async fn s3_server() -> ServerProcess {
    ServerProcess::start("s3-server", |address, _| {
        let mut command = Command::new(upstream_set("s3-server").join("s3-server"));
        command.args(["-addr", address, "-buckets", BUCKET]);
        command
    })
    .await
}

/// The destination a user would write for this server, opened with the
/// keys its Secret would hold.
fn s3_store(server: &ServerProcess, bucket: &str) -> BackupStore {
    let destination = BackupDestination {
        s3: Some(S3Destination {
            bucket: bucket.to_string(),
            prefix: Some("etcd".to_string()),
            endpoint: Some(server.url()),
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
    BackupStore::open(&destination, "prod", "main", &credentials).expect("s3 store")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_multipart_backup_in_s3_restores_every_key() {
    let server = s3_server().await;
    let prefix = format!("s3://{BUCKET}/etcd/prod/main/full-");
    scenarios::a_multipart_backup_restores_every_key(&s3_store(&server, BUCKET), &prefix).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retention_in_s3_keeps_the_newest() {
    let server = s3_server().await;
    scenarios::retention_keeps_the_newest(&s3_store(&server, BUCKET)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_bucket_is_a_configuration_error_that_names_it() {
    let server = s3_server().await;
    let store = s3_store(&server, "no-such-bucket");
    scenarios::a_missing_location_is_a_configuration_error(&store, &["no-such-bucket"]).await;
}
