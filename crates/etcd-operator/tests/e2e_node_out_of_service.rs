//! End to end on the lab: a node holding one member stops (power loss) with
//! `lab-network` volumes. The member is reported at once and waited for;
//! nothing moves while the node is merely NotReady, even past
//! `memberFailureTimeout`. Once a person taints the node
//! `node.kubernetes.io/out-of-service`, the member's Pod moves to another
//! node with its PVC: same member ID, same cluster, every key.
//!
//! Shortened for CI: `memberFailureTimeout: 5s`, and the lab's
//! node-monitor grace period of 20 s (when the test brings up its own lab).
//! The pods keep the default 300 s NotReady tolerations, so what moves the
//! Pod is the taint, not an eviction.

use std::time::{Duration, Instant};

use serde_json::json;
use test_kit::TestResult;
use test_kit::conditions::{node_condition, node_ready, pod_ready};
use test_kit::e2e::{Harness, cluster_spec_with};
use test_kit::poll::wait_for;

const NAME: &str = "oos";
const PREFIX: &str = "/oos/";
const KEYS: usize = 500;

#[test]
fn member_moves_with_its_network_volume_after_out_of_service() {
    test_kit::e2e::run("node-oos", env!("CARGO_BIN_EXE_etcd-operator"), |h| {
        Box::pin(scenario(h))
    });
}

async fn scenario(h: &mut Harness) -> TestResult {
    let before = h
        .available_with_keys(
            NAME,
            cluster_spec_with(3, "lab-network", json!({ "memberFailureTimeout": "5s" })),
            PREFIX,
            KEYS,
        )
        .await?;

    // A node that holds exactly one member (soft anti-affinity spreads them).
    let mut victim = None;
    for ordinal in 0..3 {
        let pod = format!("{NAME}-{ordinal}");
        let node = h.node_of(&pod).await?;
        let mut others = 0;
        for other in (0..3).filter(|o| *o != ordinal) {
            if h.node_of(&format!("{NAME}-{other}")).await? == node {
                others += 1;
            }
        }
        if others == 0 {
            victim = Some((pod, node));
            break;
        }
    }
    let (pod, node) = victim.ok_or("no node holds exactly one member")?;
    let member_id = before.id_of(&pod).ok_or("member of the pod")?;
    eprintln!("stopping {node} (member {pod}, {member_id:x})");
    h.lab.node_stop(&node)?;
    let outcome = while_stopped(h, &pod, &node, member_id).await;
    if outcome.is_err() {
        let _ = h.lab.node_start(&node);
    }
    outcome?;

    // Start the node again and lift the taint: the member stays where it
    // moved; the lab is left whole.
    h.lab.node_start(&node)?;
    untaint(h, &node).await?;
    let after = h.identity().await?;
    if after != before {
        return Err(format!("identity changed: before {before:x?}, after {after:x?}").into());
    }
    h.check_keys(PREFIX, KEYS).await?;
    h.one_pod_per_member().await?;
    Ok(())
}

async fn while_stopped(h: &Harness, pod: &str, node: &str, member_id: u64) -> TestResult {
    let stopped = Instant::now();
    // The member is reported unhealthy at once; nothing moves while the node
    // is only NotReady (grace 20 s + timeout 5 s + margin).
    wait_for(
        "the member to be reported unhealthy",
        Duration::from_secs(60),
        || async {
            let status = h.status(NAME).await?;
            Ok(status.members.iter().any(|m| m.name == pod && !m.healthy))
        },
    )
    .await?;
    eprintln!("reported unhealthy after {:?}", stopped.elapsed());
    let watch_until = Instant::now() + Duration::from_secs(35);
    let original_uid = h.pods.get(pod).await?.metadata.uid;
    while Instant::now() < watch_until {
        let current = h.pods.get_opt(pod).await?;
        let uid = current.as_ref().and_then(|p| p.metadata.uid.clone());
        if uid != original_uid {
            return Err(format!("{pod} was replaced while its node was only NotReady").into());
        }
        h.one_pod_per_member().await?;
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    let not_ready = node_condition(&h.nodes.get(node).await?, "Ready").is_some_and(|s| s != "True");
    if !not_ready {
        return Err(format!("{node} is still Ready after being stopped").into());
    }
    let identity = h.identity().await?;
    if identity.id_of(pod) != Some(member_id) || identity.voters() != 3 {
        return Err(format!("membership changed while waiting: {identity:x?}").into());
    }

    eprintln!("tainting {node} out-of-service");
    let tainted = Instant::now();
    h.lab.node_taint_out_of_service(node).await?;
    wait_for(
        "the member pod to run ready on another node",
        Duration::from_secs(180),
        || async {
            h.one_pod_per_member().await?;
            let Some(p) = h.pods.get_opt(pod).await? else {
                return Ok(false);
            };
            let elsewhere = p
                .spec
                .as_ref()
                .and_then(|s| s.node_name.as_deref())
                .is_some_and(|n| n != node);
            Ok(elsewhere && pod_ready(&p) && p.metadata.deletion_timestamp.is_none())
        },
    )
    .await?;
    eprintln!("moved {:?} after the taint", tainted.elapsed());
    h.wait_available(NAME, 3, Duration::from_secs(120)).await?;
    let identity = h.identity().await?;
    if identity.id_of(pod) != Some(member_id) {
        return Err(format!("{pod} is no longer member {member_id:x}: {identity:x?}").into());
    }
    h.check_keys(PREFIX, KEYS).await
}

async fn untaint(h: &Harness, node: &str) -> TestResult {
    use kube::api::{Patch, PatchParams};
    let current = h.nodes.get(node).await?;
    let taints: Vec<_> = current
        .spec
        .and_then(|s| s.taints)
        .unwrap_or_default()
        .into_iter()
        .filter(|t| t.key != "node.kubernetes.io/out-of-service")
        .collect();
    h.nodes
        .patch(
            node,
            &PatchParams::default(),
            &Patch::Merge(&json!({ "spec": { "taints": taints } })),
        )
        .await?;
    wait_for(
        "the node to be Ready again",
        Duration::from_secs(90),
        || async { Ok(node_ready(&h.nodes.get(node).await?)) },
    )
    .await
}
