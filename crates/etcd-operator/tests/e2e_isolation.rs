//! End to end on the lab: one `EtcdCluster` this operator cannot read never
//! stops the others.
//!
//! 1. A healthy one-member cluster becomes Available.
//! 2. The API server refuses a status apply carrying a resourceVersion that
//!    is no longer current, `force` or not: the precondition the operator's
//!    status writes carry (`reconcile/status.rs`) is kept by the server.
//! 3. The EtcdCluster CRD is replaced by a variant whose
//!    `spec.storage.retentionPolicy` accepts `Archive`, a value this
//!    operator's Rust type does not know, and an object with it is created.
//! 4. The operator restarts (a crash, an upgrade, a new leader): it lists
//!    every EtcdCluster anew. A typed list fails as a whole on the bad
//!    object, and then no cluster at all is reconciled.
//! 5. The healthy cluster's Pod is deleted: it is recreated, ready, and the
//!    cluster is Available again and serves writes, while the bad object gets a Warning Event
//!    `UnreadableSpec` naming the field, an `Unreadable` condition, and no
//!    Pod.
//!
//! The CRD and the bad object are put back however the scenario ends.

mod common;

use std::time::{Duration, Instant};

use common::{Harness, TestResult, wait_for};
use etcd_operator::api::EtcdCluster;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{ApiResource, DeleteParams, DynamicObject, ListParams, Patch, PatchParams};
use kube::{Api, ResourceExt};
use serde_json::{Value, json};

const HEALTHY: &str = "healthy";
const BAD: &str = "unreadable";
/// A retention policy the CRD variant accepts and the operator does not know.
const UNKNOWN_POLICY: &str = "Archive";
/// Field manager of the CRD in the end-to-end tests (`common::install_crd`).
const CRD_MANAGER: &str = "e2e";

#[test]
fn an_unreadable_cluster_does_not_stop_the_others() {
    common::run("isolation", |h| Box::pin(scenario(h)));
}

async fn scenario(h: &mut Harness) -> TestResult {
    let started = Instant::now();
    h.create_cluster(
        HEALTHY,
        json!({
            "replicas": 1,
            "storage": { "storageClassName": "lab-network", "size": "1Gi" }
        }),
    )
    .await?;
    h.wait_available(HEALTHY, 1, Duration::from_secs(180))
        .await?;
    stale_status_is_refused(h).await?;

    let outcome = with_unreadable_cluster(h).await;
    let restored = restore(h).await;
    eprintln!("scenario: {:?}", started.elapsed());
    outcome?;
    restored
}

/// A status apply with a resourceVersion that is no longer current is
/// refused with 409, even with `force`, and nothing is written.
async fn stale_status_is_refused(h: &Harness) -> TestResult {
    let objects = untyped(h);
    let read = objects.get(HEALTHY).await?;
    let stale = read
        .resource_version()
        .ok_or("the cluster has no resourceVersion")?;
    // Another writer changes the object after the read.
    objects
        .patch(
            HEALTHY,
            &PatchParams::default(),
            &Patch::Merge(&json!({ "metadata": { "annotations": { "e2e/touched": "yes" } } })),
        )
        .await?;
    let body = |version: Option<&str>| {
        let mut body = json!({
            "apiVersion": "durable-etcd.io/v1alpha1",
            "kind": "EtcdCluster",
            "metadata": { "name": HEALTHY },
            "status": { "clusterToken": "planned-from-a-stale-object" },
        });
        if let Some(version) = version {
            body["metadata"]["resourceVersion"] = json!(version);
        }
        body
    };
    let result = objects
        .patch_status(
            HEALTHY,
            &PatchParams::apply("e2e-stale-writer").force(),
            &Patch::Apply(&body(Some(&stale))),
        )
        .await;
    match result {
        Err(kube::Error::Api(status)) if status.code == 409 => {
            eprintln!("stale status apply refused: {}", status.message);
        }
        other => return Err(format!("a stale status apply was not refused: {other:?}").into()),
    }
    let token = objects.get(HEALTHY).await?.data["status"]["clusterToken"].clone();
    if token == json!("planned-from-a-stale-object") {
        return Err("the refused status was written".into());
    }
    Ok(())
}

async fn with_unreadable_cluster(h: &mut Harness) -> TestResult {
    apply_crd(h, true).await?;
    let objects = untyped(h);
    let bad: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "durable-etcd.io/v1alpha1",
        "kind": "EtcdCluster",
        "metadata": { "name": BAD, "namespace": h.namespace },
        "spec": {
            "replicas": 1,
            "storage": {
                "storageClassName": "lab-network",
                "size": "1Gi",
                "retentionPolicy": UNKNOWN_POLICY
            }
        }
    }))?;
    // The API server serves the new schema a moment after the update.
    wait_for(
        "the CRD variant to accept the unknown policy",
        Duration::from_secs(30),
        || async {
            Ok(objects
                .create(&Default::default(), &bad)
                .await
                .map_err(|e| eprintln!("create {BAD}: {e}"))
                .is_ok())
        },
    )
    .await?;
    // The premise: this operator's typed client cannot read the object, and
    // a typed list fails as a whole because of it.
    if h.clusters.get(BAD).await.is_ok() {
        return Err("the operator's own type reads the bad object: the test proves nothing".into());
    }
    match h.clusters.list(&ListParams::default()).await {
        Ok(_) => return Err("a typed list reads the bad object: the test proves nothing".into()),
        Err(error) => eprintln!("a typed list of EtcdClusters fails: {error}"),
    }

    // A restart lists every EtcdCluster anew, the bad one included.
    h.stop_operator();
    h.start_operator()?;

    let pod = format!("{HEALTHY}-0");
    h.write_keys("/before/", 10).await?;
    let before = h.pods.get(&pod).await?.uid();
    h.pods.delete(&pod, &DeleteParams::default()).await?;
    let pods = &h.pods;
    wait_for(
        "the healthy cluster's pod recreated",
        Duration::from_secs(90),
        || async {
            Ok(pods.get_opt(&pod).await?.is_some_and(|p| {
                p.uid() != before
                    && p.metadata.deletion_timestamp.is_none()
                    && common::pod_ready(&p)
            }))
        },
    )
    .await?;
    h.wait_available(HEALTHY, 1, Duration::from_secs(120))
        .await?;
    // Served by the recreated member.
    h.write_keys("/isolation/", 10).await?;
    h.check_keys("/isolation/", 10).await?;
    h.check_keys("/before/", 10).await?;

    wait_for(
        "a Warning Event UnreadableSpec on the bad object",
        Duration::from_secs(30),
        || async {
            let events = h.events_about(BAD).await?;
            Ok(events.iter().any(|e| {
                e.type_.as_deref() == Some("Warning")
                    && e.reason.as_deref() == Some("UnreadableSpec")
                    && e.note
                        .as_deref()
                        .is_some_and(|n| n.contains("spec.storage.retentionPolicy"))
            }))
        },
    )
    .await?;
    let condition = objects.get(BAD).await?.data["status"]["conditions"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["type"] == "Unreadable").cloned())
        .ok_or("no Unreadable condition on the bad object")?;
    eprintln!("condition on {BAD}: {condition}");
    if condition["status"] != "True" || condition["reason"] != "UnreadableSpec" {
        return Err(format!("unexpected condition {condition}").into());
    }
    let pods_of_bad = h
        .pods
        .list(&ListParams::default().labels(&format!("durable-etcd.io/cluster={BAD}")))
        .await?
        .items;
    if !pods_of_bad.is_empty() {
        return Err(format!(
            "the unreadable cluster got pods: {:?}",
            pods_of_bad.iter().map(Pod::name_any).collect::<Vec<_>>()
        )
        .into());
    }
    Ok(())
}

/// Deletes the bad object and puts the operator's own CRD back.
async fn restore(h: &Harness) -> TestResult {
    let objects = untyped(h);
    if objects.get_opt(BAD).await?.is_some() {
        objects.delete(BAD, &DeleteParams::default()).await?;
    }
    wait_for("the bad object gone", Duration::from_secs(30), || async {
        Ok(objects.get_opt(BAD).await?.is_none())
    })
    .await?;
    apply_crd(h, false).await
}

fn untyped(h: &Harness) -> Api<DynamicObject> {
    Api::namespaced_with(
        h.client.clone(),
        &h.namespace,
        &ApiResource::erase::<EtcdCluster>(&()),
    )
}

/// Applies the operator's EtcdCluster CRD, or (`widened`) its variant whose
/// `spec.storage.retentionPolicy` also accepts [`UNKNOWN_POLICY`].
async fn apply_crd(h: &Harness, widened: bool) -> TestResult {
    let crds: Api<CustomResourceDefinition> = Api::all(h.client.clone());
    let mut crd = serde_json::to_value(etcd_operator::api::crd())?;
    if widened {
        let versions = crd["spec"]["versions"]
            .as_array_mut()
            .ok_or("the CRD has no versions")?;
        for version in versions {
            let policy = &mut version["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
                ["storage"]["properties"]["retentionPolicy"]["enum"];
            let values = policy
                .as_array_mut()
                .ok_or("no enum at spec.storage.retentionPolicy")?;
            values.push(Value::from(UNKNOWN_POLICY));
        }
    }
    let name = crd["metadata"]["name"]
        .as_str()
        .ok_or("the CRD has no name")?
        .to_owned();
    crds.patch(
        &name,
        &PatchParams::apply(CRD_MANAGER).force(),
        &Patch::Apply(&crd),
    )
    .await?;
    eprintln!(
        "CRD {name}: {}",
        if widened {
            "accepts retentionPolicy Archive"
        } else {
            "restored"
        }
    );
    Ok(())
}
