//! End to end on the lab: a 3-member cluster whose certificates the real
//! cert-manager controller issues (`spec.tls.certManager`), from a CA
//! issuer made as cert-manager's documentation makes one.
//!
//! Checked: the operator makes a `Certificate` per leaf (server, peer, the
//! users' client, its own, one named client) and the cluster turns
//! Available on what cert-manager issued (`status.tls.issuer:
//! CertManager`, the certificates listed with their serials); the members
//! serve certificates of the issuer's CA; a user with `<cluster>-client-tls`
//! writes and reads, and the named client's certificate (common name
//! `app`) too; a client without a certificate is refused. cert-manager
//! renews the server certificate when asked (as `cmctl renew` asks: the
//! `Issuing` condition): the members serve the new one without a restart.
//! A client certificate whose name leaves the spec has its `Certificate`
//! and Secret deleted, and `status.tls` (read again at that change) shows
//! the renewed serial.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use k8s_openapi::api::core::v1::Secret;
use kube::api::{DynamicObject, ListParams, Patch, PatchParams};
use kube::{Api, ResourceExt};
use serde_json::json;
use test_kit::TestResult;
use test_kit::e2e::cert_manager::{CertManagerProcess, ca_issuer, install_crds, resource};
use test_kit::e2e::{Harness, cluster_spec_with};
use test_kit::poll::wait_for;
use test_kit::tls_client::{
    client_material, client_service_name, read_secret_material, secret_certificate,
    served_certificate, tls_client,
};

const CLUSTER: &str = "issued";
const ISSUER: &str = "etcd-ca";

#[test]
fn cert_manager_issues_every_certificate_and_renews_them_without_a_restart() {
    test_kit::e2e::run("cert-manager", env!("CARGO_BIN_EXE_etcd-operator"), |h| {
        Box::pin(scenario(h))
    });
}

async fn scenario(h: &mut Harness) -> TestResult {
    let h: &Harness = h;
    install_crds(&h.client).await?;
    let log = std::env::temp_dir().join(format!("{}-cert-manager.log", h.namespace));
    let _cert_manager = CertManagerProcess::start(&h.lab.kubeconfig_path(), &log)?;
    ca_issuer(&h.client, &h.namespace, ISSUER).await?;
    let secrets: Api<Secret> = Api::namespaced(h.client.clone(), &h.namespace);
    let issuer_ca = read_secret_material(&secrets, &format!("{ISSUER}-ca"))
        .await?
        .cert;

    h.create_available(
        CLUSTER,
        cluster_spec_with(
            3,
            "lab-network",
            json!({ "tls": {
                "certManager": { "issuerRef": { "name": ISSUER } },
                "clientCertificates": [{ "name": "app" }],
            } }),
        ),
        Duration::from_secs(240),
    )
    .await
    .map_err(|e| format!("{e}; cert-manager's log: {}", tail(&log)))?;

    // A Certificate per leaf, each Ready; status names the issuer.
    let certificates: Api<DynamicObject> = Api::namespaced_with(
        h.client.clone(),
        &h.namespace,
        &resource("Certificate", "certificates"),
    );
    let ours: Vec<String> = certificates
        .list(&ListParams::default().labels(&format!("durable-etcd.io/cluster={CLUSTER}")))
        .await?
        .items
        .iter()
        .map(ResourceExt::name_any)
        .collect();
    let mut expected: Vec<String> = ["server", "peer", "client", "operator", "client-app"]
        .iter()
        .map(|role| format!("{CLUSTER}-{role}-tls"))
        .collect();
    expected.sort();
    let mut listed = ours.clone();
    listed.sort();
    assert_eq!(listed, expected, "one Certificate per leaf");
    let tls = h.status(CLUSTER).await?.tls.ok_or("no status.tls")?;
    assert_eq!(tls.issuer, "CertManager");
    assert_eq!(tls.certificates.len(), 5, "{tls:?}");
    assert!(
        tls.ca_not_after.is_some(),
        "the issuer's CA expiry is shown"
    );

    // The members serve certificates of the issuer's CA.
    let material = client_material(h, CLUSTER).await?;
    assert!(
        material.ca.contains(issuer_ca.trim()),
        "ca.crt of the client Secret is the issuer's CA"
    );
    let ips: Vec<IpAddr> = h
        .member_ips(CLUSTER)
        .await?
        .iter()
        .map(|ip| ip.parse())
        .collect::<Result<_, _>>()?;
    let name = client_service_name(h, CLUSTER);
    for ip in &ips {
        let (address, name, ca) = (SocketAddr::new(*ip, 2379), name.clone(), issuer_ca.clone());
        tokio::task::spawn_blocking(move || served_certificate(address, &name, &ca))
            .await?
            .map_err(|e| format!("{ip} serves a certificate of the issuer's CA: {e}"))?;
    }

    // Users write and read; the named client too; no certificate, no entry.
    let mut user = tls_client(
        h,
        CLUSTER,
        &material.ca,
        Some((&material.cert, &material.key)),
    )
    .await?;
    for i in 0..50 {
        user.put(format!("/issued/{i:03}"), format!("v{i}"), None)
            .await?;
    }
    let app = read_secret_material(&secrets, &format!("{CLUSTER}-client-app-tls")).await?;
    let mut app_client = tls_client(h, CLUSTER, &app.ca, Some((&app.cert, &app.key))).await?;
    let read = app_client
        .get(
            "/issued/",
            Some(etcd_client::GetOptions::new().with_prefix()),
        )
        .await?;
    assert_eq!(read.kvs().len(), 50, "the named client reads every write");
    let refused = async {
        let mut anonymous = tls_client(h, CLUSTER, &material.ca, None).await?;
        anonymous.put("/issued/anonymous", "x", None).await?;
        TestResult::Ok(())
    }
    .await;
    assert!(refused.is_err(), "a client without a certificate wrote");

    // cert-manager renews the server certificate when asked; the members
    // serve it without a restart.
    let server_secret = format!("{CLUSTER}-server-tls");
    let before = secret_certificate(h, &server_secret).await?;
    let uids = pod_uids(h).await?;
    certificates
        .patch_status(
            &server_secret,
            &PatchParams::default(),
            &Patch::Merge(json!({ "status": { "conditions": [{
                "type": "Issuing",
                "status": "True",
                "reason": "ManuallyTriggered",
                "message": "renewal asked for by the test, as cmctl renew asks",
                "lastTransitionTime": k8s_openapi::jiff::Timestamp::now().to_string(),
            }] } })),
        )
        .await?;
    wait_for(
        "cert-manager to issue a new server certificate",
        Duration::from_secs(120),
        || {
            let before = before.clone();
            let server_secret = server_secret.clone();
            async move { Ok(secret_certificate(h, &server_secret).await? != before) }
        },
    )
    .await?;
    let after = secret_certificate(h, &server_secret).await?;
    wait_for(
        "every member to serve the renewed server certificate",
        Duration::from_secs(150),
        || {
            let (ips, name, ca, after) =
                (ips.clone(), name.clone(), issuer_ca.clone(), after.clone());
            async move {
                tokio::task::spawn_blocking(move || {
                    Ok(ips.iter().all(|ip| {
                        served_certificate(SocketAddr::new(*ip, 2379), &name, &ca)
                            .is_ok_and(|served| served == after)
                    }))
                })
                .await?
            }
        },
    )
    .await?;
    assert_eq!(pod_uids(h).await?, uids, "no member restarted");
    user.put("/issued/after-renewal", "x", None).await?;

    // A client certificate whose name leaves the spec goes, with its Secret.
    h.patch_spec(CLUSTER, json!({ "tls": { "clientCertificates": null } }))
        .await?;
    let app_secret = format!("{CLUSTER}-client-app-tls");
    wait_for(
        "the named client's Certificate and Secret to be deleted",
        Duration::from_secs(120),
        || async {
            Ok(certificates.get_opt(&app_secret).await?.is_none()
                && secrets.get_opt(&app_secret).await?.is_none())
        },
    )
    .await?;
    wait_for(
        "status.tls to list the renewed certificate (read again at the spec's change)",
        Duration::from_secs(120),
        || async {
            let tls = h.status(CLUSTER).await?.tls.unwrap_or_default();
            let listed = tls
                .certificates
                .iter()
                .find(|c| c.secret == server_secret)
                .map(|c| c.serial.clone());
            let serial = etcd_operator::tls::read_certificate(&String::from_utf8(
                secrets
                    .get(&server_secret)
                    .await?
                    .data
                    .and_then(|d| d.get("tls.crt").cloned())
                    .ok_or("no tls.crt")?
                    .0,
            )?)?
            .serial;
            Ok(listed.as_deref() == Some(serial.as_str()))
        },
    )
    .await?;

    Ok(())
}

async fn pod_uids(h: &Harness) -> TestResult<Vec<Option<String>>> {
    Ok(h.pods
        .list(&ListParams::default().labels(&format!("durable-etcd.io/cluster={CLUSTER}")))
        .await?
        .items
        .into_iter()
        .map(|p| p.metadata.uid)
        .collect())
}

/// The last lines of a log, for an error message.
fn tail(log: &std::path::Path) -> String {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(20)..].join("\n")
}
