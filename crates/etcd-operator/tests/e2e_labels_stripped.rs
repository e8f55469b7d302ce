//! End to end on the lab (rule 10: missing metadata is not evidence): the
//! operator's labels are removed from every PVC of a healthy three-member
//! cluster under a continuous writer. The label-filtered list no longer
//! finds any volume, but the operator looks each expected PVC up by name:
//! it puts the labels back (`LabelsRestored` Events) and replaces nothing.
//! For a minute no member is removed (etcd member IDs unchanged), no PVC is
//! deleted (same UIDs), no Pod replaced; every acknowledged write is there
//! at the end.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use kube::ResourceExt;
use kube::api::{ListParams, Patch, PatchParams};
use serde_json::{Value, json};
use test_kit::TestResult;
use test_kit::e2e::{Harness, Identity, cluster_spec};
use test_kit::poll::wait_for;
use test_kit::writer::Writer;

const NAME: &str = "labels";
const PREFIX: &str = "/labels/";
/// How long the cluster is watched after the labels are removed.
const WATCH: Duration = Duration::from_secs(60);
/// The operator's labels on a member's PVC.
const LABELS: [&str; 5] = [
    "durable-etcd.io/cluster",
    "durable-etcd.io/ordinal",
    "app.kubernetes.io/name",
    "app.kubernetes.io/instance",
    "app.kubernetes.io/managed-by",
];

#[test]
fn stripped_pvc_labels_come_back_and_nothing_is_replaced() {
    test_kit::e2e::run("labels", env!("CARGO_BIN_EXE_etcd-operator"), |h| {
        Box::pin(scenario(h))
    });
}

async fn scenario(h: &mut Harness) -> TestResult {
    h.create_available(
        NAME,
        cluster_spec(3, "lab-network"),
        Duration::from_secs(180),
    )
    .await?;
    let before = h.identity().await?;
    let claims = claims(h).await?;
    let pods = h.pod_uids().await?;
    if claims.len() != 3 {
        return Err(format!("three PVCs expected: {claims:?}").into());
    }
    for (name, (_, labels)) in &claims {
        if let Some(missing) = LABELS.iter().find(|l| !labels.contains_key(**l)) {
            return Err(format!("PVC {name} lacks the label {missing} to begin with").into());
        }
    }

    let writer = h.start_writer(PREFIX);
    let outcome = stripped_and_watched(h, &writer, &before, &claims, &pods).await;
    let ledger = writer.stop().await;
    outcome?;
    ledger.verify(h, 300).await?;

    // One Event per relabelled PVC; kube's recorder folds repeats of the
    // same reason about the same object into one Event with a series count
    // (keeping the first note).
    let events = h.events_about(NAME).await?;
    let restored: Vec<_> = events
        .iter()
        .filter(|e| e.reason.as_deref() == Some("LabelsRestored"))
        .collect();
    let reported: i32 = restored
        .iter()
        .map(|e| e.series.as_ref().map_or(1, |s| s.count))
        .sum();
    eprintln!(
        "LabelsRestored Events: {reported} occurrences {:?}",
        restored.iter().map(|e| &e.note).collect::<Vec<_>>()
    );
    if restored.is_empty() {
        return Err("no LabelsRestored Event".into());
    }
    if usize::try_from(reported)? < claims.len() {
        return Err(format!(
            "{reported} LabelsRestored Events for {} relabelled PVCs",
            claims.len()
        )
        .into());
    }
    h.one_pod_per_member().await
}

type Claims = BTreeMap<String, (String, BTreeMap<String, String>)>;

/// Every PVC of the namespace: name -> (UID, labels).
async fn claims(h: &Harness) -> TestResult<Claims> {
    Ok(h.pvcs
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .map(|p| {
            let uid = p.metadata.uid.clone().unwrap_or_default();
            (p.name_any(), (uid, p.labels().clone()))
        })
        .collect())
}

async fn stripped_and_watched(
    h: &Harness,
    writer: &Writer,
    before: &Identity,
    claims: &Claims,
    pods: &BTreeMap<String, String>,
) -> TestResult {
    wait_for(
        "the writer's first writes",
        Duration::from_secs(30),
        || async { Ok(writer.acknowledged().await >= 20) },
    )
    .await?;

    let removal: serde_json::Map<String, Value> = LABELS
        .iter()
        .map(|l| ((*l).to_owned(), Value::Null))
        .collect();
    let patch = json!({ "metadata": { "labels": removal } });
    for name in claims.keys() {
        let stripped = h
            .pvcs
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await?;
        if let Some(left) = LABELS.iter().find(|l| stripped.labels().contains_key(**l)) {
            return Err(format!("PVC {name} still has {left} after the patch").into());
        }
    }
    let stripped_at = Instant::now();
    let acknowledged_at_strip = writer.acknowledged().await;
    eprintln!(
        "labels removed from {:?}",
        claims.keys().collect::<Vec<_>>()
    );

    let mut relabelled: BTreeMap<String, Duration> = BTreeMap::new();
    let mut member_checks = 0;
    while stripped_at.elapsed() < WATCH {
        let now = claims_by_name(h, claims).await?;
        for (name, (uid, labels)) in claims {
            let Some((now_uid, now_labels, deleting)) = now.get(name) else {
                return Err(format!("PVC {name} was deleted").into());
            };
            if now_uid != uid || *deleting {
                return Err(format!("PVC {name} was deleted (UID {uid} -> {now_uid})").into());
            }
            let back = LABELS.iter().all(|l| now_labels.get(*l) == labels.get(*l));
            if back && !relabelled.contains_key(name) {
                eprintln!("{name}: labels back after {:?}", stripped_at.elapsed());
                relabelled.insert(name.clone(), stripped_at.elapsed());
            }
        }
        let now_pods = h.pod_uids().await?;
        if &now_pods != pods {
            return Err(format!("member Pods changed: {pods:?} -> {now_pods:?}").into());
        }
        // The member list: every member keeps its ID. A transient failure
        // to reach etcd is not a change; a different list is.
        match h.identity().await {
            Ok(identity) => {
                if identity != *before {
                    return Err(format!("membership changed: {before:x?} -> {identity:x?}").into());
                }
                member_checks += 1;
            }
            Err(error) => eprintln!("member list not read: {error}"),
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    let acknowledged = writer.acknowledged().await - acknowledged_at_strip;
    eprintln!(
        "watched {:?}: {member_checks} member lists unchanged, {acknowledged} writes acknowledged meanwhile",
        stripped_at.elapsed()
    );
    if member_checks < 10 {
        return Err(format!("the member list was read only {member_checks} times").into());
    }
    if relabelled.len() != claims.len() {
        return Err(format!(
            "labels came back only on {:?} within {WATCH:?}",
            relabelled.keys().collect::<Vec<_>>()
        )
        .into());
    }
    if acknowledged < 100 {
        return Err(format!("only {acknowledged} writes acknowledged while watched").into());
    }
    Ok(())
}

/// The PVCs of `claims` read by name: name -> (UID, labels, deleting).
async fn claims_by_name(
    h: &Harness,
    claims: &Claims,
) -> TestResult<BTreeMap<String, (String, BTreeMap<String, String>, bool)>> {
    let mut found = BTreeMap::new();
    for name in claims.keys() {
        if let Some(pvc) = h.pvcs.get_opt(name).await? {
            found.insert(
                name.clone(),
                (
                    pvc.metadata.uid.clone().unwrap_or_default(),
                    pvc.labels().clone(),
                    pvc.metadata.deletion_timestamp.is_some(),
                ),
            );
        }
    }
    Ok(found)
}
