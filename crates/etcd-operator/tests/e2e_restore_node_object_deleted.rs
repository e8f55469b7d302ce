//! End to end on the lab: the Node object of the survivor is deleted in the
//! middle of an approved restore, while its machine lives on.
//!
//! Three members on node-local volumes (`lab-local`); the volumes of two
//! are wiped (a true loss of the majority's data). A person approves the
//! restore from the survivor, `node-object-0`; once the restore Pod exists
//! the survivor's Node object is deleted (someone ran `kubectl delete
//! node`; the machine, its disks and its local volumes live on, and its
//! node agent registers the Node again). Kubernetes collects the Pods bound
//! to the deleted Node.
//!
//! A deleted Node object is not proof that a node-local volume is gone, and
//! never for data a restore depends on: the survivor's PVC is the same
//! object from start to end, the restore finishes from it, and every key
//! the survivor held is there in the new incarnation.

use std::time::{Duration, Instant};

use kube::api::DeleteParams;
use serde_json::json;
use test_kit::TestResult;
use test_kit::e2e::cluster_spec_with;
use test_kit::poll::wait_for;
use test_kit::survivor::{approval, newest_survivor};

const NAME: &str = "node-object";
const PREFIX: &str = "/node-object/";
const KEYS: usize = 500;

#[test]
fn the_survivors_node_object_deleted_during_an_approved_restore_keeps_its_volume() {
    test_kit::e2e::run(
        "restore-node-object",
        env!("CARGO_BIN_EXE_etcd-operator"),
        |h| Box::pin(scenario(h)),
    );
}

async fn scenario(h: &mut test_kit::e2e::Harness) -> TestResult {
    let before = h
        .available_with_keys(
            NAME,
            cluster_spec_with(3, "lab-local", json!({ "memberFailureTimeout": "5s" })),
            PREFIX,
            KEYS,
        )
        .await?;
    for ordinal in [1, 2] {
        let member = format!("{NAME}-{ordinal}");
        h.lab
            .volume_wipe(&h.namespace, &format!("data-{member}"))
            .await?;
        h.lab.pod_kill(&h.namespace, &member, Some("etcd")).await?;
    }
    let message = h
        .wait_majority_data_lost(
            NAME,
            "the newest survivor and the approval it needs",
            Duration::from_secs(120),
            |m| newest_survivor(m).is_some() && approval(m).is_some(),
        )
        .await?;
    let approve = approval(&message).ok_or("no approval")?;
    let survivor = format!("{NAME}-0");
    if approve.survivor != survivor {
        return Err(format!("the condition does not name {survivor}: {message}").into());
    }
    let claim = format!("data-{survivor}");
    let claim_uid = h.pvcs.get(&claim).await?.metadata.uid;
    let node = h.node_of(&survivor).await?;

    eprintln!("approving {approve:?}");
    let approved = Instant::now();
    h.patch_spec(NAME, json!({ "recovery": approve.recovery() }))
        .await?;
    wait_for("the restore pod", Duration::from_secs(120), || async {
        Ok(h.pods.get_opt(&format!("{NAME}-restore")).await?.is_some())
    })
    .await?;
    let step = h.status(NAME).await?.restore.map(|r| r.step);
    eprintln!(
        "restore pod after {:?} (step {step:?}): deleting the Node object {node}",
        approved.elapsed()
    );
    h.nodes.delete(&node, &DeleteParams::default()).await?;
    let deleted = Instant::now();
    wait_for(
        "the node agent to register the Node again",
        Duration::from_secs(120),
        || async { Ok(h.nodes.get_opt(&node).await?.is_some()) },
    )
    .await?;
    eprintln!("{node} registered again after {:?}", deleted.elapsed());
    h.mark_nodes().await?;

    // The survivor's claim is never deleted, from the Node's deletion to
    // the end of the restore.
    let same_claim = || async {
        let now = h.pvcs.get_opt(&claim).await?.and_then(|p| p.metadata.uid);
        if now != claim_uid {
            return Err(format!("the survivor's PVC {claim} was replaced: {now:?}").into());
        }
        TestResult::Ok(())
    };
    let until = Instant::now() + Duration::from_secs(420);
    loop {
        same_claim().await?;
        let status = h.status(NAME).await?;
        let restored = status.restore.as_ref().is_some_and(|r| !r.in_progress());
        let available = status
            .conditions
            .iter()
            .any(|c| c.type_ == "Available" && c.status == "True");
        if restored && available && status.ready_members == 3 {
            break;
        }
        if Instant::now() > until {
            return Err(format!("not restored in 420 s: {status:?}").into());
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    eprintln!("restored {:?} after the approval", approved.elapsed());
    h.wait_available(NAME, 3, Duration::from_secs(180)).await?;
    same_claim().await?;
    let after = h.identity().await?;
    if after.cluster_id == before.cluster_id {
        return Err(format!("the cluster ID did not change: {after:x?}").into());
    }
    h.check_keys(PREFIX, KEYS).await?;
    h.one_pod_per_member().await
}
