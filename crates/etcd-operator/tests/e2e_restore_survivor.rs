//! End to end on the lab: the volumes of two of three members are wiped (a
//! true loss of the majority's data; their etcd processes are killed, as
//! they die on a vanished data dir). The operator touches nothing: the
//! `MajorityDataLost` condition names the newest survivor (the only one,
//! `restore-0`) with its revision and asks for an approval that names the
//! incarnation, that survivor and that revision; an approval of the
//! incarnation alone approves nothing. After the three-field approval
//! (parsed from the condition, as a person would copy it) the operator
//! restores the survivor's data into a new incarnation (new token, new
//! cluster ID, same member names) and grows it back to three voters. The
//! operator is stopped and started again in the middle of the restore: the
//! restore carries on from `status.restore`. Every key the survivor held is
//! there at the end.

use std::time::{Duration, Instant};

use serde_json::json;
use test_kit::TestResult;
use test_kit::e2e::{Harness, cluster_spec};
use test_kit::poll::wait_for;
use test_kit::survivor::{approval, newest_survivor};

const NAME: &str = "restore";
const PREFIX: &str = "/restore/";
const KEYS: usize = 500;

#[test]
fn majority_loss_waits_for_approval_then_restores_from_the_survivor() {
    test_kit::e2e::run("restore", env!("CARGO_BIN_EXE_etcd-operator"), |h| {
        Box::pin(scenario(h))
    });
}

async fn scenario(h: &mut Harness) -> TestResult {
    let before = h
        .available_with_keys(NAME, cluster_spec(3, "lab-network"), PREFIX, KEYS)
        .await?;
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
    let message = h
        .wait_majority_data_lost(
            NAME,
            "the newest survivor and the approval it needs",
            Duration::from_secs(120),
            |m| newest_survivor(m).is_some() && approval(m).is_some(),
        )
        .await?;
    eprintln!("MajorityDataLost after {:?}: {message}", lost_at.elapsed());
    let newest = newest_survivor(&message).ok_or("no newest survivor")?;
    let approve = approval(&message).ok_or("no approval")?;
    let survivor = format!("{NAME}-0");
    if newest.name != survivor || approve.survivor != survivor {
        return Err(
            format!("the condition does not name {survivor} the survivor: {message}").into(),
        );
    }
    if newest.revision < revision_written || approve.revision != newest.revision {
        return Err(format!(
            "the survivor's revision is {} and the approval's {} (written up to {revision_written})",
            newest.revision, approve.revision
        )
        .into());
    }
    h.check_approved_incarnation(NAME, &approve).await?;
    let token = approve.incarnation.clone();

    // Nothing is touched while nobody approves the survivor: the
    // incarnation alone approves nothing.
    h.patch_spec(
        NAME,
        json!({ "recovery": { "approvedIncarnation": token } }),
    )
    .await?;
    let survivor_pod = h.pods.get(&survivor).await?.metadata.uid;
    let claims = pvc_uids(h).await?;
    let quiet_until = Instant::now() + Duration::from_secs(20);
    while Instant::now() < quiet_until {
        let status = h.status(NAME).await?;
        if status.restore.is_some() {
            return Err("a restore started without the survivor's approval".into());
        }
        if h.pods.get(&survivor).await?.metadata.uid != survivor_pod {
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

    eprintln!("approving {approve:?}");
    let approved = Instant::now();
    h.patch_spec(NAME, json!({ "recovery": approve.recovery() }))
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
