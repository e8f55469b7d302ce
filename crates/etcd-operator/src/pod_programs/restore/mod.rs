//! `etcd-operator restore-volume <step>`: the steps of the restore Pod on
//! the volume of the member that receives the new incarnation. Each is
//! safe to run again after a failure or a restart of the Pod, and none
//! changes the survivor's own data (kept as `data.before-<token>`, never
//! deleted by the operator).
//!
//! From a survivor's data:
//!
//! - `prepare` copies the survivor's whole data dir (db, snapshots *and*
//!   WAL) to `restore-<token>.survivor/`, commits the tail of the copy's
//!   WAL ([`crate::pod_programs::wal::commit_wal_tail`]) and installs this binary for the next
//!   step, which runs in the etcd image;
//! - `apply-wal` starts etcd with `--force-new-cluster` on loopback on the
//!   copy: it replays the WAL, so the committed entries the db file did not
//!   hold yet are applied (a crashed member's db lags its WAL by up to
//!   etcd's backend batch interval), and its snapshot becomes
//!   `restore-<token>.db`;
//!
//! from a backup, `fetch-backup` and `replay` (see [`backup`]) end with
//! the same `restore-<token>.db`. Then:
//!
//! - `etcdutl snapshot restore restore-<token>.db --bump-revision
//!   <REVISION_BUMP> --mark-compacted` (hash checked) writes the new
//!   incarnation into `restore-<token>/`, its revisions past any the old
//!   cluster may have served (see [`REVISION_BUMP`]);
//! - `finish` keeps the old data dir as `data.before-<token>`, moves the
//!   restored dir into place, removes the scratch files, and writes the
//!   identity marker of the new incarnation last.
//!
//! The steps that run etcd on a scratch data dir use a [`loopback`] etcd.
//! Every step that fails ends with a [`Report`] of `restore-volume`.

pub mod backup;
pub mod finish;
pub mod loopback;
pub mod room;
pub mod survivor;

use std::path::PathBuf;

use crate::pod_contract::restore_volume::flags;
use crate::pod_contract::{Outcome, Program, Report};
pub use crate::pod_contract::{REVISION_BUMP, RestoreLayout, RestoreStep};
use crate::pod_programs::file_error::FileError;
use crate::pod_programs::identity_marker::MarkerError;

/// Arguments of `etcd-operator restore-volume`.
#[derive(Debug, Clone, clap::Args)]
pub struct RestoreVolumeArgs {
    /// The step to run.
    #[arg(value_enum)]
    pub step: RestoreStep,
    /// Where the member's volume is mounted (the data dir is `data/` in it).
    #[arg(long = flags::VOLUME)]
    pub volume: PathBuf,
    /// Token of the new incarnation.
    #[arg(long = flags::TOKEN)]
    pub token: String,
    /// The member's name (written into the identity marker by `finish`).
    #[arg(long = flags::MEMBER_NAME)]
    pub member_name: String,
    /// `fetch-backup`: the backup to restore, as the JSON of
    /// `spec.bootstrap.fromBackup`.
    #[arg(long = flags::SOURCE)]
    pub source: Option<String>,
    /// `fetch-backup`: namespace of the cluster whose backups are read.
    #[arg(long = flags::BACKUP_NAMESPACE)]
    pub backup_namespace: Option<String>,
    /// `fetch-backup`: name of the cluster whose backups are read.
    #[arg(long = flags::BACKUP_CLUSTER)]
    pub backup_cluster: Option<String>,
    /// `fetch-backup`: a mounted Secret, one file per key, with the
    /// destination's credentials.
    #[arg(long = flags::CREDENTIALS_DIR)]
    pub credentials_dir: Option<PathBuf>,
    /// `fetch-backup`: a mounted Secret key holding the backups' encryption
    /// key (when the destination names one).
    #[arg(long = flags::ENCRYPTION_KEY_FILE)]
    pub encryption_key_file: Option<PathBuf>,
    /// `prepare`, `fetch-backup`: where to copy this binary for the
    /// `apply-wal` or `replay` step, which runs in the etcd image.
    #[arg(long = flags::INSTALL_TO)]
    pub install_to: Option<PathBuf>,
    /// `apply-wal`, `replay`: the etcd binary that serves the scratch data
    /// dir on loopback.
    #[arg(long = flags::ETCD_BINARY, default_value = "/usr/local/bin/etcd")]
    pub etcd_binary: PathBuf,
    /// `replay`: the member's peer URL, for the membership of the data dir
    /// restored from the full backup before segments are replayed on it.
    #[arg(long = flags::PEER_URL)]
    pub peer_url: Option<String>,
}

/// Errors of a restore step; each `Display` is one line, the `detail` of
/// the step's report.
#[derive(Debug, thiserror::Error)]
pub enum RestoreVolumeError {
    #[error(transparent)]
    Io(#[from] FileError),
    #[error("no etcd db to restore at {0}")]
    NoDatabase(PathBuf),
    #[error("no write-ahead log at {0}")]
    NoWal(PathBuf),
    #[error("the survivor's WAL: {0}")]
    Wal(#[from] crate::pod_programs::wal::WalError),
    #[error("replaying the survivor's WAL: {0}")]
    Loopback(#[from] loopback::LoopbackError),
    #[error("installing the operator binary: {0}")]
    Install(FileError),
    #[error("etcdutl left no restored data dir at {0}")]
    NothingRestored(PathBuf),
    #[error("writing the identity marker: {0}")]
    Marker(#[from] MarkerError),
    #[error(transparent)]
    Backup(#[from] backup::RestoreBackupError),
}

impl RestoreVolumeError {
    /// The report the step ends with.
    pub fn report(&self) -> Report {
        Report::new(Program::RestoreVolume, Outcome::Failed, &self.to_string())
    }
}

/// Runs one step.
pub fn run(args: &RestoreVolumeArgs) -> Result<(), RestoreVolumeError> {
    let layout = RestoreLayout::new(&args.volume, &args.token);
    match args.step {
        RestoreStep::Prepare => survivor::prepare(&layout, args.install_to.as_deref()),
        RestoreStep::ApplyWal => survivor::apply_wal(args, &layout),
        RestoreStep::Finish => {
            finish::finish(&layout, &args.volume, &args.token, &args.member_name)
        }
        RestoreStep::FetchBackup => Ok(backup::fetch::fetch(args, &layout)?),
        RestoreStep::Replay => Ok(backup::replay::replay(args, &layout)?),
    }
}

#[cfg(test)]
mod tests;
