//! Settings from the environment, the output folder, medians and
//! percentiles, and the sampled peak RSS of the bench process.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

/// Errors of a phase, recorded in the figures instead of stopping the bench.
pub type BenchResult<T = ()> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

/// `name` from the environment as a number, else `default`.
pub fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(default)
}

/// Runs of each median (`BENCH_RUNS`, default 3).
pub fn runs() -> usize {
    env_u64("BENCH_RUNS", 3).max(1) as usize
}

/// Where figures go (`BENCH_OUT`, default `target/bench`).
pub fn out_dir() -> PathBuf {
    std::env::var_os("BENCH_OUT")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/bench"))
}

/// Bytes as MiB.
pub fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

/// Median (mean of the middle two for an even count); 0 when empty.
pub fn median(samples: &[f64]) -> f64 {
    let mut sorted = samples.to_vec();
    sorted.sort_by(f64::total_cmp);
    match sorted.len() {
        0 => 0.0,
        n if n % 2 == 1 => sorted[n / 2],
        n => (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0,
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

/// Writes every dirty page to disk (`sync`), untimed before each timed
/// step, so that no step pays for the writes of the one before it.
pub async fn flush_disk() -> BenchResult {
    tokio::task::spawn_blocking(nix::unistd::sync).await?;
    Ok(())
}

/// Peak `VmRSS` of this process, sampled every 20 ms by a thread (the
/// kernel's `VmHWM` cannot be reset between phases).
pub struct RssSampler {
    peak_kib: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
}

impl RssSampler {
    /// Starts the sampling thread.
    pub fn start() -> Self {
        let peak_kib = Arc::new(AtomicU64::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let (peak, done) = (peak_kib.clone(), stop.clone());
        std::thread::spawn(move || {
            while !done.load(Ordering::Relaxed) {
                peak.fetch_max(rss_kib(), Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(20));
            }
        });
        Self { peak_kib, stop }
    }

    /// Starts a new peak from the RSS now; returns the RSS now in MiB.
    pub fn reset(&self) -> f64 {
        let now = rss_kib();
        self.peak_kib.store(now, Ordering::Relaxed);
        now as f64 / 1024.0
    }

    /// The peak since the last reset, in MiB.
    pub fn peak_mib(&self) -> f64 {
        self.peak_kib.load(Ordering::Relaxed).max(rss_kib()) as f64 / 1024.0
    }
}

impl Drop for RssSampler {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// `VmRSS` of this process in KiB (0 when unreadable).
fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .unwrap_or(0)
}
