//! Full backups beside `etcdctl snapshot save`, in the same run on the same
//! member: our `take_backup` to the S3 server and to a local directory
//! (stream, etcd's hash checked, zstd, multipart upload, metadata), and
//! etcdctl writing a plain snapshot file. Each run rotates the order, so
//! that no method always reads the member's database from a cold cache.

use std::path::Path;
use std::time::Instant;

use etcd_operator::api::{BackupDestination, LocalDestination};
use etcd_operator::backup::{
    BackupStore, Credentials, SnapshotOptions, choose_source, list_backups, take_backup,
};
use object_store::ObjectStoreExt;
use serde_json::{Value, json};

use test_kit::figures::{mib, round3};
use test_kit::upstream::built_etcd_bin;

use crate::figures::{BenchResult, RssSampler, flush_disk, median};

/// Namespace and cluster recorded in the bench's backups.
pub const NAMESPACE: &str = "bench";

/// One method's samples.
#[derive(Default)]
struct Samples {
    seconds: Vec<f64>,
    /// Of each, the upload's end (parts in flight, the store's completion).
    completion: Vec<f64>,
    /// Of the upload's end, the store's completion alone.
    store_completion: Vec<f64>,
    snapshot_bytes: u64,
    stored_bytes: u64,
    rss_before_mib: f64,
    peak_rss_mib: f64,
}

impl Samples {
    /// Each backup's time without the store's completion: this process's
    /// part of it, whatever the store spends completing the upload.
    fn before_store_completion(&self) -> Vec<f64> {
        self.seconds
            .iter()
            .zip(&self.store_completion)
            .map(|(total, store)| total - store)
            .collect()
    }

    fn figures(&self) -> Value {
        let median_s = median(&self.seconds);
        let mut figures = json!({
            "samples_s": self.seconds.iter().map(|s| round3(*s)).collect::<Vec<_>>(),
            "median_s": round3(median_s),
            "mib_per_s": round3(mib(self.snapshot_bytes) / median_s.max(1e-9)),
        });
        if self.stored_bytes > 0 {
            figures["stored_mib"] = json!(round3(mib(self.stored_bytes)));
            figures["stored_over_snapshot"] = json!(round3(
                self.stored_bytes as f64 / self.snapshot_bytes.max(1) as f64
            ));
            figures["rss_before_mib"] = json!(round3(self.rss_before_mib));
            figures["peak_rss_mib"] = json!(round3(self.peak_rss_mib));
        }
        if !self.completion.is_empty() {
            figures["completion_median_s"] = json!(round3(median(&self.completion)));
            figures["store_completion_median_s"] = json!(round3(median(&self.store_completion)));
            figures["before_store_completion_median_s"] =
                json!(round3(median(&self.before_store_completion())));
        }
        figures
    }
}

/// `runs` backups by each method. Leaves the last S3 backup in `s3` and
/// etcdctl's last snapshot at `<work>/etcdctl.db` for the restore phase.
pub async fn measure(
    endpoints: &[String],
    s3: &BackupStore,
    work: &Path,
    runs: usize,
    rss: &RssSampler,
) -> BenchResult<Value> {
    let options = options();
    let (mut ours_s3, mut ours_local, mut etcdctl) =
        (Samples::default(), Samples::default(), Samples::default());
    let mut sources = Vec::new();
    for run in 0..runs {
        for method in 0..3 {
            flush_disk().await?;
            match (run + method) % 3 {
                0 => {
                    let source = choose_source(endpoints, &options.settings).await?;
                    let file = work.join("etcdctl.db");
                    let started = Instant::now();
                    etcdctl_snapshot(&source.endpoint, &file).await?;
                    etcdctl.seconds.push(started.elapsed().as_secs_f64());
                    etcdctl.snapshot_bytes = std::fs::metadata(&file)?.len();
                    sources.push(format!("etcdctl: {}", source.endpoint));
                }
                1 => {
                    delete_backups(s3).await?;
                    ours(s3, endpoints, &options, rss, &mut ours_s3, &mut sources).await?;
                }
                _ => {
                    let dir = tempfile::tempdir_in(work)?;
                    let local = local_store(dir.path())?;
                    ours(
                        &local,
                        endpoints,
                        &options,
                        rss,
                        &mut ours_local,
                        &mut sources,
                    )
                    .await?;
                }
            }
        }
    }
    let ratio = |ours: &Samples| round3(median(&ours.seconds) / median(&etcdctl.seconds));
    Ok(json!({
        "zstd_level": options.zstd_level,
        "zstd_workers": options.zstd_workers,
        "snapshot_mib": round3(mib(ours_s3.snapshot_bytes.max(etcdctl.snapshot_bytes))),
        "ours_s3": ours_s3.figures(),
        "ours_local": ours_local.figures(),
        "etcdctl": etcdctl.figures(),
        "ratio_s3_over_etcdctl": ratio(&ours_s3),
        "ratio_local_over_etcdctl": ratio(&ours_local),
        "ratio_s3_before_store_completion_over_etcdctl": round3(
            median(&ours_s3.before_store_completion()) / median(&etcdctl.seconds)
        ),
        "members_read": sources,
    }))
}

/// The operator's defaults, or the zstd level and worker threads of
/// `BENCH_BACKUP_ZSTD_LEVEL` and `BENCH_BACKUP_ZSTD_WORKERS` (to compare
/// settings; the figures record which were used).
fn options() -> SnapshotOptions {
    let mut options = SnapshotOptions::default();
    if let Some(level) = std::env::var("BENCH_BACKUP_ZSTD_LEVEL")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        options.zstd_level = level;
    }
    if let Some(workers) = std::env::var("BENCH_BACKUP_ZSTD_WORKERS")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        options.zstd_workers = workers;
    }
    options
}

/// One `take_backup`, timed, with the peak RSS of the process during it.
async fn ours(
    store: &BackupStore,
    endpoints: &[String],
    options: &SnapshotOptions,
    rss: &RssSampler,
    samples: &mut Samples,
    sources: &mut Vec<String>,
) -> BenchResult {
    let before = rss.reset();
    let started = Instant::now();
    let taken = take_backup(store, endpoints, NAMESPACE, "main", options).await?;
    samples.seconds.push(started.elapsed().as_secs_f64());
    samples.completion.push(taken.completion.as_secs_f64());
    samples
        .store_completion
        .push(taken.store_completion.as_secs_f64());
    samples.peak_rss_mib = samples.peak_rss_mib.max(rss.peak_mib());
    samples.rss_before_mib = samples.rss_before_mib.max(before);
    samples.snapshot_bytes = taken.metadata.snapshot_bytes;
    samples.stored_bytes = taken.metadata.stored_bytes;
    sources.push(format!("{}: {}", taken.location, taken.source.endpoint));
    Ok(())
}

/// `etcdctl snapshot save` of the member at `endpoint` into `file`.
pub async fn etcdctl_snapshot(endpoint: &str, file: &Path) -> BenchResult {
    let _ = std::fs::remove_file(file);
    let output = tokio::process::Command::new(built_etcd_bin("etcdctl")?)
        .args(["--endpoints", endpoint, "snapshot", "save"])
        .arg(file)
        .output()
        .await?;
    if !output.status.success() {
        return Err(format!(
            "etcdctl snapshot save: {}",
            String::from_utf8_lossy(&output.stderr)
        )
        .into());
    }
    Ok(())
}

/// A local destination in `dir`, as a user would write it.
fn local_store(dir: &Path) -> BenchResult<BackupStore> {
    let destination = BackupDestination {
        local: Some(LocalDestination {
            path: dir.display().to_string(),
        }),
        ..BackupDestination::default()
    };
    Ok(BackupStore::open(
        &destination,
        NAMESPACE,
        "main",
        &Credentials::new(),
    )?)
}

/// Deletes the full backups in `store` (the in-memory S3 server keeps
/// every object in memory).
pub async fn delete_backups(store: &BackupStore) -> BenchResult {
    for backup in list_backups(store).await? {
        store
            .store()
            .delete(&store.path(&backup.metadata_name()))
            .await?;
        store.store().delete(&store.path(&backup.object)).await?;
    }
    Ok(())
}
