//! Full backups to Google Cloud Storage, against a GCS server on loopback:
//! the pinned `tools/gcs-server` (fake-gcs-server, plus the XML API writes
//! it lacks) built by `tools/build-upstream.sh`. The destination is what a
//! user would write (bucket, prefix, `endpoint`, `credentialsSecret`) and
//! the Secret holds a service-account key file as Google issues them, with
//! a fresh RSA key: the client signs its own bearer tokens with it, as in
//! production. Multipart upload of a snapshot larger than one part,
//! listing, verified download and restore with the pinned `etcdutl`,
//! retention, a corrupted object refused, a missing bucket reported
//! clearly.

use std::collections::BTreeMap;
use std::process::Command;

use etcd_operator::api::{BackupDestination, GcsDestination};
use etcd_operator::backup::{BackupStore, keys};

use test_kit::backup_scenarios as scenarios;
use test_kit::object_store_server::{ServerProcess, bucket_server};

const BUCKET: &str = "etcd-backups";

/// fake-gcs-server with the bucket [`BUCKET`] created.
async fn gcs_server() -> ServerProcess {
    bucket_server("gcs-server", BUCKET).await
}

/// A service-account key file of the shape Google issues, with a new
/// 2048-bit RSA key (PKCS#8 PEM from `openssl genpkey`).
fn service_account_key() -> String {
    let output = Command::new("openssl")
        .args([
            "genpkey",
            "-algorithm",
            "RSA",
            "-pkeyopt",
            "rsa_keygen_bits:2048",
        ])
        .output()
        .expect("openssl");
    assert!(
        output.status.success(),
        "openssl genpkey: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::json!({
        "type": "service_account",
        "project_id": "etcd-backup-tests",
        "private_key_id": "0123456789abcdef",
        "private_key": String::from_utf8(output.stdout).expect("pem"),
        "client_email": "etcd-backups@etcd-backup-tests.iam.gserviceaccount.com",
        "client_id": "100000000000000000001",
    })
    .to_string()
}

fn gcs_destination(endpoint: &str, bucket: &str) -> BackupDestination {
    BackupDestination {
        gcs: Some(GcsDestination {
            bucket: bucket.to_string(),
            prefix: Some("etcd".to_string()),
            endpoint: Some(endpoint.to_string()),
            credentials_secret: Some("gcs-credentials".to_string()),
        }),
        ..BackupDestination::default()
    }
}

fn gcs_store(server: &ServerProcess, bucket: &str) -> BackupStore {
    let credentials =
        BTreeMap::from([(keys::GCS_SERVICE_ACCOUNT.to_string(), service_account_key())]);
    BackupStore::open(
        &gcs_destination(&server.url(), bucket),
        "prod",
        "main",
        &credentials,
    )
    .expect("gcs store")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_multipart_backup_in_gcs_restores_every_key() {
    let server = gcs_server().await;
    let prefix = format!("gs://{BUCKET}/etcd/prod/main/full-");
    scenarios::a_multipart_backup_restores_every_key(&gcs_store(&server, BUCKET), &prefix).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retention_in_gcs_keeps_the_newest() {
    let server = gcs_server().await;
    scenarios::retention_keeps_the_newest(&gcs_store(&server, BUCKET)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_gcs_bucket_is_a_configuration_error_that_names_it() {
    let server = gcs_server().await;
    let store = gcs_store(&server, "no-such-bucket");
    // The client percent-encodes the bucket in the URL (`-` too); GCS's
    // message does not name the bucket, its code says what is wrong.
    scenarios::a_missing_location_is_a_configuration_error(
        &store,
        &["no%2Dsuch%2Dbucket", "NoSuchBucket"],
    )
    .await;
}
