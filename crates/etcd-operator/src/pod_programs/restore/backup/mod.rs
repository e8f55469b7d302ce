//! The backup steps of the restore Pod (`restore-volume fetch-backup` and
//! `restore-volume replay`), on the volume of the member that receives the
//! backup. Nothing is restored from a backup that fails a check:
//!
//! - `fetch-backup` picks the full backup (named, else the newest), checks
//!   that the wanted revision is within reach, downloads the snapshot with
//!   every check of [`download_backup`] (stored hash, etcd's embedded hash,
//!   size), downloads the incremental segments after it, records what it
//!   chose in `restore-<token>.plan.json`, and installs the operator binary
//!   for `replay`, which runs in the etcd image;
//! - after `etcdutl snapshot restore` of the full backup into
//!   `restore-<token>.base/`, `replay` serves that data dir with etcd on
//!   loopback only, applies the segments, one revision per transaction, up
//!   to the wanted revision (so every revision keeps its number from the
//!   source, and the replay checks each), and writes the replayed etcd's
//!   snapshot as `restore-<token>.db`; with no segment to replay, the full
//!   backup itself is that snapshot.
//!
//! The revision bump comes after the replay, when the last container of
//! the Pod restores `restore-<token>.db` with `etcdutl snapshot restore
//! --bump-revision --mark-compacted` (see
//! [`crate::pod_programs::restore::REVISION_BUMP`]): the old cluster may have
//! served every revision after the restored one, and the bump must clear
//! the last of them, not the full backup's.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::api::BackupSource;
use crate::backup::{
    BackupError, BackupMetadata, BackupStore, Credentials, EncryptionKey, download_backup,
    list_backups, newest_backup,
};
use crate::pod_programs::restore::{RestoreLayout, RestoreVolumeArgs};

/// Why a backup step failed; each `Display` is one line.
#[derive(Debug, thiserror::Error)]
pub enum RestoreBackupError {
    #[error("{0} is required for this step")]
    MissingArgument(&'static str),
    #[error("--source is not a backup source: {0}")]
    Source(serde_json::Error),
    #[error("no full backup named {name} under {folder}")]
    NoSuchBackup { name: String, folder: String },
    #[error(
        "revision {wanted} is older than the full backup {backup} (revision {base}): name an older backup"
    )]
    RevisionBeforeBackup {
        wanted: i64,
        backup: String,
        base: i64,
    },
    #[error(
        "revision {wanted} is beyond what the backup holds: {backup} and its contiguous segments reach revision {reach}"
    )]
    RevisionBeyondBackup {
        wanted: i64,
        backup: String,
        reach: i64,
    },
    #[error("{0}")]
    Backup(#[from] BackupError),
    #[error("{action} {path}: {source}")]
    Io {
        action: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("the fetch plan {path} is unreadable: {source}")]
    Plan {
        path: PathBuf,
        source: serde_json::Error,
    },
    #[error("installing the operator binary: {0}")]
    Install(#[from] crate::pod_programs::member_guard::MemberGuardError),
    #[error("replay: {0}")]
    Replay(String),
    #[error("replay: {0}")]
    Loopback(#[from] crate::pod_programs::restore::loopback::LoopbackError),
    #[error("the encryption key in {path} is unusable: {reason}")]
    Key { path: PathBuf, reason: String },
}

fn io(action: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> RestoreBackupError {
    let path = path.to_path_buf();
    move |source| RestoreBackupError::Io {
        action,
        path,
        source,
    }
}

/// What `fetch-backup` chose, for `replay` and for the logs.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct FetchPlan {
    /// Base name of the full backup.
    pub backup: String,
    /// Where it was read from.
    pub location: String,
    /// etcd cluster ID (hex) the backup was taken of.
    #[serde(rename = "clusterID")]
    pub cluster_id: String,
    /// Revision of the full backup.
    pub base_revision: i64,
    /// The revision the restore stops at (inclusive).
    pub target_revision: i64,
    /// How many segments were fetched into the segments folder.
    pub segments: usize,
    /// The metadata of the full backup (the segments follow it).
    pub base: BackupMetadata,
}

/// `restore-volume fetch-backup`.
pub fn fetch(args: &RestoreVolumeArgs, layout: &RestoreLayout) -> Result<(), RestoreBackupError> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(io("starting the runtime for", &layout.source_db))?;
    let plan = runtime.block_on(fetch_backup(args, layout))?;
    println!(
        "fetched backup {} of cluster {} (revision {}, {} incremental segments, restoring up to revision {}) from {}",
        plan.backup,
        plan.cluster_id,
        plan.base_revision,
        plan.segments,
        plan.target_revision,
        plan.location
    );
    Ok(())
}

async fn fetch_backup(
    args: &RestoreVolumeArgs,
    layout: &RestoreLayout,
) -> Result<FetchPlan, RestoreBackupError> {
    let source: BackupSource = serde_json::from_str(
        args.source
            .as_deref()
            .ok_or(RestoreBackupError::MissingArgument("--source"))?,
    )
    .map_err(RestoreBackupError::Source)?;
    let namespace = args
        .backup_namespace
        .as_deref()
        .ok_or(RestoreBackupError::MissingArgument("--backup-namespace"))?;
    let cluster = args
        .backup_cluster
        .as_deref()
        .ok_or(RestoreBackupError::MissingArgument("--backup-cluster"))?;
    let credentials = match &args.credentials_dir {
        Some(dir) => read_credentials(dir)?,
        None => Credentials::new(),
    };
    let key = read_key(args.encryption_key_file.as_deref())?;
    let store = BackupStore::open(&source.destination, namespace, cluster, &credentials)?
        .with_encryption(key);
    let base = choose_backup(&store, source.backup_name.as_deref()).await?;
    let name = base_name(&base);
    let target = source.revision.unwrap_or(i64::MAX);
    if target < base.revision {
        return Err(RestoreBackupError::RevisionBeforeBackup {
            wanted: target,
            backup: name,
            base: base.revision,
        });
    }
    if layout.segments.exists() {
        std::fs::remove_dir_all(&layout.segments).map_err(io("removing", &layout.segments))?;
    }
    let fetched =
        crate::backup::incremental::fetch_segments(&store, &base, &layout.segments).await?;
    if let Some(gap) = &fetched.gap {
        println!(
            "the incremental segments of {name} stop at revision {}: {}",
            fetched.last_revision, gap.message
        );
    }
    let reach = fetched.last_revision.max(base.revision);
    if source.revision.is_some_and(|wanted| wanted > reach) {
        return Err(RestoreBackupError::RevisionBeyondBackup {
            wanted: target,
            backup: name,
            reach,
        });
    }

    for stale in [&layout.staging, &layout.base] {
        if stale.exists() {
            std::fs::remove_dir_all(stale).map_err(io("removing", stale))?;
        }
    }
    if layout.source_db.exists() {
        std::fs::remove_file(&layout.source_db).map_err(io("removing", &layout.source_db))?;
    }
    download_backup(&store, &base, &layout.backup_db).await?;
    let plan = FetchPlan {
        location: store.url(&store.path(&base.object)),
        backup: name,
        cluster_id: base.cluster_id.clone(),
        base_revision: base.revision,
        target_revision: target.min(reach),
        segments: fetched.segments,
        base: base.clone(),
    };
    let json = serde_json::to_vec_pretty(&plan).map_err(|source| RestoreBackupError::Plan {
        path: layout.plan.clone(),
        source,
    })?;
    let temporary = layout.plan.with_extension("tmp");
    std::fs::write(&temporary, json).map_err(io("writing", &temporary))?;
    std::fs::rename(&temporary, &layout.plan).map_err(io("renaming into", &layout.plan))?;
    if let Some(target) = &args.install_to {
        crate::pod_programs::member_guard::install_self(target)?;
    }
    Ok(plan)
}

/// The named full backup, else the newest.
async fn choose_backup(
    store: &BackupStore,
    name: Option<&str>,
) -> Result<BackupMetadata, RestoreBackupError> {
    let Some(name) = name else {
        return Ok(newest_backup(store).await?);
    };
    list_backups(store)
        .await?
        .into_iter()
        .find(|b| base_name(b) == name)
        .ok_or_else(|| RestoreBackupError::NoSuchBackup {
            name: name.to_string(),
            folder: store.url(store.folder()),
        })
}

fn base_name(backup: &BackupMetadata) -> String {
    // `full-<time>-r<revision>`, also for encrypted (`.db.zst.enc`) objects.
    backup.name()
}

/// The backups' encryption key from a mounted Secret key, if one is named.
pub(crate) fn read_key(path: Option<&Path>) -> Result<Option<EncryptionKey>, RestoreBackupError> {
    let Some(path) = path else {
        return Ok(None);
    };
    let bytes = std::fs::read(path).map_err(io("reading", path))?;
    EncryptionKey::from_secret_value(&bytes)
        .map(Some)
        .map_err(|e| RestoreBackupError::Key {
            path: path.to_path_buf(),
            reason: e.to_string(),
        })
}

/// A mounted Secret: one file per key (dot-files are the kubelet's own).
fn read_credentials(dir: &Path) -> Result<Credentials, RestoreBackupError> {
    let mut credentials = BTreeMap::new();
    for entry in std::fs::read_dir(dir).map_err(io("reading", dir))? {
        let entry = entry.map_err(io("reading", dir))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let path = entry.path();
        if name.starts_with('.') || !path.is_file() {
            continue;
        }
        let value = std::fs::read_to_string(&path).map_err(io("reading", &path))?;
        credentials.insert(name, value.trim_end_matches('\n').to_string());
    }
    Ok(credentials)
}

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
        // again by etcdutl).
        let temporary = layout.source_db.with_extension("part");
        std::fs::copy(&layout.backup_db, &temporary).map_err(io("copying to", &temporary))?;
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
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(io("starting the runtime for", &layout.staging))?;
    let key = read_key(args.encryption_key_file.as_deref())?;
    let revision = runtime.block_on(crate::pod_programs::restore::loopback::replay_on_loopback(
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
