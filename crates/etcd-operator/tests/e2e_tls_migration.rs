//! End to end on the lab: TLS turned on for a running 3-member plaintext
//! cluster (`spec.tls.disabled` → `spec.tls: {builtIn: {}}`) under a
//! continuous writer.
//!
//! The writer is a client as a user migrating runs one: plain HTTP to the
//! members' client port until the user client Secret `<cluster>-client-tls`
//! exists, then TLS with its certificate whenever that works, plain HTTP
//! when it does not yet (a member that serves plain HTTP only), retrying a
//! failed write on the members that are up. The operator rolls the
//! members to serve clients on both and peers on plain HTTP and TLS,
//! moves each peer URL to TLS, rolls them again, moves each back to port
//! 2380, and rolls them to TLS alone.
//!
//! Checked: `status.transport` walks Plaintext → BridgingPeers →
//! ReturningPeers → Tls; the member list's peer URLs all end as
//! `https://…:2380`; no write fails for good; the writer moved to TLS
//! before plain HTTP stopped; every acknowledged write is there; the
//! cluster ID and member IDs are unchanged; a plain-HTTP client and a TLS
//! client without a certificate are refused at the end.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use etcd_client::Client;
use etcd_operator::api::EtcdCluster;
use etcd_operator::transport::Transport;
use kube::Api;
use serde_json::json;
use test_kit::TestResult;
use test_kit::e2e::{Harness, cluster_spec_with, etcd_at, keys_under};
use test_kit::poll::wait_for;
use test_kit::tls_client::{
    ClientMaterial, client_material, client_service_name, connect, read_client_material, tls_client,
};
use test_kit::writer::ready_ips_of;

const CLUSTER: &str = "migrating";
const PREFIX: &str = "/migrating/";
/// A write is retried for this long before it counts as failed.
const RETRY_FOR: Duration = Duration::from_secs(20);
/// How often the writer tries TLS while it cannot use it.
const TLS_RETRY: Duration = Duration::from_secs(2);

#[test]
fn tls_is_turned_on_for_a_running_plaintext_cluster_with_no_failed_write_and_nothing_lost() {
    test_kit::e2e::run("tls-migration", env!("CARGO_BIN_EXE_etcd-operator"), |h| {
        Box::pin(scenario(h))
    });
}

/// What the writer counted.
#[derive(Default)]
struct Counts {
    acknowledged: Vec<usize>,
    /// Writes acknowledged over plain HTTP and over TLS.
    over_http: usize,
    over_tls: usize,
    /// The number of the first write acknowledged over TLS, and the last
    /// over plain HTTP.
    first_tls: Option<usize>,
    last_http: Option<usize>,
    /// Writes not acknowledged after [`RETRY_FOR`].
    failed: usize,
    /// Attempts that failed and were retried.
    retried: usize,
}

/// The user's two ways in: the client Secret (once it exists) and the
/// member Pods that are Ready.
#[derive(Clone)]
struct UserSide {
    secrets: Api<k8s_openapi::api::core::v1::Secret>,
    pods: Api<k8s_openapi::api::core::v1::Pod>,
    server_name: String,
}

impl UserSide {
    async fn ready_ips(&self) -> TestResult<Vec<String>> {
        let ips = ready_ips_of(&self.pods, &members()).await?;
        if ips.is_empty() {
            return Err("no member is ready".into());
        }
        Ok(ips)
    }

    async fn tls(&self, m: &ClientMaterial) -> TestResult<Client> {
        let endpoints = self
            .ready_ips()
            .await?
            .into_iter()
            .map(|ip| format!("https://{ip}:2379"))
            .collect();
        connect(
            endpoints,
            &self.server_name,
            &m.ca,
            Some((&m.cert, &m.key)),
            Duration::from_secs(3),
        )
        .await
    }

    async fn http(&self) -> TestResult<Client> {
        let endpoints = self
            .ready_ips()
            .await?
            .into_iter()
            .map(|ip| format!("http://{ip}:2379"))
            .collect();
        etcd_at(endpoints).await
    }
}

/// The cluster's member Pods.
fn members() -> kube::api::ListParams {
    kube::api::ListParams::default().labels(&format!(
        "durable-etcd.io/cluster={CLUSTER},app.kubernetes.io/name=etcd"
    ))
}

/// Writes `<PREFIX>NNNNNN` until `stop`, as described in the module.
async fn write_as_a_user(h: UserSide, stop: Arc<AtomicBool>, written: Arc<AtomicUsize>) -> Counts {
    let mut counts = Counts::default();
    let mut secure: Option<Client> = None;
    let mut plain: Option<Client> = None;
    let mut tls_tried = Instant::now() - TLS_RETRY;
    let mut n = 0usize;
    while !stop.load(Ordering::Relaxed) {
        let key = format!("{PREFIX}{n:06}");
        let started = Instant::now();
        let mut acknowledged = None;
        while started.elapsed() < RETRY_FOR && acknowledged.is_none() {
            // TLS once the Secret is there and a member serves it (tried
            // again every TLS_RETRY), plain HTTP otherwise.
            if secure.is_none() && tls_tried.elapsed() >= TLS_RETRY {
                tls_tried = Instant::now();
                if let Ok(material) = read_client_material(&h.secrets, CLUSTER).await {
                    secure = h.tls(&material).await.ok();
                }
            }
            if let Some(c) = secure.as_mut() {
                if c.put(key.clone(), format!("v{n}"), None).await.is_ok() {
                    acknowledged = Some(true);
                    break;
                }
                secure = None;
            }
            if plain.is_none() {
                plain = h.http().await.ok();
            }
            if let Some(c) = plain.as_mut() {
                if c.put(key.clone(), format!("v{n}"), None).await.is_ok() {
                    acknowledged = Some(false);
                    break;
                }
                plain = None;
            }
            counts.retried += 1;
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        match acknowledged {
            Some(over_tls) => {
                counts.acknowledged.push(n);
                if over_tls {
                    counts.over_tls += 1;
                    counts.first_tls.get_or_insert(n);
                } else {
                    counts.over_http += 1;
                    counts.last_http = Some(n);
                }
                written.store(counts.acknowledged.len(), Ordering::Relaxed);
            }
            None => {
                eprintln!("write {key} failed for {RETRY_FOR:?}");
                counts.failed += 1;
            }
        }
        n += 1;
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    counts
}

async fn member_ids(client: &mut Client) -> TestResult<(u64, BTreeSet<u64>)> {
    let members = client.member_list().await?;
    let cluster = members.header().map(|h| h.cluster_id()).unwrap_or_default();
    Ok((cluster, members.members().iter().map(|m| m.id()).collect()))
}

async fn peer_urls(client: &mut Client) -> TestResult<Vec<String>> {
    let members = client.member_list().await?;
    Ok(members
        .members()
        .iter()
        .flat_map(|m| m.peer_urls().to_vec())
        .collect())
}

async fn scenario(h: &mut Harness) -> TestResult {
    h.create_available(
        CLUSTER,
        cluster_spec_with(3, "lab-network", json!({ "tls": { "disabled": true } })),
        Duration::from_secs(180),
    )
    .await?;
    let clusters: Api<EtcdCluster> = Api::namespaced(h.client.clone(), &h.namespace);
    let transport = |c: &EtcdCluster| c.status.as_ref().and_then(|s| s.transport);
    assert_eq!(
        transport(&clusters.get(CLUSTER).await?),
        Some(Transport::Plaintext)
    );
    let user = UserSide {
        secrets: Api::namespaced(h.client.clone(), &h.namespace),
        pods: h.pods.clone(),
        server_name: client_service_name(h, CLUSTER),
    };
    // Available says quorum; the writer dials members whose Pod is Ready.
    wait_for(
        "the members' Pods to be Ready",
        Duration::from_secs(60),
        || async { Ok(user.ready_ips().await.is_ok_and(|ips| ips.len() == 3)) },
    )
    .await?;
    let mut plain = user.http().await?;
    let identity = member_ids(&mut plain).await?;
    assert!(
        peer_urls(&mut plain)
            .await?
            .iter()
            .all(|u| u.starts_with("http://")),
        "a plaintext member list"
    );

    let stop = Arc::new(AtomicBool::new(false));
    let written = Arc::new(AtomicUsize::new(0));
    let writer = tokio::spawn(write_as_a_user(user.clone(), stop.clone(), written.clone()));
    wait_for(
        "the writer's first writes",
        Duration::from_secs(30),
        || async { Ok(written.load(Ordering::Relaxed) >= 20) },
    )
    .await?;

    h.patch_spec(
        CLUSTER,
        json!({ "tls": { "disabled": false, "builtIn": {} } }),
    )
    .await?;
    let started = Instant::now();
    let mut stages: Vec<Transport> = vec![Transport::Plaintext];
    loop {
        let cluster = clusters.get(CLUSTER).await?;
        if let Some(stage) = transport(&cluster)
            && stages.last() != Some(&stage)
        {
            eprintln!(
                "{:?}: {stage:?} ({} writes acknowledged)",
                started.elapsed(),
                written.load(Ordering::Relaxed)
            );
            stages.push(stage);
        }
        let status = cluster.status.unwrap_or_default();
        if stages.last() == Some(&Transport::Tls)
            && status.updated_members == 3
            && status.ready_members == 3
        {
            break;
        }
        if started.elapsed() > Duration::from_secs(900) {
            return Err(format!("TLS was not on in 900 s: stages {stages:?}, {status:?}").into());
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    eprintln!("TLS on in {:?}: {stages:?}", started.elapsed());
    h.wait_available(CLUSTER, 3, Duration::from_secs(180))
        .await?;
    tokio::time::sleep(Duration::from_secs(5)).await;
    stop.store(true, Ordering::Relaxed);
    let counts = writer.await?;
    assert_eq!(
        stages,
        [
            Transport::Plaintext,
            Transport::BridgingPeers,
            Transport::ReturningPeers,
            Transport::Tls
        ]
    );

    let material = client_material(h, CLUSTER).await?;
    let mut secure = tls_client(
        h,
        CLUSTER,
        &material.ca,
        Some((&material.cert, &material.key)),
    )
    .await?;
    let urls = peer_urls(&mut secure).await?;
    assert!(
        urls.iter()
            .all(|u| u.starts_with("https://") && u.ends_with(":2380")),
        "every peer URL serves TLS on 2380: {urls:?}"
    );
    assert_eq!(
        member_ids(&mut secure).await?,
        identity,
        "the same cluster and members"
    );

    // Plain HTTP and a client without a certificate are refused now.
    let plain_accepted = match user.http().await {
        Ok(mut c) => c.put(format!("{PREFIX}plain"), "x", None).await.is_ok(),
        Err(_) => false,
    };
    assert!(
        !plain_accepted,
        "a plain-HTTP client was served after the change"
    );
    let anonymous_accepted = match tls_client(h, CLUSTER, &material.ca, None).await {
        Ok(mut c) => c.put(format!("{PREFIX}anonymous"), "x", None).await.is_ok(),
        Err(_) => false,
    };
    assert!(
        !anonymous_accepted,
        "a client without a certificate was served"
    );

    // Every acknowledged write is there.
    let stored = keys_under(&mut secure, PREFIX).await?;
    let lost: Vec<usize> = counts
        .acknowledged
        .iter()
        .copied()
        .filter(|n| !stored.contains(&format!("{PREFIX}{n:06}")))
        .collect();
    eprintln!(
        "writer: {} acknowledged ({} over plain HTTP, {} over TLS; first over TLS #{:?}, last over plain HTTP #{:?}), {} failed, {} attempts retried, {} lost",
        counts.acknowledged.len(),
        counts.over_http,
        counts.over_tls,
        counts.first_tls,
        counts.last_http,
        counts.failed,
        counts.retried,
        lost.len()
    );
    assert_eq!(counts.failed, 0, "no write failed for good");
    assert!(lost.is_empty(), "acknowledged writes lost: {lost:?}");
    assert!(
        counts.over_http > 0 && counts.over_tls > 0,
        "the writer moved from plain HTTP to TLS"
    );
    assert!(
        counts.acknowledged.len() > 200,
        "the writer wrote throughout"
    );
    Ok(())
}
