//! Full backups against a real S3-compatible server on loopback: the
//! pinned `tools/s3-server` (gofakes3) built by `tools/build-upstream.sh`.
//! Multipart upload of a snapshot larger than one part, listing,
//! verified download and restore with the pinned `etcdutl`, retention,
//! a corrupted object refused, a wrong bucket reported clearly.

use etcd_operator::backup::BackupStore;
use test_kit::backup_scenarios::{self as scenarios, s3_store as s3_store_at};
use test_kit::object_store_server::{ServerProcess, bucket_server};

const BUCKET: &str = "etcd-backups";

/// gofakes3 with the bucket [`BUCKET`] created.
async fn s3_server() -> ServerProcess {
    bucket_server("s3-server", BUCKET).await
}

/// The destination a user would write for this server, opened with the
/// keys its Secret would hold.
fn s3_store(server: &ServerProcess, bucket: &str) -> BackupStore {
    s3_store_at(&server.url(), bucket, "prod", "main").expect("s3 store")
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
