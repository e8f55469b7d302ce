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

const LAB_DIR: &str = "/var/lib/etcd-lab-bench";
const IDLE_SAMPLE: Duration = Duration::from_secs(30);
const LOCK: &str = "/run/etcd-lab-tests.lock";

fn main() {
    let _lock = lab_lock();
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
        etcd_lab_binary: Some(PathBuf::from(env!("CARGO_BIN_EXE_etcd-lab"))),
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
    let rss_kib: u64 = pids.iter().map(|pid| rss_kib(*pid)).sum();
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
    let dir = std::env::var_os("BENCH_OUT")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/bench"));
    std::fs::create_dir_all(&dir).expect("bench output directory");
    let path = dir.join("lab.json");
    let text = serde_json::to_string_pretty(&figures).expect("figures as JSON");
    std::fs::write(&path, text).expect("write lab.json");
    println!("figures written to {}", path.display());
}

/// The lock every lab test holds; under it, a lab left up for reuse (one
/// lab per machine) is stopped with its data kept, as the lab's tests do.
fn lab_lock() -> std::fs::File {
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(LOCK)
        .expect("lab test lock file");
    file.lock().expect("lab test lock");
    if let Some(other) = etcd_lab::current::current()
        && other != Path::new(LAB_DIR)
    {
        let status = std::process::Command::new(env!("CARGO_BIN_EXE_etcd-lab"))
            .args(["down", "--keep-data"])
            .env("ETCD_LAB_DIR", &other)
            .status()
            .expect("etcd-lab down");
        assert!(status.success(), "stopping the lab at {}", other.display());
    }
    file
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

fn rss_kib(pid: i32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|text| {
            text.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .unwrap_or(0)
}
