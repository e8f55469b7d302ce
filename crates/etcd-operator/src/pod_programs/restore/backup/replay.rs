//! `replay`: the fetched incremental segments replayed on the data dir
//! restored from the full backup, by an etcd on loopback, and its snapshot
//! written as the restore's source; with no segment to replay, the full
//! backup itself is that snapshot.

use std::path::Path;
use std::sync::Arc;

use object_store::local::LocalFileSystem;

use super::{FetchPlan, RestoreBackupError, read_key};
use crate::backup::{BackupStore, EncryptionKey};
use crate::pod_programs::file_error::io;
use crate::pod_programs::restore::loopback::LoopbackEtcd;
use crate::pod_programs::restore::{RestoreLayout, RestoreVolumeArgs};

/// Largest replay transaction etcd accepts (one source revision).
const MAX_REQUEST_BYTES: u64 = 256 * 1024 * 1024;

/// `restore-volume replay`.
pub fn replay(args: &RestoreVolumeArgs, layout: &RestoreLayout) -> Result<(), RestoreBackupError> {
    let bytes = std::fs::read(&layout.plan).map_err(io("reading", &layout.plan))?;
    let plan: FetchPlan =
        serde_json::from_slice(&bytes).map_err(|source| RestoreBackupError::Plan {
            path: layout.plan.clone(),
            source,
        })?;
    if plan.segments == 0 || plan.target_revision <= plan.base_revision {
        // The full backup is the snapshot to restore (its hash is checked
        // by the last container's etcdutl): a second name for the
        // downloaded file, which nothing writes again, rather than a copy
        // of it; it is restored once, not into a scratch data dir first.
        let temporary = layout.source_db.with_extension("part");
        if temporary.exists() {
            std::fs::remove_file(&temporary).map_err(io("removing", &temporary))?;
        }
        if std::fs::hard_link(&layout.backup_db, &temporary).is_err() {
            // A volume without hard links: a copy, made durable.
            std::fs::copy(&layout.backup_db, &temporary).map_err(io("copying to", &temporary))?;
        }
        std::fs::File::open(&temporary)
            .and_then(|f| f.sync_all())
            .map_err(io("syncing", &temporary))?;
        std::fs::rename(&temporary, &layout.source_db)
            .map_err(io("renaming into", &layout.source_db))?;
        println!(
            "no incremental segment to replay: the restore holds revision {} of backup {}",
            plan.base_revision, plan.backup
        );
        return Ok(());
    }
    restore_full_backup(args, layout)?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(io("starting the runtime for", &layout.staging))?;
    let key = read_key(args.encryption_key_file.as_deref())?;
    let revision = runtime.block_on(replay_on_loopback(
        &args.etcd_binary,
        &args.member_name,
        layout,
        &plan,
        key,
    ))?;
    println!(
        "replayed {} incremental segments of backup {}: the restore holds revision {revision} (before the revision bump)",
        plan.segments, plan.backup
    );
    Ok(())
}

/// `etcdutl snapshot restore` of the downloaded full backup (its hash
/// checked) into the scratch data dir the segments are replayed on: one
/// member, the new incarnation's token, the member's real peer URL. A data
/// dir left by an earlier attempt is removed first (etcdutl refuses to
/// write into one).
fn restore_full_backup(
    args: &RestoreVolumeArgs,
    layout: &RestoreLayout,
) -> Result<(), RestoreBackupError> {
    let peer_url = args
        .peer_url
        .as_deref()
        .ok_or(RestoreBackupError::MissingArgument("--peer-url"))?;
    if layout.base.exists() {
        std::fs::remove_dir_all(&layout.base).map_err(io("removing", &layout.base))?;
    }
    let etcdutl = args.etcd_binary.with_file_name("etcdutl");
    let member = &args.member_name;
    let output = std::process::Command::new(&etcdutl)
        .args(["snapshot", "restore"])
        .arg(&layout.backup_db)
        .arg(format!("--name={member}"))
        .arg(format!("--initial-cluster={member}={peer_url}"))
        .arg(format!("--initial-cluster-token={}", args.token))
        .arg(format!("--initial-advertise-peer-urls={peer_url}"))
        .arg(format!("--data-dir={}", layout.base.display()))
        .output()
        .map_err(io("running", &etcdutl))?;
    if !output.status.success() {
        let stderr = String::from_utf8_lossy(&output.stderr);
        let tail: Vec<&str> = stderr.lines().rev().take(3).collect();
        return Err(RestoreBackupError::Etcdutl {
            status: output.status.to_string(),
            stderr: tail.into_iter().rev().collect::<Vec<_>>().join(" | "),
        });
    }
    Ok(())
}

/// Replays the segments of `plan` on the data dir
/// restored from the full backup, then writes its snapshot as the
/// restore's source; returns the revision it holds.
async fn replay_on_loopback(
    etcd_binary: &Path,
    member_name: &str,
    layout: &RestoreLayout,
    plan: &FetchPlan,
    key: Option<EncryptionKey>,
) -> Result<i64, RestoreBackupError> {
    // The data dir already holds its membership (written by etcdutl with
    // the member's real peer URL, no other member); the loopback URLs only
    // say where this temporary server listens.
    let etcd = LoopbackEtcd::start(
        etcd_binary,
        member_name,
        &layout.base,
        &[
            // One transaction per source revision: a lease revoked in the
            // source deleted all its keys in one revision.
            "--max-txn-ops=1000000".to_string(),
            format!("--max-request-bytes={MAX_REQUEST_BYTES}"),
        ],
        false,
    )
    .await?;
    let result = replay_against(&etcd, layout, plan, key).await;
    let snapshot = match result {
        Ok(replayed) => etcd
            .snapshot_to(&layout.source_db)
            .await
            .map_err(RestoreBackupError::from)
            .and_then(|held| {
                if held == replayed {
                    Ok(held)
                } else {
                    Err(RestoreBackupError::SnapshotMismatch { replayed, held })
                }
            }),
        Err(error) => Err(error),
    };
    etcd.stop().await;
    snapshot
}

async fn replay_against(
    etcd: &LoopbackEtcd,
    layout: &RestoreLayout,
    plan: &FetchPlan,
    key: Option<EncryptionKey>,
) -> Result<i64, RestoreBackupError> {
    let mut client = etcd.client();
    let local = LocalFileSystem::new_with_prefix(&layout.segments).map_err(|source| {
        RestoreBackupError::Segments {
            path: layout.segments.clone(),
            source,
        }
    })?;
    let store = BackupStore::from_parts(
        Arc::new(local),
        object_store::path::Path::from(""),
        format!("file://{}", layout.segments.display()),
    )
    .with_encryption(key);
    let chain = crate::backup::incremental::segment_chain(&store, &plan.base).await?;
    let outcome = crate::backup::incremental::replay_segments(
        &store,
        &chain,
        Some(plan.target_revision),
        &mut client,
    )
    .await?;
    Ok(outcome.revision)
}
