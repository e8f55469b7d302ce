//! The baseline: 3 etcd processes of the pinned 3.6 release on loopback with
//! the flags the operator gives its members (heartbeat, election timeout,
//! backend quota, `StopGRPCServiceOnDefrag`), a fresh cluster per run,
//! fragmented the same way, under the same load, defragmented by
//! `etcdctl defrag --cluster` (every member in turn, in the order of the
//! member list, leader included, nothing moved first).

use std::process::Stdio;
use std::time::Instant;

use serde_json::{Value, json};
use test_kit::TestResult;
use test_kit::upstream::built_etcd_bin;

use crate::etcd_cluster::Cluster;
use crate::fragment::{db_sizes, fragment};
use crate::load::{self, PacedWriter};
use crate::runs::{Runs, run_figures, summary_line};
use crate::{ELECTION_TIMEOUT_MS, HEARTBEAT_MS, HOLD, MEMBERS, QUOTA_BACKEND_BYTES, WARM_UP};

/// etcdctl's own timeout for the whole command (its default, 5 s, is
/// shorter than one member's defragmentation of a large file).
const COMMAND_TIMEOUT: &str = "10m";

/// `runs` runs on a database of `db_mib` MiB.
pub async fn measure(runs: usize, db_mib: u64) -> TestResult<Value> {
    let mut done = Runs::default();
    for run in 0..runs {
        match one_run(run, db_mib).await {
            Ok(figures) => done.push(figures),
            Err(error) => {
                return Ok(done.into_json(Some(format!("etcd alone, run {run}: {error}"))));
            }
        }
    }
    Ok(done.into_json(None))
}

async fn one_run(run: usize, db_mib: u64) -> TestResult<Value> {
    let args = [
        format!("--heartbeat-interval={HEARTBEAT_MS}"),
        format!("--election-timeout={ELECTION_TIMEOUT_MS}"),
        format!("--quota-backend-bytes={QUOTA_BACKEND_BYTES}"),
        "--feature-gates=StopGRPCServiceOnDefrag=true".to_owned(),
    ];
    let cluster = Cluster::start(MEMBERS, &format!("defrag-{run}"), &args).await?;
    let endpoints = cluster.endpoints();
    let fragmented = fragment(&endpoints, db_mib).await?;

    let client = load::client(&endpoints).await?;
    let writer = PacedWriter::start(client, &format!("/defrag/load/{run}/"));
    tokio::time::sleep(WARM_UP).await;
    let before = db_sizes(&endpoints).await?;
    let started = Instant::now();
    let output = tokio::process::Command::new(built_etcd_bin("etcdctl")?)
        .arg(format!("--endpoints={}", endpoints.join(",")))
        .arg(format!("--command-timeout={COMMAND_TIMEOUT}"))
        .args(["defrag", "--cluster"])
        .stdin(Stdio::null())
        .output()
        .await?;
    let ended = Instant::now();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    if !output.status.success() {
        return Err(format!("etcdctl defrag --cluster: {}: {said}", output.status).into());
    }
    tokio::time::sleep(HOLD).await;
    let record = writer.stop().await?;
    let lost = record.lost(endpoints.clone()).await?;
    let after = db_sizes(&endpoints).await?;
    let seconds = ended.duration_since(started).as_secs_f64();
    let mut figures = run_figures(
        record.window_figures(started, ended),
        seconds,
        &before,
        &after,
        lost,
    );
    figures["fragmented"] = fragmented;
    figures["etcdctl_said"] = json!(said.lines().collect::<Vec<_>>());
    eprintln!(
        "{}",
        summary_line(
            &format!("etcd alone, run {run}: etcdctl defrag --cluster in {seconds:.1} s"),
            &figures
        )
    );
    Ok(figures)
}
