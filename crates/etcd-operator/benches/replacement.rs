//! Benchmark (not a timed test) of member replacement: how long the operator
//! takes to replace a member whose data is gone, beside the time etcd itself
//! needs to send and apply a snapshot of the same database to a new member,
//! measured in the same run. For each database size
//! (`BENCH_REPLACEMENT_SIZES_MIB`, default `100,1024`), `BENCH_RUNS` times
//! (default 3):
//!
//! 1. operator on the lab (`replacement/on_lab.rs`): a 3-member `EtcdCluster`
//!    filled to the size; one follower's volume wiped; time from the wipe
//!    until the replacement (new member ID, same name) is a voter and has
//!    applied up to the leader's revision and index at the wipe;
//! 2. etcd alone (`replacement/etcd_alone.rs`): 3 etcd processes on loopback,
//!    same fill; a follower removed and its data deleted, a learner added on
//!    an empty data dir and started with `--initial-cluster-state=existing`;
//!    time from the add until it has caught up the same way and is promoted.
//!
//! Both fills end with enough small writes that etcd's raft log no longer
//! holds the fill (`replacement/fill.rs`): the new member catches up from a
//! database snapshot, as in a cluster that has run a while; the snapshots
//! the members sent are counted per run to show it. During each replacement
//! both sides get the same trickle of one small write every 200 ms
//! (`replacement/trickle.rs`: without any write, etcd leaves a member that
//! joined from a large snapshot unready).
//!
//! Run as root: `cargo bench -p etcd-operator --bench replacement` (also part
//! of `make bench`). Figures go to `target/bench/replacement.json`
//! (`BENCH_OUT` sets the directory); a phase that fails records its error
//! there instead of stopping the others.

#[path = "replacement/etcd_alone.rs"]
mod etcd_alone;
#[path = "replacement/fill.rs"]
mod fill;
#[path = "replacement/on_lab.rs"]
mod on_lab;
#[path = "replacement/probe.rs"]
mod probe;
#[path = "replacement/sizes.rs"]
mod sizes;
#[path = "replacement/trickle.rs"]
mod trickle;

use kube::api::DeleteParams;
use serde_json::{Value, json};
use test_kit::TestResult;
use test_kit::e2e::{Harness, run_bench};
use test_kit::figures::{load_average, phase, ratio_of_medians, runs, write_figures};

/// The bench's `EtcdCluster`.
const CLUSTER: &str = "replace";

fn main() {
    run_bench(env!("CARGO_BIN_EXE_etcd-operator"), |h| Box::pin(bench(h)));
}

async fn bench(h: &mut Harness) -> TestResult {
    let runs = runs();
    let sizes = sizes::sizes_mib();
    let mut results = Vec::new();
    let save = |results: &Vec<Value>| -> TestResult {
        let figures = json!({
            "runs": runs,
            "sizes_mib": sizes,
            "value_bytes": fill::VALUE_BYTES,
            "log_entries_after_fill": fill::LOG_ENTRIES,
            "sizes": results,
        });
        write_figures("replacement.json", &figures).map(|_| ())
    };

    let mut cluster = on_lab::LabCluster::new(CLUSTER);
    for &size_mib in &sizes {
        eprintln!("=== {size_mib} MiB: operator on the lab");
        let load_before = load_average();
        let mut operator = phase(on_lab::measure(h, &mut cluster, size_mib, runs).await);
        operator["load_average"] = json!([load_before, load_average()]);
        eprintln!("operator: {operator}");
        eprintln!("=== {size_mib} MiB: etcd alone");
        let load_before = load_average();
        let mut etcd = phase(etcd_alone::measure(size_mib, runs).await);
        etcd["load_average"] = json!([load_before, load_average()]);
        eprintln!("etcd alone: {etcd}");
        let ratio = ratio_of_medians(&operator, &etcd);
        results.push(json!({
            "size_mib": size_mib,
            "operator": operator,
            "etcd": etcd,
            "ratio": ratio,
        }));
        save(&results)?;
    }
    // Its PVCs go with the namespace.
    let _ = h.clusters.delete(CLUSTER, &DeleteParams::default()).await;
    save(&results)
}
