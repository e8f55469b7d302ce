//! What the benches share: settings from the environment, medians and
//! summaries of samples, the machine's load, and the JSON file of figures
//! each bench writes (`target/bench/<bench>.json`, `BENCH_OUT` sets the
//! directory).

use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use crate::TestResult;

/// `name` from the environment as a number, else `default`.
pub fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(default)
}

/// Runs of each median (`BENCH_RUNS`, default 3, at least 1).
pub fn runs() -> usize {
    usize::try_from(env_u64("BENCH_RUNS", 3).max(1)).unwrap_or(1)
}

/// Where figures go (`BENCH_OUT`, default `target/bench` of the workspace).
pub fn out_dir() -> PathBuf {
    std::env::var_os("BENCH_OUT")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/bench"))
}

/// Writes `figures` as pretty JSON to `<out_dir>/<file>` and says where.
pub fn write_figures(file: &str, figures: &impl serde::Serialize) -> TestResult<PathBuf> {
    let dir = out_dir();
    std::fs::create_dir_all(&dir)?;
    let path = dir.join(file);
    std::fs::write(&path, serde_json::to_string_pretty(figures)?)?;
    eprintln!("figures written to {}", path.display());
    Ok(path)
}

/// The figures of a phase, or `{"error": ...}` when it failed: a phase
/// that fails records its error instead of stopping the others.
pub fn phase(result: TestResult<Value>) -> Value {
    result.unwrap_or_else(|e| json!({ "error": e.to_string() }))
}

/// Median (mean of the middle two for an even count); none when empty.
pub fn median(samples: &[f64]) -> Option<f64> {
    let mut sorted = samples.to_vec();
    sorted.sort_by(f64::total_cmp);
    match sorted.len() {
        0 => None,
        n if n % 2 == 1 => Some(sorted[n / 2]),
        n => Some((sorted[n / 2 - 1] + sorted[n / 2]) / 2.0),
    }
}

/// `{ "samples_s": [...], "median_s": ... }`.
pub fn summary(samples: &[f64]) -> Value {
    json!({ "samples_s": samples, "median_s": median(samples) })
}

/// `ours.median_s / theirs.median_s` of two summaries, null when either is
/// missing or the divisor is not positive.
pub fn ratio_of_medians(ours: &Value, theirs: &Value) -> Value {
    match (
        ours.get("median_s").and_then(Value::as_f64),
        theirs.get("median_s").and_then(Value::as_f64),
    ) {
        (Some(o), Some(t)) if t > 0.0 => json!(o / t),
        _ => Value::Null,
    }
}

/// The `p`-th percentile (nearest rank) of sorted samples; 0 when empty.
pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// Rounded to 3 decimals, for readable JSON.
pub fn round3(value: f64) -> f64 {
    (value * 1000.0).round() / 1000.0
}

/// Bytes as MiB.
pub fn mib(bytes: impl Into<i128>) -> f64 {
    bytes.into() as f64 / (1024.0 * 1024.0)
}

/// The 1-minute load average of the machine (other work running beside a
/// bench shows here).
pub fn load_average() -> Option<f64> {
    std::fs::read_to_string("/proc/loadavg")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// `VmRSS` of process `pid` in KiB.
pub fn rss_kib(pid: u32) -> Option<u64> {
    vm_rss_kib(&format!("/proc/{pid}/status"))
}

/// `VmRSS` of this process in KiB.
pub fn own_rss_kib() -> Option<u64> {
    vm_rss_kib("/proc/self/status")
}

fn vm_rss_kib(status: &str) -> Option<u64> {
    std::fs::read_to_string(status)
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()
}
