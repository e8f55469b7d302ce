//! The baseline: the same load on etcd processes of the old release on
//! loopback (the operator's heartbeat and election timeout), `members` of
//! them, a fresh cluster per run:
//!
//! - **election**: the leader SIGKILLed; time until a survivor reports a new
//!   leader, and until the first write after the kill is acknowledged;
//! - **roll by hand**: the upgrade the operator does, done directly: each
//!   follower stopped cleanly (SIGTERM) and started again on its data with
//!   the new release's binary, the next one once it serves and has caught
//!   up; the leader last, after moving leadership to an upgraded member.
//!   The load's client drops a member's endpoint before it stops and adds it
//!   back once it serves, as the lab side follows the Ready member Pods.

use std::collections::BTreeSet;
use std::path::Path;
use std::time::{Duration, Instant};

use etcd_client::Client;
use serde_json::{Value, json};
use test_kit::TestResult;
use test_kit::e2e::etcd_at;
use test_kit::etcd_process::{READY_TIMEOUT, initial_cluster};
use test_kit::figures::{round3, summary};

use crate::etcd_cluster::{Cluster, member_id, status_at};
use crate::load::{self, PacedWriter, Record, follow_endpoints};
use crate::{ELECTION_TIMEOUT_MS, HEARTBEAT_MS, HOLD, TO_VERSION, WARM_UP};

/// How often the survivors are asked for the leader after a kill.
const LEADER_POLL: Duration = Duration::from_millis(10);
/// How far behind the leader's applied index a restarted member may be and
/// count as caught up (the operator's rule).
const CATCH_UP_ENTRIES: u64 = 1000;
/// How long a clean stop may take.
const STOP_TIMEOUT: Duration = Duration::from_secs(30);

/// A fresh cluster of `size` members of the old release with the
/// operator's heartbeat and election timeout, serving.
async fn start_cluster(size: usize, token: &str) -> TestResult<Cluster> {
    let timing = [
        format!("--heartbeat-interval={HEARTBEAT_MS}"),
        format!("--election-timeout={ELECTION_TIMEOUT_MS}"),
    ];
    Cluster::start(size, token, &timing).await
}

/// Leader elections with `size` members, `runs` times.
pub async fn election(size: usize, runs: usize) -> TestResult<Value> {
    let mut elected = Vec::new();
    let mut first_write = Vec::new();
    let mut gaps = Vec::new();
    let mut details = Vec::new();
    let mut error = None;
    for run in 0..runs {
        match one_election(size, run).await {
            Ok(figures) => {
                elected.extend(figures["elected_s"].as_f64());
                first_write.extend(figures["first_write_s"].as_f64());
                gaps.extend(figures["longest_gap_s"].as_f64());
                details.push(figures);
            }
            Err(e) => {
                error = Some(e.to_string());
                break;
            }
        }
    }
    let mut value = json!({
        "elected": summary(&elected),
        "first_write": summary(&first_write),
        "longest_gap": summary(&gaps),
        "failed": details.iter().map(|d| d["failed"].clone()).collect::<Vec<_>>(),
        "lost": details.iter().map(|d| d["lost"].clone()).collect::<Vec<_>>(),
        "runs": details,
    });
    if let Some(error) = error {
        value["error"] = json!(error);
    }
    Ok(value)
}

async fn one_election(size: usize, run: usize) -> TestResult<Value> {
    let mut cluster = start_cluster(size, &format!("rollout-election-{size}-{run}")).await?;
    let client = load::client(&cluster.endpoints()).await?;
    let writer = PacedWriter::start(client, &format!("/election/{size}/{run}/"));
    tokio::time::sleep(WARM_UP).await;

    let (leader, _) = cluster.leader().await?;
    let old_id = member_id(&status_at(&cluster.members[leader].client_url).await?);
    let survivors: Vec<String> = cluster
        .endpoints()
        .into_iter()
        .enumerate()
        .filter(|(i, _)| *i != leader)
        .map(|(_, e)| e)
        .collect();
    let mut clients = Vec::new();
    for endpoint in &survivors {
        clients.push(etcd_at(vec![endpoint.clone()]).await?);
    }
    cluster.members[leader].kill();
    let killed = Instant::now();
    let elected = loop {
        if new_leader(&mut clients, old_id).await {
            break killed.elapsed().as_secs_f64();
        }
        if killed.elapsed() > Duration::from_secs(60) {
            return Err("no new leader within 60 s of the kill".into());
        }
        tokio::time::sleep(LEADER_POLL).await;
    };
    tokio::time::sleep(HOLD).await;
    let record = writer.stop().await?;
    let lost = record.lost(survivors).await?;
    let mut figures = record.figures(killed, lost);
    let first_write = record
        .first_ack_after(killed)
        .map(|t| round3(t.duration_since(killed).as_secs_f64()));
    figures["elected_s"] = json!(round3(elected));
    figures["first_write_s"] = json!(first_write);
    eprintln!(
        "etcd alone, {size} members, run {run}: leader killed; new leader after {elected:.3} s, \
         first write after {} s; longest gap {} s; {} of {} requests failed {}; {lost} lost",
        figures["first_write_s"],
        figures["longest_gap_s"],
        figures["failed"],
        figures["attempted"],
        figures["failed_by_kind"],
    );
    Ok(figures)
}

/// Whether a survivor reports a leader other than `old_id` (each asked
/// within 100 ms).
async fn new_leader(clients: &mut [Client], old_id: u64) -> bool {
    for client in clients {
        let status = tokio::time::timeout(Duration::from_millis(100), client.status()).await;
        if let Ok(Ok(status)) = status
            && status.leader() != 0
            && status.leader() != old_id
        {
            return true;
        }
    }
    false
}

/// The upgrade done by hand with `size` members, `runs` times.
pub async fn roll_by_hand(size: usize, runs: usize) -> TestResult<Value> {
    let binary = etcd_lab::upstream::ETCD_3_7
        .built_dir()
        .map_err(|e| e.to_string())?
        .join("etcd");
    let mut rollouts = Vec::new();
    let mut gaps = Vec::new();
    let mut details = Vec::new();
    let mut error = None;
    for run in 0..runs {
        match one_roll(size, run, &binary).await {
            Ok(figures) => {
                rollouts.extend(figures["rollout_s"].as_f64());
                gaps.extend(figures["longest_gap_s"].as_f64());
                details.push(figures);
            }
            Err(e) => {
                error = Some(e.to_string());
                break;
            }
        }
    }
    let mut value = json!({
        "rollout": summary(&rollouts),
        "longest_gap": summary(&gaps),
        "failed": details.iter().map(|d| d["failed"].clone()).collect::<Vec<_>>(),
        "lost": details.iter().map(|d| d["lost"].clone()).collect::<Vec<_>>(),
        "runs": details,
    });
    if let Some(error) = error {
        value["error"] = json!(error);
    }
    Ok(value)
}

async fn one_roll(size: usize, run: usize, binary: &Path) -> TestResult<Value> {
    let mut cluster = start_cluster(size, &format!("rollout-roll-{size}-{run}")).await?;
    let mut current: BTreeSet<String> = cluster.endpoints().into_iter().collect();
    let client = load::client(&cluster.endpoints()).await?;
    let writer = PacedWriter::start(client.clone(), &format!("/roll/{size}/{run}/"));
    tokio::time::sleep(WARM_UP).await;

    let started = Instant::now();
    let mut steps = Vec::new();
    let (leader, _) = cluster.leader().await?;
    let followers: Vec<usize> = (0..size).filter(|&i| i != leader).collect();
    for &i in &followers {
        upgrade(&mut cluster, i, binary, &client, &mut current).await?;
        steps.push((
            round3(started.elapsed().as_secs_f64()),
            format!("m{i} upgraded"),
        ));
    }
    let target = followers.first().copied().ok_or("no follower")?;
    let target_id = member_id(&status_at(&cluster.members[target].client_url).await?);
    etcd_at(vec![cluster.members[leader].client_url.clone()])
        .await?
        .move_leader(target_id)
        .await?;
    steps.push((
        round3(started.elapsed().as_secs_f64()),
        format!("leadership moved from m{leader} to m{target}"),
    ));
    upgrade(&mut cluster, leader, binary, &client, &mut current).await?;
    steps.push((
        round3(started.elapsed().as_secs_f64()),
        format!("m{leader} upgraded"),
    ));
    let rolled = started.elapsed().as_secs_f64();
    tokio::time::sleep(HOLD).await;
    let record: Record = writer.stop().await?;
    let versions: Vec<String> = cluster
        .statuses()
        .await
        .iter()
        .map(|(_, s)| s.version().to_owned())
        .collect();
    if versions.len() != size || versions.iter().any(|v| v != TO_VERSION) {
        return Err(format!("members report {versions:?} after the roll").into());
    }
    let lost = record.lost(cluster.endpoints()).await?;
    let mut figures = record.figures(started, lost);
    figures["rollout_s"] = json!(round3(rolled));
    figures["timeline"] = json!(steps);
    eprintln!(
        "etcd alone, {size} members, run {run}: rolled by hand in {rolled:.1} s; longest gap {} s \
         ({}-{} s after the start); {} of {} requests failed {}; {lost} lost; {steps:?}",
        figures["longest_gap_s"],
        figures["longest_gap_from_s"],
        figures["longest_gap_to_s"],
        figures["failed"],
        figures["attempted"],
        figures["failed_by_kind"],
    );
    Ok(figures)
}

/// Member `i` stopped cleanly and started again on its data with `binary`;
/// back once it serves and has caught up with the leader.
async fn upgrade(
    cluster: &mut Cluster,
    i: usize,
    binary: &Path,
    client: &Client,
    current: &mut BTreeSet<String>,
) -> TestResult {
    let endpoint = cluster.members[i].client_url.clone();
    let mut without = current.clone();
    without.remove(&endpoint);
    follow_endpoints(client, current, &without).await?;
    cluster.members[i].stop(STOP_TIMEOUT).await?;
    let initial = initial_cluster(&cluster.members);
    let member = &mut cluster.members[i];
    member.set_binary(binary);
    member.start(&initial, "existing", &cluster.token)?;
    member.wait_serving(READY_TIMEOUT).await?;
    let deadline = Instant::now() + READY_TIMEOUT;
    loop {
        let (_, leader_applied) = cluster.leader().await?;
        let own = status_at(&endpoint).await?.raft_applied_index();
        if own + CATCH_UP_ENTRIES >= leader_applied {
            break;
        }
        if Instant::now() > deadline {
            return Err(format!("m{i} did not catch up within {READY_TIMEOUT:?}").into());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let mut with = current.clone();
    with.insert(endpoint);
    follow_endpoints(client, current, &with).await?;
    Ok(())
}
