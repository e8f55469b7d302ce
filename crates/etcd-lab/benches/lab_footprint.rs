//! Benchmark (not a timed test): how long `etcd-lab up` takes with the
//! upstream binaries built, the idle CPU and memory of a 3-node lab, and the
//! cold build time of each upstream set (recorded by tools/build-upstream.sh).
//!
//! Run as root: `cargo bench -p etcd-lab --bench lab_footprint` (or `make
//! bench`). Holds the lab test lock (`/run/etcd-lab-tests.lock`) throughout;
//! a lab left up by a test is stopped first, its data kept. Prints one line
//! per figure, writes them to `target/bench/lab.json` (`BENCH_OUT` sets the
//! directory) and brings the lab down at the end.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use etcd_lab::upstream::{ETCD_SETS, KUBERNETES};
use etcd_lab::{Lab, LabOptions};
use serde_json::{Value, json};
use test_kit::figures::{rss_kib, write_figures};
use test_kit::lab_lock::LabLock;
use test_kit::lab_test::stop_other_lab;

const LAB_DIR: &str = "/var/lib/etcd-lab-bench";
const IDLE_SAMPLE: Duration = Duration::from_secs(30);
const ETCD_LAB: &str = env!("CARGO_BIN_EXE_etcd-lab");

fn main() {
    // Under the lock every lab test holds, a lab left up for reuse (one lab
    // per machine) is stopped with its data kept, as the lab's tests do.
    let _lock = LabLock::acquire();
    stop_other_lab(Path::new(ETCD_LAB), Path::new(LAB_DIR));
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let mut figures = BTreeMap::<String, Value>::new();
    let mut builds = BTreeMap::<String, Value>::new();
    for set in [KUBERNETES].iter().chain(ETCD_SETS.iter()) {
        let seconds = std::fs::read_to_string(set.dir().join(".build-seconds"))
            .ok()
            .and_then(|s| s.trim().parse::<f64>().ok());
        match seconds {
            Some(s) => println!("cold build of {}: {s} s", set.name),
            None => println!("cold build of {}: unknown", set.name),
        }
        builds.insert(set.name.to_owned(), json!(seconds));
    }
    figures.insert("cold_build_s".into(), json!(builds));
    let options = LabOptions {
        lab_dir: Some(PathBuf::from(LAB_DIR)),
        etcd_lab_binary: Some(PathBuf::from(ETCD_LAB)),
        ..LabOptions::default()
    };
    let started = Instant::now();
    let lab = runtime.block_on(Lab::up(options)).expect("etcd-lab up");
    let up = started.elapsed().as_secs_f64();
    println!("etcd-lab up (3 nodes Ready): {up:.1} s");
    figures.insert("up_s".into(), json!(up));
    // Let start-up work settle before sampling the idle lab.
    std::thread::sleep(Duration::from_secs(20));
    let group = lab.cgroups().lab();
    let before = cpu_usage_usec(&group);
    std::thread::sleep(IDLE_SAMPLE);
    let after = cpu_usage_usec(&group);
    let cores = (after - before) as f64 / IDLE_SAMPLE.as_micros() as f64;
    println!("idle CPU of the lab: {:.1}% of one core", cores * 100.0);
    let pids = lab.cgroups().pids();
    let rss_kib: u64 = pids
        .iter()
        .filter_map(|pid| u32::try_from(*pid).ok())
        .map(|pid| rss_kib(pid).unwrap_or(0))
        .sum();
    println!(
        "memory of the lab (sum of RSS): {} MiB in {} processes",
        rss_kib / 1024,
        pids.len()
    );
    figures.insert("idle_sample_s".into(), json!(IDLE_SAMPLE.as_secs()));
    figures.insert("idle_cpu_percent_of_one_core".into(), json!(cores * 100.0));
    figures.insert("idle_rss_mib".into(), json!(rss_kib / 1024));
    figures.insert("idle_processes".into(), json!(pids.len()));
    lab.down(false).expect("etcd-lab down");
    write_figures("lab.json", &figures).expect("write lab.json");
}

/// `usage_usec` of a cgroup's `cpu.stat` (always present in cgroup2).
fn cpu_usage_usec(group: &Path) -> u64 {
    std::fs::read_to_string(group.join("cpu.stat"))
        .ok()
        .and_then(|text| {
            text.lines()
                .find_map(|l| l.strip_prefix("usage_usec "))
                .and_then(|v| v.trim().parse().ok())
        })
        .unwrap_or(0)
}
