//! The steps that restore a survivor's own data: `prepare` copies it and
//! commits its WAL's tail, `apply-wal` replays that WAL with etcd and
//! snapshots the result.

use std::fs;
use std::path::Path;

use super::loopback::{LoopbackError, LoopbackEtcd};
use super::{REVISION_BUMP, RestoreLayout, RestoreVolumeArgs, RestoreVolumeError};
use crate::backup::incremental::replay::LeaseKeeper;
use crate::pod_programs::file_error::io;
use crate::pod_programs::install::install_self;
use crate::pod_programs::wal;

/// `restore-volume prepare`.
pub fn prepare(
    layout: &RestoreLayout,
    install_to: Option<&Path>,
) -> Result<(), RestoreVolumeError> {
    for stale in [&layout.staging, &layout.survivor_copy] {
        if stale.exists() {
            fs::remove_dir_all(stale).map_err(io("removing", stale))?;
        }
    }
    if layout.source_db.exists() {
        fs::remove_file(&layout.source_db).map_err(io("removing", &layout.source_db))?;
    }
    // The survivor's own data: kept aside by an earlier run, or in place.
    // It is only read.
    let origin = if layout.kept.exists() {
        &layout.kept
    } else {
        &layout.data
    };
    let db = origin.join("member").join("snap").join("db");
    if !db.is_file() {
        return Err(RestoreVolumeError::NoDatabase(db));
    }
    let wal_dir = origin.join("member").join("wal");
    if !wal_dir.is_dir() {
        return Err(RestoreVolumeError::NoWal(wal_dir));
    }
    let temporary = layout.survivor_copy.with_extension("survivor.tmp");
    if temporary.exists() {
        fs::remove_dir_all(&temporary).map_err(io("removing", &temporary))?;
    }
    copy_tree(origin, &temporary)?;
    fs::rename(&temporary, &layout.survivor_copy)
        .map_err(io("renaming into", &layout.survivor_copy))?;
    let tail = wal::commit_wal_tail(&layout.survivor_copy.join("member").join("wal"))?;
    if tail.appended {
        println!(
            "the survivor's WAL holds entries up to index {} beyond its persisted commit index {}: committed on the copy, so that etcd applies them",
            tail.last_index, tail.persisted_commit
        );
    } else if tail.torn {
        println!(
            "the survivor's WAL ends in a torn record: left to etcd's repair; entries after its persisted commit index {} are not applied",
            tail.persisted_commit
        );
    } else {
        println!(
            "the survivor's WAL is committed up to its last entry {}",
            tail.last_index
        );
    }
    if let Some(target) = install_to {
        install_self(target).map_err(RestoreVolumeError::Install)?;
    }
    Ok(())
}

/// Copies the directory tree `from` into `to` (regular files and
/// directories; etcd's data dir holds nothing else).
fn copy_tree(from: &Path, to: &Path) -> Result<(), RestoreVolumeError> {
    fs::create_dir_all(to).map_err(io("creating", to))?;
    for entry in fs::read_dir(from).map_err(io("reading", from))? {
        let entry = entry.map_err(io("reading", from))?;
        let source = entry.path();
        let target = to.join(entry.file_name());
        let kind = entry.file_type().map_err(io("reading", &source))?;
        if kind.is_dir() {
            copy_tree(&source, &target)?;
        } else if kind.is_file() {
            fs::copy(&source, &target).map_err(io("copying", &source))?;
        }
    }
    Ok(())
}

/// `restore-volume apply-wal`.
pub fn apply_wal(
    args: &RestoreVolumeArgs,
    layout: &RestoreLayout,
) -> Result<(), RestoreVolumeError> {
    if !layout.survivor_copy.is_dir() {
        return Err(RestoreVolumeError::NoWal(layout.survivor_copy.clone()));
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(io("starting the runtime for", &layout.survivor_copy))?;
    let revision = runtime.block_on(apply_survivor_wal(
        &args.etcd_binary,
        &args.member_name,
        layout,
    ))?;
    println!(
        "the survivor's data with its WAL applied holds revision {revision}; the restore serves from revision {} on",
        revision
            .saturating_add(i64::try_from(REVISION_BUMP).unwrap_or(i64::MAX))
            .saturating_add(1)
    );
    Ok(())
}

/// The survivor's WAL replayed by etcd on the
/// copy of its data dir, whose snapshot becomes the restore's source;
/// returns the revision it holds. The copy is removed afterwards.
async fn apply_survivor_wal(
    etcd_binary: &Path,
    member_name: &str,
    layout: &RestoreLayout,
) -> Result<i64, LoopbackError> {
    let etcd = LoopbackEtcd::start(
        etcd_binary,
        member_name,
        &layout.survivor_copy,
        &["--force-new-cluster".to_string()],
        true,
    )
    .await?;
    // Leases the survivor held must not expire while nobody can reach
    // this etcd to keep them alive: their keys belong to the restore.
    let mut client = etcd.client();
    let leases = LeaseKeeper::start(&mut client).await;
    let result = match leases {
        Ok(leases) => {
            let result = etcd.snapshot_to(&layout.source_db).await;
            leases.stop();
            result
        }
        Err(error) => Err(LoopbackError::Request {
            data_dir: layout.survivor_copy.clone(),
            what: "keep the leases alive",
            message: error.to_string(),
        }),
    };
    etcd.stop().await;
    let revision = result?;
    std::fs::remove_dir_all(&layout.survivor_copy)
        .map_err(io("removing", &layout.survivor_copy))?;
    Ok(revision)
}
