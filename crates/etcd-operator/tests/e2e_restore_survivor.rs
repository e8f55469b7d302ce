//! End to end on the lab: the volumes of two of three members are wiped (a
//! true loss of the majority's data; their etcd processes are killed, as
//! they die on a vanished data dir). The operator touches nothing: status
//! says `MajorityDataLost` with the newest revision the survivor holds, and
//! waits for a person. After the approval (`spec.recovery.
//! approvedIncarnation` = `status.clusterToken`) it restores the survivor's
//! data into a new incarnation (new token, new cluster ID, same member
//! names) and grows it back to three voters. The operator is stopped and
//! started again in the middle of the restore: the restore carries on from
//! `status.restore`. Every key the survivor held is there at the end.

mod common;

use std::time::{Duration, Instant};

use common::{Harness, TestResult, condition_true, wait_for};
use serde_json::json;

const NAME: &str = "restore";
const PREFIX: &str = "/restore/";
const KEYS: usize = 500;

#[test]
fn majority_loss_waits_for_approval_then_restores_from_the_survivor() {
    common::run("restore", |h| Box::pin(scenario(h)));
}

async fn scenario(h: &mut Harness) -> TestResult {
    h.create_cluster(
        NAME,
        json!({
            "replicas": 3,
            "storage": { "storageClassName": "lab-network", "size": "1Gi" },
        }),
    )
    .await?;
    h.wait_available(NAME, 3, Duration::from_secs(180)).await?;
    h.write_keys(PREFIX, KEYS).await?;
    let before = h.identity().await?;
    let revision_written = {
        let mut client = h.etcd().await?;
        client
            .get(PREFIX, None)
            .await?
            .header()
            .map(|h| h.revision())
            .unwrap_or_default()
    };
    eprintln!("{KEYS} keys written, revision {revision_written}");

    for ordinal in [1, 2] {
        let member = format!("{NAME}-{ordinal}");
        h.lab
            .volume_wipe(&h.namespace, &format!("data-{member}"))
            .await?;
        h.lab.pod_kill(&h.namespace, &member, Some("etcd")).await?;
    }
    let lost_at = Instant::now();
    wait_for("MajorityDataLost", Duration::from_secs(120), || async {
        Ok(condition_true(&h.status(NAME).await?, "MajorityDataLost"))
    })
    .await?;
    let status = h.status(NAME).await?;
    let message = status
        .conditions
        .iter()
        .find(|c| c.type_ == "MajorityDataLost")
        .map(|c| c.message.clone())
        .unwrap_or_default();
    eprintln!("MajorityDataLost after {:?}: {message}", lost_at.elapsed());
    if !message.contains("newest revision held by a survivor") {
        return Err(format!("status does not show the survivor's revision: {message}").into());
    }

    // Nothing is touched while nobody approves.
    let survivor_pod = h.pods.get(&format!("{NAME}-0")).await?.metadata.uid;
    let claims = pvc_uids(h).await?;
    let quiet_until = Instant::now() + Duration::from_secs(20);
    while Instant::now() < quiet_until {
        let status = h.status(NAME).await?;
        if status.restore.is_some() {
            return Err("a restore started without approval".into());
        }
        if h.pods.get(&format!("{NAME}-0")).await?.metadata.uid != survivor_pod {
            return Err("the survivor's pod was replaced without approval".into());
        }
        if pvc_uids(h).await? != claims {
            return Err("PVCs changed without approval".into());
        }
        if h.pods.get_opt(&format!("{NAME}-restore")).await?.is_some() {
            return Err("a restore pod runs without approval".into());
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }

    let token = status.cluster_token.clone().ok_or("no cluster token")?;
    eprintln!("approving the restore of incarnation {token}");
    let approved = Instant::now();
    h.patch_spec(
        NAME,
        json!({ "recovery": { "approvedIncarnation": token } }),
    )
    .await?;

    // The operator restarts while the restore runs.
    wait_for("the restore pod", Duration::from_secs(120), || async {
        Ok(h.pods.get_opt(&format!("{NAME}-restore")).await?.is_some())
    })
    .await?;
    eprintln!(
        "restore pod after {:?}: step {:?}; restarting the operator",
        approved.elapsed(),
        h.status(NAME).await?.restore.map(|r| r.step)
    );
    h.stop_operator();
    tokio::time::sleep(Duration::from_secs(3)).await;
    h.start_operator()?;

    h.wait_available(NAME, 3, Duration::from_secs(300)).await?;
    eprintln!(
        "three voters again {:?} after the approval",
        approved.elapsed()
    );
    let after = h.identity().await?;
    if after.cluster_id == before.cluster_id {
        return Err(format!("the cluster ID did not change: {after:x?}").into());
    }
    if after.members.keys().ne(before.members.keys()) {
        return Err(format!("member names changed: {after:x?}").into());
    }
    let status = h.status(NAME).await?;
    let restore = status.restore.clone().ok_or("no restore record")?;
    if restore.in_progress() {
        return Err(format!("the restore is not complete: {restore:?}").into());
    }
    if status.cluster_token.as_deref() == Some(token.as_str()) {
        return Err("the token did not change".into());
    }
    eprintln!(
        "restored: incarnation {} cluster {:x}, survivor revision kept {:?} (written up to {revision_written})",
        restore.incarnation, after.cluster_id, restore.revision
    );
    if restore.revision.is_some_and(|r| r < revision_written) {
        return Err(format!(
            "the restore kept revision {:?} < {revision_written}",
            restore.revision
        )
        .into());
    }
    h.check_keys(PREFIX, KEYS).await?;
    h.one_pod_per_member().await
}

async fn pvc_uids(h: &Harness) -> TestResult<Vec<String>> {
    let mut uids: Vec<String> = h
        .pvcs
        .list(&Default::default())
        .await?
        .items
        .into_iter()
        .filter_map(|p| p.metadata.uid)
        .collect();
    uids.sort();
    Ok(uids)
}
