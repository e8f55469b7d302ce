//! Benchmark (not a timed test) of defragmentation under load: what clients
//! see while the operator defragments a 3-member cluster, beside
//! `etcdctl defrag --cluster` on etcd processes, measured in the same run.
//! The database is `BENCH_DEFRAG_DB_MIB` MiB (default 1024) of 512 KiB
//! values, half of them then deleted and the history compacted, so that
//! about half of every member's file is free (`defrag/fragment.rs`). Each
//! side, `BENCH_RUNS` times (default 3), under one put every 10 ms on every
//! member's endpoint (`shared/load.rs`):
//!
//! 1. operator on the lab (`defrag/on_lab.rs`): a round asked for with a
//!    schedule, one member at a time, followers first, the leader last after
//!    moving leadership away, members with `StopGRPCServiceOnDefrag`;
//! 2. etcd alone (`defrag/etcd_alone.rs`, on `shared/etcd_cluster.rs`):
//!    3 etcd 3.6.16 processes on loopback with the same flags,
//!    `etcdctl defrag --cluster`.
//!
//! Within the defragmentation's window: the longest time between two
//! acknowledged writes, the 99th percentile of write latency, the failed
//! requests; and the space given back (the members' files, summed). The
//! goal: no gap longer than one election timeout (1 s), no failed request.
//!
//! Run as root: `cargo bench -p etcd-operator --bench defrag` (also part of
//! `make bench`). Figures go to `target/bench/defrag.json` (`BENCH_OUT`
//! sets the directory); a side that fails records its error there instead
//! of stopping the other.

#[path = "defrag/etcd_alone.rs"]
mod etcd_alone;
// Shared with the rollout bench, which uses other parts of them.
#[path = "shared/etcd_cluster.rs"]
#[allow(dead_code)]
mod etcd_cluster;
#[path = "defrag/fragment.rs"]
mod fragment;
#[path = "shared/lab_cluster.rs"]
mod lab_cluster;
#[path = "shared/load.rs"]
#[allow(dead_code)]
mod load;
#[path = "defrag/on_lab.rs"]
mod on_lab;
#[path = "defrag/runs.rs"]
mod runs;

use std::time::Duration;

use serde_json::{Value, json};
use test_kit::TestResult;
use test_kit::e2e::{Harness, run_bench};
use test_kit::figures::{env_u64, load_average, phase, runs, write_figures};

/// Members on both sides.
pub const MEMBERS: usize = 3;
/// etcd's heartbeat interval and election timeout on both sides (the
/// operator's defaults, which are etcd's).
pub const HEARTBEAT_MS: u64 = 100;
pub const ELECTION_TIMEOUT_MS: u64 = 1000;
/// The backend quota on both sides, and the lab volume that fits it
/// (2 × quota + 256 MiB).
pub const QUOTA_BACKEND_BYTES: i64 = 2 << 30;
pub const STORAGE_SIZE: &str = "6Gi";
/// The goal: no gap between acknowledged writes longer than this.
const GOAL: Duration = Duration::from_millis(ELECTION_TIMEOUT_MS);
/// The load runs this long before the defragmentation, and this long after.
pub const WARM_UP: Duration = Duration::from_secs(3);
pub const HOLD: Duration = Duration::from_secs(3);

fn main() {
    run_bench(env!("CARGO_BIN_EXE_etcd-operator"), |h| Box::pin(bench(h)));
}

async fn bench(h: &mut Harness) -> TestResult {
    let runs = runs();
    let db_mib = env_u64("BENCH_DEFRAG_DB_MIB", 1024);
    let mut figures = json!({
        "runs": runs,
        "db_mib": db_mib,
        "value_kib": fragment::VALUE_BYTES / 1024,
        "members": MEMBERS,
        "quota_backend_bytes": QUOTA_BACKEND_BYTES,
        "write_interval_ms": load::INTERVAL.as_millis(),
        "request_timeout_ms": load::TIMEOUT.as_millis(),
        "election_timeout_ms": ELECTION_TIMEOUT_MS,
        "goal_s": GOAL.as_secs_f64(),
    });

    eprintln!("=== operator on the lab, {db_mib} MiB");
    let load_before = load_average();
    let mut operator = phase(on_lab::measure(h, runs, db_mib).await);
    operator["load_average"] = json!([load_before, load_average()]);
    figures["operator"] = operator;
    write_figures("defrag.json", &figures)?;

    eprintln!("=== etcd alone, etcdctl defrag --cluster, {db_mib} MiB");
    let load_before = load_average();
    let mut etcdctl = phase(etcd_alone::measure(runs, db_mib).await);
    etcdctl["load_average"] = json!([load_before, load_average()]);
    figures["etcdctl"] = etcdctl;
    figures["goal_met"] = goal_met(&figures["operator"]);
    figures["etcdctl_goal_met"] = goal_met(&figures["etcdctl"]);
    eprintln!(
        "operator: longest gap {} s, p99 {} ms, failed {}; etcdctl: longest gap {} s, p99 {} \
         ms, failed {}; operator within the goal: {}",
        figures["operator"]["longest_gap_s"]["median"],
        figures["operator"]["latency_p99_ms"]["median"],
        figures["operator"]["failed"],
        figures["etcdctl"]["longest_gap_s"]["median"],
        figures["etcdctl"]["latency_p99_ms"]["median"],
        figures["etcdctl"]["failed"],
        figures["goal_met"],
    );
    write_figures("defrag.json", &figures).map(|_| ())
}

/// Whether every run of a side kept within the goal: no gap longer than
/// [`GOAL`], no failed request; null when it has no runs.
fn goal_met(side: &Value) -> Value {
    let runs = side["runs"].as_array().cloned().unwrap_or_default();
    if runs.is_empty() {
        return Value::Null;
    }
    json!(runs.iter().all(|run| {
        run["longest_gap_s"]
            .as_f64()
            .is_some_and(|gap| gap <= GOAL.as_secs_f64())
            && run["failed"].as_u64() == Some(0)
    }))
}
