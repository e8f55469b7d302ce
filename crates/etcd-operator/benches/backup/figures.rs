//! What only the backup bench measures: medians of samples that may be
//! empty, disk flushes between timed steps, and the sampled peak RSS of the
//! bench process.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

/// Errors of a phase, recorded in the figures instead of stopping the bench.
pub use test_kit::TestResult as BenchResult;

/// Median (mean of the middle two for an even count); 0 when empty.
pub fn median(samples: &[f64]) -> f64 {
    test_kit::figures::median(samples).unwrap_or(0.0)
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
    test_kit::figures::own_rss_kib().unwrap_or(0)
}
