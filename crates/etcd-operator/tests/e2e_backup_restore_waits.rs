//! End to end on the lab (rules 7 and 11 for a restore from backups): a
//! restore from backups approved in advance waits while a survivor newer
//! than the backups cannot be read, and runs once a person approves this
//! very loss.
//!
//! Three members on network volumes, one per node (`memberSpreading:
//! RequiredPerNode`); backups go to a claim labelled for them. Batch A is
//! written, one full `EtcdBackup` is taken, then batch B is written: every
//! member is newer than the backup. `spec.recovery` names the backup
//! (`source: Backup`) and approves the incarnation in advance
//! (`approvedIncarnation: <status.clusterToken>`, as if kept in Git). The
//! volumes of two members are wiped (their etcd processes killed) and the
//! node of the third, the survivor holding batch B, freezes: it cannot be
//! read.
//!
//! The operator must wait: for a while no restore starts (no
//! `status.restore`, no restore Pod, no PVC deleted), the
//! `MajorityDataLost` condition names the survivor unreadable and shows the
//! approval to set, and `status.dataLoss` lists the lost members and the
//! survivor with `readable: false`, its last reported revision newer than
//! the backup's. Once a person sets `approvedLoss` to
//! `status.dataLoss.approval`, the restore from the backup starts (into the
//! volume of a lost member). Its first step deletes every Pod of the lost
//! incarnation, and the survivor's terminates only once its machine
//! resumes: the node thaws, and the cluster serves again with two voters,
//! holding batch A and none of batch B, the survivor's volume kept.

use std::time::{Duration, Instant};

use etcd_operator::api::{BackupPhase, ConditionType, EtcdBackup, RecoverySource};
use kube::Api;
use kube::api::ListParams;
use serde_json::{Value, json};
use test_kit::TestResult;
use test_kit::e2e::{Harness, cluster_spec_with};
use test_kit::poll::wait_for;
use test_kit::survivor::unreadable_survivors;

const NAME: &str = "waits";
const CLAIM: &str = "etcd-backups";
const BACKUP: &str = "waits-full";
const BATCH_A: &str = "/waits/a/";
const BATCH_B: &str = "/waits/b/";
const KEYS: usize = 100;
/// How long the test watches that nothing is restored while the survivor
/// cannot be read.
const QUIET: Duration = Duration::from_secs(35);

#[test]
fn a_backup_restore_approved_in_advance_waits_until_a_person_approves_the_loss() {
    test_kit::e2e::run("backup-waits", env!("CARGO_BIN_EXE_etcd-operator"), |h| {
        Box::pin(scenario(h))
    });
}

async fn scenario(h: &mut Harness) -> TestResult {
    let started = Instant::now();
    let outcome = loss_and_restore(h, started).await;
    // No node stays frozen, whatever happened.
    let names: Vec<String> = h
        .lab
        .config()
        .nodes
        .iter()
        .map(|n| n.name.clone())
        .collect();
    for node in &names {
        let _ = h.lab.node_thaw(node);
    }
    outcome
}

fn member(ordinal: usize) -> String {
    format!("{NAME}-{ordinal}")
}

fn claim(ordinal: usize) -> String {
    format!("data-{NAME}-{ordinal}")
}

fn destination() -> Value {
    json!({ "persistentVolumeClaim": { "claimName": CLAIM, "path": "etcd" } })
}

async fn loss_and_restore(h: &mut Harness, started: Instant) -> TestResult {
    let at = || format!("[{:?}]", started.elapsed());
    h.create_claim(CLAIM).await?;
    h.create_available(
        NAME,
        cluster_spec_with(
            3,
            "lab-network",
            json!({ "pod": { "memberSpreading": "RequiredPerNode" } }),
        ),
        Duration::from_secs(180),
    )
    .await?;
    let mut nodes = Vec::new();
    for ordinal in 0..3 {
        nodes.push(h.node_of(&member(ordinal)).await?);
    }
    h.write_keys(BATCH_A, KEYS).await?;
    eprintln!("{} batch A written; members on {nodes:?}", at());

    // One full backup of batch A.
    h.create_backup_to_claim(BACKUP, NAME, CLAIM, Some("etcd"))
        .await?;
    let backups: Api<EtcdBackup> = Api::namespaced(h.client.clone(), &h.namespace);
    wait_for("the full backup", Duration::from_secs(180), || async {
        let status = backups.get(BACKUP).await?.status.unwrap_or_default();
        if status.phase == Some(BackupPhase::Failed) {
            return Err(format!("the full backup failed: {:?}", status.error).into());
        }
        Ok(status.phase == Some(BackupPhase::Succeeded))
    })
    .await?;
    let full = backups.get(BACKUP).await?.status.unwrap_or_default();
    let backup_revision = full.revision.ok_or("the backup has no revision")?;
    let backup_name = full
        .location
        .as_deref()
        .and_then(|l| l.rsplit('/').next())
        .and_then(|o| o.strip_suffix(".db.zst"))
        .ok_or_else(|| format!("not a snapshot location: {:?}", full.location))?
        .to_string();
    if !backup_name.ends_with(&format!("-r{backup_revision}")) {
        return Err(format!("backup {backup_name} is not at revision {backup_revision}").into());
    }
    eprintln!(
        "{} full backup {backup_name} at revision {backup_revision}",
        at()
    );

    // Batch B after the backup: every member is newer than the backups.
    h.write_keys(BATCH_B, KEYS).await?;
    let revision_b = h
        .etcd()
        .await?
        .get(BATCH_B, None)
        .await?
        .header()
        .map(|h| h.revision())
        .unwrap_or_default();
    eprintln!("{} batch B written up to revision {revision_b}", at());

    // The restore from the backup, approved in advance (as if kept in Git).
    let token = h
        .status(NAME)
        .await?
        .cluster_token
        .ok_or("no status.clusterToken")?;
    h.patch_spec(
        NAME,
        json!({ "recovery": {
            "source": "Backup",
            "backup": { "destination": destination(), "backupName": backup_name },
            "approvedIncarnation": token,
        } }),
    )
    .await?;

    // The survivor: a member whose node does not run the claim's store
    // (its node freezes; the restore reads the backups from the store).
    let store_nodes: Vec<String> = h
        .pods
        .list(&ListParams::default().labels(&format!("durable-etcd.io/backup-claim={CLAIM}")))
        .await?
        .items
        .into_iter()
        .filter_map(|p| p.spec?.node_name)
        .collect();
    let survivor = [2, 1]
        .into_iter()
        .find(|&o| !store_nodes.contains(&nodes[o]))
        .ok_or_else(|| format!("the store runs on every node: {store_nodes:?}"))?;
    let lost: Vec<usize> = (0..3).filter(|&o| o != survivor).collect();
    let lost_names: Vec<String> = lost.iter().map(|&o| member(o)).collect();
    // The operator has read batch B on the survivor before it hangs: the
    // revision it last reported is newer than the backup.
    wait_for(
        "the operator to read batch B on the survivor",
        Duration::from_secs(60),
        || async {
            Ok(h.status(NAME)
                .await?
                .members
                .iter()
                .find(|m| m.name == member(survivor))
                .and_then(|m| m.revision)
                .is_some_and(|r| r >= revision_b))
        },
    )
    .await?;
    let claims = h.claim_uids().await?;

    // The loss: two volumes wiped, their etcd processes killed; the
    // survivor's machine hangs.
    for &ordinal in &lost {
        h.lab.volume_wipe(&h.namespace, &claim(ordinal)).await?;
        h.lab
            .pod_kill(&h.namespace, &member(ordinal), Some("etcd"))
            .await?;
    }
    h.lab.node_freeze(&nodes[survivor])?;
    eprintln!(
        "{} volumes of {lost_names:?} wiped; node {} of {} frozen (store on {store_nodes:?})",
        at(),
        nodes[survivor],
        member(survivor)
    );

    let message = h
        .wait_majority_data_lost(
            NAME,
            "the survivor named unreadable",
            Duration::from_secs(180),
            |m| unreadable_survivors(m) == Some(vec![member(survivor)]),
        )
        .await?;
    eprintln!("{} MajorityDataLost: {message}", at());
    let approval =
        wait_for_data_loss(h, &lost_names, survivor, backup_revision, revision_b).await?;
    eprintln!("{} status.dataLoss approval {approval}", at());

    // Nothing is restored while the survivor cannot be read, although the
    // incarnation was approved.
    let pods = h.pod_uids().await?;
    let quiet_until = Instant::now() + QUIET;
    while Instant::now() < quiet_until {
        let status = h.status(NAME).await?;
        if let Some(restore) = &status.restore {
            return Err(format!(
                "a restore started while {} was unreadable: {restore:?}",
                member(survivor)
            )
            .into());
        }
        if h.pods.get_opt(&format!("{NAME}-restore")).await?.is_some() {
            return Err("a restore Pod runs while the survivor is unreadable".into());
        }
        if h.claim_uids().await? != claims {
            return Err("a PVC was deleted while the survivor is unreadable".into());
        }
        if h.pod_uids().await?.get(&member(survivor)) != pods.get(&member(survivor)) {
            return Err(format!("the Pod of survivor {} was deleted", member(survivor)).into());
        }
        let message = h.majority_data_lost(NAME).await?.unwrap_or_default();
        if unreadable_survivors(&message) != Some(vec![member(survivor)])
            || !message.contains(&format!("approvedLoss: {approval}"))
        {
            return Err(format!(
                "MajorityDataLost no longer names {} unreadable with the approval {approval}: {message}",
                member(survivor)
            )
            .into());
        }
        let loss = status.data_loss.ok_or("status.dataLoss is gone")?;
        if loss.approval != approval
            || loss
                .survivors
                .iter()
                .any(|s| s.name == member(survivor) && s.readable)
        {
            return Err(format!("status.dataLoss changed: {loss:?}").into());
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    eprintln!(
        "{} nothing restored for {QUIET:?} with the incarnation approved in advance",
        at()
    );

    // A person approves this very loss.
    h.patch_spec(NAME, json!({ "recovery": { "approvedLoss": approval } }))
        .await?;
    let approved = Instant::now();
    eprintln!("{} approvedLoss {approval}", at());
    let deadline = Instant::now() + Duration::from_secs(60);
    let restore = loop {
        if let Some(restore) = h.status(NAME).await?.restore {
            break restore;
        }
        if Instant::now() > deadline {
            return Err(format!(
                "no restore 60 s after the approval: {:#?}",
                h.status(NAME).await?.conditions
            )
            .into());
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    };
    eprintln!(
        "{} restore started {:?} after the approval: {restore:?}",
        at(),
        approved.elapsed()
    );
    if restore.source != RecoverySource::Backup {
        return Err(format!("not a restore from the backup: {restore:?}").into());
    }
    if restore.from_incarnation != token {
        return Err(format!("the restore answers another incarnation: {restore:?}").into());
    }
    let mut restored_lost = restore.lost_members.clone();
    restored_lost.sort();
    if restored_lost != lost_names {
        return Err(format!("lost members {restored_lost:?}, expected {lost_names:?}").into());
    }
    if restore.survivor == member(survivor) {
        return Err(format!(
            "the backup is restored into the unreadable survivor's volume: {restore:?}"
        )
        .into());
    }

    // The restore deletes every Pod of the lost incarnation first, the
    // survivor's too, and a Pod on a hung machine terminates only once the
    // machine resumes.
    wait_for(
        "the restore to delete the survivor's Pod",
        Duration::from_secs(90),
        || async {
            Ok(h.pods
                .get_opt(&member(survivor))
                .await?
                .is_none_or(|p| p.metadata.deletion_timestamp.is_some()))
        },
    )
    .await?;
    eprintln!(
        "{} the Pod of {} is being deleted; restore step: {:?}",
        at(),
        member(survivor),
        h.status(NAME).await?.restore.map(|r| r.step)
    );
    h.lab.node_thaw(&nodes[survivor])?;
    eprintln!(
        "{} node {} of {} thawed",
        at(),
        nodes[survivor],
        member(survivor)
    );

    // The new incarnation serves the backup's data with two voters; the
    // survivor's volume is kept.
    h.wait_available(NAME, 2, Duration::from_secs(300)).await?;
    eprintln!(
        "{} two voters {:?} after the approval",
        at(),
        approved.elapsed()
    );
    h.check_keys(BATCH_A, KEYS).await?;
    let after_backup = h.values_under(BATCH_B).await?;
    if !after_backup.is_empty() {
        return Err(format!(
            "{} keys of batch B (written after the backup) are in the restored cluster",
            after_backup.len()
        )
        .into());
    }
    let now = h.claim_uids().await?;
    if now.get(&claim(survivor)) != claims.get(&claim(survivor)) {
        return Err(format!(
            "the PVC of survivor {} was not kept: {now:?}",
            member(survivor)
        )
        .into());
    }
    let status = h.status(NAME).await?;
    if status.cluster_token.as_deref() == Some(token.as_str()) {
        return Err("the restore kept the old incarnation's token".into());
    }
    eprintln!(
        "{} restored: incarnation {:?}, batch A present, batch B absent",
        at(),
        status.cluster_token
    );
    Ok(())
}

/// Waits until `status.dataLoss` lists `lost` and the survivor unreadable,
/// at a last reported revision that holds batch B (up to `revision_b`),
/// newer than the backup; returns its approval.
async fn wait_for_data_loss(
    h: &Harness,
    lost: &[String],
    survivor: usize,
    backup_revision: i64,
    revision_b: i64,
) -> TestResult<String> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let status = h.status(NAME).await?;
        if let Some(loss) = &status.data_loss {
            let unreadable = loss
                .survivors
                .iter()
                .find(|s| s.name == member(survivor))
                .is_some_and(|s| !s.readable);
            if loss.lost_members == lost && unreadable {
                eprintln!("status.dataLoss: {loss:?}");
                let newer = loss
                    .survivors
                    .iter()
                    .find(|s| s.name == member(survivor))
                    .and_then(|s| s.revision)
                    .is_some_and(|r| r >= revision_b && r > backup_revision);
                if !newer || loss.backup_revision != Some(backup_revision) {
                    return Err(format!(
                        "status.dataLoss does not show the survivor at revision {revision_b} or later, newer than the backup at revision {backup_revision}: {loss:?}"
                    )
                    .into());
                }
                if !loss.approval.starts_with(&format!("{}@", lost.join(","))) {
                    return Err(format!("approval {} names other members", loss.approval).into());
                }
                let condition = status
                    .condition(ConditionType::MajorityDataLost)
                    .map(|c| c.message.clone())
                    .unwrap_or_default();
                if !condition.contains(&loss.approval) {
                    return Err(format!(
                        "MajorityDataLost does not show the approval {}: {condition}",
                        loss.approval
                    )
                    .into());
                }
                return Ok(loss.approval.clone());
            }
        }
        if Instant::now() > deadline {
            return Err(format!(
                "status.dataLoss does not list {lost:?} and {} unreadable: {:?}",
                member(survivor),
                status.data_loss
            )
            .into());
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}
