//! End to end on the lab: the operator keeps a 3-member cluster's identity
//! and data through
//!
//! 1. all three pods deleted at once;
//! 2. two of three nodes stopped for longer than the pod eviction timeout,
//!    then started again (quorum lost meanwhile, no membership change);
//! 3. the operator killed (SIGKILL) in the middle of recreating deleted pods,
//!    then started again: it re-observes and finishes the same recovery.
//!
//! Shortened for CI: NotReady tolerations of 20 s on the member pods, and
//! the lab's node-monitor grace period of 20 s (when the test brings up its
//! own lab).

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use kube::api::{DeleteParams, ListParams};
use kube::{Api, ResourceExt};
use serde_json::json;
use test_kit::TestResult;
use test_kit::e2e::{Harness, Identity, cluster_spec_with, tolerations};
use test_kit::poll::wait_for;

const NAME: &str = "durable";
const PREFIX: &str = "/e2e/";
const KEYS: usize = 1000;
/// Tolerations of NotReady/unreachable nodes on the member pods: the pod
/// eviction timeout of this test.
const TOLERATION_SECONDS: i64 = 20;

#[test]
fn members_keep_identity_and_data_through_pod_and_node_loss() {
    test_kit::e2e::run("durability", env!("CARGO_BIN_EXE_etcd-operator"), |h| {
        Box::pin(scenario(h))
    });
}

async fn scenario(h: &mut Harness) -> TestResult {
    let started = Instant::now();
    h.create_available(
        NAME,
        cluster_spec_with(
            3,
            "lab-network",
            json!({
                "pod": { "tolerations": tolerations(TOLERATION_SECONDS) }
            }),
        ),
        Duration::from_secs(240),
    )
    .await?;
    eprintln!("Available after {:?}", started.elapsed());
    let identity = h.identity().await?;
    eprintln!("identity {identity:x?}");
    h.write_keys(PREFIX, KEYS).await?;

    // 1. Every pod deleted at once.
    let pods = &h.pods;
    let before: BTreeSet<String> = pods
        .list(&ListParams::default())
        .await?
        .items
        .iter()
        .filter_map(|p| p.uid())
        .collect();
    for pod in pods.list(&ListParams::default()).await?.items {
        pods.delete(&pod.name_any(), &DeleteParams::default())
            .await?;
    }
    wait_for("three new pods", Duration::from_secs(120), || async {
        let uids: BTreeSet<String> = pods
            .list(&ListParams::default())
            .await?
            .items
            .iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .filter_map(|p| p.uid())
            .collect();
        Ok(uids.len() == 3 && uids.is_disjoint(&before))
    })
    .await?;
    h.wait_available(NAME, 3, Duration::from_secs(240)).await?;
    check_same(h, &identity).await?;
    eprintln!("pods deleted: same identity and every key");

    // 2. Two of three nodes stopped beyond the eviction timeout.
    let stopped = majority_nodes(pods).await?;
    eprintln!("stopping nodes {stopped:?}");
    for node in &stopped {
        h.lab.node_stop(node)?;
    }
    let outcome = while_stopped(h, &identity, &stopped).await;
    for node in &stopped {
        h.lab.node_start(node)?;
    }
    outcome?;
    h.wait_available(NAME, 3, Duration::from_secs(300)).await?;
    check_same(h, &identity).await?;
    eprintln!("nodes back: same identity and every key");

    // 3. The operator killed mid-recovery: every pod deleted, the operator
    // killed once it has recreated some but not all of them.
    let before = pod_uids(pods, false).await?;
    for pod in pods.list(&ListParams::default()).await?.items {
        pods.delete(&pod.name_any(), &DeleteParams::default())
            .await?;
    }
    wait_for(
        "a first pod recreated",
        Duration::from_secs(120),
        || async { Ok(recreated(pods, &before).await? >= 1) },
    )
    .await?;
    let recreated_when_killed = recreated(pods, &before).await?;
    h.stop_operator();
    eprintln!("operator killed with {recreated_when_killed} of 3 pods recreated");
    tokio::time::sleep(Duration::from_secs(5)).await;
    h.start_operator()?;
    h.wait_available(NAME, 3, Duration::from_secs(240)).await?;
    check_same(h, &identity).await?;
    h.one_pod_per_member().await?;
    eprintln!("operator restarted mid-recovery: same identity and every key");
    Ok(())
}

/// UIDs of the cluster's pods; `live_only` leaves out Terminating ones.
async fn pod_uids(pods: &Api<Pod>, live_only: bool) -> TestResult<BTreeSet<String>> {
    Ok(pods
        .list(&ListParams::default())
        .await?
        .items
        .iter()
        .filter(|p| !live_only || p.metadata.deletion_timestamp.is_none())
        .filter_map(|p| p.uid())
        .collect())
}

/// How many live pods are new since `before`.
async fn recreated(pods: &Api<Pod>, before: &BTreeSet<String>) -> TestResult<usize> {
    Ok(pod_uids(pods, true).await?.difference(before).count())
}

/// Same cluster ID, same member IDs, every key with its value.
async fn check_same(h: &Harness, before: &Identity) -> TestResult {
    let now = h.identity().await?;
    if &now != before {
        return Err(format!("identity changed: before {before:x?}, now {now:x?}").into());
    }
    h.check_keys(PREFIX, KEYS).await
}

async fn while_stopped(h: &Harness, identity: &Identity, stopped: &[String]) -> TestResult {
    let (clusters, pods) = (&h.clusters, &h.pods);
    let deadline = Instant::now() + Duration::from_secs(240);
    let mut quorum_lost_seen = false;
    let mut evicted_at: Option<Instant> = None;
    loop {
        let cluster = clusters.get(NAME).await?;
        let status = cluster.status.unwrap_or_default();
        if status
            .conditions
            .iter()
            .any(|c| c.type_ == "QuorumLost" && c.status == "True")
        {
            quorum_lost_seen = true;
        }
        let ids: BTreeSet<String> = status.members.iter().filter_map(|m| m.id.clone()).collect();
        let expected: BTreeSet<String> = identity
            .members
            .values()
            .map(|(id, _)| format!("{id:x}"))
            .collect();
        if !ids.is_empty() && ids != expected {
            return Err(format!("membership changed while quorum was lost: {ids:?}").into());
        }
        let list = pods.list(&ListParams::default()).await?.items;
        let names: Vec<String> = list.iter().map(|p| p.name_any()).collect();
        let unique: BTreeSet<&String> = names.iter().collect();
        if unique.len() != names.len() {
            return Err(format!("two pods of one member: {names:?}").into());
        }
        let on_stopped_evicted = list
            .iter()
            .filter(|p| {
                p.spec
                    .as_ref()
                    .and_then(|s| s.node_name.as_ref())
                    .is_some_and(|n| stopped.contains(n))
            })
            .all(|p| p.metadata.deletion_timestamp.is_some());
        if on_stopped_evicted && evicted_at.is_none() {
            eprintln!("pods on the stopped nodes are Terminating (evicted)");
            evicted_at = Some(Instant::now());
        }
        if quorum_lost_seen && evicted_at.is_some_and(|t| t.elapsed() > Duration::from_secs(2 * 15))
        {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(format!(
                "while stopped: QuorumLost seen {quorum_lost_seen}, evicted {}",
                evicted_at.is_some()
            )
            .into());
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
}

/// Nodes to stop so that a majority of the members is down: the nodes of
/// the members' pods, most-loaded first, until two members are covered.
async fn majority_nodes(pods: &Api<Pod>) -> TestResult<Vec<String>> {
    let mut by_node: BTreeMap<String, usize> = BTreeMap::new();
    for pod in pods.list(&ListParams::default()).await?.items {
        if let Some(node) = pod.spec.and_then(|s| s.node_name) {
            *by_node.entry(node).or_default() += 1;
        }
    }
    let mut nodes: Vec<(String, usize)> = by_node.into_iter().collect();
    nodes.sort_by_key(|n| std::cmp::Reverse(n.1));
    let mut chosen = Vec::new();
    let mut covered = 0;
    for (node, count) in nodes {
        if covered >= 2 {
            break;
        }
        covered += count;
        chosen.push(node);
    }
    if covered == 3 {
        return Err(format!("every member is on the nodes {chosen:?}: cannot keep one").into());
    }
    Ok(chosen)
}
