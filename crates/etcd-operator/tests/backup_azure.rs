//! Full backups to Azure Blob Storage, against Azurite (Microsoft's Azure
//! Storage emulator, pinned in `tools/azurite` and installed with `npm ci`
//! by `tools/build-upstream.sh`): its Blob service only, on loopback, with
//! its data in a temporary directory. The destination is what a user would
//! write for it: `endpoint` = `http://127.0.0.1:<port>/devstoreaccount1`,
//! the account `devstoreaccount1` and its published development key in the
//! credentials Secret, so requests are signed with the Shared Key scheme
//! exactly as for a real account, and Azurite checks the signatures.
//! Multipart (block) upload of a snapshot larger than one part, listing,
//! verified download and restore with the pinned `etcdutl`, retention, a
//! corrupted blob refused, a missing container reported clearly.

use std::collections::BTreeMap;
use std::process::Command;

use etcd_operator::api::{AzureDestination, BackupDestination};
use etcd_operator::backup::{BackupErrorCategory, BackupStore, keys, list_backups};
use sha2::{Digest, Sha256};

use test_kit::backup_scenarios::{self as scenarios, backup_of};
use test_kit::etcd_process::LocalCluster;
use test_kit::object_store_server::ServerProcess;
use test_kit::upstream::upstream_set;

/// Azurite's development account and key, published in its documentation.
const ACCOUNT: &str = "devstoreaccount1";
const ACCOUNT_KEY: &str =
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==";
const CONTAINER: &str = "etcd-backups";

/// `azurite-blob` on a free loopback port, data in a temporary directory,
/// telemetry off, with the container [`CONTAINER`] created.
async fn azurite() -> ServerProcess {
    let server = ServerProcess::start("azurite-blob", |address, dir| {
        let (host, port) = address.rsplit_once(':').expect("host:port");
        let mut command =
            Command::new(upstream_set("azurite").join("node_modules/.bin/azurite-blob"));
        command
            .args(["--blobHost", host, "--blobPort", port])
            .arg("--location")
            .arg(dir)
            .arg("--disableTelemetry");
        command
    })
    .await;
    create_container(&server, CONTAINER).await;
    server
}

fn azure_destination(endpoint: &str, container: &str) -> BackupDestination {
    BackupDestination {
        azure: Some(AzureDestination {
            account: ACCOUNT.to_string(),
            container: container.to_string(),
            prefix: Some("etcd".to_string()),
            endpoint: Some(endpoint.to_string()),
            credentials_secret: Some("azure-credentials".to_string()),
        }),
        ..BackupDestination::default()
    }
}

fn azure_store(server: &ServerProcess, container: &str) -> BackupStore {
    let credentials =
        BTreeMap::from([(keys::AZURE_ACCOUNT_KEY.to_string(), ACCOUNT_KEY.to_string())]);
    let endpoint = format!("{}/{ACCOUNT}", server.url());
    BackupStore::open(
        &azure_destination(&endpoint, container),
        "prod",
        "main",
        &credentials,
    )
    .expect("azure store")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_multipart_backup_in_azure_restores_every_key() {
    let server = azurite().await;
    let prefix = format!("az://{ACCOUNT}/{CONTAINER}/etcd/prod/main/full-");
    scenarios::a_multipart_backup_restores_every_key(&azure_store(&server, CONTAINER), &prefix)
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retention_in_azure_keeps_the_newest() {
    let server = azurite().await;
    scenarios::retention_keeps_the_newest(&azure_store(&server, CONTAINER)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_azure_container_is_a_configuration_error_that_names_it() {
    let server = azurite().await;
    let store = azure_store(&server, "no-such-container");
    scenarios::a_missing_location_is_a_configuration_error(
        &store,
        &["no-such-container", "ContainerNotFound"],
    )
    .await;
}

/// A key that is not the account's: Azurite checks the Shared Key
/// signature and refuses; the backup fails as a configuration error, since
/// retrying cannot help.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_account_key_is_refused_as_a_configuration_error() {
    let server = azurite().await;
    let cluster = LocalCluster::start(1).await;
    let mut key = base64_decode(ACCOUNT_KEY);
    key[0] ^= 0x01;
    let credentials = BTreeMap::from([(keys::AZURE_ACCOUNT_KEY.to_string(), base64_encode(&key))]);
    let endpoint = format!("{}/{ACCOUNT}", server.url());
    let store = BackupStore::open(
        &azure_destination(&endpoint, CONTAINER),
        "prod",
        "main",
        &credentials,
    )
    .expect("azure store");
    let error = backup_of(&store, &cluster.endpoints())
        .await
        .expect_err("wrong key refused");
    eprintln!("{error}");
    assert_eq!(
        error.category(),
        BackupErrorCategory::Configuration,
        "{error}"
    );
    assert!(error.to_string().contains("403"), "{error}");
    // Listing is refused too (its category is not asserted: object_store
    // reports a refused listing as a generic error, not by status).
    let error = list_backups(&store).await.expect_err("wrong key refused");
    assert!(
        error.to_string().contains("AuthorizationFailure"),
        "{error}"
    );
}

/// Creates a container (object stores do not create buckets or
/// containers; the test sets up what an administrator would): a Shared Key
/// signed `PUT ?restype=container`, the one request the backup code never
/// makes.
async fn create_container(server: &ServerProcess, container: &str) {
    let version = "2023-11-03";
    let date = chrono::Utc::now()
        .format("%a, %d %b %Y %H:%M:%S GMT")
        .to_string();
    // Verb, 11 standard headers (all empty), the x-ms- headers, the
    // resource: the Shared Key string-to-sign of the Blob service.
    let to_sign = format!(
        "PUT\n\n\n\n\n\n\n\n\n\n\n\nx-ms-date:{date}\nx-ms-version:{version}\n/{ACCOUNT}/{ACCOUNT}/{container}\nrestype:container"
    );
    let signature = base64_encode(&hmac_sha256(
        &base64_decode(ACCOUNT_KEY),
        to_sign.as_bytes(),
    ));
    // reqwest is built without a TLS provider; the operator installs ring.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let response = reqwest::Client::new()
        .put(format!(
            "{}/{ACCOUNT}/{container}?restype=container",
            server.url()
        ))
        .header("x-ms-date", &date)
        .header("x-ms-version", version)
        .header("Content-Length", "0")
        .header("Authorization", format!("SharedKey {ACCOUNT}:{signature}"))
        .send()
        .await
        .expect("create container");
    let status = response.status();
    let body = response.text().await.unwrap_or_default();
    assert!(
        status.is_success(),
        "create container {container}: {status} {body}\n{}",
        server.log()
    );
}

/// HMAC-SHA256 (RFC 2104) over the workspace's `sha2`, for the one
/// request above.
fn hmac_sha256(key: &[u8], message: &[u8]) -> Vec<u8> {
    let mut block = [0u8; 64];
    if key.len() > block.len() {
        block[..32].copy_from_slice(&Sha256::digest(key));
    } else {
        block[..key.len()].copy_from_slice(key);
    }
    let inner = Sha256::new()
        .chain_update(block.map(|b| b ^ 0x36))
        .chain_update(message)
        .finalize();
    Sha256::new()
        .chain_update(block.map(|b| b ^ 0x5c))
        .chain_update(inner)
        .finalize()
        .to_vec()
}

const BASE64: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

fn base64_encode(bytes: &[u8]) -> String {
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, b)| n | u32::from(*b) << (16 - 8 * i));
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(BASE64[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

fn base64_decode(text: &str) -> Vec<u8> {
    let mut out = Vec::new();
    let (mut n, mut bits) = (0u32, 0);
    for c in text.bytes().filter(|c| *c != b'=') {
        let value = BASE64.iter().position(|b| *b == c).expect("base64") as u32;
        n = n << 6 | value;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((n >> bits) as u8);
        }
    }
    out
}

#[test]
fn the_request_signing_helpers_match_known_answers() {
    // RFC 4231, test case 2.
    let mac = hmac_sha256(b"Jefe", b"what do ya want for nothing?");
    assert_eq!(
        hex::encode(mac),
        "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
    );
    assert_eq!(base64_encode(b"etcd!"), "ZXRjZCE=");
    assert_eq!(base64_decode("ZXRjZCE="), b"etcd!");
    assert_eq!(base64_encode(&base64_decode(ACCOUNT_KEY)), ACCOUNT_KEY);
}
