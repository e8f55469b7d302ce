//! End to end on the lab: a cluster with mutual TLS from the built-in CA,
//! created without `spec.tls` (the default, `status.transport: Tls`), in
//! a namespace that enforces the
//! `restricted` Pod Security Standard (a Pod that breaks it is refused
//! there; every Pod of the test runs in it: members, the claim's backup
//! store, restore Pods).
//!
//! Three members come up serving TLS on their client and peer ports and
//! asking every client for a certificate. A user's client with the
//! cluster's `<cluster>-client-tls` Secret writes and reads; a client that
//! trusts the CA but presents no certificate is refused, and so is plain
//! HTTP. The member Pods carry the CIS etcd benchmark's section 2 flags.
//! A member Pod deleted comes back and rejoins over peer TLS while the
//! writes go on. `status.tls` lists every certificate with its serial and
//! expiry. Every certificate renewed on request (the annotation
//! `durable-etcd.io/renew-certificates`) under a continuous writer: no
//! write fails, the members serve the new server and peer certificates
//! without a restart (the kubelet refreshes the mounted Secrets), and the
//! new user certificate works. A full backup (`EtcdBackup`) of the TLS cluster succeeds,
//! through the operator's own client certificate; continuous backup
//! follows the writes after it, and a new TLS cluster restored from them
//! (its own CA) holds every one. A CA key made unusable is reported in
//! `Degraded` (reason `CertificatesFailed`) and cleared once it is back.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use etcd_client::{Client, ConnectOptions};
use etcd_operator::api::{BackupPhase, EtcdBackup, EtcdBackupSchedule, EtcdCluster};
use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;
use test_kit::TestResult;
use test_kit::e2e::{Harness, cluster_spec_with};
use test_kit::poll::wait_for;
use test_kit::tls_client::{
    client_material, client_service_name, read_secret_material, secret_certificate,
    served_certificate, tls_client,
};

const CLUSTER: &str = "secure";
const RESTORED: &str = "secure-restored";

#[test]
fn a_tls_cluster_serves_only_clients_with_a_certificate_and_backs_up() {
    test_kit::e2e::run("tls", env!("CARGO_BIN_EXE_etcd-operator"), |h| {
        Box::pin(scenario(h))
    });
}

/// The test's namespace enforces the `restricted` Pod Security Standard;
/// a Pod that breaks it is refused (the lab's API server enforces it).
async fn enforce_restricted(h: &Harness) -> TestResult {
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(h.client.clone());
    namespaces
        .patch(
            &h.namespace,
            &PatchParams::default(),
            &Patch::Merge(json!({ "metadata": { "labels": {
                "pod-security.kubernetes.io/enforce": "restricted",
                "pod-security.kubernetes.io/enforce-version": "latest",
            } } })),
        )
        .await?;
    let careless: k8s_openapi::api::core::v1::Pod = serde_json::from_value(json!({
        "metadata": { "name": "careless" },
        "spec": { "containers": [{ "name": "c", "image": "etcd", "command": ["sleep", "1"] }] },
    }))?;
    match h.pods.create(&PostParams::default(), &careless).await {
        Err(kube::Error::Api(e)) if e.message.contains("violates PodSecurity") => Ok(()),
        other => {
            Err(format!("a Pod breaking the restricted standard was not refused: {other:?}").into())
        }
    }
}

async fn scenario(h: &mut Harness) -> TestResult {
    enforce_restricted(h).await?;
    // No `spec.tls`: a new cluster serves mutual TLS by default.
    let mut spec = cluster_spec_with(3, "lab-network", json!({}));
    if let Some(fields) = spec.as_object_mut() {
        fields.remove("tls");
    }
    h.create_available(CLUSTER, spec, Duration::from_secs(180))
        .await?;
    let status = h.status(CLUSTER).await?;
    assert_eq!(
        status.transport,
        Some(etcd_operator::transport::Transport::Tls),
        "status.transport of a cluster created without spec.tls"
    );

    // The member Pods: TLS on both ports, certificates demanded (CIS 2.x).
    let pods = h
        .pods
        .list(&ListParams::default().labels(&format!(
            "durable-etcd.io/cluster={CLUSTER},app.kubernetes.io/name=etcd"
        )))
        .await?;
    for pod in &pods.items {
        let args = pod
            .spec
            .as_ref()
            .and_then(|s| s.containers.iter().find(|c| c.name == "etcd"))
            .and_then(|c| c.args.clone())
            .unwrap_or_default();
        for flag in [
            "--client-cert-auth=true",
            "--peer-client-cert-auth=true",
            "--auto-tls=false",
            "--peer-auto-tls=false",
            "--listen-client-urls=https://0.0.0.0:2379",
            "--listen-peer-urls=https://0.0.0.0:2380",
        ] {
            assert!(args.iter().any(|a| a == flag), "{flag} missing: {args:?}");
        }
    }

    // A user with the client Secret writes and reads.
    let material = client_material(h, CLUSTER).await?;
    let (ca, cert, key) = (material.ca, material.cert, material.key);
    let mut user = tls_client(h, CLUSTER, &ca, Some((&cert, &key))).await?;
    for i in 0..200 {
        user.put(format!("/secure/{i:04}"), format!("v{i}"), None)
            .await?;
    }
    let read = user
        .get(
            "/secure/",
            Some(etcd_client::GetOptions::new().with_prefix()),
        )
        .await?;
    assert_eq!(read.kvs().len(), 200);

    // No certificate, or no TLS: refused.
    let refused = async {
        let mut anonymous = tls_client(h, CLUSTER, &ca, None).await?;
        anonymous.put("/secure/anonymous", "x", None).await?;
        TestResult::Ok(())
    }
    .await;
    assert!(refused.is_err(), "a client without a certificate wrote");
    let plain = async {
        let ips = h.member_ips(CLUSTER).await?;
        let options = ConnectOptions::new()
            .with_connect_timeout(Duration::from_secs(3))
            .with_timeout(Duration::from_secs(3));
        let mut plain = Client::connect(
            ips.iter()
                .map(|ip| format!("http://{ip}:2379"))
                .collect::<Vec<_>>(),
            Some(options),
        )
        .await?;
        plain.put("/secure/plain", "x", None).await?;
        TestResult::Ok(())
    }
    .await;
    assert!(plain.is_err(), "a plain-HTTP client wrote");

    // A member Pod deleted rejoins over peer TLS; writes go on.
    let member = format!("{CLUSTER}-1");
    let old_uid = h.pods.get(&member).await?.metadata.uid;
    h.pods.delete(&member, &DeleteParams::default()).await?;
    wait_for(
        "the member Pod to be recreated",
        Duration::from_secs(120),
        || async {
            Ok(h.pods
                .get_opt(&member)
                .await?
                .is_some_and(|p| p.metadata.uid != old_uid))
        },
    )
    .await?;
    h.wait_available(CLUSTER, 3, Duration::from_secs(180))
        .await?;
    let mut user = tls_client(h, CLUSTER, &ca, Some((&cert, &key))).await?;
    wait_for(
        "a write after the member came back",
        Duration::from_secs(60),
        || {
            let mut user = user.clone();
            async move { Ok(user.put("/secure/after", "yes", None).await.is_ok()) }
        },
    )
    .await?;
    let status = user.status().await?;
    eprintln!(
        "after the member came back: leader {:x}, revision {:?}",
        status.leader(),
        status.header().map(|h| h.revision())
    );

    renewal_under_writes(h, &user, &ca).await?;
    an_application_gets_its_own_certificate(h).await?;

    // A full backup through the operator's client certificate.
    h.create_claim("tls-backups").await?;
    h.create_backup_to_claim("secure-full", CLUSTER, "tls-backups", None)
        .await?;
    let backups: Api<EtcdBackup> = Api::namespaced(h.client.clone(), &h.namespace);
    wait_for(
        "the backup of the TLS cluster",
        Duration::from_secs(180),
        || async {
            let status = backups.get("secure-full").await?.status.unwrap_or_default();
            if status.phase == Some(BackupPhase::Failed) {
                return Err(format!("the backup failed: {:?}", status.error).into());
            }
            Ok(status.phase == Some(BackupPhase::Succeeded))
        },
    )
    .await?;
    let status = backups.get("secure-full").await?.status.unwrap_or_default();
    eprintln!(
        "backup of the TLS cluster: revision {:?} at {:?}",
        status.revision, status.location
    );
    assert!(status.revision.unwrap_or_default() >= 201);

    // Continuous backup of the TLS cluster, then a new TLS cluster
    // restored from it.
    let schedules: Api<EtcdBackupSchedule> = Api::namespaced(h.client.clone(), &h.namespace);
    schedules
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "apiVersion": "durable-etcd.io/v1alpha1",
                "kind": "EtcdBackupSchedule",
                "metadata": { "name": "secure-continuous" },
                "spec": {
                    "clusterName": CLUSTER,
                    "schedule": "0 0 1 1 *",
                    "destination": { "persistentVolumeClaim": { "claimName": "tls-backups" } },
                    "incremental": { "enabled": true, "interval": "3s" },
                },
            }))?,
        )
        .await?;
    let mut last = 0;
    for i in 0..100 {
        let response = user
            .put(format!("/secure/later/{i:04}"), format!("l{i}"), None)
            .await?;
        last = response.header().map(|h| h.revision()).unwrap_or_default();
    }
    wait_for(
        "the TLS cluster's writes to be durable in segments",
        Duration::from_secs(120),
        || async {
            let durable = schedules
                .get("secure-continuous")
                .await?
                .status
                .and_then(|s| s.incremental)
                .and_then(|i| i.durable_revision)
                .unwrap_or_default();
            Ok(durable >= last)
        },
    )
    .await?;
    h.create_cluster(
        RESTORED,
        json!({
            "replicas": 1,
            "storage": { "storageClassName": "lab-network", "size": "1Gi" },
            "tls": { "builtIn": {} },
            "bootstrap": { "fromBackup": {
                "destination": { "persistentVolumeClaim": { "claimName": "tls-backups" } },
                "clusterName": CLUSTER,
            } },
        }),
    )
    .await?;
    h.wait_available(RESTORED, 1, Duration::from_secs(300))
        .await?;
    let mut restored = test_kit::tls_client::user_client(h, RESTORED).await?;
    let read = restored
        .get(
            "/secure/",
            Some(etcd_client::GetOptions::new().with_prefix()),
        )
        .await?;
    let keys: Vec<String> = read
        .kvs()
        .iter()
        .filter_map(|kv| kv.key_str().ok().map(str::to_owned))
        .collect();
    let later = keys
        .iter()
        .filter(|k| k.starts_with("/secure/later/"))
        .count();
    eprintln!(
        "restored into a new TLS cluster: {} keys, {later} written after the full backup",
        keys.len()
    );
    assert_eq!(later, 100, "every write durable in a segment is restored");
    assert!(keys.len() >= 301, "{} keys restored", keys.len());

    unusable_ca_is_reported(h).await
}

/// A name added to `spec.tls.clientCertificates` gets its Secret
/// `<cluster>-client-<name>-tls`, whose certificate (common name: the
/// name) writes and reads, listed in `status.tls`; the name removed, the
/// Secret is deleted. No member Pod is restarted by either.
async fn an_application_gets_its_own_certificate(h: &Harness) -> TestResult {
    const APP: &str = "reports";
    let secret_name = format!("{CLUSTER}-client-{APP}-tls");
    let secrets: Api<Secret> = Api::namespaced(h.client.clone(), &h.namespace);
    let clusters: Api<EtcdCluster> = Api::namespaced(h.client.clone(), &h.namespace);
    let members_before = h.pod_uids().await?;
    let set_names = |names: serde_json::Value| {
        let clusters = clusters.clone();
        async move {
            clusters
                .patch(
                    CLUSTER,
                    &PatchParams::default(),
                    &Patch::Merge(json!({ "spec": { "tls": { "clientCertificates": names } } })),
                )
                .await
        }
    };
    set_names(json!([{ "name": APP }])).await?;
    wait_for(
        "the application's client certificate Secret",
        Duration::from_secs(60),
        || async { Ok(secrets.get_opt(&secret_name).await?.is_some()) },
    )
    .await?;
    let material = read_secret_material(&secrets, &secret_name).await?;
    let certificate = secret_certificate(h, &secret_name).await?;
    let (_, parsed) = x509_parser::parse_x509_certificate(&certificate)?;
    let common_name: Vec<String> = parsed
        .subject()
        .iter_common_name()
        .filter_map(|cn| cn.as_str().ok().map(str::to_owned))
        .collect();
    assert_eq!(common_name, vec![APP.to_string()]);
    let mut app = tls_client(
        h,
        CLUSTER,
        &material.ca,
        Some((&material.cert, &material.key)),
    )
    .await?;
    app.put("/secure/reports/1", "from the reports application", None)
        .await?;
    let read = app.get("/secure/reports/1", None).await?;
    assert_eq!(read.kvs().len(), 1, "the application reads what it wrote");
    wait_for(
        "status.tls to list the application's certificate",
        Duration::from_secs(60),
        || async {
            let tls = clusters.get(CLUSTER).await?.status.and_then(|s| s.tls);
            Ok(tls.is_some_and(|tls| tls.certificates.iter().any(|c| c.secret == secret_name)))
        },
    )
    .await?;

    set_names(serde_json::Value::Null).await?;
    wait_for(
        "the removed name's Secret to be deleted",
        Duration::from_secs(60),
        || async { Ok(secrets.get_opt(&secret_name).await?.is_none()) },
    )
    .await?;
    assert_eq!(
        h.pod_uids().await?,
        members_before,
        "adding or removing a client certificate restarted a member"
    );
    eprintln!(
        "application certificate {secret_name}: issued (CN {APP}), used, deleted; no member restarted"
    );
    Ok(())
}

/// A CA Secret whose key is unusable stops the cluster's passes before
/// they act, and says so in `Degraded` (reason `CertificatesFailed`);
/// once the key is back, the next pass clears it.
async fn unusable_ca_is_reported(h: &Harness) -> TestResult {
    use k8s_openapi::ByteString;
    use k8s_openapi::api::core::v1::Secret;
    let secrets: Api<Secret> = Api::namespaced(h.client.clone(), &h.namespace);
    let name = format!("{CLUSTER}-ca");
    let original = secrets.get(&name).await?;
    let key = original
        .data
        .as_ref()
        .and_then(|d| d.get("ca.key"))
        .cloned()
        .ok_or("the CA Secret has no ca.key")?;
    let set_key = |value: ByteString| json!({ "data": { "ca.key": value } });
    secrets
        .patch(
            &name,
            &PatchParams::default(),
            &Patch::Merge(set_key(ByteString(b"not a key".to_vec()))),
        )
        .await?;
    h.annotate_cluster(CLUSTER, "e2e/poke", "unusable-ca")
        .await?;
    let degraded = |reason: &'static str| {
        let clusters: Api<EtcdCluster> = Api::namespaced(h.client.clone(), &h.namespace);
        async move {
            let status = clusters.get(CLUSTER).await?.status.unwrap_or_default();
            let found = status
                .conditions
                .iter()
                .find(|c| c.type_ == "Degraded")
                .filter(|c| c.reason == reason)
                .map(|c| c.message.clone());
            TestResult::Ok(found)
        }
    };
    wait_for(
        "Degraded with reason CertificatesFailed",
        Duration::from_secs(60),
        || async { Ok(degraded("CertificatesFailed").await?.is_some()) },
    )
    .await?;
    let message = degraded("CertificatesFailed").await?.unwrap_or_default();
    eprintln!("with an unusable CA key: {message}");
    assert!(
        message.contains(&format!("Secret {CLUSTER}-ca")),
        "{message}"
    );
    secrets
        .patch(&name, &PatchParams::default(), &Patch::Merge(set_key(key)))
        .await?;
    h.annotate_cluster(CLUSTER, "e2e/poke", "ca-back").await?;
    wait_for(
        "Degraded cleared once the CA key is back",
        Duration::from_secs(60),
        || async { Ok(degraded("AsExpected").await?.is_some()) },
    )
    .await?;
    Ok(())
}

/// Every certificate renewed on request while a writer writes: no write
/// fails, the members serve the renewed certificates, the new user
/// certificate works.
async fn renewal_under_writes(h: &Harness, user: &Client, ca: &str) -> TestResult {
    let clusters: Api<EtcdCluster> = Api::namespaced(h.client.clone(), &h.namespace);
    let tls = clusters
        .get(CLUSTER)
        .await?
        .status
        .and_then(|s| s.tls)
        .ok_or("status.tls is missing")?;
    assert_eq!(tls.issuer, "BuiltIn");
    assert_eq!(tls.certificates.len(), 4, "{:?}", tls.certificates);
    assert!(tls.ca_not_after.is_some());
    let server_before = secret_certificate(h, &format!("{CLUSTER}-server-tls")).await?;
    let peer_before = secret_certificate(h, &format!("{CLUSTER}-peer-tls")).await?;

    // A writer with the user's certificate as it was before the renewal.
    let stop = Arc::new(AtomicBool::new(false));
    let failed = Arc::new(AtomicUsize::new(0));
    let writer = {
        let (stop, failed, mut user) = (stop.clone(), failed.clone(), user.clone());
        tokio::spawn(async move {
            let mut acknowledged = Vec::new();
            let mut n = 0usize;
            while !stop.load(Ordering::Relaxed) {
                match user
                    .put(format!("/secure/renew/{n:05}"), format!("r{n}"), None)
                    .await
                {
                    Ok(_) => acknowledged.push(n),
                    Err(e) => {
                        eprintln!("write {n} failed: {e}");
                        failed.fetch_add(1, Ordering::Relaxed);
                    }
                }
                n += 1;
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            acknowledged
        })
    };

    h.annotate_cluster(CLUSTER, "durable-etcd.io/renew-certificates", "e2e-1")
        .await?;
    wait_for(
        "status.tls.renewedFor to name the request",
        Duration::from_secs(60),
        || async {
            let renewed = clusters.get(CLUSTER).await?.status.and_then(|s| s.tls);
            Ok(renewed.and_then(|t| t.renewed_for).as_deref() == Some("e2e-1"))
        },
    )
    .await?;
    let server_after = secret_certificate(h, &format!("{CLUSTER}-server-tls")).await?;
    let peer_after = secret_certificate(h, &format!("{CLUSTER}-peer-tls")).await?;
    assert_ne!(
        server_after, server_before,
        "the server certificate was renewed"
    );
    assert_ne!(peer_after, peer_before, "the peer certificate was renewed");
    let renewed_at = std::time::Instant::now();

    // The members serve the new certificates without a restart.
    let ips: Vec<IpAddr> = h
        .member_ips(CLUSTER)
        .await?
        .iter()
        .map(|ip| ip.parse())
        .collect::<Result<_, _>>()?;
    let uids: Vec<_> = h
        .pods
        .list(&ListParams::default().labels(&format!("durable-etcd.io/cluster={CLUSTER}")))
        .await?
        .items
        .into_iter()
        .map(|p| p.metadata.uid)
        .collect();
    let client_name = client_service_name(h, CLUSTER);
    let peer_name = format!(
        "{CLUSTER}-0.{CLUSTER}-peer.{}.svc.cluster.local",
        h.namespace
    );
    wait_for(
        "every member to serve the renewed server and peer certificates",
        Duration::from_secs(150),
        || {
            let (ips, ca) = (ips.clone(), ca.to_string());
            let (client_name, peer_name) = (client_name.clone(), peer_name.clone());
            let (server_after, peer_after) = (server_after.clone(), peer_after.clone());
            async move {
                tokio::task::spawn_blocking(move || {
                    Ok(ips.iter().all(|ip| {
                        let client =
                            served_certificate(SocketAddr::new(*ip, 2379), &client_name, &ca);
                        let peer = served_certificate(SocketAddr::new(*ip, 2380), &peer_name, &ca);
                        client.is_ok_and(|c| c == server_after)
                            && peer.is_ok_and(|c| c == peer_after)
                    }))
                })
                .await?
            }
        },
    )
    .await?;
    eprintln!(
        "every member serves the renewed certificates {:?} after the renewal",
        renewed_at.elapsed()
    );
    let uids_after: Vec<_> = h
        .pods
        .list(&ListParams::default().labels(&format!("durable-etcd.io/cluster={CLUSTER}")))
        .await?
        .items
        .into_iter()
        .map(|p| p.metadata.uid)
        .collect();
    assert_eq!(
        uids, uids_after,
        "no member Pod was replaced for the renewal"
    );

    // The renewed user certificate works.
    let mut renewed_user = test_kit::tls_client::user_client(h, CLUSTER).await?;
    renewed_user
        .put("/secure/renewed-user", "yes", None)
        .await?;

    stop.store(true, Ordering::Relaxed);
    let acknowledged = writer.await?;
    let failed = failed.load(Ordering::Relaxed);
    let mut reader = user.clone();
    let stored = reader
        .get(
            "/secure/renew/",
            Some(etcd_client::GetOptions::new().with_prefix()),
        )
        .await?;
    let stored: std::collections::BTreeSet<String> = stored
        .kvs()
        .iter()
        .filter_map(|kv| kv.key_str().ok().map(str::to_owned))
        .collect();
    let lost = acknowledged
        .iter()
        .filter(|n| !stored.contains(&format!("/secure/renew/{n:05}")))
        .count();
    eprintln!(
        "renewal under writes: {} writes acknowledged, {failed} failed, {lost} lost",
        acknowledged.len()
    );
    assert!(acknowledged.len() > 100, "the writer wrote throughout");
    assert_eq!(failed, 0, "no write failed during the renewal");
    assert_eq!(lost, 0, "no acknowledged write lost");
    Ok(())
}
