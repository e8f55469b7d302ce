//! Benchmark (not a timed test) of a rolling upgrade under load: what
//! clients see while the operator upgrades a cluster from etcd 3.6.16 to
//! 3.7.3, beside what they see in etcd's own leader election and in the same
//! upgrade done by hand, measured in the same run. For 3 and 5 members
//! (`BENCH_ROLLOUT_MEMBERS`, default `3,5`), `BENCH_RUNS` times each
//! (default 3):
//!
//! 1. operator on the lab (`rollout/on_lab.rs`): an `EtcdCluster` created on
//!    3.6.16 and Available, one put every 10 ms through its Ready member
//!    Pods (`shared/load.rs`), `spec.version` patched to 3.7.3; the longest
//!    time between two acknowledged writes, the failed requests, the time
//!    until every member runs 3.7.3 and the cluster is Available, and the
//!    acknowledged writes read back (none may be lost);
//! 2. etcd alone (`rollout/etcd_alone.rs`, on `shared/etcd_cluster.rs`): as
//!    many etcd 3.6.16 processes on loopback under the same load: the leader SIGKILLed (etcd's election),
//!    and the upgrade done by hand (followers, then the leader after moving
//!    leadership, each stopped cleanly and started on its data with 3.7.3).
//!
//! The goal: no gap longer than one election timeout (1 s, the operator's
//! default) plus a second.
//!
//! Run as root: `cargo bench -p etcd-operator --bench rollout` (also part of
//! `make bench`). Figures go to `target/bench/rollout.json` (`BENCH_OUT`
//! sets the directory); a phase that fails records its error there instead
//! of stopping the others.

#[path = "rollout/etcd_alone.rs"]
mod etcd_alone;
// Shared with the defragmentation bench, which uses other parts of them.
#[path = "shared/etcd_cluster.rs"]
#[allow(dead_code)]
mod etcd_cluster;
#[path = "shared/lab_cluster.rs"]
mod lab_cluster;
#[path = "shared/load.rs"]
#[allow(dead_code)]
mod load;
#[path = "rollout/on_lab.rs"]
mod on_lab;

use std::time::Duration;

use serde_json::{Value, json};
use test_kit::TestResult;
use test_kit::e2e::{Harness, run_bench};
use test_kit::figures::{load_average, phase, ratio_of_medians, runs, write_figures};

/// The release the clusters start on.
pub const FROM_VERSION: &str = "3.6.16";
/// The release they are upgraded to.
pub const TO_VERSION: &str = "3.7.3";
/// etcd's heartbeat interval and election timeout on both sides (the
/// operator's defaults, which are etcd's).
pub const HEARTBEAT_MS: u64 = 100;
pub const ELECTION_TIMEOUT_MS: u64 = 1000;
/// The goal: no gap between acknowledged writes longer than this.
const GOAL: Duration = Duration::from_millis(ELECTION_TIMEOUT_MS + 1000);
/// The load runs this long before the change, and this long after it.
pub const WARM_UP: Duration = Duration::from_secs(3);
pub const HOLD: Duration = Duration::from_secs(3);

fn main() {
    run_bench(env!("CARGO_BIN_EXE_etcd-operator"), |h| Box::pin(bench(h)));
}

/// Cluster sizes (`BENCH_ROLLOUT_MEMBERS`, default `3,5`).
fn sizes() -> Vec<usize> {
    let sizes: Vec<usize> = std::env::var("BENCH_ROLLOUT_MEMBERS")
        .ok()
        .map(|v| {
            v.split(',')
                .filter_map(|s| s.trim().parse().ok())
                .filter(|&s| s > 0)
                .collect()
        })
        .unwrap_or_default();
    if sizes.is_empty() { vec![3, 5] } else { sizes }
}

async fn bench(h: &mut Harness) -> TestResult {
    let runs = runs();
    let mut results = Vec::new();
    let save = |results: &Vec<Value>| -> TestResult {
        let figures = json!({
            "runs": runs,
            "from_version": FROM_VERSION,
            "to_version": TO_VERSION,
            "write_interval_ms": load::INTERVAL.as_millis(),
            "request_timeout_ms": load::TIMEOUT.as_millis(),
            "heartbeat_ms": HEARTBEAT_MS,
            "election_timeout_ms": ELECTION_TIMEOUT_MS,
            "goal_s": GOAL.as_secs_f64(),
            "sizes": results,
        });
        write_figures("rollout.json", &figures).map(|_| ())
    };

    for members in sizes() {
        eprintln!("=== {members} members: operator on the lab");
        let load_before = load_average();
        let replicas = i32::try_from(members)?;
        let mut operator = phase(on_lab::measure(h, replicas, runs).await);
        operator["load_average"] = json!([load_before, load_average()]);
        eprintln!("=== {members} members: etcd alone, leader killed");
        let election = phase(etcd_alone::election(members, runs).await);
        eprintln!("=== {members} members: etcd alone, upgrade by hand");
        let by_hand = phase(etcd_alone::roll_by_hand(members, runs).await);
        let gap = &operator["longest_gap"];
        let goal_met = operator["longest_gap_max_s"]
            .as_f64()
            .map(|max| max <= GOAL.as_secs_f64());
        let result = json!({
            "members": members,
            "operator": operator,
            "etcd_election": election,
            "etcd_by_hand": by_hand,
            "ratio_gap_over_election_gap": ratio_of_medians(gap, &election["longest_gap"]),
            "ratio_gap_over_by_hand_gap": ratio_of_medians(gap, &by_hand["longest_gap"]),
            "goal_met": goal_met,
        });
        eprintln!(
            "{members} members: operator's longest gap {} s (max {}), etcd's election {} s, \
             by hand {} s; goal met: {goal_met:?}",
            gap["median_s"],
            result["operator"]["longest_gap_max_s"],
            election["longest_gap"]["median_s"],
            by_hand["longest_gap"]["median_s"],
        );
        results.push(result);
        save(&results)?;
    }
    save(&results)
}
