//! Full backups through the store of a `persistentVolumeClaim`
//! destination: the `backup-store` server (run here on loopback over a
//! temporary directory, as its Pod runs it over the claim's mount) and the
//! operator's own client for it, opened from the credentials its Secret
//! holds. Multipart upload, listing, verified download and restore with
//! the pinned `etcdutl`, retention, and a request without the store's
//! token refused as a configuration error.

use std::collections::BTreeMap;
use std::path::Path;

use etcd_operator::api::{BackupDestination, VolumeClaimDestination};
use etcd_operator::backup::{BackupStore, keys};
use etcd_operator::pod_programs::backup_store::files::ObjectFiles;
use etcd_operator::pod_programs::backup_store::server::router;
use test_kit::backup_scenarios as scenarios;

const TOKEN: &str = "4f1d3c1e0f9a2b7c";

/// A store over `root` on a loopback port; its URL.
async fn serve(root: &Path) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind loopback");
    let address = listener.local_addr().expect("address");
    let app = router(ObjectFiles::new(root), TOKEN.to_string());
    tokio::spawn(async move { axum::serve(listener, app).await });
    format!("http://{address}")
}

fn claim_store(endpoint: &str, token: &str) -> BackupStore {
    let destination = BackupDestination {
        persistent_volume_claim: Some(VolumeClaimDestination {
            claim_name: "etcd-backups".to_string(),
            path: Some("etcd".to_string()),
        }),
        ..BackupDestination::default()
    };
    let credentials = BTreeMap::from([
        (keys::STORE_ENDPOINT.to_string(), endpoint.to_string()),
        (keys::STORE_TOKEN.to_string(), token.to_string()),
    ]);
    BackupStore::open(&destination, "prod", "main", &credentials).expect("claim store")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_multipart_backup_on_a_claim_restores_every_key_and_is_a_plain_file() {
    let root = tempfile::tempdir().expect("tempdir");
    let endpoint = serve(root.path()).await;
    let store = claim_store(&endpoint, TOKEN);
    scenarios::a_multipart_backup_restores_every_key(
        &store,
        "pvc://etcd-backups/etcd/prod/main/full-",
    )
    .await;
    let folder = root.path().join("etcd/prod/main");
    let files: Vec<String> = std::fs::read_dir(&folder)
        .expect("the cluster's folder on the volume")
        .filter_map(|entry| entry.ok()?.file_name().into_string().ok())
        .collect();
    assert!(
        files
            .iter()
            .any(|f| f.starts_with("full-") && f.ends_with(".db.zst")),
        "the snapshot is a file on the volume: {files:?}"
    );
    let scratch = root.path().join(".uploads");
    let left: Vec<_> = std::fs::read_dir(&scratch)
        .map(|entries| {
            entries
                .filter_map(Result::ok)
                .map(|e| e.file_name())
                .collect()
        })
        .unwrap_or_default();
    assert!(left.is_empty(), "no upload left behind: {left:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retention_on_a_claim_keeps_the_newest() {
    let root = tempfile::tempdir().expect("tempdir");
    let endpoint = serve(root.path()).await;
    scenarios::retention_keeps_the_newest(&claim_store(&endpoint, TOKEN)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_without_the_stores_token_is_a_configuration_error() {
    let root = tempfile::tempdir().expect("tempdir");
    let endpoint = serve(root.path()).await;
    let store = claim_store(&endpoint, "not-the-token");
    scenarios::a_missing_location_is_a_configuration_error(&store, &["AccessDenied"]).await;
    assert!(
        std::fs::read_dir(root.path())
            .map(|d| d.count())
            .unwrap_or(0)
            <= 1,
        "nothing but scratch space is written without the token"
    );
}
