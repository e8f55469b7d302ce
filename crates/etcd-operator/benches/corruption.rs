//! Benchmark (not a timed test) of what finding damaged data costs
//! (durability rule 15), on 3 etcd processes of the pinned 3.6 release on
//! loopback holding `BENCH_CORRUPTION_MIB` MiB (default 256) of live
//! 256 KiB values, each figure beside a baseline measured in the same run,
//! `BENCH_RUNS` times (default 3):
//!
//! 1. a follower's restart on its data with the corruption-check flags of
//!    the member Pods (`feature_and_corruption_check_flags`: its initial
//!    check hashes its keyspace and compares it with its peers' before it
//!    serves) beside the same restart without them;
//! 2. one `HashKV` of a member's whole keyspace (what every voter answers
//!    before each backup, `backup/agreement.rs`, and what etcd's full
//!    periodic check asks every 4 hours) beside a serializable read of
//!    every key with its value from the same member.
//!
//! Run as root: `cargo bench -p etcd-operator --bench corruption` (also
//! part of `make bench`). Figures go to `target/bench/corruption.json`
//! (`BENCH_OUT` sets the directory); a part that fails records its error
//! there instead of stopping the other.

#[path = "shared/etcd_cluster.rs"]
#[allow(dead_code)]
mod etcd_cluster;

use std::time::{Duration, Instant};

use etcd_client::{GetOptions, PutOptions};
use serde_json::{Value, json};
use test_kit::TestResult;
use test_kit::e2e::etcd_at;
use test_kit::etcd_process::{EtcdProcess, READY_TIMEOUT, initial_cluster};
use test_kit::figures::{
    env_u64, load_average, phase, ratio_of_medians, round3, runs, summary, write_figures,
};

use etcd_cluster::Cluster;

const VALUE_BYTES: usize = 256 * 1024;
/// Keys per page of the read of every value (8 MiB, under the client's
/// message limit with room to spare: 2 MiB).
const PAGE: i64 = 8;

fn main() {
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("cannot start the async runtime: {error}");
            std::process::exit(1);
        }
    };
    let figures = runtime.block_on(bench());
    if let Err(error) = write_figures("corruption.json", &figures) {
        eprintln!("cannot write the figures: {error}");
        std::process::exit(1);
    }
}

async fn bench() -> Value {
    let db_mib = env_u64("BENCH_CORRUPTION_MIB", 256);
    let values = usize::try_from(db_mib * 1024 * 1024).unwrap_or(usize::MAX) / VALUE_BYTES;
    let runs = runs();
    let load_before = load_average();
    let result: TestResult<Value> = async {
        let flags = etcd_operator::resources::feature_and_corruption_check_flags();
        let mut cluster = Cluster::start(3, "corruption-bench", &[]).await?;
        fill(&cluster, values).await?;
        let restart = phase(restarts(&mut cluster, &flags, runs).await);
        let hashkv = phase(hashes(&cluster, runs).await);
        Ok(json!({ "restart": restart, "hashkv": hashkv }))
    }
    .await;
    let mut figures = phase(result);
    if let Value::Object(map) = &mut figures {
        map.insert("db_mib".into(), json!(db_mib));
        map.insert("values".into(), json!(values));
        map.insert("value_kib".into(), json!(VALUE_BYTES / 1024));
        map.insert("runs".into(), json!(runs));
        map.insert("load_average".into(), json!([load_before, load_average()]));
    }
    figures
}

/// Writes `values` live values of [`VALUE_BYTES`].
async fn fill(cluster: &Cluster, values: usize) -> TestResult {
    let mut client = etcd_at(cluster.endpoints()).await?;
    for i in 0..values {
        let value = vec![b'a' + u8::try_from(i % 26)?; VALUE_BYTES];
        client
            .put(format!("/bench/{i:06}"), value, None::<PutOptions>)
            .await?;
    }
    Ok(())
}

/// A follower stopped cleanly and started again on its data, with and
/// without the corruption-check flags, alternately: seconds until it serves.
async fn restarts(cluster: &mut Cluster, flags: &[String], runs: usize) -> TestResult<Value> {
    let (leader, _) = cluster.leader().await?;
    let index = (leader + 1) % cluster.members.len();
    let initial = initial_cluster(&cluster.members);
    let token = cluster.token.clone();
    let (mut with, mut without) = (Vec::new(), Vec::new());
    for _ in 0..runs {
        for checked in [false, true] {
            let member = &mut cluster.members[index];
            member.stop(Duration::from_secs(30)).await?;
            let root = member.data_dir.parent().ok_or("data dir without parent")?;
            let args: Vec<&str> = if checked {
                flags.iter().map(String::as_str).collect()
            } else {
                Vec::new()
            };
            let mut again = EtcdProcess::new(root, &member.name)
                .with_data_dir(&member.data_dir)
                .with_peer_url(&member.peer_url)
                .with_args(&args);
            again.client_url = member.client_url.clone();
            let started = Instant::now();
            again.start(&initial, "existing", &token)?;
            again.wait_serving(READY_TIMEOUT).await?;
            let seconds = round3(started.elapsed().as_secs_f64());
            eprintln!(
                "restart {} checks: {seconds} s",
                if checked { "with" } else { "without" }
            );
            if checked { &mut with } else { &mut without }.push(seconds);
            *member = again;
        }
    }
    let with = summary(&with);
    let without = summary(&without);
    Ok(json!({
        "ratio": ratio_of_medians(&with, &without),
        "with_checks": with,
        "without_checks": without,
    }))
}

/// One `HashKV` of the whole keyspace on a member, beside a serializable
/// read of every key and value from the same member (paged).
async fn hashes(cluster: &Cluster, runs: usize) -> TestResult<Value> {
    let endpoint = cluster.members[0].client_url.clone();
    let mut client = etcd_at(vec![endpoint]).await?;
    let (mut hash, mut read) = (Vec::new(), Vec::new());
    for run in 0..runs {
        // A new revision each run: no hash of an earlier one is reused.
        client
            .put(format!("/bench-run/{run}"), "x", None::<PutOptions>)
            .await?;
        let started = Instant::now();
        client.hash_kv(0).await?;
        hash.push(round3(started.elapsed().as_secs_f64()));

        let started = Instant::now();
        let mut from = b"/bench/".to_vec();
        loop {
            let page = client
                .get(
                    from.clone(),
                    Some(
                        GetOptions::new()
                            .with_range("/bench0")
                            .with_limit(PAGE)
                            .with_serializable(),
                    ),
                )
                .await?;
            let Some(last) = page.kvs().last() else {
                break;
            };
            from = last.key().to_vec();
            from.push(0);
            if !page.more() {
                break;
            }
        }
        read.push(round3(started.elapsed().as_secs_f64()));
        eprintln!(
            "hashkv {:?} s, read every value {:?} s",
            hash.last(),
            read.last()
        );
    }
    let hash = summary(&hash);
    let read = summary(&read);
    Ok(json!({
        "ratio": ratio_of_medians(&hash, &read),
        "hashkv": hash,
        "read_all": read,
    }))
}
