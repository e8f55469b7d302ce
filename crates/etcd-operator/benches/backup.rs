//! Benchmark (not a timed test) of backups on a large database, everything
//! on loopback, no lab: 3 etcd members of the pinned 3.6 set filled to
//! `BENCH_BACKUP_DB_MIB` (default 512) with 1 MiB values, half random and
//! half compressible (`backup/fill.rs`), and the pinned S3-compatible
//! server. In one run:
//!
//! 1. full backups (`backup/snapshot.rs`): our `take_backup` to the S3
//!    server and to a local directory beside `etcdctl snapshot save` of the
//!    same member, `BENCH_RUNS` times (default 3), with the operator's zstd
//!    settings or those of `BENCH_BACKUP_ZSTD_LEVEL` and
//!    `BENCH_BACKUP_ZSTD_WORKERS`: medians, MiB/s, the
//!    ratio ours / etcdctl, and the peak RSS of this process during ours
//!    (sampled `VmRSS`), which stays bounded whatever the database size;
//! 2. restores (`backup/restore.rs`): download from S3 with every check
//!    plus `etcdutl snapshot restore`, beside `etcdutl snapshot restore` of
//!    a local snapshot file;
//! 3. the recovery point under load (`backup/rpo.rs`): a writer paced at
//!    `BENCH_BACKUP_WRITES_PER_S` (default 1000) small puts per second for
//!    `BENCH_BACKUP_RPO_S` (default 60) seconds while the continuous
//!    incremental backup writes segments to S3, once per segment interval
//!    of `BENCH_BACKUP_INTERVALS_S` (default `1,4,20`; 4 s is the
//!    operator's default): the lag from each acknowledged write until it is
//!    durable; its maximum is the RPO; and the object-store writes a day
//!    at that pace.
//!
//! `cargo bench -p etcd-operator --bench backup` (also part of `make
//! bench`); root is not needed. Figures go to `target/bench/backup.json`
//! (`BENCH_OUT` sets the directory); a phase that fails records its error
//! there instead of stopping the others.

#[path = "backup/figures.rs"]
mod figures;
#[path = "backup/fill.rs"]
mod fill;
#[path = "backup/restore.rs"]
mod restore;
#[path = "backup/rpo.rs"]
mod rpo;
#[path = "backup/snapshot.rs"]
mod snapshot;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use etcd_operator::backup::BackupStore;
use figures::{BenchResult, RssSampler};
use serde_json::{Value, json};
use test_kit::backup_scenarios::s3_store as s3_store_at;
use test_kit::etcd_process::LocalCluster;
use test_kit::figures::{env_u64, load_average, phase, runs, write_figures};
use test_kit::loopback::free_port;
use test_kit::object_store_server::try_bucket_server_at;

/// Backend quota of the bench's members: far above the database it fills.
const QUOTA_BYTES: u64 = 8 * 1024 * 1024 * 1024;
/// The bucket the S3 server creates at start.
const BUCKET: &str = "etcd-backups";

fn main() {
    let result = tokio::runtime::Runtime::new()
        .map_err(Into::into)
        .and_then(|runtime| runtime.block_on(bench()));
    if let Err(error) = result {
        eprintln!("backup bench: {error}");
        std::process::exit(1);
    }
}

async fn bench() -> BenchResult {
    let runs = runs();
    let db_mib = env_u64("BENCH_BACKUP_DB_MIB", 512);
    let mut figures = BTreeMap::<String, Value>::new();
    figures.insert("runs".into(), json!(runs));
    figures.insert("db_target_mib".into(), json!(db_mib));
    figures.insert("load_average_at_start".into(), json!(load_average()));
    let save = |figures: &BTreeMap<String, Value>| -> BenchResult {
        write_figures("backup.json", figures).map(|_| ())
    };

    let rss = RssSampler::start();
    let work = tempfile::Builder::new().prefix("backup-bench-").tempdir()?;
    let setup = async {
        let address = format!("127.0.0.1:{}", free_port());
        let server = try_bucket_server_at("s3-server", &address, BUCKET).await?;
        let quota = format!("--quota-backend-bytes={QUOTA_BYTES}");
        let cluster = LocalCluster::try_start_in(work.path(), 3, &[&quota]).await?;
        let client = etcd_client::Client::connect(cluster.endpoints(), None).await?;
        BenchResult::Ok((server, cluster, client))
    }
    .await;
    let (server, cluster, client) = match setup {
        Ok(setup) => setup,
        Err(error) => {
            figures.insert("error".into(), json!(format!("set-up: {error}")));
            return save(&figures);
        }
    };

    eprintln!("=== filling to {db_mib} MiB");
    let db = phase(fill::fill(&client, &cluster.endpoints(), db_mib).await);
    eprintln!("db: {db}");
    let filled = db.get("error").is_none();
    figures.insert("db".into(), db);
    save(&figures)?;
    if !filled {
        return Ok(());
    }

    eprintln!("=== full backups beside etcdctl snapshot save");
    let s3 = s3_store(&server.url(), "main")?;
    let full = phase(snapshot::measure(&cluster.endpoints(), &s3, work.path(), runs, &rss).await);
    eprintln!("snapshot: {full}");
    figures.insert("snapshot".into(), full);
    save(&figures)?;

    eprintln!("=== restores beside etcdutl snapshot restore");
    let restored = phase(restore_phase(&cluster, &s3, work.path(), runs).await);
    eprintln!("restore: {restored}");
    figures.insert("restore".into(), restored);
    snapshot::delete_backups(&s3).await?;
    save(&figures)?;

    let rpo_store = s3_store(&server.url(), "rpo")?;
    let mut rpo = Vec::new();
    for interval in intervals() {
        eprintln!("=== RPO with {interval:?} segments");
        let load = rpo::Load {
            interval,
            duration: Duration::from_secs(env_u64("BENCH_BACKUP_RPO_S", 60)),
            writes_per_s: env_u64("BENCH_BACKUP_WRITES_PER_S", 1000),
        };
        let measured = phase(rpo::measure(&client, &cluster.endpoints(), &rpo_store, &load).await);
        eprintln!("rpo: {measured}");
        rpo.push(measured);
        figures.insert("rpo".into(), json!(rpo));
        save(&figures)?;
    }
    figures.insert("load_average_at_end".into(), json!(load_average()));
    save(&figures)
}

/// The restore phase, with its inputs made again when the snapshot phase
/// left none.
async fn restore_phase(
    cluster: &LocalCluster,
    s3: &BackupStore,
    work: &Path,
    runs: usize,
) -> BenchResult<Value> {
    if etcd_operator::backup::newest_backup(s3).await.is_err() {
        etcd_operator::backup::take_backup(
            s3,
            &cluster.endpoints(),
            snapshot::NAMESPACE,
            "main",
            &Default::default(),
        )
        .await?;
    }
    let local = work.join("etcdctl.db");
    if !local.is_file() {
        snapshot::etcdctl_snapshot(&cluster.endpoints()[0], &local).await?;
    }
    restore::measure(s3, &local, work, runs).await
}

/// The S3 server as a user's destination, for cluster `cluster`.
fn s3_store(url: &str, cluster: &str) -> BenchResult<BackupStore> {
    Ok(s3_store_at(url, BUCKET, snapshot::NAMESPACE, cluster)?)
}

/// Segment intervals of the RPO runs (`BENCH_BACKUP_INTERVALS_S`).
fn intervals() -> Vec<Duration> {
    std::env::var("BENCH_BACKUP_INTERVALS_S")
        .unwrap_or_else(|_| "1,4,20".to_string())
        .split(',')
        .filter_map(|s| s.trim().parse::<u64>().ok())
        .map(Duration::from_secs)
        .collect()
}
