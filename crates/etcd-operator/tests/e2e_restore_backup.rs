//! End to end on the lab: continuous backup, a true loss of the majority's
//! data, and a restore from the backup into a new cluster.
//!
//! An S3-compatible server (the pinned `tools/s3-server`) listens on the
//! lab's host address, which the operator (on the host) and the restore Pod
//! (in a node's namespace) both reach. A writer writes keys continuously to
//! cluster `source` and records each acknowledged write with its revision
//! and time. A full backup (`EtcdBackup`) is taken, then an
//! `EtcdBackupSchedule` writes incremental segments every few seconds. Two of
//! the three volumes are wiped (their etcd processes killed): the source has
//! lost its majority. Cluster `restored` is created with
//! `spec.bootstrap.fromBackup` naming the source's backups: the restore Pod
//! downloads and checks the full backup and its segments, replays them, and
//! the new cluster grows to three voters. Every write acknowledged up to the
//! last durable segment (as the schedule reported it before the loss) is
//! there with its value; the loss window (acknowledged writes after the
//! restored revision) is measured and printed. Then a restore naming a
//! corrupted backup is refused by the restore Pod before any member starts.

use std::net::TcpListener;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use etcd_client::{Client, GetOptions};
use etcd_operator::api::{
    BackupPhase, EtcdBackup, EtcdBackupSchedule, EtcdClusterStatus, IncrementalBackupStatus,
};
use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::Api;
use kube::api::{ListParams, PostParams};
use serde_json::{Value, json};
use test_kit::TestResult;
use test_kit::e2e::{Harness, cluster_spec, etcd_at};
use test_kit::object_store_server::{ServerProcess, try_bucket_server_at};
use test_kit::poll::wait_for;
use test_kit::restore_checks::key_values;

const SOURCE: &str = "source";
const RESTORED: &str = "restored";
const REFUSED: &str = "refused";
const BUCKET: &str = "etcd-backups";
/// The lab's host address: pods and host processes both reach it.
const HOST_IP: &str = "10.244.0.1";
const SEGMENT_INTERVAL: &str = "4s";
const PREFIX: &str = "/orders/";

#[test]
fn continuous_backup_restores_into_a_new_cluster_after_majority_loss() {
    test_kit::e2e::run("backup", env!("CARGO_BIN_EXE_etcd-operator"), |h| {
        Box::pin(scenario(h))
    });
}

/// The S3 server on the host address, which pods and host processes both
/// reach.
async fn start_s3() -> TestResult<ServerProcess> {
    let port = TcpListener::bind((HOST_IP, 0))?.local_addr()?.port();
    let address = format!("{HOST_IP}:{port}");
    Ok(try_bucket_server_at("s3-server", &address, BUCKET).await?)
}

/// One acknowledged write.
#[derive(Clone, Debug)]
struct Acked {
    key: String,
    value: String,
    revision: i64,
    at: Instant,
}

/// Writes `PREFIX<n>` until told to stop; records every acknowledged write.
fn spawn_writer(
    endpoints: Vec<String>,
    acked: Arc<Mutex<Vec<Acked>>>,
    stop: Arc<std::sync::atomic::AtomicBool>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut client: Option<Client> = None;
        let mut n = 0usize;
        while !stop.load(std::sync::atomic::Ordering::Relaxed) {
            if client.is_none() {
                client = etcd_at(endpoints.clone()).await.ok();
            }
            let Some(c) = client.as_mut() else {
                tokio::time::sleep(Duration::from_millis(200)).await;
                continue;
            };
            let key = format!("{PREFIX}{n:08}");
            let value = format!("order-{n}-{}", "x".repeat(n % 50));
            let put = tokio::time::timeout(
                Duration::from_secs(2),
                c.put(key.clone(), value.clone(), None),
            )
            .await;
            match put {
                Ok(Ok(response)) => {
                    let revision = response.header().map(|h| h.revision()).unwrap_or_default();
                    if let Ok(mut acked) = acked.lock() {
                        acked.push(Acked {
                            key,
                            value,
                            revision,
                            at: Instant::now(),
                        });
                    }
                    n += 1;
                }
                _ => {
                    client = None;
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
}

/// Client endpoints of the member pods of one cluster that have an IP.
async fn cluster_endpoints(h: &Harness, cluster: &str) -> TestResult<Vec<String>> {
    let pods = h
        .pods
        .list(&ListParams::default().labels(&format!("durable-etcd.io/cluster={cluster}")))
        .await?;
    Ok(pods
        .items
        .iter()
        .filter(|p| {
            p.metadata
                .labels
                .as_ref()
                .is_none_or(|l| l.get("durable-etcd.io/role").is_none())
        })
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .filter_map(|p| p.status.as_ref()?.pod_ip.clone())
        .map(|ip| format!("http://{ip}:2379"))
        .collect())
}

fn destination(s3: &ServerProcess) -> Value {
    json!({
        "s3": {
            "bucket": BUCKET,
            "prefix": "etcd",
            "endpoint": s3.url(),
            "forcePathStyle": true,
            "credentialsSecret": "s3-credentials",
        }
    })
}

/// Creates a namespaced object of kind `K` from its spec.
async fn create<K>(h: &Harness, name: &str, spec: Value) -> TestResult
where
    K: kube::Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + serde::Serialize
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
{
    let object = json!({
        "apiVersion": K::api_version(&()),
        "kind": K::kind(&()),
        "metadata": { "name": name, "namespace": h.namespace },
        "spec": spec,
    });
    Api::<K>::namespaced(h.client.clone(), &h.namespace)
        .create(&PostParams::default(), &serde_json::from_value(object)?)
        .await?;
    Ok(())
}

async fn scenario(h: &mut Harness) -> TestResult {
    let s3 = start_s3().await?;
    let secrets: Api<Secret> = Api::namespaced(h.client.clone(), &h.namespace);
    secrets
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": { "name": "s3-credentials" },
                "stringData": { "accessKeyID": "lab", "secretAccessKey": "lab-secret" },
            }))?,
        )
        .await?;

    h.create_available(
        SOURCE,
        cluster_spec(3, "lab-network"),
        Duration::from_secs(180),
    )
    .await?;

    // Continuous writes from here on, to every member.
    wait_for(
        "three member addresses",
        Duration::from_secs(60),
        || async { Ok(cluster_endpoints(h, SOURCE).await?.len() == 3) },
    )
    .await?;
    let acked = Arc::new(Mutex::new(Vec::<Acked>::new()));
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = spawn_writer(
        cluster_endpoints(h, SOURCE).await?,
        acked.clone(),
        stop.clone(),
    );
    wait_for("the first writes", Duration::from_secs(30), || async {
        Ok(acked.lock().map(|a| a.len()).unwrap_or(0) >= 50)
    })
    .await?;

    // A full backup, then incremental segments after it.
    create::<EtcdBackup>(
        h,
        "source-full",
        json!({ "clusterName": SOURCE, "destination": destination(&s3) }),
    )
    .await?;
    let backups: Api<EtcdBackup> = Api::namespaced(h.client.clone(), &h.namespace);
    wait_for("the full backup", Duration::from_secs(120), || async {
        let status = backups.get("source-full").await?.status.unwrap_or_default();
        if status.phase == Some(BackupPhase::Failed) {
            return Err(format!("the full backup failed: {:?}", status.error).into());
        }
        Ok(status.phase == Some(BackupPhase::Succeeded))
    })
    .await?;
    let full = backups.get("source-full").await?.status.unwrap_or_default();
    eprintln!(
        "full backup: revision {:?} at {:?}",
        full.revision, full.location
    );
    create::<EtcdBackupSchedule>(
        h,
        "source-continuous",
        json!({
            "clusterName": SOURCE,
            // Full backups yearly: this test lives on the segments.
            "schedule": "0 0 1 1 *",
            "destination": destination(&s3),
            "incremental": { "enabled": true, "interval": SEGMENT_INTERVAL },
        }),
    )
    .await?;
    let schedules: Api<EtcdBackupSchedule> = Api::namespaced(h.client.clone(), &h.namespace);
    let incremental = || async {
        Ok::<IncrementalBackupStatus, Box<dyn std::error::Error + Send + Sync>>(
            schedules
                .get("source-continuous")
                .await?
                .status
                .and_then(|s| s.incremental)
                .unwrap_or_default(),
        )
    };
    wait_for(
        "three durable segments",
        Duration::from_secs(120),
        || async { Ok(incremental().await.map_err(|e| e.to_string())?.segments >= 3) },
    )
    .await?;
    // The cluster's own status shows its backups: the schedule, its newest
    // full backup and the recovery point. The schedule's watcher bases its
    // chain on a full backup of its own (never on the one-shot backup
    // above), which counts as the schedule's newest: BackupReady is true.
    wait_for(
        "the cluster to show its recovery point",
        Duration::from_secs(90),
        || async {
            let status = h.status(SOURCE).await?;
            let fresh = status
                .condition(etcd_operator::api::ConditionType::BackupReady)
                .is_some_and(|c| c.status == "True" && c.message.contains("source-continuous"));
            let backup = status.backup.unwrap_or_default();
            Ok(fresh
                && backup.schedules == ["source-continuous"]
                && backup.newest_full_backup.is_some()
                && backup.recovery_point.is_some())
        },
    )
    .await?;
    let base = incremental().await.map_err(|e| e.to_string())?.base;
    assert!(
        base.as_deref()
            .is_some_and(|b| !full.location.as_deref().unwrap_or_default().contains(b)),
        "the schedule's chain follows the one-shot backup {:?}: {base:?}",
        full.location
    );

    // The loss: two of three volumes wiped, their etcd processes killed.
    let before_loss = incremental().await.map_err(|e| e.to_string())?;
    let durable = before_loss
        .last_segment_revision
        .ok_or("no segment revision in status")?;
    eprintln!("before the loss: {before_loss:?}");
    for ordinal in [1, 2] {
        let member = format!("{SOURCE}-{ordinal}");
        h.lab
            .volume_wipe(&h.namespace, &format!("data-{member}"))
            .await?;
        h.lab.pod_kill(&h.namespace, &member, Some("etcd")).await?;
    }
    h.wait_condition(SOURCE, "MajorityDataLost", Duration::from_secs(120))
        .await?;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    writer.await?;
    let acked = acked.lock().map(|a| a.clone()).map_err(|e| e.to_string())?;
    let last_acked = acked.last().ok_or("no write acknowledged")?.clone();
    eprintln!(
        "{} writes acknowledged, the last at revision {}; durable up to revision {durable} before the loss",
        acked.len(),
        last_acked.revision
    );

    // Restore into a new cluster.
    let started = Instant::now();
    h.create_cluster(
        RESTORED,
        json!({
            "replicas": 3,
            "storage": { "storageClassName": "lab-network", "size": "1Gi" },
            "tls": { "disabled": true },
            "bootstrap": { "fromBackup": {
                "destination": destination(&s3),
                "clusterName": SOURCE,
            } },
        }),
    )
    .await?;
    h.wait_available(RESTORED, 3, Duration::from_secs(300))
        .await?;
    eprintln!(
        "restored into a new 3-member cluster in {:?}",
        started.elapsed()
    );
    let status: EtcdClusterStatus = h.status(RESTORED).await?;
    let restore = status.restore.clone().ok_or("no restore record")?;
    assert!(!restore.in_progress(), "{restore:?}");

    wait_for(
        "three restored member addresses",
        Duration::from_secs(60),
        || async { Ok(cluster_endpoints(h, RESTORED).await?.len() == 3) },
    )
    .await?;
    let mut client = etcd_at(cluster_endpoints(h, RESTORED).await?).await?;
    let response = client
        .get(PREFIX, Some(GetOptions::new().with_prefix()))
        .await?;
    let restored_revision = response.header().map(|h| h.revision()).unwrap_or_default();
    let restored = key_values(&response);
    // Every acknowledged write up to the last durable segment is there,
    // with its value; nothing is there that was never acknowledged or
    // written by the writer.
    let mut missing = Vec::new();
    for write in acked.iter().filter(|w| w.revision <= durable) {
        if restored.get(&write.key) != Some(&write.value) {
            missing.push(write.key.clone());
        }
    }
    assert!(
        missing.is_empty(),
        "{} acknowledged writes up to revision {durable} are missing, first {:?}",
        missing.len(),
        missing.first()
    );
    assert!(
        restored_revision >= durable,
        "restored revision {restored_revision} < durable {durable}"
    );
    assert!(
        restored_revision > full.revision.unwrap_or(i64::MAX),
        "no segment was replayed: restored revision {restored_revision}, full backup {:?}",
        full.revision
    );
    let lost: Vec<&Acked> = acked
        .iter()
        .filter(|w| restored.get(&w.key) != Some(&w.value))
        .collect();
    let newest_kept = acked
        .iter()
        .filter(|w| restored.get(&w.key) == Some(&w.value))
        .map(|w| w.at)
        .max()
        .ok_or("nothing restored")?;
    let window = last_acked.at.saturating_duration_since(newest_kept);
    eprintln!(
        "loss window: {} of {} acknowledged writes lost, {:.1}s of writes (segments every {SEGMENT_INTERVAL}); restored revision {restored_revision}, full backup revision {:?}",
        lost.len(),
        acked.len(),
        window.as_secs_f64(),
        full.revision
    );
    // Losses are only ever the newest writes: never a hole.
    if let Some(first_lost) = lost.first() {
        assert!(
            acked
                .iter()
                .filter(|w| w.revision > first_lost.revision)
                .all(|w| restored.get(&w.key) != Some(&w.value)),
            "a hole: write at revision {} lost but a later one kept",
            first_lost.revision
        );
    }

    refused_corrupt_backup(h, &s3).await
}

/// A restore that names a corrupted backup fails in the restore Pod, says
/// why, and never starts a member.
async fn refused_corrupt_backup(h: &Harness, s3: &ServerProcess) -> TestResult {
    let backups: Api<EtcdBackup> = Api::namespaced(h.client.clone(), &h.namespace);
    let full = backups.get("source-full").await?.status.unwrap_or_default();
    let location = full.location.ok_or("no location")?;
    let object = location
        .strip_prefix(&format!("s3://{BUCKET}/"))
        .ok_or("not an s3 location")?
        .to_string();
    let name = object
        .rsplit('/')
        .next()
        .and_then(|o| o.strip_suffix(".db.zst"))
        .ok_or("not a snapshot object")?
        .to_string();
    // Overwrite the snapshot object with other bytes of the same kind.
    let store = object_store::aws::AmazonS3Builder::new()
        .with_bucket_name(BUCKET)
        .with_endpoint(s3.url())
        .with_allow_http(true)
        .with_access_key_id("lab")
        .with_secret_access_key("lab-secret")
        .with_region("us-east-1")
        .build()?;
    let path = object_store::path::Path::from(object.as_str());
    let mut bytes = object_store::ObjectStoreExt::get(&store, &path)
        .await?
        .bytes()
        .await?
        .to_vec();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0xff;
    object_store::ObjectStoreExt::put(&store, &path, bytes.into()).await?;

    h.create_cluster(
        REFUSED,
        json!({
            "replicas": 3,
            "storage": { "storageClassName": "lab-network", "size": "1Gi" },
            "tls": { "disabled": true },
            "bootstrap": { "fromBackup": {
                "destination": destination(s3),
                "clusterName": SOURCE,
                "backupName": name,
            } },
        }),
    )
    .await?;
    wait_for(
        "the corrupt backup to be refused",
        Duration::from_secs(180),
        || async {
            let status = h.status(REFUSED).await?;
            let message = status
                .conditions
                .iter()
                .map(|c| c.message.clone())
                .collect::<Vec<_>>()
                .join(" | ");
            Ok(message.contains("restore Pod failed") && message.contains("corrupt"))
        },
    )
    .await?;
    let status = h.status(REFUSED).await?;
    eprintln!(
        "corrupt backup refused: {:?}",
        status
            .conditions
            .iter()
            .map(|c| &c.message)
            .collect::<Vec<_>>()
    );
    let pods: Api<Pod> = Api::namespaced(h.client.clone(), &h.namespace);
    let members = pods
        .list(&ListParams::default().labels(&format!(
            "durable-etcd.io/cluster={REFUSED},app.kubernetes.io/name=etcd"
        )))
        .await?;
    assert!(
        members.items.is_empty(),
        "a member started from a corrupt backup: {:?}",
        members
            .items
            .iter()
            .map(|p| p.metadata.name.clone())
            .collect::<Vec<_>>()
    );
    Ok(())
}
