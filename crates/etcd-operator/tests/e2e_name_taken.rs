//! End to end on the lab: a name one cluster's certificates need, held by
//! another cluster's object, is reported and never overwritten (rule 14).
//!
//! Cluster `main` with a client certificate named `db-peer` needs the
//! Secret `main-client-db-peer-tls`; that is the peer Secret of a cluster
//! named `main-client-db` in the same namespace.
//!
//! 1. `main-client-db` (TLS, the default) becomes Available.
//! 2. `main` is created with `spec.tls.clientCertificates: [db-peer]`.
//! 3. `main` reports `Degraded` with reason `NameTaken` naming the Secret,
//!    and a Warning Event; nothing of it starts.
//! 4. The peer Secret of `main-client-db` is unchanged (same
//!    resourceVersion, same certificate) and `main-client-db` stays
//!    Available.

use std::time::Duration;

use etcd_operator::api::ConditionType;
use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use serde_json::json;
use test_kit::TestResult;
use test_kit::e2e::{Harness, cluster_spec_with};
use test_kit::poll::wait_for;

const OWNER: &str = "main-client-db";
const TAKER: &str = "main";
const TAKEN: &str = "main-client-db-peer-tls";

#[test]
fn a_name_another_clusters_object_holds_is_reported_and_never_overwritten() {
    test_kit::e2e::run("name-taken", env!("CARGO_BIN_EXE_etcd-operator"), |h| {
        Box::pin(scenario(h))
    });
}

async fn scenario(h: &mut Harness) -> TestResult {
    h.create_available(
        OWNER,
        cluster_spec_with(1, "lab-network", json!({ "tls": { "builtIn": {} } })),
        Duration::from_secs(180),
    )
    .await?;
    let secrets: Api<Secret> = Api::namespaced(h.client.clone(), &h.namespace);
    let before = secrets.get(TAKEN).await?;

    h.create_cluster(
        TAKER,
        cluster_spec_with(
            1,
            "lab-network",
            json!({ "tls": { "builtIn": {}, "clientCertificates": [{ "name": "db-peer" }] } }),
        ),
    )
    .await?;
    wait_for(
        "main to report the Secret it needs as taken",
        Duration::from_secs(60),
        || async {
            let status = h.status(TAKER).await?;
            let degraded = status.condition(ConditionType::Degraded).cloned();
            if let Some(c) = &degraded {
                eprintln!("main Degraded={} {}: {}", c.status, c.reason, c.message);
            }
            Ok(degraded.is_some_and(|c| {
                c.status == "True" && c.reason == "NameTaken" && c.message.contains(TAKEN)
            }))
        },
    )
    .await?;
    // A few more passes of main's.
    tokio::time::sleep(Duration::from_secs(10)).await;
    let after = secrets.get(TAKEN).await?;
    if after.metadata.resource_version != before.metadata.resource_version
        || after.data != before.data
    {
        return Err(format!("{TAKEN} was written by cluster main").into());
    }
    let pods = h.pods.list(&Default::default()).await?.items;
    if pods
        .iter()
        .any(|p| p.metadata.name.as_deref() == Some("main-0"))
    {
        return Err("main started a member without its certificates".into());
    }
    h.wait_available(OWNER, 1, Duration::from_secs(30)).await
}
