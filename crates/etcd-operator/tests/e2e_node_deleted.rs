//! End to end on the lab: the node of one member is deleted for good with
//! its `lab-local` volume. The data is known gone (the PV's node no longer
//! exists), so the member is replaced while the other two hold quorum:
//! remove the old member ID, a fresh PVC, add as a learner, promote. Back to
//! three voters with the same cluster ID and every key; the member keeps its
//! name and gets a new ID.
//!
//! Short on its own: the member is replaced once it has been down for
//! `memberFailureTimeout` (5 s here) on a Node that stays deleted. A new
//! node in the same zone takes the deleted one's place: with node-local
//! volumes two members never share a node, so the replacement needs it.

use std::time::{Duration, Instant};

use serde_json::json;
use test_kit::TestResult;
use test_kit::e2e::{Harness, Identity, cluster_spec_with};
use test_kit::poll::wait_for;

const NAME: &str = "gone";
const PREFIX: &str = "/gone/";
const KEYS: usize = 500;

#[test]
fn member_on_a_deleted_node_is_replaced() {
    test_kit::e2e::run("node-deleted", env!("CARGO_BIN_EXE_etcd-operator"), |h| {
        Box::pin(scenario(h))
    });
}

async fn scenario(h: &mut Harness) -> TestResult {
    let before = h
        .available_with_keys(
            NAME,
            cluster_spec_with(3, "lab-local", json!({ "memberFailureTimeout": "5s" })),
            PREFIX,
            KEYS,
        )
        .await?;

    let pod = format!("{NAME}-1");
    let node = h.node_of(&pod).await?;
    for other in [0, 2] {
        if h.node_of(&format!("{NAME}-{other}")).await? == node {
            return Err(format!("{NAME}-{other} shares {node} with {pod}").into());
        }
    }
    let old_id = before.id_of(&pod).ok_or("member of the pod")?;
    eprintln!("deleting {node} (member {pod}, {old_id:x})");
    let deleted = Instant::now();
    let zone = h
        .lab
        .config()
        .node(&node)
        .map(|n| n.zone.clone())
        .ok_or("zone of the node")?;
    h.lab.node_delete(&node).await?;
    // A new machine in the same zone: with node-local volumes two members
    // never share a node, so the replacement needs a node of its own. It
    // gets a name of its own too: the lab would otherwise give the next
    // free index's name, which is the deleted node's when that one had the
    // highest index, and a machine registering under the name of a deleted
    // Node is handed the Pods still bound to that name (another scenario).
    let replacement = format!("{node}-replacement");
    let spare = h.lab.node_add(Some(&replacement), Some(&zone))?.name;
    wait_for("the new node", Duration::from_secs(60), || async {
        Ok(h.nodes.get_opt(&spare).await?.is_some())
    })
    .await?;
    h.mark_nodes().await?;

    let outcome = replaced(h, &pod, old_id, &before).await;
    eprintln!("replaced after {:?}", deleted.elapsed());
    outcome
}

async fn replaced(h: &Harness, pod: &str, old_id: u64, before: &Identity) -> TestResult {
    let mut quorum_checks = 0;
    wait_for(
        "a new member of the same name, three voters",
        Duration::from_secs(240),
        || async {
            h.one_pod_per_member().await?;
            let now = h.identity().await?;
            if now.cluster_id != before.cluster_id {
                return Err(format!("cluster ID changed: {now:x?}").into());
            }
            Ok(now.voters() == 3 && now.id_of(pod).is_some_and(|id| id != old_id))
        },
    )
    .await?;
    quorum_checks += 1;
    h.wait_available(NAME, 3, Duration::from_secs(120)).await?;
    let now = h.identity().await?;
    eprintln!("members now {now:x?} ({quorum_checks} checks)");
    if now.members.keys().ne(before.members.keys()) {
        return Err(format!("member names changed: {now:x?}").into());
    }
    if now.members.values().any(|(_, learner)| *learner) {
        return Err(format!("a learner is left: {now:x?}").into());
    }
    h.check_keys(PREFIX, KEYS).await
}
