//! The command line of `etcd-operator restore-volume <step>` and where its
//! steps keep their files on the member's volume: what the restore Pod's
//! builder writes and the steps read.

use std::fmt::Display;
use std::path::{Path, PathBuf};

use super::Program;

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

impl RestoreStep {
    /// Every step.
    pub const ALL: [RestoreStep; 5] = [
        RestoreStep::Prepare,
        RestoreStep::ApplyWal,
        RestoreStep::Finish,
        RestoreStep::FetchBackup,
        RestoreStep::Replay,
    ];

    /// Its name on the command line (and of its container).
    pub fn name(self) -> &'static str {
        match self {
            RestoreStep::Prepare => "prepare",
            RestoreStep::ApplyWal => "apply-wal",
            RestoreStep::Finish => "finish",
            RestoreStep::FetchBackup => "fetch-backup",
            RestoreStep::Replay => "replay",
        }
    }

    /// The arguments every step takes: the subcommand, the step, the
    /// volume's mount, the new incarnation's token and the member's name.
    pub fn args(self, volume: &Path, token: &str, member_name: &str) -> Vec<String> {
        vec![
            Program::RestoreVolume.name().to_string(),
            self.name().to_string(),
            flag(flags::VOLUME, volume.display()),
            flag(flags::TOKEN, token),
            flag(flags::MEMBER_NAME, member_name),
        ]
    }
}

/// The long options of `restore-volume`, without their dashes.
pub mod flags {
    /// Where the member's volume is mounted (the data dir is `data/` in it).
    pub const VOLUME: &str = "volume";
    /// Token of the new incarnation.
    pub const TOKEN: &str = "token";
    /// The member's name.
    pub const MEMBER_NAME: &str = "member-name";
    /// `fetch-backup`: the JSON of the `BackupSource` to restore.
    pub const SOURCE: &str = "source";
    /// `fetch-backup`: namespace of the cluster whose backups are read.
    pub const BACKUP_NAMESPACE: &str = "backup-namespace";
    /// `fetch-backup`: name of the cluster whose backups are read.
    pub const BACKUP_CLUSTER: &str = "backup-cluster";
    /// `fetch-backup`: a mounted Secret with the destination's credentials.
    pub const CREDENTIALS_DIR: &str = "credentials-dir";
    /// `fetch-backup`, `replay`: a mounted Secret key with the backups'
    /// encryption key.
    pub const ENCRYPTION_KEY_FILE: &str = "encryption-key-file";
    /// `prepare`, `fetch-backup`: where to install the operator binary for
    /// the next step, which runs in the etcd image.
    pub const INSTALL_TO: &str = "install-to";
    /// `apply-wal`, `replay`: the etcd binary of the etcd image (`replay`
    /// runs the `etcdutl` beside it).
    pub const ETCD_BINARY: &str = "etcd-binary";
    /// `replay`: the member's peer URL, written into the membership of
    /// the data dir restored from the full backup.
    pub const PEER_URL: &str = "peer-url";
}

/// `--<name>=<value>`.
pub fn flag(name: &str, value: impl Display) -> String {
    format!("--{name}={value}")
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

#[cfg(test)]
mod tests {
    use super::*;
    use clap::ValueEnum;

    #[test]
    fn step_names_are_the_command_line_values() {
        for step in RestoreStep::ALL {
            let value = step.to_possible_value().map(|v| v.get_name().to_owned());
            assert_eq!(value.as_deref(), Some(step.name()));
        }
        assert_eq!(RestoreStep::value_variants().len(), RestoreStep::ALL.len());
    }

    #[test]
    fn every_step_names_the_volume_the_incarnation_and_the_member() {
        let args = RestoreStep::ApplyWal.args(Path::new("/var/lib/etcd"), "a-x-r1", "a-0");
        assert_eq!(
            args,
            [
                "restore-volume",
                "apply-wal",
                "--volume=/var/lib/etcd",
                "--token=a-x-r1",
                "--member-name=a-0"
            ]
        );
    }
}
