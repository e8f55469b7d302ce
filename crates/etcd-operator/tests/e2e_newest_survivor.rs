//! End to end on the lab (rule 11: the newest survivor, and nothing else
//! deleted). Five members, one per node (`memberSpreading:
//! RequiredPerNode`). Batch A is written; member 4's node is cut off from
//! its peers, so it falls behind; batch B is acknowledged by the other
//! four. The volumes of members 0, 1 and 2 are wiped: the majority's data
//! is lost, and the two survivors differ — member 3 holds B, member 4 does
//! not. Member 3's node freezes and member 4's is reachable again: the only
//! survivor that answers is the older one.
//!
//! The operator must wait: `MajorityDataLost` names member 3 as unreadable,
//! and even with `policy: NewestSurvivor` (which restores without a person)
//! no restore starts, no Pod of a survivor is deleted and no PVC goes.
//! Once member 3 answers, the two survivors talk again: member 3, which
//! led, sends member 4 the entries it lacks and the commit that covers
//! them (seen on the lab: member 4's log goes from index 251 to 412 within
//! a second), so both logs end at the same entry and either one holds B.
//! The condition then names the newest survivor (by what its log holds) at
//! a revision that includes B, and asks for the three-field approval, which
//! is taken from the message. The restore deletes only the PVCs of the
//! three members whose data was lost: the other survivor's PVC is kept
//! (same UID) and the status says so, with four voters serving, until a
//! person releases it; then that member is replaced and there are five
//! voters again, with every key of A and B.

use std::time::{Duration, Instant};

use etcd_client::PutOptions;
use kube::api::{ListParams, Patch, PatchParams};
use serde_json::json;
use test_kit::TestResult;
use test_kit::conditions::node_ready;
use test_kit::e2e::{Harness, etcd_at, key, value};
use test_kit::poll::wait_for;
use test_kit::survivor::{
    Approval, NewestSurvivor, approval, newest_survivor, unreadable_survivors,
};

const NAME: &str = "newest";
const BATCH_A: &str = "/newest/a/";
const BATCH_B: &str = "/newest/b/";
const KEYS: usize = 200;
const MEMBERS: usize = 5;
/// How long the test watches that nothing is restored while the newest
/// survivor cannot be read.
const QUIET: Duration = Duration::from_secs(20);

#[test]
fn a_restore_waits_for_the_newest_survivor_and_keeps_every_other_survivor() {
    test_kit::e2e::run("newest", env!("CARGO_BIN_EXE_etcd-operator"), |h| {
        Box::pin(scenario(h))
    });
}

async fn scenario(h: &mut Harness) -> TestResult {
    let started = Instant::now();
    let added = five_nodes(h).await?;
    eprintln!(
        "[{:?}] {MEMBERS} nodes (added {added:?})",
        started.elapsed()
    );
    let outcome = losses_and_restore(h, started).await;
    // No node stays frozen or cut off, whatever happened.
    let names: Vec<String> = h
        .lab
        .config()
        .nodes
        .iter()
        .map(|n| n.name.clone())
        .collect();
    for node in &names {
        let _ = h.lab.node_thaw(node);
        let _ = h.lab.node_heal(node);
    }
    // Give a reused lab its shape back.
    for node in &added {
        if let Err(error) = h.lab.node_delete(node).await {
            eprintln!("could not delete the added node {node}: {error}");
        }
    }
    outcome
}

/// Adds lab nodes until there are five Ready ones; returns the added names.
async fn five_nodes(h: &mut Harness) -> TestResult<Vec<String>> {
    let mut added = Vec::new();
    let count = h.nodes.list(&ListParams::default()).await?.items.len();
    for _ in count..MEMBERS {
        added.push(h.lab.node_add(None, None)?.name);
    }
    wait_for(
        &format!("{MEMBERS} Ready nodes"),
        Duration::from_secs(90),
        || async {
            let nodes = h.nodes.list(&ListParams::default()).await?.items;
            Ok(nodes.iter().filter(|n| node_ready(n)).count() >= MEMBERS)
        },
    )
    .await?;
    h.mark_nodes().await?;
    Ok(added)
}

fn member(ordinal: usize) -> String {
    format!("{NAME}-{ordinal}")
}

fn claim(ordinal: usize) -> String {
    format!("data-{NAME}-{ordinal}")
}

async fn losses_and_restore(h: &mut Harness, started: Instant) -> TestResult {
    let at = || format!("[{:?}]", started.elapsed());
    h.create_cluster(
        NAME,
        json!({
            "replicas": MEMBERS,
            "storage": { "storageClassName": "lab-network", "size": "1Gi" },
            "tls": { "disabled": true },
            "pod": { "memberSpreading": "RequiredPerNode" },
        }),
    )
    .await?;
    h.wait_available(NAME, 5, Duration::from_secs(240)).await?;
    let before = h.identity().await?;
    let mut nodes = Vec::new();
    for ordinal in 0..MEMBERS {
        nodes.push(h.node_of(&member(ordinal)).await?);
    }
    let distinct: std::collections::BTreeSet<&String> = nodes.iter().collect();
    if distinct.len() != MEMBERS {
        return Err(format!("RequiredPerNode, yet members share nodes: {nodes:?}").into());
    }
    let claims = h.claim_uids().await?;
    h.write_keys(BATCH_A, KEYS).await?;
    eprintln!("{} batch A written; members on {nodes:?}", at());

    // Member 4 falls behind (cut off from its peers, its etcd running on);
    // B is acknowledged by the other four.
    let peers = etcd_lab::faults::parse_partition("peers")?;
    h.lab.node_partition(&nodes[4], peers)?;
    let four: Vec<String> = pod_endpoints(h, 0..4).await?;
    let revision_b = write_batch(four, BATCH_B, KEYS).await?;
    eprintln!(
        "{} node {} of {} cut off from its peers; batch B written up to revision {revision_b}",
        at(),
        nodes[4],
        member(4)
    );
    // Member 3 holds all of B before the others go (an acknowledged write
    // whose only copies were on the wiped volumes could not survive).
    let ip3 = pod_ip(h, 3).await?;
    wait_for(
        "member 3 to have applied batch B",
        Duration::from_secs(30),
        || async { Ok(member_revision(&ip3).await? >= revision_b) },
    )
    .await?;

    for ordinal in 0..3 {
        h.lab.volume_wipe(&h.namespace, &claim(ordinal)).await?;
        h.lab
            .pod_kill(&h.namespace, &member(ordinal), Some("etcd"))
            .await?;
    }
    // The newest survivor hangs (its machine frozen: etcd does not answer);
    // the older one is reachable again. (A frozen node rather than a
    // stopped one: an etcd restarted without quorum never serves its
    // client port, so a restarted survivor could not be read at all.)
    h.lab.node_freeze(&nodes[3])?;
    h.lab.node_heal(&nodes[4])?;
    eprintln!(
        "{} volumes of members 0-2 wiped; node {} of {} frozen, node {} of {} reachable",
        at(),
        nodes[3],
        member(3),
        nodes[4],
        member(4)
    );

    // Only the older survivor answers: the operator waits for the newest.
    let message = h
        .wait_majority_data_lost(
            NAME,
            "member 3 (only) named unreadable",
            Duration::from_secs(180),
            |m| unreadable_survivors(m) == Some(vec![member(3)]),
        )
        .await?;
    eprintln!("{} MajorityDataLost: {message}", at());
    h.patch_spec(NAME, json!({ "recovery": { "policy": "NewestSurvivor" } }))
        .await?;
    let pods = h.pod_uids().await?;
    let quiet_until = Instant::now() + QUIET;
    while Instant::now() < quiet_until {
        let status = h.status(NAME).await?;
        if let Some(restore) = &status.restore {
            return Err(format!(
                "a restore started while {} was unreadable: {restore:?}",
                member(3)
            )
            .into());
        }
        if h.pods.get_opt(&format!("{NAME}-restore")).await?.is_some() {
            return Err("a restore Pod runs while the newest survivor is unreadable".into());
        }
        if h.claim_uids().await? != claims {
            return Err("a PVC was deleted while the newest survivor is unreadable".into());
        }
        let now = h.pod_uids().await?;
        for ordinal in [3, 4] {
            if now.get(&member(ordinal)) != pods.get(&member(ordinal)) {
                return Err(format!("the Pod of survivor {} was deleted", member(ordinal)).into());
            }
        }
        match h.majority_data_lost(NAME).await? {
            Some(m) if unreadable_survivors(&m) == Some(vec![member(3)]) => {}
            other => {
                return Err(format!(
                    "MajorityDataLost no longer names {} unreadable: {other:?}",
                    member(3)
                )
                .into());
            }
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    eprintln!(
        "{} nothing restored for {QUIET:?} under policy NewestSurvivor",
        at()
    );

    // Back to a person's approval before the newest survivor answers.
    h.patch_spec(NAME, json!({ "recovery": { "policy": "Manual" } }))
        .await?;
    h.lab.node_thaw(&nodes[3])?;
    eprintln!("{} node {} of {} thawed", at(), nodes[3], member(3));
    let message = h
        .wait_majority_data_lost(
            NAME,
            "a survivor holding B named the newest with an approval to set",
            Duration::from_secs(120),
            |m| {
                newest_survivor(m).is_some_and(|n| n.revision >= revision_b)
                    && approval(m).is_some()
            },
        )
        .await?;
    eprintln!("{} MajorityDataLost: {message}", at());
    let newest: NewestSurvivor = newest_survivor(&message).ok_or("no newest survivor")?;
    let approve: Approval = approval(&message).ok_or("no approval")?;
    let (chosen, other) = match newest.name.as_str() {
        n if n == member(3) => (3, 4),
        n if n == member(4) => (4, 3),
        _ => return Err(format!("the newest survivor is {}: {message}", newest.name).into()),
    };
    if approve.survivor != newest.name {
        return Err(format!("approval for {}: {message}", approve.survivor).into());
    }
    if approve.revision != newest.revision || newest.revision < revision_b {
        return Err(format!(
            "approval at revision {} for a survivor at {} (batch B ended at {revision_b})",
            approve.revision, newest.revision
        )
        .into());
    }
    h.check_approved_incarnation(NAME, &approve).await?;
    h.patch_spec(NAME, json!({ "recovery": approve.recovery() }))
        .await?;
    let approved = Instant::now();
    eprintln!("{} approved {approve:?}", at());

    h.wait_available(NAME, 4, Duration::from_secs(300)).await?;
    eprintln!(
        "{} four voters {:?} after the approval",
        at(),
        approved.elapsed()
    );
    let status = h.status(NAME).await?;
    let restore = status.restore.clone().ok_or("no restore record")?;
    if restore.in_progress() || restore.survivor != member(chosen) {
        return Err(format!("restore not complete from {}: {restore:?}", member(chosen)).into());
    }
    let lost: Vec<String> = (0..3).map(member).collect();
    let mut lost_members = restore.lost_members.clone();
    lost_members.sort();
    if lost_members != lost {
        return Err(format!("lost members {:?}, expected {lost:?}", restore.lost_members).into());
    }
    if restore.revision.is_none_or(|r| r < revision_b) {
        return Err(format!(
            "the restore kept revision {:?} < {revision_b}",
            restore.revision
        )
        .into());
    }
    let now = h.claim_uids().await?;
    for ordinal in [3, 4] {
        if now.get(&claim(ordinal)) != claims.get(&claim(ordinal)) {
            return Err(format!(
                "the PVC of survivor {} was not kept: {now:?}",
                member(ordinal)
            )
            .into());
        }
    }
    for ordinal in 0..3 {
        if now.get(&claim(ordinal)) == claims.get(&claim(ordinal)) {
            return Err(format!("the PVC of lost {} was not replaced", member(ordinal)).into());
        }
    }
    let kept = kept_message(h, &member(other)).await?;
    eprintln!("{} kept: {kept}", at());
    if h.identity().await?.id_of(&member(other)).is_some() {
        return Err(format!("{} is a member while its PVC is kept", member(other)).into());
    }

    h.pvcs
        .patch(
            &claim(other),
            &PatchParams::default(),
            &Patch::Merge(&json!({ "metadata": { "annotations": {
                "durable-etcd.io/release-retained-data": "true" } } })),
        )
        .await?;
    let released = Instant::now();
    eprintln!("{} released {}", at(), claim(other));
    h.wait_available(NAME, 5, Duration::from_secs(240)).await?;
    eprintln!(
        "{} five voters {:?} after the release",
        at(),
        released.elapsed()
    );
    let after = h.identity().await?;
    if after.voters() != MEMBERS || after.cluster_id == before.cluster_id {
        return Err(format!("five voters of a new incarnation expected: {after:x?}").into());
    }
    if after.id_of(&member(other)) == before.id_of(&member(other)) {
        return Err(format!("{} kept its old member ID: {after:x?}", member(other)).into());
    }
    h.check_keys(BATCH_A, KEYS).await?;
    h.check_keys(BATCH_B, KEYS).await?;
    let restore = h.status(NAME).await?.restore.ok_or("no restore record")?;
    eprintln!(
        "{} every key of A and B present; restored at revision {:?} (B ended at {revision_b})",
        at(),
        restore.revision
    );
    h.one_pod_per_member().await
}

/// Waits until a condition of the cluster says that the PVC of `member` is
/// kept and how to release it; returns that message.
async fn kept_message(h: &Harness, member: &str) -> TestResult<String> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let status = h.status(NAME).await?;
        let found = status.conditions.iter().map(|c| &c.message).find(|m| {
            m.contains(&format!("the PVC of {member} keeps the data"))
                && m.contains("durable-etcd.io/release-retained-data=true")
        });
        if let Some(message) = found {
            return Ok(message.clone());
        }
        if Instant::now() > deadline {
            return Err(format!(
                "status does not say that the PVC of {member} is kept: {:#?}",
                status.conditions
            )
            .into());
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

async fn pod_ip(h: &Harness, ordinal: usize) -> TestResult<String> {
    h.pods
        .get(&member(ordinal))
        .await?
        .status
        .and_then(|s| s.pod_ip)
        .ok_or_else(|| format!("{} has no IP", member(ordinal)).into())
}

/// The client endpoints of these members.
async fn pod_endpoints(h: &Harness, ordinals: std::ops::Range<usize>) -> TestResult<Vec<String>> {
    let mut endpoints = Vec::new();
    for ordinal in ordinals {
        endpoints.push(format!("http://{}:2379", pod_ip(h, ordinal).await?));
    }
    Ok(endpoints)
}

/// The store revision a member holds, from its own status.
async fn member_revision(ip: &str) -> TestResult<i64> {
    let mut client = etcd_at(vec![format!("http://{ip}:2379")]).await?;
    let status = client.status().await?;
    Ok(status.header().map(|h| h.revision()).unwrap_or_default())
}

/// Writes `count` keys under `prefix` through `endpoints` (each put retried
/// while a leader is elected); returns the revision of the last put.
async fn write_batch(endpoints: Vec<String>, prefix: &str, count: usize) -> TestResult<i64> {
    let mut client = etcd_at(endpoints.clone()).await?;
    let mut revision = 0;
    for i in 0..count {
        let mut attempts = 0;
        let response = loop {
            match client
                .put(key(prefix, i), value(i), None::<PutOptions>)
                .await
            {
                Ok(response) => break response,
                Err(error) if attempts < 20 => {
                    attempts += 1;
                    eprintln!("put {} failed ({error}); retrying", key(prefix, i));
                    tokio::time::sleep(Duration::from_millis(500)).await;
                    client = etcd_at(endpoints.clone()).await?;
                }
                Err(error) => return Err(error.into()),
            }
        };
        revision = response.header().map(|h| h.revision()).unwrap_or_default();
    }
    Ok(revision)
}

/// The parsing this test relies on, without a lab.
#[test]
fn the_condition_is_read_as_a_person_reads_it() {
    let message = "data of a majority is known lost: c-0 (member-guard refused: x), c-1 (y); \
            newest survivor c-3 at revision 812 (raft index 1040); \
            to restore from it set spec.recovery: {approvedIncarnation: c-abc-r1, approvedSurvivor: c-3, approvedRevision: 812}";
    assert_eq!(
        newest_survivor(message),
        Some(NewestSurvivor {
            name: "c-3".into(),
            revision: 812,
            raft_index: 1040
        })
    );
    assert_eq!(
        approval(message),
        Some(Approval {
            incarnation: "c-abc-r1".into(),
            survivor: "c-3".into(),
            revision: 812
        })
    );
    assert_eq!(unreadable_survivors(message), None);
    let waiting = "data of a majority is known lost: c-0 (z); survivors c-3, c-5 keep their volumes but cannot be read, so the newest data is not known: waiting for them (of those that answered, c-4 is newest at revision 700; a person may choose it explicitly); a person may choose";
    assert_eq!(
        unreadable_survivors(waiting),
        Some(vec!["c-3".to_owned(), "c-5".to_owned()])
    );
    assert_eq!(newest_survivor(waiting), None);
    assert_eq!(approval(waiting), None);
}
