//! Settings read from the environment, medians, and where the figures go.

use std::path::{Path, PathBuf};

use serde_json::{Value, json};

/// Runs per size (`BENCH_RUNS`, default 3).
pub fn runs() -> usize {
    std::env::var("BENCH_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3_usize)
        .max(1)
}

/// Database sizes in MiB (`BENCH_REPLACEMENT_SIZES_MIB`, default `100,1024`).
pub fn sizes_mib() -> Vec<u64> {
    let sizes: Vec<u64> = std::env::var("BENCH_REPLACEMENT_SIZES_MIB")
        .ok()
        .map(|v| {
            v.split(',')
                .filter_map(|s| s.trim().parse().ok())
                .filter(|&s| s > 0)
                .collect()
        })
        .unwrap_or_default();
    if sizes.is_empty() {
        vec![100, 1024]
    } else {
        sizes
    }
}

/// The directory of the figures (`BENCH_OUT`, default `target/bench`).
pub fn out_dir() -> PathBuf {
    std::env::var_os("BENCH_OUT")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/bench"))
}

pub fn median(values: &[f64]) -> Option<f64> {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let n = sorted.len();
    match n {
        0 => None,
        _ if n % 2 == 1 => Some(sorted[n / 2]),
        _ => Some((sorted[n / 2 - 1] + sorted[n / 2]) / 2.0),
    }
}

/// `{ "samples_s": [...], "median_s": ... }`.
pub fn summary(samples: &[f64]) -> Value {
    json!({ "samples_s": samples, "median_s": median(samples) })
}

/// The 1-minute load average of the machine (other work running beside the
/// bench shows here).
pub fn load_average() -> Option<f64> {
    std::fs::read_to_string("/proc/loadavg")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

pub fn mib(bytes: i64) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}
