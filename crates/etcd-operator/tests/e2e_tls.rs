//! End to end on the lab: a cluster with mutual TLS from the built-in CA
//! (`spec.tls: {builtIn: {}}`).
//!
//! Three members come up serving TLS on their client and peer ports and
//! asking every client for a certificate. A user's client with the
//! cluster's `<cluster>-client-tls` Secret writes and reads; a client that
//! trusts the CA but presents no certificate is refused, and so is plain
//! HTTP. The member Pods carry the CIS etcd benchmark's section 2 flags.
//! A member Pod deleted comes back and rejoins over peer TLS while the
//! writes go on. A full backup (`EtcdBackup`) of the TLS cluster succeeds,
//! through the operator's own client certificate; continuous backup
//! follows the writes after it, and a new TLS cluster restored from them
//! (its own CA) holds every one.

use std::time::Duration;

use etcd_client::{Certificate, Client, ConnectOptions, Identity, TlsOptions};
use etcd_operator::api::{BackupPhase, EtcdBackup, EtcdBackupSchedule};
use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use kube::api::{DeleteParams, ListParams, PostParams};
use serde_json::json;
use test_kit::TestResult;
use test_kit::e2e::{Harness, cluster_spec_with};
use test_kit::poll::wait_for;

const CLUSTER: &str = "secure";
const RESTORED: &str = "secure-restored";

#[test]
fn a_tls_cluster_serves_only_clients_with_a_certificate_and_backs_up() {
    test_kit::e2e::run("tls", env!("CARGO_BIN_EXE_etcd-operator"), |h| {
        Box::pin(scenario(h))
    });
}

/// The PEM values of the user client Secret: CA bundle, certificate, key.
async fn client_material(h: &Harness, cluster: &str) -> TestResult<(String, String, String)> {
    let secrets: Api<Secret> = Api::namespaced(h.client.clone(), &h.namespace);
    let secret = secrets.get(&format!("{cluster}-client-tls")).await?;
    let data = secret.data.ok_or("no data in the client Secret")?;
    let text = |key: &str| -> TestResult<String> {
        Ok(String::from_utf8(
            data.get(key).ok_or(format!("no {key}"))?.0.clone(),
        )?)
    };
    Ok((text("ca.crt")?, text("tls.crt")?, text("tls.key")?))
}

/// A client of the cluster over TLS, presenting `identity` when given.
async fn tls_client(
    h: &Harness,
    cluster: &str,
    ca: &str,
    identity: Option<(&str, &str)>,
) -> TestResult<Client> {
    let mut tls = TlsOptions::new()
        .ca_certificate(Certificate::from_pem(ca))
        .domain_name(format!(
            "{cluster}-client.{}.svc.cluster.local",
            h.namespace
        ));
    if let Some((cert, key)) = identity {
        tls = tls.identity(Identity::from_pem(cert, key));
    }
    let endpoints: Vec<String> = h
        .member_ips(cluster)
        .await?
        .iter()
        .map(|ip| format!("https://{ip}:2379"))
        .collect();
    let options = ConnectOptions::new()
        .with_connect_timeout(Duration::from_secs(3))
        .with_timeout(Duration::from_secs(5))
        .with_tls(tls);
    Ok(Client::connect(endpoints, Some(options)).await?)
}

async fn scenario(h: &mut Harness) -> TestResult {
    h.create_available(
        CLUSTER,
        cluster_spec_with(3, "lab-network", json!({ "tls": { "builtIn": {} } })),
        Duration::from_secs(180),
    )
    .await?;

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
    let (ca, cert, key) = client_material(h, CLUSTER).await?;
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

    // A full backup through the operator's client certificate.
    h.create_claim("tls-backups").await?;
    let backups: Api<EtcdBackup> = Api::namespaced(h.client.clone(), &h.namespace);
    backups
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "apiVersion": "durable-etcd.io/v1alpha1",
                "kind": "EtcdBackup",
                "metadata": { "name": "secure-full" },
                "spec": {
                    "clusterName": CLUSTER,
                    "destination": { "persistentVolumeClaim": { "claimName": "tls-backups" } },
                },
            }))?,
        )
        .await?;
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
    let (ca, cert, key) = client_material(h, RESTORED).await?;
    let mut restored = tls_client(h, RESTORED, &ca, Some((&cert, &key))).await?;
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
    Ok(())
}
