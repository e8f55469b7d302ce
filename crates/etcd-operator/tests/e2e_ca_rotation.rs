//! End to end on the lab: the CA of a running 3-member TLS cluster
//! replaced twice under one continuous writer: first by the operator
//! itself, because the CA has passed two-thirds of its life (a CA Secret
//! made before the cluster, eight years into a ten-year CA, with
//! `caRotation: Manual` until the writer runs, then `Automatic`), then on a
//! person's request (annotation `durable-etcd.io/rotate-ca`).
//!
//! The writer is a client as users run one: it reads the user client
//! Secret `<cluster>-client-tls` (as a Pod mounting it would), builds a
//! new client whenever the Secret changes or a write fails (a member
//! restarting), and retries a failed write on the members that are up.
//! The operator trusts a new CA beside the old one, issues every
//! certificate from it, then retires the old one, restarting the members
//! one at a time after each step.
//!
//! Checked: nothing rotates while the policy is `Manual`; each rotation
//! completes (`status.tls.caRotatedFor`: `automatic-<serial of the aged
//! CA>`, then the annotation's value), each step only once every member
//! runs the last (the member Pods' template changes three times per
//! rotation, one member at a time); no write fails for good; no member
//! refuses a client's or a peer's certificate meanwhile (their etcd logs:
//! a refusal shows on the refusing side, the client only sees its
//! connection closed); every acknowledged write is there; the cluster ID
//! and member IDs are unchanged; the members serve certificates of the
//! newest CA, which a client trusting only an older CA refuses; a client
//! with an older certificate is refused.

use std::collections::BTreeSet;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use etcd_client::Client;
use std::collections::BTreeMap;

use etcd_operator::api::EtcdCluster;
use etcd_operator::tls::{CertificateAuthority, DEFAULT_CA_LIFETIME};
use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use kube::api::{ObjectMeta, PostParams};
use serde_json::json;
use test_kit::TestResult;
use test_kit::e2e::{Harness, cluster_spec_with, keys_under};
use test_kit::poll::wait_for;
use test_kit::tls_client::{
    ClientMaterial, client_material, client_service_name, connect, read_client_material,
    served_certificate, tls_client,
};
use test_kit::writer::ready_ips_of;

const CLUSTER: &str = "rotating";
const PREFIX: &str = "/rotating/";
/// A write is retried for this long before it counts as failed.
const RETRY_FOR: Duration = Duration::from_secs(20);

#[test]
fn the_ca_is_rotated_with_no_failed_write_and_nothing_lost() {
    test_kit::e2e::run("ca-rotation", env!("CARGO_BIN_EXE_etcd-operator"), |h| {
        Box::pin(scenario(h))
    });
}

/// What the writer counted.
#[derive(Default)]
struct Counts {
    acknowledged: Vec<usize>,
    /// Writes not acknowledged after [`RETRY_FOR`].
    failed: usize,
    /// Attempts that failed and were retried.
    retried: usize,
    /// Attempts that failed on a certificate (must be none).
    certificate_errors: Vec<String>,
    /// Times the client Secret changed under the writer.
    reloads: usize,
}

/// Whether an error (its debug form, with its sources) is a TLS
/// verification failure.
fn is_certificate_error(error: &impl std::fmt::Debug) -> bool {
    let text = format!("{error:?}").to_lowercase();
    [
        "certificate",
        "unknownissuer",
        "handshake",
        "badsignature",
        "tls alert",
    ]
    .iter()
    .any(|word| text.contains(word))
}

/// Writes `<PREFIX>NNNNNN` until `stop`, as described in the module.
async fn write_as_a_user(h: UserSide, stop: Arc<AtomicBool>, written: Arc<AtomicUsize>) -> Counts {
    let mut counts = Counts::default();
    let mut material: Option<ClientMaterial> = None;
    let mut client: Option<Client> = None;
    let mut n = 0usize;
    while !stop.load(Ordering::Relaxed) {
        let key = format!("{PREFIX}{n:06}");
        let started = Instant::now();
        let mut acknowledged = false;
        while started.elapsed() < RETRY_FOR {
            // The Secret as a mounted file shows it now.
            if let Ok(now) = h.material().await
                && material.as_ref() != Some(&now)
            {
                if material.is_some() {
                    counts.reloads += 1;
                }
                material = Some(now);
                client = None;
            }
            if client.is_none()
                && let Some(m) = &material
            {
                client = h.client(m).await.ok();
            }
            let Some(c) = client.as_mut() else {
                tokio::time::sleep(Duration::from_millis(200)).await;
                continue;
            };
            match c.put(key.clone(), format!("v{n}"), None).await {
                Ok(_) => {
                    acknowledged = true;
                    break;
                }
                Err(e) => {
                    if is_certificate_error(&e) {
                        counts.certificate_errors.push(format!("{key}: {e:?}"));
                    }
                    counts.retried += 1;
                    client = None;
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
            }
        }
        if acknowledged {
            counts.acknowledged.push(n);
            written.store(counts.acknowledged.len(), Ordering::Relaxed);
        } else {
            eprintln!("write {key} failed for {RETRY_FOR:?}");
            counts.failed += 1;
        }
        n += 1;
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    counts
}

/// What the user's writer reads: the client Secret and the member Pods.
#[derive(Clone)]
struct UserSide {
    secrets: Api<k8s_openapi::api::core::v1::Secret>,
    pods: Api<k8s_openapi::api::core::v1::Pod>,
    server_name: String,
}

impl UserSide {
    async fn material(&self) -> TestResult<ClientMaterial> {
        read_client_material(&self.secrets, CLUSTER).await
    }

    /// A client on the members whose Pod is Ready now.
    async fn client(&self, m: &ClientMaterial) -> TestResult<Client> {
        let list = kube::api::ListParams::default().labels(&format!(
            "durable-etcd.io/cluster={CLUSTER},app.kubernetes.io/name=etcd"
        ));
        let endpoints: Vec<String> = ready_ips_of(&self.pods, &list)
            .await?
            .into_iter()
            .map(|ip| format!("https://{ip}:2379"))
            .collect();
        if endpoints.is_empty() {
            return Err("no member is ready".into());
        }
        connect(
            endpoints,
            &self.server_name,
            &m.ca,
            Some((&m.cert, &m.key)),
            Duration::from_secs(3),
        )
        .await
    }
}

/// Every connection a member of the test's namespace refused for its
/// certificate, from the members' etcd logs on the lab's nodes (etcd logs
/// `rejected connection` with the TLS error).
fn certificate_refusals(h: &Harness) -> TestResult<Vec<String>> {
    let nodes = h.lab.paths().root().join("logs/nodes");
    let mut refusals = Vec::new();
    for node in std::fs::read_dir(&nodes)? {
        let pods = node?.path().join("pods");
        let Ok(pods) = std::fs::read_dir(&pods) else {
            continue;
        };
        for pod in pods {
            let pod = pod?.path();
            let ours = pod
                .file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with(&format!("{}_", h.namespace)));
            let Ok(log) = std::fs::read_to_string(pod.join("etcd.log")) else {
                continue;
            };
            if !ours {
                continue;
            }
            refusals.extend(
                log.lines()
                    .filter(|line| line.contains("rejected connection"))
                    .filter(|line| line.contains("tls:") || line.contains("x509"))
                    .map(str::to_owned),
            );
        }
    }
    Ok(refusals)
}

async fn member_ids(client: &mut Client) -> TestResult<(u64, BTreeSet<u64>)> {
    let members = client.member_list().await?;
    let cluster = members.header().map(|h| h.cluster_id()).unwrap_or_default();
    Ok((cluster, members.members().iter().map(|m| m.id()).collect()))
}

/// Whether the PEM bundle `bundle` holds the certificate `ca` (PEM).
fn trusts(bundle: &str, ca: &str) -> bool {
    let body = |pem: &str| -> String {
        pem.lines()
            .filter(|line| !line.starts_with("-----"))
            .collect::<String>()
    };
    bundle
        .split_inclusive("-----END CERTIFICATE-----")
        .any(|block| body(block) == body(ca))
}

/// A CA eight years into its ten years: past its renewal point.
fn aged_ca() -> TestResult<CertificateAuthority> {
    let born = chrono::Utc::now() - chrono::TimeDelta::days(8 * 365);
    Ok(CertificateAuthority::generate(
        "rotating etcd CA (aged)",
        DEFAULT_CA_LIFETIME,
        born,
    )?)
}

/// Waits until the rotation of `request` is done; returns the Pod
/// templates seen meanwhile.
async fn rotation_done(clusters: &Api<EtcdCluster>, request: &str) -> TestResult<BTreeSet<String>> {
    let started = Instant::now();
    let mut steps_seen: Vec<String> = Vec::new();
    let mut templates = BTreeSet::new();
    loop {
        let status = clusters.get(CLUSTER).await?.status.unwrap_or_default();
        if let Some(hash) = status.pod_template_hash {
            templates.insert(hash);
        }
        let tls = status.tls.unwrap_or_default();
        if let Some(rotation) = &tls.ca_rotation {
            let step = rotation
                .next_step
                .map_or("(restarts onto the new CA alone)".to_string(), |s| {
                    s.to_string()
                });
            let seen = format!("{}: {step}", rotation.requested_for);
            if steps_seen.last() != Some(&seen) {
                eprintln!("{:?}: next {seen}", started.elapsed());
                steps_seen.push(seen);
            }
        }
        if tls.ca_rotated_for.as_deref() == Some(request) {
            break;
        }
        if started.elapsed() > Duration::from_secs(600) {
            return Err(
                format!("the CA rotation {request} did not complete in 600 s: {tls:?}").into(),
            );
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    eprintln!(
        "CA rotation {request} done in {:?}; steps seen pending: {steps_seen:?}; Pod templates: {}",
        started.elapsed(),
        templates.len()
    );
    Ok(templates)
}

async fn scenario(h: &mut Harness) -> TestResult {
    // The cluster's CA, made before it: eight years into ten.
    let aged = aged_ca()?;
    let secrets: Api<Secret> = Api::namespaced(h.client.clone(), &h.namespace);
    let ca_secret = Secret {
        metadata: ObjectMeta {
            name: Some(format!("{CLUSTER}-ca")),
            ..ObjectMeta::default()
        },
        string_data: Some(BTreeMap::from([
            ("ca.crt".to_string(), aged.cert_pem().to_string()),
            ("ca.key".to_string(), aged.key_pem().to_string()),
        ])),
        ..Secret::default()
    };
    secrets.create(&PostParams::default(), &ca_secret).await?;
    h.create_available(
        CLUSTER,
        cluster_spec_with(
            3,
            "lab-network",
            json!({ "tls": { "builtIn": { "caRotation": "Manual" } } }),
        ),
        Duration::from_secs(180),
    )
    .await?;
    let before = client_material(h, CLUSTER).await?;
    assert!(
        trusts(&before.ca, aged.cert_pem()),
        "the cluster trusts the CA made before it"
    );
    let mut old_user =
        tls_client(h, CLUSTER, &before.ca, Some((&before.cert, &before.key))).await?;
    let identity = member_ids(&mut old_user).await?;

    let stop = Arc::new(AtomicBool::new(false));
    let written = Arc::new(AtomicUsize::new(0));
    let user = UserSide {
        secrets: secrets.clone(),
        pods: h.pods.clone(),
        server_name: client_service_name(h, CLUSTER),
    };
    let writer = tokio::spawn(write_as_a_user(user, stop.clone(), written.clone()));
    wait_for(
        "the writer's first writes",
        Duration::from_secs(30),
        || async { Ok(written.load(Ordering::Relaxed) >= 20) },
    )
    .await?;

    // Under `Manual`, the aged CA is left alone.
    let clusters: Api<EtcdCluster> = Api::namespaced(h.client.clone(), &h.namespace);
    let tls = clusters
        .get(CLUSTER)
        .await?
        .status
        .unwrap_or_default()
        .tls
        .unwrap_or_default();
    assert!(
        tls.ca_rotation.is_none() && tls.ca_rotated_for.is_none(),
        "no rotation under caRotation: Manual: {tls:?}"
    );

    // `Automatic`: the operator rotates the aged CA by itself.
    h.patch_spec(
        CLUSTER,
        json!({ "tls": { "builtIn": { "caRotation": "Automatic" } } }),
    )
    .await?;
    let automatic = format!("automatic-{}", aged.facts().serial);
    let mut templates = rotation_done(&clusters, &automatic).await?;
    h.wait_available(CLUSTER, 3, Duration::from_secs(180))
        .await?;
    let middle = client_material(h, CLUSTER).await?;
    assert!(
        !trusts(&middle.ca, aged.cert_pem()),
        "the aged CA is no longer trusted"
    );
    let ca_not_after = clusters
        .get(CLUSTER)
        .await?
        .status
        .and_then(|s| s.tls)
        .and_then(|t| t.ca_not_after)
        .ok_or("no status.tls.caNotAfter")?;
    let years_left = ca_not_after
        .0
        .duration_since(k8s_openapi::jiff::Timestamp::now())
        .as_secs()
        / (365 * 24 * 3600);
    assert!(
        years_left >= 9,
        "the new CA is young: {years_left} years left ({ca_not_after:?})"
    );
    let automatic_templates = templates.len();

    // A person asks for another rotation.
    h.annotate_cluster(CLUSTER, "durable-etcd.io/rotate-ca", "e2e-rotation")
        .await?;
    templates.extend(rotation_done(&clusters, "e2e-rotation").await?);
    h.wait_available(CLUSTER, 3, Duration::from_secs(180))
        .await?;
    // Let the writer pass the last restart, then stop it.
    tokio::time::sleep(Duration::from_secs(5)).await;
    stop.store(true, Ordering::Relaxed);
    let counts = writer.await?;

    // No member refused a client or a peer for its certificate meanwhile
    // (a refusal shows on the refusing side only: the client sees its
    // connection closed).
    let refusals = certificate_refusals(h)?;
    assert!(
        refusals.is_empty(),
        "members refused certificates during the rotation: {refusals:#?}"
    );

    // The members serve certificates of the new CA only.
    let after = client_material(h, CLUSTER).await?;
    assert_ne!(after.ca, middle.ca, "the trust bundle changed");
    let ips: Vec<IpAddr> = h
        .member_ips(CLUSTER)
        .await?
        .iter()
        .map(|ip| ip.parse())
        .collect::<Result<_, _>>()?;
    let name = client_service_name(h, CLUSTER);
    for ip in &ips {
        let address = SocketAddr::new(*ip, 2379);
        let (new_ca, old_ca, name) = (after.ca.clone(), middle.ca.clone(), name.clone());
        let (with_new, with_old) = tokio::task::spawn_blocking(move || {
            (
                served_certificate(address, &name, &new_ca).is_ok(),
                served_certificate(address, &name, &old_ca).is_ok(),
            )
        })
        .await?;
        assert!(with_new, "{ip} serves a certificate of the new CA");
        assert!(
            !with_old,
            "{ip}'s certificate is not trusted by the old CA alone"
        );
    }
    // The older certificates no longer open the door; the new one does.
    for older in [&before, &middle] {
        let accepted =
            match tls_client(h, CLUSTER, &after.ca, Some((&older.cert, &older.key))).await {
                Ok(mut old) => old
                    .put(format!("{PREFIX}old-certificate"), "x", None)
                    .await
                    .is_ok(),
                Err(_) => false,
            };
        assert!(!accepted, "a certificate of a retired CA was accepted");
    }
    let mut new_user = tls_client(h, CLUSTER, &after.ca, Some((&after.cert, &after.key))).await?;
    assert_eq!(
        member_ids(&mut new_user).await?,
        identity,
        "the same cluster and members"
    );

    // Every acknowledged write is there.
    let stored = keys_under(&mut new_user, PREFIX).await?;
    let lost: Vec<usize> = counts
        .acknowledged
        .iter()
        .copied()
        .filter(|n| !stored.contains(&format!("{PREFIX}{n:06}")))
        .collect();
    eprintln!(
        "writer: {} acknowledged, {} failed, {} attempts retried, {} certificate errors, {} reloads of the client Secret, {} lost",
        counts.acknowledged.len(),
        counts.failed,
        counts.retried,
        counts.certificate_errors.len(),
        counts.reloads,
        lost.len()
    );
    assert!(
        counts.certificate_errors.is_empty(),
        "attempts failed on a certificate: {:?}",
        counts.certificate_errors
    );
    assert_eq!(counts.failed, 0, "no write failed for good");
    assert!(lost.is_empty(), "acknowledged writes lost: {lost:?}");
    assert!(
        counts.acknowledged.len() > 200,
        "the writer wrote throughout"
    );
    assert!(
        counts.reloads >= 4,
        "the client Secret changed under the writer"
    );
    assert!(
        automatic_templates >= 4 && templates.len() >= 7,
        "the members restarted after each of the three steps of both rotations: {templates:?}"
    );
    Ok(())
}
