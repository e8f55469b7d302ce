//! Benchmark (not a timed test): how long `etcd-lab up` takes with the
//! upstream binaries built, the idle CPU and memory of a 3-node lab, and the
//! cold build time of each upstream set (recorded by tools/build-upstream.sh).
//!
//! Run as root: `cargo bench -p etcd-lab --bench lab_footprint`. Prints one
//! line per figure and brings the lab down at the end.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use etcd_lab::upstream::{ETCD_SETS, KUBERNETES};
use etcd_lab::{Lab, LabOptions};

const LAB_DIR: &str = "/var/lib/etcd-lab-bench";
const IDLE_SAMPLE: Duration = Duration::from_secs(30);

fn main() {
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    for set in [KUBERNETES].iter().chain(ETCD_SETS.iter()) {
        let seconds = std::fs::read_to_string(set.dir().join(".build-seconds"))
            .map(|s| s.trim().to_owned())
            .unwrap_or_else(|_| "unknown".into());
        println!("cold build of {}: {seconds} s", set.name);
    }
    let options = LabOptions {
        lab_dir: Some(PathBuf::from(LAB_DIR)),
        etcd_lab_binary: Some(PathBuf::from(env!("CARGO_BIN_EXE_etcd-lab"))),
        ..LabOptions::default()
    };
    let started = Instant::now();
    let lab = runtime.block_on(Lab::up(options)).expect("etcd-lab up");
    println!(
        "etcd-lab up (3 nodes Ready): {:.1} s",
        started.elapsed().as_secs_f64()
    );
    // Let start-up work settle before sampling the idle lab.
    std::thread::sleep(Duration::from_secs(20));
    let group = lab.cgroups().lab();
    let before = cpu_usage_usec(&group);
    std::thread::sleep(IDLE_SAMPLE);
    let after = cpu_usage_usec(&group);
    let cores = (after - before) as f64 / IDLE_SAMPLE.as_micros() as f64;
    println!("idle CPU of the lab: {:.1}% of one core", cores * 100.0);
    let rss_kib: u64 = lab.cgroups().pids().iter().map(|pid| rss_kib(*pid)).sum();
    println!(
        "memory of the lab (sum of RSS): {} MiB in {} processes",
        rss_kib / 1024,
        lab.cgroups().pids().len()
    );
    lab.down(false).expect("etcd-lab down");
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
