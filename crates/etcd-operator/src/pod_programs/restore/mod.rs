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
//!   WAL ([`wal::commit_wal_tail`]) and installs this binary for the next
//!   step, which runs in the etcd image;
//! - `apply-wal` starts etcd with `--force-new-cluster` on loopback on the
//!   copy: it replays the WAL, so the committed entries the db file did not
//!   hold yet are applied (a crashed member's db lags its WAL by up to
//!   etcd's backend batch interval), and its snapshot becomes
//!   `restore-<token>.db`;
//!
//! from a backup, `fetch-backup` and `replay` (see
//! [`crate::pod_programs::restore::backup`]) end with the same `restore-<token>.db`. Then:
//!
//! - `etcdutl snapshot restore restore-<token>.db --bump-revision
//!   <REVISION_BUMP> --mark-compacted` (hash checked) writes the new
//!   incarnation into `restore-<token>/`, its revisions past any the old
//!   cluster may have served (see [`REVISION_BUMP`]);
//! - `finish` keeps the old data dir as `data.before-<token>`, moves the
//!   restored dir into place, removes the scratch files, and writes the
//!   identity marker of the new incarnation last.

use std::fs;
use std::path::{Path, PathBuf};

use crate::pod_programs::member_guard::{MARKER_FILE_NAME, MemberMarker, write_marker_file};

pub mod backup;
pub mod loopback;
pub mod wal;

/// How far every restore moves the revision past the one it restores
/// (`etcdutl snapshot restore --bump-revision`, with `--mark-compacted`).
///
/// A client of the old cluster (a Kubernetes API server's watch cache)
/// may have seen revisions after the restored one: every write after the
/// backup, or the writes a lost member had committed beyond the newest
/// survivor. Reused with other content, such a revision corrupts its
/// cache. With the bump, the first revision the new incarnation serves is
/// `restored + REVISION_BUMP + 1`, and every older revision is compacted:
/// a watcher resuming from a revision it saw gets "required revision has
/// been compacted" and lists again. One billion (as used by Kubernetes
/// restores) covers more than 11 days of writes at 1,000 writes/s after
/// the restored point, and uses 1/9,223,372,036th of etcd's 64-bit revision
/// space per restore.
pub const REVISION_BUMP: u64 = 1_000_000_000;

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
    /// `prepare`, `fetch-backup`: where to copy this binary for the
    /// `apply-wal` or `replay` step, which runs in the etcd image.
    #[arg(long)]
    pub install_to: Option<PathBuf>,
    /// `apply-wal`, `replay`: the etcd binary that serves the scratch data
    /// dir on loopback.
    #[arg(long, default_value = "/usr/local/bin/etcd")]
    pub etcd_binary: PathBuf,
}

/// A step of the restore Pod.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum RestoreStep {
    /// Copy the survivor's data dir (db and WAL); clear half-written
    /// scratch files.
    Prepare,
    /// Replay the survivor's WAL on the copy with etcd and snapshot it.
    ApplyWal,
    /// Swap the restored data dir in; write the marker.
    Finish,
    /// Download and verify a backup (snapshot and incremental segments)
    /// instead of `prepare`; refuses a corrupt or truncated backup before
    /// anything is restored.
    FetchBackup,
    /// Replay the fetched incremental segments on the data dir restored
    /// from the full backup and snapshot it.
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
    #[error("restore-volume: no write-ahead log at {0}")]
    NoWal(PathBuf),
    #[error("restore-volume: the survivor's WAL: {0}")]
    Wal(#[from] wal::WalError),
    #[error("restore-volume: replaying the survivor's WAL: {0}")]
    Loopback(#[from] crate::pod_programs::restore::loopback::LoopbackError),
    #[error("restore-volume: installing the operator binary: {0}")]
    Install(crate::pod_programs::member_guard::MemberGuardError),
    #[error("restore-volume: etcdutl left no restored data dir at {0}")]
    NothingRestored(PathBuf),
    #[error("restore-volume: writing the identity marker: {0}")]
    Marker(#[from] crate::pod_programs::member_guard::MemberGuardError),
    #[error("restore-volume: {0}")]
    Backup(#[from] crate::pod_programs::restore::backup::RestoreBackupError),
}

/// The paths of a restore on one volume.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RestoreLayout {
    /// The data dir etcd runs on.
    pub data: PathBuf,
    /// The lost incarnation's data dir, kept.
    pub kept: PathBuf,
    /// The snapshot that etcdutl restores (with the revision bump): of the
    /// survivor's data with its WAL applied, or of the replayed backup.
    pub source_db: PathBuf,
    /// The copy of the survivor's data dir whose WAL etcd replays.
    pub survivor_copy: PathBuf,
    /// The full backup as downloaded.
    pub backup_db: PathBuf,
    /// The data dir restored from the full backup, where the segments are
    /// replayed.
    pub base: PathBuf,
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
            survivor_copy: volume.join(format!("restore-{token}.survivor")),
            backup_db: volume.join(format!("restore-{token}.backup.db")),
            base: volume.join(format!("restore-{token}.base")),
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
        RestoreStep::Prepare => prepare(&layout, args.install_to.as_deref()),
        RestoreStep::ApplyWal => apply_wal(args, &layout),
        RestoreStep::Finish => finish(&layout, &args.volume, &args.token, &args.member_name),
        RestoreStep::FetchBackup => Ok(crate::pod_programs::restore::backup::fetch(args, &layout)?),
        RestoreStep::Replay => Ok(crate::pod_programs::restore::backup::replay(args, &layout)?),
    }
}

fn prepare(layout: &RestoreLayout, install_to: Option<&Path>) -> Result<(), RestoreVolumeError> {
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
        crate::pod_programs::member_guard::install_self(target).map_err(RestoreVolumeError::Install)?;
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

fn apply_wal(args: &RestoreVolumeArgs, layout: &RestoreLayout) -> Result<(), RestoreVolumeError> {
    if !layout.survivor_copy.is_dir() {
        return Err(RestoreVolumeError::NoWal(layout.survivor_copy.clone()));
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(io("starting the runtime for", &layout.survivor_copy))?;
    let revision = runtime.block_on(crate::pod_programs::restore::loopback::apply_survivor_wal(
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
    for file in [&layout.source_db, &layout.backup_db, &layout.plan] {
        if file.exists() {
            fs::remove_file(file).map_err(io("removing", file))?;
        }
    }
    for dir in [&layout.segments, &layout.survivor_copy, &layout.base] {
        if dir.exists() {
            fs::remove_dir_all(dir).map_err(io("removing", dir))?;
        }
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

    /// What `apply-wal` and etcdutl do, for the test: the copy's db as
    /// the snapshot, then a data dir with it.
    fn fake_etcd_steps(layout: &RestoreLayout) -> std::io::Result<()> {
        fs::copy(
            layout.survivor_copy.join("member/snap/db"),
            &layout.source_db,
        )?;
        fs::remove_dir_all(&layout.survivor_copy)?;
        let snap = layout.staging.join("member").join("snap");
        fs::create_dir_all(&snap)?;
        fs::copy(&layout.source_db, snap.join("db"))?;
        Ok(())
    }

    /// A survivor's data dir: a db and a WAL whose last entry (index 3) is
    /// after the persisted commit index (2).
    fn survivor(data: &Path) -> std::io::Result<PathBuf> {
        let snap = data.join("member").join("snap");
        let wal = data.join("member").join("wal");
        fs::create_dir_all(&snap)?;
        fs::create_dir_all(&wal)?;
        fs::write(snap.join("db"), b"survivor")?;
        let mut log = wal::tests::Writer::new(0);
        log.entry(1, 1);
        log.entry(1, 2);
        log.state(1, 2);
        log.entry(1, 3);
        let file = wal.join("0000000000000000-0000000000000000.wal");
        fs::write(&file, log.file())?;
        Ok(file)
    }

    #[test]
    fn restores_keep_the_old_data_and_can_run_again() -> Result<(), Box<dyn std::error::Error>> {
        let volume = tempfile::tempdir()?;
        let layout = RestoreLayout::new(volume.path(), "main-abc-r1");
        let wal_file = survivor(&layout.data)?;
        let original_wal = fs::read(&wal_file)?;

        run(&args(volume.path(), RestoreStep::Prepare))?;
        // The copy's WAL commits its tail; the survivor's own is untouched.
        let copied = layout
            .survivor_copy
            .join("member/wal")
            .join(wal_file.file_name().ok_or("name")?);
        assert_ne!(fs::read(&copied)?, original_wal);
        assert_eq!(fs::read(&wal_file)?, original_wal);
        assert_eq!(
            fs::read(layout.survivor_copy.join("member/snap/db"))?,
            b"survivor".to_vec()
        );
        fake_etcd_steps(&layout)?;
        run(&args(volume.path(), RestoreStep::Finish))?;
        assert_eq!(
            fs::read(layout.kept.join("member/snap/db"))?,
            b"survivor".to_vec()
        );
        assert_eq!(
            fs::read(
                layout
                    .kept
                    .join("member/wal")
                    .join(wal_file.file_name().ok_or("name")?)
            )?,
            original_wal
        );
        assert_eq!(
            fs::read(layout.data.join("member/snap/db"))?,
            b"survivor".to_vec()
        );
        assert!(!layout.source_db.exists() && !layout.survivor_copy.exists());
        let marker: serde_json::Value =
            serde_json::from_str(&fs::read_to_string(volume.path().join(MARKER_FILE_NAME))?)?;
        assert_eq!(marker["cluster_token"], "main-abc-r1");
        assert_eq!(marker["has_had_data"], true);

        // Run again (the Pod restarted after finishing): restored again from
        // the kept original, never from the restored copy.
        fs::write(layout.data.join("member/snap/db"), b"restored")?;
        run(&args(volume.path(), RestoreStep::Prepare))?;
        assert_eq!(
            fs::read(layout.survivor_copy.join("member/snap/db"))?,
            b"survivor".to_vec()
        );
        fake_etcd_steps(&layout)?;
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
        let snap = volume.path().join("data/member/snap");
        fs::create_dir_all(&snap)?;
        fs::write(snap.join("db"), b"db without a WAL")?;
        let error = run(&args(volume.path(), RestoreStep::Prepare))
            .err()
            .ok_or("restored without a WAL")?;
        assert!(matches!(error, RestoreVolumeError::NoWal(_)));
        let error = run(&args(volume.path(), RestoreStep::Finish))
            .err()
            .ok_or("finished without etcdutl")?;
        assert!(matches!(error, RestoreVolumeError::NothingRestored(_)));
        Ok(())
    }
}
