//! `etcd-operator restore-volume prepare|finish`: the steps of the restore
//! Pod around `etcdutl snapshot restore`, on the survivor's volume. Each is
//! safe to run again after a failure or a restart of the Pod:
//!
//! - `prepare` copies the survivor's `member/snap/db` to `restore-<token>.db`
//!   (from the data dir kept as `data.before-<token>` when an earlier run got
//!   that far) and removes a half-written staging dir;
//! - `etcdutl snapshot restore restore-<token>.db --skip-hash-check` (a
//!   member's live db, not a snapshot file, has no hash) writes the new
//!   incarnation into `restore-<token>/`;
//! - `finish` keeps the old data dir as `data.before-<token>` (never
//!   deleted by the operator), moves the restored dir into place, and writes
//!   the identity marker of the new incarnation last.

use std::fs;
use std::path::{Path, PathBuf};

use crate::member_guard::{MARKER_FILE_NAME, MemberMarker, write_marker_file};

/// Arguments of `etcd-operator restore-volume`.
#[derive(Debug, Clone, clap::Args)]
pub struct RestoreVolumeArgs {
    /// `prepare` or `finish`.
    #[arg(value_enum)]
    pub step: RestoreStep,
    /// Where the member's volume is mounted (the data dir is `data/` in it).
    #[arg(long)]
    pub volume: PathBuf,
    /// Token of the new incarnation.
    #[arg(long)]
    pub token: String,
    /// The member's name (written into the identity marker by `finish`).
    #[arg(long)]
    pub member_name: String,
    /// `fetch-backup`: the backup to restore, as the JSON of
    /// `spec.bootstrap.fromBackup`.
    #[arg(long)]
    pub source: Option<String>,
    /// `fetch-backup`: namespace of the cluster whose backups are read.
    #[arg(long)]
    pub backup_namespace: Option<String>,
    /// `fetch-backup`: name of the cluster whose backups are read.
    #[arg(long)]
    pub backup_cluster: Option<String>,
    /// `fetch-backup`: a mounted Secret, one file per key, with the
    /// destination's credentials.
    #[arg(long)]
    pub credentials_dir: Option<PathBuf>,
    /// `fetch-backup`: a mounted Secret key holding the backups' encryption
    /// key (when the destination names one).
    #[arg(long)]
    pub encryption_key_file: Option<PathBuf>,
    /// `fetch-backup`: where to copy this binary for the `replay` step, which
    /// runs in the etcd image.
    #[arg(long)]
    pub install_to: Option<PathBuf>,
    /// `replay`: the etcd binary that serves the restored data on loopback
    /// while the segments are replayed.
    #[arg(long, default_value = "/usr/local/bin/etcd")]
    pub etcd_binary: PathBuf,
}

/// A step of the restore Pod.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum RestoreStep {
    /// Copy the survivor's db; clear a half-written staging dir.
    Prepare,
    /// Swap the restored data dir in; write the marker.
    Finish,
    /// Download and verify a backup (snapshot and incremental segments)
    /// instead of `prepare`; refuses a corrupt or truncated backup before
    /// anything is restored.
    FetchBackup,
    /// Replay the fetched incremental segments on the restored data dir.
    Replay,
}

/// Errors of a restore step; each `Display` is one line.
#[derive(Debug, thiserror::Error)]
pub enum RestoreVolumeError {
    #[error("restore-volume: {action} {path}: {source}")]
    Io {
        action: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("restore-volume: no etcd db to restore at {0}")]
    NoDatabase(PathBuf),
    #[error("restore-volume: etcdutl left no restored data dir at {0}")]
    NothingRestored(PathBuf),
    #[error("restore-volume: writing the identity marker: {0}")]
    Marker(#[from] crate::member_guard::MemberGuardError),
    #[error("restore-volume: {0}")]
    Backup(#[from] crate::restore_backup::RestoreBackupError),
}

/// The paths of a restore on one volume.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RestoreLayout {
    /// The data dir etcd runs on.
    pub data: PathBuf,
    /// The lost incarnation's data dir, kept.
    pub kept: PathBuf,
    /// The copy of the db that etcdutl restores.
    pub source_db: PathBuf,
    /// Where etcdutl writes the new data dir.
    pub staging: PathBuf,
    /// The incremental segments fetched with a backup, in the layout of the
    /// backup folder.
    pub segments: PathBuf,
    /// What `fetch-backup` chose, read by `replay`.
    pub plan: PathBuf,
}

impl RestoreLayout {
    /// The layout of a restore into incarnation `token` on `volume`.
    pub fn new(volume: &Path, token: &str) -> Self {
        Self {
            data: volume.join("data"),
            kept: volume.join(format!("data.before-{token}")),
            source_db: volume.join(format!("restore-{token}.db")),
            staging: volume.join(format!("restore-{token}")),
            segments: volume.join(format!("restore-{token}.segments")),
            plan: volume.join(format!("restore-{token}.plan.json")),
        }
    }
}

fn io(action: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> RestoreVolumeError {
    let path = path.to_path_buf();
    move |source| RestoreVolumeError::Io {
        action,
        path,
        source,
    }
}

/// Runs one step.
pub fn run(args: &RestoreVolumeArgs) -> Result<(), RestoreVolumeError> {
    let layout = RestoreLayout::new(&args.volume, &args.token);
    match args.step {
        RestoreStep::Prepare => prepare(&layout),
        RestoreStep::Finish => finish(&layout, &args.volume, &args.token, &args.member_name),
        RestoreStep::FetchBackup => Ok(crate::restore_backup::fetch(args, &layout)?),
        RestoreStep::Replay => Ok(crate::restore_backup::replay(args, &layout)?),
    }
}

fn prepare(layout: &RestoreLayout) -> Result<(), RestoreVolumeError> {
    if layout.staging.exists() {
        fs::remove_dir_all(&layout.staging).map_err(io("removing", &layout.staging))?;
    }
    // The survivor's own data: kept aside by an earlier run, or in place.
    let origin = if layout.kept.exists() {
        &layout.kept
    } else {
        &layout.data
    };
    let db = origin.join("member").join("snap").join("db");
    if !db.is_file() {
        return Err(RestoreVolumeError::NoDatabase(db));
    }
    let temporary = layout.source_db.with_extension("db.tmp");
    fs::copy(&db, &temporary).map_err(io("copying the db to", &temporary))?;
    fs::File::open(&temporary)
        .and_then(|f| f.sync_all())
        .map_err(io("syncing", &temporary))?;
    fs::rename(&temporary, &layout.source_db).map_err(io("renaming into", &layout.source_db))
}

fn finish(
    layout: &RestoreLayout,
    volume: &Path,
    token: &str,
    member_name: &str,
) -> Result<(), RestoreVolumeError> {
    if !layout.staging.join("member").is_dir() {
        return Err(RestoreVolumeError::NothingRestored(layout.staging.clone()));
    }
    if !layout.kept.exists() {
        if layout.data.exists() {
            fs::rename(&layout.data, &layout.kept).map_err(io("keeping", &layout.data))?;
        }
    } else if layout.data.exists() {
        // A restored dir of an earlier run: replaced by this one.
        fs::remove_dir_all(&layout.data).map_err(io("removing", &layout.data))?;
    }
    fs::rename(&layout.staging, &layout.data).map_err(io("moving into place", &layout.data))?;
    if layout.source_db.exists() {
        fs::remove_file(&layout.source_db).map_err(io("removing", &layout.source_db))?;
    }
    if layout.segments.exists() {
        fs::remove_dir_all(&layout.segments).map_err(io("removing", &layout.segments))?;
    }
    if layout.plan.exists() {
        fs::remove_file(&layout.plan).map_err(io("removing", &layout.plan))?;
    }
    fs::File::open(volume)
        .and_then(|d| d.sync_all())
        .map_err(io("syncing", volume))?;
    write_marker_file(
        &volume.join(MARKER_FILE_NAME),
        &MemberMarker {
            cluster_token: token.to_string(),
            member_name: member_name.to_string(),
            cluster_id: None,
            member_id: None,
            has_had_data: true,
        },
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(volume: &Path, step: RestoreStep) -> RestoreVolumeArgs {
        RestoreVolumeArgs {
            step,
            volume: volume.to_path_buf(),
            token: "main-abc-r1".into(),
            member_name: "main-0".into(),
            source: None,
            backup_namespace: None,
            backup_cluster: None,
            credentials_dir: None,
            encryption_key_file: None,
            install_to: None,
            etcd_binary: "/usr/local/bin/etcd".into(),
        }
    }

    /// What etcdutl does, for the test: a data dir with a db.
    fn fake_etcdutl(layout: &RestoreLayout) -> std::io::Result<()> {
        let snap = layout.staging.join("member").join("snap");
        fs::create_dir_all(&snap)?;
        fs::copy(&layout.source_db, snap.join("db"))?;
        Ok(())
    }

    #[test]
    fn restores_keep_the_old_data_and_can_run_again() -> Result<(), Box<dyn std::error::Error>> {
        let volume = tempfile::tempdir()?;
        let layout = RestoreLayout::new(volume.path(), "main-abc-r1");
        let snap = layout.data.join("member").join("snap");
        fs::create_dir_all(&snap)?;
        fs::write(snap.join("db"), b"survivor")?;

        run(&args(volume.path(), RestoreStep::Prepare))?;
        fake_etcdutl(&layout)?;
        run(&args(volume.path(), RestoreStep::Finish))?;
        assert_eq!(
            fs::read(layout.kept.join("member/snap/db"))?,
            b"survivor".to_vec()
        );
        assert_eq!(
            fs::read(layout.data.join("member/snap/db"))?,
            b"survivor".to_vec()
        );
        let marker: serde_json::Value =
            serde_json::from_str(&fs::read_to_string(volume.path().join(MARKER_FILE_NAME))?)?;
        assert_eq!(marker["cluster_token"], "main-abc-r1");
        assert_eq!(marker["has_had_data"], true);

        // Run again (the Pod restarted after finishing): restored again from
        // the kept original, never from the restored copy.
        fs::write(layout.data.join("member/snap/db"), b"restored")?;
        run(&args(volume.path(), RestoreStep::Prepare))?;
        assert_eq!(fs::read(&layout.source_db)?, b"survivor".to_vec());
        fake_etcdutl(&layout)?;
        run(&args(volume.path(), RestoreStep::Finish))?;
        assert_eq!(
            fs::read(layout.data.join("member/snap/db"))?,
            b"survivor".to_vec()
        );
        assert!(!layout.staging.exists());
        Ok(())
    }

    #[test]
    fn nothing_to_restore_is_an_error() -> Result<(), Box<dyn std::error::Error>> {
        let volume = tempfile::tempdir()?;
        let error = run(&args(volume.path(), RestoreStep::Prepare))
            .err()
            .ok_or("restored from nothing")?;
        assert!(matches!(error, RestoreVolumeError::NoDatabase(_)));
        let error = run(&args(volume.path(), RestoreStep::Finish))
            .err()
            .ok_or("finished without etcdutl")?;
        assert!(matches!(error, RestoreVolumeError::NothingRestored(_)));
        Ok(())
    }
}
