//! End to end on the lab: backups kept on a PersistentVolumeClaim, as an
//! on-call person meets them.
//!
//! Two `EtcdBackupSchedule`s of one cluster write to the same claim
//! (`persistentVolumeClaim` destination): `continuous` (a full backup every
//! minute and incremental segments every 5 s) and `copy` (a full backup
//! every minute), each keeping one backup. The operator starts the claim's
//! store Pod by itself. For three minutes nothing is written: the cluster's
//! `BackupReady`, once true, must stay true (a quiet cluster has nothing to
//! lose), and the continuous schedule's loss window is 0. On the volume,
//! each schedule's own newest backup is kept (retention never deletes a
//! neighbour's). Then writes resume and the recovery point follows them.
//! The operator is stopped and the store Pod deleted (its Deployment
//! brings it back on the same claim); the operator starts again, and a new
//! cluster restored from the claim holds every acknowledged write up to
//! the durable revision.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use chrono::Utc;
use etcd_client::GetOptions;
use etcd_operator::api::{ConditionType, EtcdBackupSchedule, IncrementalBackupStatus};
use etcd_operator::backup::{BackupStore, keys, list_backups};
use etcd_operator::controller_kit::member_endpoints::client_url;
use etcd_operator::pod_contract::backup_store::{STORE_PORT, TOKEN_KEY, store_secret_name};
use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::Api;
use kube::api::{DeleteParams, ListParams, PostParams};
use serde_json::{Value, json};
use test_kit::TestResult;
use test_kit::conditions::pod_ready;
use test_kit::e2e::{Harness, cluster_spec, etcd_at};
use test_kit::poll::wait_for;
use test_kit::restore_checks::key_values;

const SOURCE: &str = "source";
const RESTORED: &str = "restored";
const CLAIM: &str = "etcd-backups";
const CONTINUOUS: &str = "continuous";
const COPY: &str = "copy";
const QUIET: Duration = Duration::from_secs(180);

#[test]
fn backups_on_a_claim_stay_fresh_when_quiet_keep_their_neighbours_and_restore() {
    test_kit::e2e::run("backup-volume", env!("CARGO_BIN_EXE_etcd-operator"), |h| {
        Box::pin(scenario(h))
    });
}

fn destination() -> Value {
    json!({ "persistentVolumeClaim": { "claimName": CLAIM, "path": "etcd" } })
}

async fn create_schedule(h: &Harness, name: &str, incremental: bool) -> TestResult {
    let mut spec = json!({
        "clusterName": SOURCE,
        "schedule": "* * * * *",
        "destination": destination(),
        "retention": { "count": 1 },
    });
    if incremental {
        spec["incremental"] = json!({ "enabled": true, "interval": "5s" });
    }
    let object = json!({
        "apiVersion": "durable-etcd.io/v1alpha1",
        "kind": "EtcdBackupSchedule",
        "metadata": { "name": name, "namespace": h.namespace },
        "spec": spec,
    });
    Api::<EtcdBackupSchedule>::namespaced(h.client.clone(), &h.namespace)
        .create(&PostParams::default(), &serde_json::from_value(object)?)
        .await?;
    Ok(())
}

/// The store Pods of the claim.
async fn store_pods(h: &Harness) -> TestResult<Vec<Pod>> {
    Ok(h.pods
        .list(&ListParams::default().labels(&format!("durable-etcd.io/backup-claim={CLAIM}")))
        .await?
        .items)
}

/// The claim's store, opened as the operator opens it.
async fn open_store(h: &Harness) -> TestResult<BackupStore> {
    let secrets: Api<Secret> = Api::namespaced(h.client.clone(), &h.namespace);
    let secret = secrets.get(&store_secret_name(CLAIM)).await?;
    let token = secret
        .data
        .and_then(|d| {
            d.get(TOKEN_KEY)
                .map(|t| String::from_utf8_lossy(&t.0).to_string())
        })
        .ok_or("no token in the store's Secret")?;
    let pod = store_pods(h)
        .await?
        .into_iter()
        .find(pod_ready)
        .ok_or("no Ready store Pod")?;
    let ip = pod.status.and_then(|s| s.pod_ip).ok_or("no store Pod IP")?;
    let destination = serde_json::from_value(destination())?;
    let credentials = BTreeMap::from([
        (keys::STORE_TOKEN.to_string(), token),
        (
            keys::STORE_ENDPOINT.to_string(),
            client_url("http", &ip, STORE_PORT),
        ),
    ]);
    Ok(BackupStore::open(
        &destination,
        &h.namespace,
        SOURCE,
        &credentials,
    )?)
}

async fn incremental(h: &Harness) -> TestResult<IncrementalBackupStatus> {
    Ok(
        Api::<EtcdBackupSchedule>::namespaced(h.client.clone(), &h.namespace)
            .get(CONTINUOUS)
            .await?
            .status
            .and_then(|s| s.incremental)
            .unwrap_or_default(),
    )
}

/// A claim not labelled for backups (an application's data) is refused
/// with the reason: no store is made for it, nothing mounts it.
async fn an_unmarked_claim_is_refused_and_left_alone(h: &Harness) -> TestResult {
    const APP_CLAIM: &str = "app-data";
    h.create_claim_labelled(APP_CLAIM, json!({ "app": "shop" }))
        .await?;
    h.create_backup_to_claim("to-app-data", SOURCE, APP_CLAIM, None)
        .await?;
    let backups: Api<etcd_operator::api::EtcdBackup> =
        Api::namespaced(h.client.clone(), &h.namespace);
    wait_for(
        "the backup to an unmarked claim to be refused",
        Duration::from_secs(60),
        || async {
            let status = backups.get("to-app-data").await?.status.unwrap_or_default();
            if let Some(error) = &status.error {
                eprintln!("backup to {APP_CLAIM}: {error}");
            }
            Ok(status
                .error
                .is_some_and(|e| e.contains("not marked for backups")))
        },
    )
    .await?;
    let store_pods = h
        .pods
        .list(&ListParams::default().labels(&format!("durable-etcd.io/backup-claim={APP_CLAIM}")))
        .await?
        .items;
    if !store_pods.is_empty() {
        return Err(format!("a store Pod mounts {APP_CLAIM}: {}", store_pods.len()).into());
    }
    let secrets: Api<Secret> = Api::namespaced(h.client.clone(), &h.namespace);
    if secrets
        .get_opt(&store_secret_name(APP_CLAIM))
        .await?
        .is_some()
    {
        return Err(format!("a store Secret was made for {APP_CLAIM}").into());
    }
    backups
        .delete("to-app-data", &DeleteParams::default())
        .await?;
    Ok(())
}

async fn scenario(h: &mut Harness) -> TestResult {
    h.create_claim(CLAIM).await?;
    h.create_available(
        SOURCE,
        cluster_spec(1, "lab-network"),
        Duration::from_secs(180),
    )
    .await?;
    an_unmarked_claim_is_refused_and_left_alone(h).await?;
    let mut client = etcd_at(
        h.member_ips(SOURCE)
            .await?
            .iter()
            .map(|ip| format!("http://{ip}:2379"))
            .collect(),
    )
    .await?;
    for i in 0..100 {
        client
            .put(format!("/before/{i:04}"), format!("v{i}"), None)
            .await?;
    }

    create_schedule(h, CONTINUOUS, true).await?;
    create_schedule(h, COPY, false).await?;

    // Quiet: once BackupReady is true it stays true.
    let quiet_from = Instant::now();
    let mut ready_since: Option<Instant> = None;
    let schedules: Api<EtcdBackupSchedule> = Api::namespaced(h.client.clone(), &h.namespace);
    let mut locations: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    while ready_since.is_none_or(|t| t.elapsed() < QUIET) {
        if quiet_from.elapsed() > QUIET + Duration::from_secs(180) {
            return Err(format!(
                "BackupReady never held for {QUIET:?} (true since {ready_since:?})"
            )
            .into());
        }
        let status = h.status(SOURCE).await?;
        let ready = status.condition(ConditionType::BackupReady).cloned();
        match (&ready, ready_since) {
            (Some(c), None) if c.status == "True" => {
                eprintln!(
                    "BackupReady after {:?}: {}",
                    quiet_from.elapsed(),
                    c.message
                );
                ready_since = Some(Instant::now());
            }
            (Some(c), Some(since)) if c.status != "True" => {
                return Err(format!(
                    "BackupReady turned {} after {:?} of quiet: {} ({})",
                    c.status,
                    since.elapsed(),
                    c.reason,
                    c.message
                )
                .into());
            }
            _ => {}
        }
        for name in [CONTINUOUS, COPY] {
            let status = schedules.get(name).await?.status.unwrap_or_default();
            if let Some(location) = status.last_successful_location {
                let seen = locations.entry(name).or_default();
                if seen.last() != Some(&location) {
                    seen.push(location);
                }
            }
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    let quiet = incremental(h).await?;
    eprintln!("after {QUIET:?} of quiet: {quiet:?}; full backups seen: {locations:?}");
    assert_eq!(quiet.loss_window_seconds, Some(0), "{quiet:?}");
    for name in [CONTINUOUS, COPY] {
        let seen = locations.get(name).map_or(0, Vec::len);
        assert!(
            seen >= 2,
            "{name} took {seen} full backups in the quiet minutes"
        );
    }

    // Neighbours: each schedule keeps its own newest backup on the claim.
    let store = open_store(h).await?;
    let mut kept: BTreeMap<String, usize> = BTreeMap::new();
    for backup in list_backups(&store).await? {
        let writer = backup.written_by.map(|w| w.name).unwrap_or_default();
        *kept.entry(writer).or_default() += 1;
    }
    eprintln!("backups on the claim by writer: {kept:?}");
    assert!(
        kept.get(CONTINUOUS).is_some_and(|n| *n >= 1) && kept.get(COPY).is_some_and(|n| *n >= 1),
        "a schedule's retention deleted its neighbour's backup: {kept:?}"
    );

    // Writes resume; the recovery point follows them.
    let mut acked: Vec<(String, String, i64)> = Vec::new();
    for i in 0..300 {
        let (key, value) = (format!("/orders/{i:04}"), format!("order-{i}"));
        let response = client.put(key.clone(), value.clone(), None).await?;
        let revision = response.header().map(|h| h.revision()).unwrap_or_default();
        acked.push((key, value, revision));
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let last_revision = acked.last().map(|a| a.2).unwrap_or_default();
    let written_at = Utc::now();
    wait_for(
        "the recovery point to follow the writes",
        Duration::from_secs(60),
        || async {
            let durable = incremental(h).await?.durable_revision.unwrap_or_default();
            let point = h
                .status(SOURCE)
                .await?
                .backup
                .and_then(|b| b.recovery_point)
                .map(|t| t.0);
            Ok(durable >= last_revision
                && point.is_some_and(|p| p.as_second() >= written_at.timestamp() - 1))
        },
    )
    .await?;
    let durable = incremental(h).await?.durable_revision.unwrap_or_default();
    eprintln!("durable up to revision {durable} (last write {last_revision})");

    // The operator goes away and the store Pod is deleted: the claim keeps
    // the backups, the Deployment brings the store back.
    h.stop_operator();
    let old = store_pods(h).await?;
    for pod in &old {
        if let Some(name) = &pod.metadata.name {
            h.pods.delete(name, &DeleteParams::default()).await?;
        }
    }
    let old_uids: Vec<_> = old.iter().filter_map(|p| p.metadata.uid.clone()).collect();
    wait_for(
        "a new store Pod to be Ready",
        Duration::from_secs(120),
        || async {
            Ok(store_pods(h).await?.iter().any(|p| {
                pod_ready(p)
                    && p.metadata
                        .uid
                        .as_ref()
                        .is_some_and(|u| !old_uids.contains(u))
            }))
        },
    )
    .await?;
    h.start_operator()?;

    // A new cluster restored from the claim.
    let started = Instant::now();
    h.create_cluster(
        RESTORED,
        json!({
            "replicas": 1,
            "storage": { "storageClassName": "lab-network", "size": "1Gi" },
            "tls": { "disabled": true },
            "bootstrap": { "fromBackup": { "destination": destination(), "clusterName": SOURCE } },
        }),
    )
    .await?;
    h.wait_available(RESTORED, 1, Duration::from_secs(300))
        .await?;
    eprintln!("restored from the claim in {:?}", started.elapsed());
    let mut restored_client = etcd_at(
        h.member_ips(RESTORED)
            .await?
            .iter()
            .map(|ip| format!("http://{ip}:2379"))
            .collect(),
    )
    .await?;
    let restored = key_values(
        &restored_client
            .get("/", Some(GetOptions::new().with_prefix()))
            .await?,
    );
    let missing: Vec<&String> = acked
        .iter()
        .filter(|(_, _, revision)| *revision <= durable)
        .filter(|(key, value, _)| restored.get(key) != Some(value))
        .map(|(key, _, _)| key)
        .collect();
    assert!(
        missing.is_empty(),
        "{} acknowledged writes up to revision {durable} are missing, first {:?}",
        missing.len(),
        missing.first()
    );
    assert_eq!(
        (0..100)
            .filter(|i| restored.contains_key(&format!("/before/{i:04}")))
            .count(),
        100,
        "the writes before the schedules are restored"
    );
    Ok(())
}
