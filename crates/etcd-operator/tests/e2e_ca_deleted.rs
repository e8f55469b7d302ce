//! End to end on the lab: the deleted CA Secret of a running TLS cluster
//! is never replaced (docs/security.md, "A deleted CA Secret").
//!
//! 1. A 3-member cluster with the built-in CA and a named client
//!    certificate (`writer`) becomes Available; a writer with that
//!    certificate puts a key every 100 ms and counts the acknowledged
//!    writes.
//! 2. Every leaf Secret's resourceVersion and `ca.crt` is recorded, then
//!    `<cluster>-ca` is deleted.
//! 3. The cluster reports `Degraded` with reason `CaSecretMissing` naming
//!    the Secret; no new CA Secret appears.
//! 4. One member's etcd process is killed (SIGKILL): its container
//!    restarts on the unchanged mounts and serves again, and the writes go
//!    on throughout (no gap of 15 s or more between acknowledged writes,
//!    and acknowledged writes after the member is back).
//! 5. No leaf Secret was written (same resourceVersion, same `ca.crt`),
//!    no member Pod replaced, no `<cluster>-ca` created.
//! 6. The saved CA Secret restored, `Degraded` no longer says
//!    `CaSecretMissing` and the cluster is Available, on the same CA.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use etcd_operator::api::ConditionType;
use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::Api;
use kube::api::{DeleteParams, ListParams, PostParams};
use serde_json::json;
use test_kit::TestResult;
use test_kit::e2e::{Harness, cluster_spec_with};
use test_kit::poll::wait_for;
use test_kit::tls_client::{ClientMaterial, client_service_name, connect, read_secret_material};
use tokio::sync::watch;

const CLUSTER: &str = "keeper";
const WRITER: &str = "writer";
/// The longest time allowed between two acknowledged writes.
const LONGEST_GAP: Duration = Duration::from_secs(15);

#[test]
fn a_deleted_ca_secret_is_reported_never_replaced_and_members_keep_serving() {
    test_kit::e2e::run("ca-deleted", env!("CARGO_BIN_EXE_etcd-operator"), |h| {
        Box::pin(scenario(h))
    });
}

/// What the writer saw: acknowledged writes, when the last one was, the
/// longest time between two, and the last error.
#[derive(Debug)]
struct Ledger {
    acknowledged: usize,
    failed: usize,
    last_ack: Instant,
    longest_gap: Duration,
    last_error: Option<String>,
}

impl Ledger {
    fn new() -> Self {
        Self {
            acknowledged: 0,
            failed: 0,
            last_ack: Instant::now(),
            longest_gap: Duration::ZERO,
            last_error: None,
        }
    }

    /// The longest gap so far, counting the time since the last write.
    fn longest_gap_now(&self) -> Duration {
        self.longest_gap.max(self.last_ack.elapsed())
    }
}

fn ledger_now(ledger: &Mutex<Ledger>) -> TestResult<(usize, usize, Duration)> {
    let ledger = ledger
        .lock()
        .map_err(|_| "the writer's ledger is poisoned")?;
    Ok((ledger.acknowledged, ledger.failed, ledger.longest_gap_now()))
}

/// A key every 100 ms through `client` (the writer's certificate), each
/// acknowledged write counted in `ledger`, until `stop` says so.
async fn write_continuously(
    mut client: etcd_client::Client,
    ledger: Arc<Mutex<Ledger>>,
    mut stop: watch::Receiver<bool>,
) {
    let mut i: u64 = 0;
    loop {
        if *stop.borrow() {
            return;
        }
        let outcome = client
            .put(format!("/ca-deleted/{i:06}"), format!("v{i}"), None)
            .await;
        if let Ok(mut ledger) = ledger.lock() {
            match outcome {
                Ok(_) => {
                    let now = Instant::now();
                    ledger.longest_gap = ledger.longest_gap.max(now - ledger.last_ack);
                    ledger.last_ack = now;
                    ledger.acknowledged += 1;
                }
                Err(error) => {
                    ledger.failed += 1;
                    ledger.last_error = Some(error.to_string());
                }
            }
        }
        i += 1;
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(100)) => {}
            _ = stop.changed() => {}
        }
    }
}

/// A TLS client of the cluster's members at `ips` with `material`.
async fn client_at(
    h: &Harness,
    ips: &[String],
    material: &ClientMaterial,
) -> TestResult<etcd_client::Client> {
    connect(
        ips.iter().map(|ip| format!("https://{ip}:2379")).collect(),
        &client_service_name(h, CLUSTER),
        &material.ca,
        Some((&material.cert, &material.key)),
        Duration::from_secs(5),
    )
    .await
}

/// Every leaf Secret of the cluster (its certificate Secrets but the CA's):
/// name -> (resourceVersion, `ca.crt`).
async fn leaves(secrets: &Api<Secret>) -> TestResult<BTreeMap<String, (String, String)>> {
    let ca = format!("{CLUSTER}-ca");
    let list = secrets
        .list(&ListParams::default().labels(&format!("durable-etcd.io/cluster={CLUSTER}")))
        .await?;
    let mut found = BTreeMap::new();
    for secret in list.items {
        let name = secret.metadata.name.clone().unwrap_or_default();
        if name == ca {
            continue;
        }
        let bundle = secret
            .data
            .as_ref()
            .and_then(|d| d.get("ca.crt"))
            .map(|b| String::from_utf8_lossy(&b.0).into_owned())
            .unwrap_or_default();
        let version = secret.metadata.resource_version.clone().unwrap_or_default();
        found.insert(name, (version, bundle));
    }
    Ok(found)
}

/// The `Degraded` condition now: (status, reason, message).
async fn degraded(h: &Harness) -> TestResult<Option<(String, String, String)>> {
    Ok(h.status(CLUSTER)
        .await?
        .condition(ConditionType::Degraded)
        .map(|c| (c.status.clone(), c.reason.clone(), c.message.clone())))
}

/// Fails when a `<cluster>-ca` Secret exists.
async fn no_ca_secret(secrets: &Api<Secret>, when: &str) -> TestResult {
    let name = format!("{CLUSTER}-ca");
    if let Some(secret) = secrets.get_opt(&name).await? {
        return Err(format!(
            "{when}: a Secret {name} was created (uid {:?}, created {:?})",
            secret.metadata.uid, secret.metadata.creation_timestamp
        )
        .into());
    }
    Ok(())
}

/// The restart count of `pod`'s etcd container and whether it is ready.
async fn etcd_container(pods: &Api<Pod>, pod: &str) -> TestResult<(i32, bool)> {
    let pod = pods.get(pod).await?;
    let status = pod
        .status
        .and_then(|s| s.container_statuses)
        .unwrap_or_default()
        .into_iter()
        .find(|c| c.name == "etcd")
        .ok_or("no status of the etcd container")?;
    Ok((status.restart_count, status.ready))
}

async fn scenario(h: &mut Harness) -> TestResult {
    // 1. The cluster and a writer with its own client certificate.
    h.create_available(
        CLUSTER,
        cluster_spec_with(
            3,
            "lab-network",
            json!({ "tls": { "builtIn": {}, "clientCertificates": [{ "name": WRITER }] } }),
        ),
        Duration::from_secs(240),
    )
    .await?;
    let secrets: Api<Secret> = Api::namespaced(h.client.clone(), &h.namespace);
    let writer_secret = format!("{CLUSTER}-client-{WRITER}-tls");
    wait_for(
        "the writer's client certificate Secret",
        Duration::from_secs(60),
        || async { Ok(secrets.get_opt(&writer_secret).await?.is_some()) },
    )
    .await?;
    let material = read_secret_material(&secrets, &writer_secret).await?;
    let ips = h.member_ips(CLUSTER).await?;
    if ips.len() != 3 {
        return Err(format!("member IPs: {ips:?}").into());
    }
    let client = client_at(h, &ips, &material).await?;
    let ledger = Arc::new(Mutex::new(Ledger::new()));
    let (stop, stopped) = watch::channel(false);
    let writer = tokio::spawn(write_continuously(client, ledger.clone(), stopped));
    let outcome = with_writer(h, &secrets, &material, &ips, &ledger).await;
    let _ = stop.send(true);
    let _ = writer.await;
    let (acknowledged, failed, longest) = ledger_now(&ledger)?;
    eprintln!(
        "writer: {acknowledged} writes acknowledged, {failed} failed, longest gap {longest:?}"
    );
    outcome
}

async fn with_writer(
    h: &Harness,
    secrets: &Api<Secret>,
    material: &ClientMaterial,
    ips: &[String],
    ledger: &Mutex<Ledger>,
) -> TestResult {
    wait_for(
        "the writer's first acknowledged writes",
        Duration::from_secs(30),
        || async { Ok(ledger_now(ledger)?.0 >= 10) },
    )
    .await?;

    // 2. The leaf Secrets as they are, then the CA Secret deleted.
    let before = leaves(secrets).await?;
    for role in ["server", "peer", "client", "operator"] {
        let name = format!("{CLUSTER}-{role}-tls");
        if !before.contains_key(&name) {
            return Err(format!("no leaf Secret {name}: {:?}", before.keys()).into());
        }
    }
    if !before.contains_key(&format!("{CLUSTER}-client-{WRITER}-tls")) {
        return Err(format!("the writer's Secret is not a leaf: {:?}", before.keys()).into());
    }
    let ca_bundles: Vec<&String> = before.values().map(|(_, ca)| ca).collect();
    if ca_bundles.iter().any(|ca| ca.trim().is_empty()) {
        return Err("a leaf Secret carries no ca.crt".into());
    }
    eprintln!("leaf Secrets: {:?}", before.keys().collect::<Vec<_>>());
    let pods_before = h.pod_uids().await?;
    let ca_name = format!("{CLUSTER}-ca");
    let saved = secrets.get(&ca_name).await?;
    secrets.delete(&ca_name, &DeleteParams::default()).await?;
    wait_for(
        "the CA Secret to be gone",
        Duration::from_secs(30),
        || async { Ok(secrets.get_opt(&ca_name).await?.is_none()) },
    )
    .await?;
    let deleted_at = Instant::now();
    eprintln!("deleted Secret {ca_name}");
    // Another change of the cluster's objects: the operator looks now.
    h.annotate_cluster(CLUSTER, "e2e/poke", "ca-deleted")
        .await?;

    // 3. Degraded, CaSecretMissing, naming the Secret; no CA made.
    let qualified = format!("{}/{ca_name}", h.namespace);
    wait_for(
        "Degraded with reason CaSecretMissing naming the Secret",
        Duration::from_secs(90),
        || async {
            // A CA Secret appearing ends the wait; the check below fails.
            if secrets.get_opt(&ca_name).await?.is_some() {
                return Ok(true);
            }
            let found = degraded(h).await?;
            Ok(found.is_some_and(|(status, reason, message)| {
                status == "True" && reason == "CaSecretMissing" && message.contains(&qualified)
            }))
        },
    )
    .await?;
    no_ca_secret(secrets, "once Degraded").await?;
    if let Some((_, _, message)) = degraded(h).await? {
        eprintln!("Degraded after {:?}: {message}", deleted_at.elapsed());
    }
    h.wait_warning_event(
        CLUSTER,
        "CaSecretMissing",
        &qualified,
        Duration::from_secs(30),
    )
    .await?;

    // 4. One member's etcd killed: its container restarts and serves.
    let member = format!("{CLUSTER}-1");
    let member_ip = h
        .pods
        .get(&member)
        .await?
        .status
        .and_then(|s| s.pod_ip)
        .ok_or("the member has no IP")?;
    if !ips.contains(&member_ip) {
        return Err(format!("{member} at {member_ip}, not among {ips:?}").into());
    }
    let (restarts_before, _) = etcd_container(&h.pods, &member).await?;
    let (acknowledged_before_kill, _, _) = ledger_now(ledger)?;
    let killed = h.lab.pod_kill(&h.namespace, &member, Some("etcd")).await?;
    let killed_at = Instant::now();
    eprintln!("killed {killed} processes of {member}'s etcd container");
    wait_for(
        "the member's etcd container to restart and be ready",
        Duration::from_secs(120),
        || async {
            let (restarts, ready) = etcd_container(&h.pods, &member).await?;
            Ok(restarts > restarts_before && ready)
        },
    )
    .await?;
    wait_for(
        "the restarted member to serve",
        Duration::from_secs(120),
        || async {
            let mut alone = client_at(h, std::slice::from_ref(&member_ip), material).await?;
            alone.status().await?;
            // Linearizable: the member reaches the leader.
            alone.get("/ca-deleted/", None).await?;
            Ok(true)
        },
    )
    .await?;
    let (acknowledged_back, _, _) = ledger_now(ledger)?;
    eprintln!(
        "{member} serves again after {:?}; {} writes acknowledged since the kill",
        killed_at.elapsed(),
        acknowledged_back - acknowledged_before_kill
    );
    wait_for(
        "acknowledged writes after the member came back",
        Duration::from_secs(30),
        || async { Ok(ledger_now(ledger)?.0 >= acknowledged_back + 20) },
    )
    .await?;
    // A few more passes of the operator while it stays Degraded.
    tokio::time::sleep(Duration::from_secs(10)).await;
    match degraded(h).await? {
        Some((status, reason, _)) if status == "True" && reason == "CaSecretMissing" => {}
        other => {
            return Err(format!("Degraded changed without a CA Secret: {other:?}").into());
        }
    }

    // 5. Nothing written, nothing replaced, no CA made.
    let (acknowledged, failed, longest) = ledger_now(ledger)?;
    eprintln!(
        "writer so far: {acknowledged} acknowledged, {failed} failed, longest gap {longest:?}"
    );
    if longest >= LONGEST_GAP {
        let last_error = ledger
            .lock()
            .map_err(|_| "the writer's ledger is poisoned")?
            .last_error
            .clone();
        return Err(format!(
            "{longest:?} between acknowledged writes (last error: {last_error:?})"
        )
        .into());
    }
    let after = leaves(secrets).await?;
    if after != before {
        let changed: Vec<&String> = before
            .keys()
            .chain(after.keys())
            .filter(|name| before.get(*name) != after.get(*name))
            .collect();
        return Err(format!("leaf Secrets written without a CA Secret: {changed:?}").into());
    }
    if h.pod_uids().await? != pods_before {
        return Err("a member Pod was replaced without a CA Secret".into());
    }
    no_ca_secret(secrets, "after the member restarted").await?;

    // 6. The CA Secret restored: the operator resumes on the same CA.
    let mut restored = saved.clone();
    restored.metadata.resource_version = None;
    restored.metadata.uid = None;
    restored.metadata.creation_timestamp = None;
    restored.metadata.managed_fields = None;
    restored.metadata.deletion_timestamp = None;
    restored.metadata.deletion_grace_period_seconds = None;
    restored.metadata.generation = None;
    secrets.create(&PostParams::default(), &restored).await?;
    let restored_at = Instant::now();
    eprintln!("restored Secret {ca_name}");
    wait_for(
        "Degraded to no longer say CaSecretMissing",
        Duration::from_secs(120),
        || async {
            Ok(match degraded(h).await? {
                Some((status, reason, _)) => status != "True" || reason != "CaSecretMissing",
                None => true,
            })
        },
    )
    .await?;
    eprintln!(
        "Degraded after the restore ({:?}): {:?}",
        restored_at.elapsed(),
        degraded(h).await?
    );
    h.wait_available(CLUSTER, 3, Duration::from_secs(120))
        .await?;
    let now = secrets.get(&ca_name).await?;
    if now.data != saved.data {
        return Err("the restored CA Secret was replaced".into());
    }
    let after_restore = leaves(secrets).await?;
    for (name, (_, ca)) in &before {
        match after_restore.get(name) {
            Some((_, now)) if now == ca => {}
            other => {
                return Err(
                    format!("{name} carries another CA after the restore: {other:?}").into(),
                );
            }
        }
    }
    let (acknowledged_end, _, longest) = ledger_now(ledger)?;
    if acknowledged_end <= acknowledged {
        return Err("no write acknowledged after the CA Secret was restored".into());
    }
    if longest >= LONGEST_GAP {
        return Err(format!("{longest:?} between acknowledged writes").into());
    }
    Ok(())
}
