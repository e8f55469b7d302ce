//! End to end on the lab (rule 15): a follower's database, full of live
//! values, has bytes flipped on its disk (`etcd-lab volume corrupt`).
//!
//! - Restarted on it, the follower is refused by etcd's initial corruption
//!   check (its data differs from its peers' at the same revision).
//! - Left running, the damage is found by etcd's compaction hash check
//!   after the next compaction: CORRUPT names the follower, which serves
//!   its damaged values until it is out; the operator compares the
//!   members' keyspace hashes itself before it acts, and disarms the alarm
//!   once the member is removed.
//!
//! Either way the operator names the member with the evidence, sets its
//! volume aside for a person (the PersistentVolume kept under `Retain`,
//! annotated with the evidence) and rebuilds the member from its healthy
//! peers, learner first: three voters whose `hashkv` agree at one revision,
//! every acknowledged write present, the damaged volume still there, and
//! status saying what happened.

use std::time::{Duration, Instant};

use etcd_client::{GetOptions, PutOptions};
use k8s_openapi::api::core::v1::PersistentVolume;
use kube::Api;
use kube::api::ListParams;
use test_kit::TestResult;
use test_kit::e2e::{Harness, cluster_spec, etcd_at};
use test_kit::poll::wait_for;

const NAME: &str = "damaged";
const PREFIX: &str = "/damaged/";
const KEYS: usize = 200;
/// Live values that fill the database: 40 MiB.
const BIG_VALUES: usize = 400;
const BIG_VALUE_BYTES: usize = 100 * 1024;

#[test]
fn a_follower_whose_data_is_damaged_is_rebuilt_and_its_volume_kept() {
    test_kit::e2e::run("damaged-member", env!("CARGO_BIN_EXE_etcd-operator"), |h| {
        Box::pin(refused_at_restart(h))
    });
}

#[test]
fn a_running_follower_corrupt_names_is_rebuilt_and_the_alarm_disarmed() {
    test_kit::e2e::run("corrupt-member", env!("CARGO_BIN_EXE_etcd-operator"), |h| {
        Box::pin(named_by_corrupt(h))
    });
}

/// A follower of a cluster whose database holds 40 MiB of live values.
struct Damaged {
    before: test_kit::e2e::Identity,
    member: String,
    old_id: u64,
    claim: String,
}

async fn a_full_cluster(h: &mut Harness) -> TestResult<Damaged> {
    let before = h
        .available_with_keys(NAME, cluster_spec(3, "lab-network"), PREFIX, KEYS)
        .await?;
    let mut client = h.etcd().await?;
    for i in 0..BIG_VALUES {
        let value = vec![b'a' + u8::try_from(i % 26)?; BIG_VALUE_BYTES];
        client
            .put(format!("/damaged-big/{i:04}"), value, None::<PutOptions>)
            .await?;
    }
    // A follower: not the member that leads.
    let leader = client.status().await?.leader();
    let (member, (old_id, _)) = before
        .members
        .iter()
        .find(|(_, (id, _))| *id != leader)
        .map(|(name, id)| (name.clone(), *id))
        .ok_or("no follower")?;
    let claim = format!("data-{member}");
    Ok(Damaged {
        before,
        member,
        old_id,
        claim,
    })
}

async fn refused_at_restart(h: &mut Harness) -> TestResult {
    let damaged = a_full_cluster(h).await?;
    let started = Instant::now();
    let file = h
        .lab
        .volume_corrupt(&h.namespace, &damaged.claim, Some("snap/db"))
        .await?;
    eprintln!("corrupted {} of {}", file.display(), damaged.member);
    h.lab
        .pod_kill(&h.namespace, &damaged.member, Some("etcd"))
        .await?;
    rebuilt(h, &damaged, started).await?;
    agree_and_intact(h).await?;
    let volume = kept_with_evidence(h, &damaged.claim, "found data inconsistency").await?;
    status_says(h, &volume, &damaged.member).await
}

async fn named_by_corrupt(h: &mut Harness) -> TestResult {
    let damaged = a_full_cluster(h).await?;
    let started = Instant::now();
    let file = h
        .lab
        .volume_corrupt(&h.namespace, &damaged.claim, Some("snap/db"))
        .await?;
    eprintln!(
        "corrupted {} of {} while it runs",
        file.display(),
        damaged.member
    );
    // A compaction, as auto-compaction does: the next compaction hash
    // check (every minute) hashes the damaged values.
    let mut client = h.etcd().await?;
    let revision = client
        .put("/damaged-compaction", "x", None::<PutOptions>)
        .await?
        .header()
        .ok_or("no header")?
        .revision();
    client
        .compact(
            revision,
            Some(etcd_client::CompactionOptions::new().with_physical()),
        )
        .await?;
    rebuilt(h, &damaged, started).await?;
    h.wait_warning_event(
        NAME,
        "CorruptDisarmed",
        &format!("{:x}", damaged.old_id),
        Duration::from_secs(30),
    )
    .await?;
    agree_and_intact(h).await?;
    let volume = kept_with_evidence(h, &damaged.claim, "CORRUPT").await?;
    status_says(h, &volume, &damaged.member).await
}

/// Rebuilt: a new voter under the same name, same cluster.
async fn rebuilt(h: &Harness, damaged: &Damaged, started: Instant) -> TestResult {
    let member = &damaged.member;
    wait_for(
        &format!("{member} to be rebuilt as a new voter"),
        Duration::from_secs(300),
        || async {
            let now = h.identity().await?;
            if now.cluster_id != damaged.before.cluster_id {
                return Err(format!("cluster ID changed: {now:x?}").into());
            }
            let rebuilt = now
                .members
                .get(member)
                .is_some_and(|(id, learner)| *id != damaged.old_id && !learner);
            Ok(rebuilt && now.voters() == 3)
        },
    )
    .await?;
    h.wait_available(NAME, 3, Duration::from_secs(180)).await?;
    eprintln!("{member} rebuilt in {:?}", started.elapsed());
    Ok(())
}

/// Three voters agree on hashkv at one revision, and every acknowledged
/// write is there.
async fn agree_and_intact(h: &Harness) -> TestResult {
    wait_for(
        "the three members to agree on hashkv at one revision",
        Duration::from_secs(60),
        || async {
            let revision = h
                .etcd()
                .await?
                .status()
                .await?
                .header()
                .map_or(0, |h| h.revision());
            let mut hashes = Vec::new();
            for ip in h.member_ips(NAME).await? {
                let mut one = etcd_at(vec![format!("http://{ip}:2379")]).await?;
                let answer = one.hash_kv(revision).await?;
                hashes.push((ip, answer.hash()));
            }
            eprintln!("hashkv at {revision}: {hashes:?}");
            Ok(hashes.len() == 3 && hashes.iter().all(|(_, h)| *h == hashes[0].1))
        },
    )
    .await?;
    h.check_keys(PREFIX, KEYS).await?;
    let big = h
        .etcd()
        .await?
        .get(
            "/damaged-big/",
            Some(GetOptions::new().with_prefix().with_count_only()),
        )
        .await?
        .count();
    if big != i64::try_from(BIG_VALUES)? {
        return Err(format!("{big} of {BIG_VALUES} large values").into());
    }
    Ok(())
}

/// The damaged volume is kept for a person, `Released` under `Retain`,
/// with the evidence (containing `evidence`); returns its name.
async fn kept_with_evidence(h: &Harness, claim: &str, evidence: &str) -> TestResult<String> {
    let volumes: Api<PersistentVolume> = Api::all(h.client.clone());
    let kept: Vec<PersistentVolume> = volumes
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter(|v| {
            v.spec
                .as_ref()
                .and_then(|s| s.claim_ref.as_ref())
                .is_some_and(|r| {
                    r.namespace.as_deref() == Some(h.namespace.as_str())
                        && r.name.as_deref() == Some(claim)
                })
        })
        .filter(|v| {
            v.metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get("durable-etcd.io/damaged-data"))
                .is_some_and(|why| why.contains(evidence))
        })
        .collect();
    let [volume] = kept.as_slice() else {
        return Err(format!("{} volumes of {claim} kept with the evidence", kept.len()).into());
    };
    let spec = volume.spec.as_ref().ok_or("PV without spec")?;
    if spec.persistent_volume_reclaim_policy.as_deref() != Some("Retain") {
        return Err(format!("kept volume reclaimed by {spec:?}").into());
    }
    let phase = volume.status.as_ref().and_then(|s| s.phase.clone());
    if phase.as_deref() != Some("Released") {
        return Err(format!("kept volume is {phase:?}, not Released").into());
    }
    Ok(volume.metadata.name.clone().unwrap_or_default())
}

/// Status names the kept volume, and the Warning Event was published.
async fn status_says(h: &Harness, volume: &str, member: &str) -> TestResult {
    wait_for(
        "DamagedDataKept to name the kept volume",
        Duration::from_secs(60),
        || async {
            let status = h.status(NAME).await?;
            let kept = status
                .conditions
                .iter()
                .find(|c| c.type_ == "DamagedDataKept")
                .ok_or("no DamagedDataKept condition")?;
            eprintln!("DamagedDataKept: {} {}", kept.status, kept.message);
            Ok(kept.status == "True" && kept.message.contains(volume))
        },
    )
    .await?;
    h.wait_warning_event(
        NAME,
        "DamagedVolumeSetAside",
        member,
        Duration::from_secs(30),
    )
    .await
}
