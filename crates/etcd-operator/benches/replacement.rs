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

mod common;
#[path = "replacement/etcd_alone.rs"]
mod etcd_alone;
#[path = "replacement/figures.rs"]
mod figures;
#[path = "replacement/fill.rs"]
mod fill;
#[path = "replacement/on_lab.rs"]
mod on_lab;
#[path = "replacement/probe.rs"]
mod probe;
#[path = "replacement/trickle.rs"]
mod trickle;

use common::{Harness, TestResult};
use kube::api::DeleteParams;
use serde_json::{Value, json};

/// The bench's `EtcdCluster`.
const CLUSTER: &str = "replace";

fn main() {
    common::run(|h| Box::pin(bench(h)));
}

async fn bench(h: &mut Harness) -> TestResult {
    let runs = figures::runs();
    let sizes = figures::sizes_mib();
    let mut results = Vec::new();
    let save = |results: &Vec<Value>| -> TestResult {
        let dir = figures::out_dir();
        std::fs::create_dir_all(&dir)?;
        let path = dir.join("replacement.json");
        let figures = json!({
            "runs": runs,
            "sizes_mib": sizes,
            "value_bytes": fill::VALUE_BYTES,
            "log_entries_after_fill": fill::LOG_ENTRIES,
            "sizes": results,
        });
        std::fs::write(&path, serde_json::to_string_pretty(&figures)?)?;
        eprintln!("figures written to {}", path.display());
        Ok(())
    };
    let phase = |r: TestResult<Value>| r.unwrap_or_else(|e| json!({ "error": e.to_string() }));

    let mut cluster = on_lab::LabCluster::new(CLUSTER);
    for &size_mib in &sizes {
        eprintln!("=== {size_mib} MiB: operator on the lab");
        let load_before = figures::load_average();
        let mut operator = phase(on_lab::measure(h, &mut cluster, size_mib, runs).await);
        operator["load_average"] = json!([load_before, figures::load_average()]);
        eprintln!("operator: {operator}");
        eprintln!("=== {size_mib} MiB: etcd alone");
        let load_before = figures::load_average();
        let mut etcd = phase(etcd_alone::measure(size_mib, runs).await);
        etcd["load_average"] = json!([load_before, figures::load_average()]);
        eprintln!("etcd alone: {etcd}");
        let ratio = match (
            operator.get("median_s").and_then(Value::as_f64),
            etcd.get("median_s").and_then(Value::as_f64),
        ) {
            (Some(o), Some(e)) if e > 0.0 => json!(o / e),
            _ => Value::Null,
        };
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
