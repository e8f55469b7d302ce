//! Restores beside plain `etcdutl snapshot restore`, in the same run: our
//! path (the newest backup found in the S3 server, downloaded with every
//! check of `download_backup`, then `etcdutl snapshot restore` with its own
//! hash check, as the restore Pod's `fetch-backup` does) and etcdutl alone
//! on a local snapshot file saved by etcdctl. Our time is split into the
//! download (durable: `download_backup` syncs the file before renaming it
//! into place), a second fsync of the downloaded file (what is left of its
//! write-back, otherwise paid inside etcdutl's own fsyncs) and etcdutl.

use std::path::Path;
use std::time::Instant;

use etcd_operator::backup::{BackupStore, download_backup, newest_backup};
use serde_json::{Value, json};

use test_kit::figures::{mib, round3};
use test_kit::loopback::free_port;
use test_kit::upstream::built_etcd_bin;

use crate::figures::{BenchResult, flush_disk, median};

/// `runs` restores each way, from the backup in `s3` and the snapshot file
/// `local_snapshot`.
pub async fn measure(
    s3: &BackupStore,
    local_snapshot: &Path,
    work: &Path,
    runs: usize,
) -> BenchResult<Value> {
    let (mut ours, mut download, mut plain) = (Vec::new(), Vec::new(), Vec::new());
    let (mut flush, mut restore) = (Vec::new(), Vec::new());
    let mut snapshot_bytes = 0;
    for run in 0..runs {
        for method in 0..2 {
            let dir = tempfile::tempdir_in(work)?;
            flush_disk().await?;
            if (run + method) % 2 == 0 {
                let file = dir.path().join("fetched.db");
                let started = Instant::now();
                let backup = newest_backup(s3).await?;
                let verified = download_backup(s3, &backup, &file).await?;
                download.push(started.elapsed().as_secs_f64());
                // The download synced the file already: what is left to
                // write back, which etcdutl's own fsyncs would wait for.
                let flushing = Instant::now();
                tokio::fs::File::open(&file).await?.sync_all().await?;
                flush.push(flushing.elapsed().as_secs_f64());
                let restoring = Instant::now();
                etcdutl_restore(&file, &dir.path().join("restored.etcd")).await?;
                restore.push(restoring.elapsed().as_secs_f64());
                ours.push(started.elapsed().as_secs_f64());
                snapshot_bytes = verified.size;
            } else {
                let started = Instant::now();
                etcdutl_restore(local_snapshot, &dir.path().join("restored.etcd")).await?;
                plain.push(started.elapsed().as_secs_f64());
            }
        }
    }
    let samples = |s: &[f64]| s.iter().map(|v| round3(*v)).collect::<Vec<_>>();
    Ok(json!({
        "snapshot_mib": round3(mib(snapshot_bytes)),
        "ours": {
            "samples_s": samples(&ours),
            "median_s": round3(median(&ours)),
            "download_samples_s": samples(&download),
            "download_median_s": round3(median(&download)),
            "download_mib_per_s": round3(mib(snapshot_bytes) / median(&download).max(1e-9)),
            "fsync_median_s": round3(median(&flush)),
            "etcdutl_median_s": round3(median(&restore)),
        },
        "etcdutl": {
            "samples_s": samples(&plain),
            "median_s": round3(median(&plain)),
        },
        "ratio_ours_over_etcdutl": round3(median(&ours) / median(&plain)),
    }))
}

/// `etcdutl snapshot restore` of `snapshot` into a new data dir (hash
/// checked, as by default).
async fn etcdutl_restore(snapshot: &Path, data_dir: &Path) -> BenchResult {
    let peer = format!("http://127.0.0.1:{}", free_port());
    let output = tokio::process::Command::new(built_etcd_bin("etcdutl")?)
        .args(["snapshot", "restore"])
        .arg(snapshot)
        .args(["--name", "r0"])
        .arg("--data-dir")
        .arg(data_dir)
        .args(["--initial-cluster", &format!("r0={peer}")])
        .args(["--initial-advertise-peer-urls", &peer])
        .args(["--initial-cluster-token", "restored"])
        .output()
        .await?;
    if !output.status.success() {
        return Err(format!(
            "etcdutl snapshot restore: {}",
            String::from_utf8_lossy(&output.stderr)
        )
        .into());
    }
    Ok(())
}
