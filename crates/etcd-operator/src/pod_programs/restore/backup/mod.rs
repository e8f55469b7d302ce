//! The backup steps of the restore Pod (`restore-volume fetch-backup` and
//! `restore-volume replay`), on the volume of the member that receives the
//! backup. Nothing is restored from a backup that fails a check:
//!
//! - `fetch-backup` picks the full backup (named, else the one restoring
//!   the newest data), checks
//!   that the wanted revision is within reach, downloads the snapshot with
//!   every check of [`download_backup`] (stored hash, etcd's embedded hash,
//!   size), downloads the incremental segments after it, records what it
//!   chose in `restore-<token>.plan.json`, and installs the operator binary
//!   for `replay`, which runs in the etcd image;
//! - `replay` (in the etcd image) restores the full backup with `etcdutl
//!   snapshot restore` into `restore-<token>.base/`, serves that data dir
//!   with etcd on loopback only, applies the segments, one revision per
//!   transaction, up to the wanted revision (so every revision keeps its
//!   number from the source, and the replay checks each), and writes the
//!   replayed etcd's snapshot as `restore-<token>.db`; with no segment to
//!   replay, the full backup itself is that snapshot and nothing is
//!   restored twice.
//!
//! The revision bump comes after the replay, when the last container of
//! the Pod restores `restore-<token>.db` with `etcdutl snapshot restore
//! --bump-revision --mark-compacted` (see
//! [`REVISION_BUMP`](crate::pod_contract::REVISION_BUMP)): the old cluster may have
//! served every revision after the restored one, and the bump must clear
//! the last of them, not the full backup's.

pub mod fetch;
pub mod replay;

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::loopback::LoopbackError;
use super::room::NoRoom;
use crate::backup::{BackupError, BackupMetadata, EncryptionKey};
use crate::pod_programs::file_error::{FileError, io};

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
    #[error(transparent)]
    NoRoom(#[from] NoRoom),
    #[error(transparent)]
    Io(#[from] FileError),
    #[error("the fetch plan {path} is unreadable: {source}")]
    Plan {
        path: PathBuf,
        source: serde_json::Error,
    },
    #[error("installing the operator binary: {0}")]
    Install(FileError),
    #[error("replay: opening the fetched segments in {path}: {source}")]
    Segments {
        path: PathBuf,
        source: object_store::Error,
    },
    #[error("replay: the replay reached revision {replayed} but the snapshot holds {held}")]
    SnapshotMismatch { replayed: i64, held: i64 },
    #[error("replay: {0}")]
    Loopback(#[from] LoopbackError),
    #[error("the encryption key in {path} is unusable: {reason}")]
    Key { path: PathBuf, reason: String },
    #[error("replay: etcdutl snapshot restore of the full backup failed ({status}): {stderr}")]
    Etcdutl { status: String, stderr: String },
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
