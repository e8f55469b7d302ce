//! End to end on the lab (rule 15): a follower's database, full of live
//! values, has bytes flipped on its disk (`etcd-lab volume corrupt`) and
//! its etcd restarts. etcd's initial corruption check finds that its data
//! differs from its peers' at the same revision and refuses to serve it;
//! the operator names the member with etcd's words, sets its volume aside
//! for a person (the PersistentVolume kept under `Retain`, annotated with
//! the evidence) and rebuilds the member from its healthy peers, learner
//! first: three voters whose `hashkv` agree at one revision, every
//! acknowledged write present, the damaged volume still there, and status
//! saying what happened.

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
        Box::pin(scenario(h))
    });
}

async fn scenario(h: &mut Harness) -> TestResult {
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
    let started = Instant::now();
    let file = h
        .lab
        .volume_corrupt(&h.namespace, &claim, Some("snap/db"))
        .await?;
    eprintln!("corrupted {} of {member}", file.display());
    h.lab.pod_kill(&h.namespace, &member, Some("etcd")).await?;

    // Rebuilt: a new voter under the same name, same cluster.
    wait_for(
        &format!("{member} to be rebuilt as a new voter"),
        Duration::from_secs(300),
        || async {
            let now = h.identity().await?;
            if now.cluster_id != before.cluster_id {
                return Err(format!("cluster ID changed: {now:x?}").into());
            }
            let rebuilt = now
                .members
                .get(&member)
                .is_some_and(|(id, learner)| *id != old_id && !learner);
            Ok(rebuilt && now.voters() == 3)
        },
    )
    .await?;
    h.wait_available(NAME, 3, Duration::from_secs(180)).await?;
    eprintln!("{member} rebuilt in {:?}", started.elapsed());

    // Three voters agree on hashkv at one revision.
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

    // Every acknowledged write is there.
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

    // The damaged volume is kept, with the evidence, for a person.
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
                        && r.name.as_deref() == Some(claim.as_str())
                })
        })
        .filter(|v| {
            v.metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get("durable-etcd.io/damaged-data"))
                .is_some_and(|why| why.contains("found data inconsistency"))
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

    // Status says what happened.
    let volume_name = volume.metadata.name.clone().unwrap_or_default();
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
            Ok(kept.status == "True" && kept.message.contains(&volume_name))
        },
    )
    .await?;
    h.wait_warning_event(
        NAME,
        "DamagedVolumeSetAside",
        &member,
        Duration::from_secs(30),
    )
    .await?;
    Ok(())
}
