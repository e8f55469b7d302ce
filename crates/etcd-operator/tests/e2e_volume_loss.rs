//! End to end on the lab: the volume of one running member is wiped (a
//! replaced disk), then, on another member, the identity marker is
//! corrupted. In both cases etcd is killed afterwards, as it dies at its
//! next WAL segment or snapshot on a vanished data dir; the container
//! restarts in the same Pod, and the member guard that starts etcd refuses
//! the data. The operator replaces the member (remove, fresh PVC, learner,
//! promote): same name, new member ID, same cluster ID, three voters, every
//! key. The old member ID never serves again.

use std::time::{Duration, Instant};

use test_kit::TestResult;
use test_kit::e2e::{Harness, Identity, cluster_spec};
use test_kit::poll::wait_for;

const NAME: &str = "wiped";
const PREFIX: &str = "/wiped/";
const KEYS: usize = 500;

#[test]
fn wiped_or_foreign_data_is_refused_and_the_member_replaced() {
    test_kit::e2e::run("volume-loss", env!("CARGO_BIN_EXE_etcd-operator"), |h| {
        Box::pin(scenario(h))
    });
}

async fn scenario(h: &mut Harness) -> TestResult {
    let first = h
        .available_with_keys(NAME, cluster_spec(3, "lab-network"), PREFIX, KEYS)
        .await?;

    // 1. A wiped volume under a running member.
    let member = format!("{NAME}-1");
    let claim = format!("data-{member}");
    let started = Instant::now();
    let dir = h.lab.volume_wipe(&h.namespace, &claim).await?;
    eprintln!("wiped {}", dir.display());
    h.lab.pod_kill(&h.namespace, &member, Some("etcd")).await?;
    replaced(h, &member, &first).await?;
    eprintln!("wiped volume: replaced in {:?}", started.elapsed());

    // 2. A corrupted identity marker.
    let second = h.identity().await?;
    let member = format!("{NAME}-2");
    let claim = format!("data-{member}");
    let started = Instant::now();
    let file = h
        .lab
        .volume_corrupt(&h.namespace, &claim, Some("member-identity"))
        .await?;
    eprintln!("corrupted {}", file.display());
    h.lab.pod_kill(&h.namespace, &member, Some("etcd")).await?;
    replaced(h, &member, &second).await?;
    eprintln!("corrupted marker: replaced in {:?}", started.elapsed());
    Ok(())
}

/// Waits until `member` is a new voter; the old ID never serves meanwhile.
async fn replaced(h: &Harness, member: &str, before: &Identity) -> TestResult {
    let old_id = before.id_of(member).ok_or("member before")?;
    wait_for(
        &format!("{member} to be replaced by a new voter"),
        Duration::from_secs(240),
        || async {
            h.one_pod_per_member().await?;
            let now = h.identity().await?;
            if now.cluster_id != before.cluster_id {
                return Err(format!("cluster ID changed: {now:x?}").into());
            }
            let voter = now
                .members
                .get(member)
                .is_some_and(|(id, learner)| *id != old_id && !learner);
            Ok(voter && now.voters() == 3)
        },
    )
    .await?;
    h.wait_available(NAME, 3, Duration::from_secs(120)).await?;
    let now = h.identity().await?;
    if now.members.values().any(|(id, _)| *id == old_id) {
        return Err(format!("old member {old_id:x} is back: {now:x?}").into());
    }
    h.check_keys(PREFIX, KEYS).await
}
