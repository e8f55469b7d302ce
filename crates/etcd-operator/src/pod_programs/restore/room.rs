//! Room on the member's volume for a restore from a backup, checked by
//! `fetch-backup` before it downloads anything: a restore that cannot
//! finish is refused whole rather than stopped half-way by a full volume.
//!
//! What the restore Pod writes before `finish` removes its scratch files
//! (all of it stays until then):
//!
//! - the downloaded snapshot (`restore-<token>.backup.db`): the backup's
//!   snapshot size, known from its metadata before the download;
//! - the incremental segments (`restore-<token>.segments/`), as stored;
//! - the data dir etcdutl restores from the full backup
//!   (`restore-<token>.base/`): a db of the snapshot's size and a WAL file
//!   etcd preallocates whole ([`WAL_PREALLOCATED_BYTES`]); the replay of
//!   the segments grows it by about as much as they hold;
//! - the snapshot to restore (`restore-<token>.db`): a copy of the full
//!   backup, or the replayed one;
//! - the new data dir (`restore-<token>/`): db and preallocated WAL again.
//!
//! About four times the snapshot, two WAL files and twice the segments.
//! The figures were measured with the pinned `etcdutl`: a restored data dir
//! is its snapshot's size plus a 64,000,000-byte WAL file and a few KiB.

use std::path::Path;

use nix::sys::statvfs::statvfs;

use crate::pod_programs::file_error::FileError;

/// Bytes etcd allocates for the first WAL file of each data dir
/// `etcdutl snapshot restore` writes (etcd's WAL segment size).
pub const WAL_PREALLOCATED_BYTES: u64 = 64_000_000;

/// What a restore from a backup writes on the volume, in bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Footprint {
    /// The full backup's snapshot, uncompressed.
    pub snapshot_bytes: u64,
    /// The incremental segments as fetched (0 before they are).
    pub segment_bytes: u64,
}

impl Footprint {
    /// Everything the restore writes before its scratch files are
    /// removed: four copies of the snapshot (downloaded, restored base,
    /// snapshot to restore, new data dir), two preallocated WAL files, the
    /// segments and as much again for their replay.
    pub fn bytes(&self) -> u64 {
        self.snapshot_bytes
            .saturating_mul(4)
            .saturating_add(2 * WAL_PREALLOCATED_BYTES)
            .saturating_add(self.segment_bytes.saturating_mul(2))
    }
}

/// The volume has too little room for the restore; nothing was restored.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "not enough room on the volume {volume} to restore backup {backup}: the restore writes about {needed} (4 x the {snapshot} snapshot, 2 x {wal} of WAL, 2 x {segments} of segments) and {available} is free; nothing was restored; grow the volume or free space on it, then delete the restore Pod",
    needed = mib(self.needed),
    snapshot = mib(self.footprint.snapshot_bytes),
    wal = mib(WAL_PREALLOCATED_BYTES),
    segments = mib(self.footprint.segment_bytes),
    available = mib(self.available)
)]
pub struct NoRoom {
    /// Where the volume is mounted.
    pub volume: String,
    /// The backup to restore.
    pub backup: String,
    /// What the restore writes.
    pub footprint: Footprint,
    /// Its total.
    pub needed: u64,
    /// What the volume has free for it.
    pub available: u64,
}

/// Whether `footprint` fits in `available` bytes (pure).
pub fn check(
    volume: &Path,
    backup: &str,
    footprint: Footprint,
    available: u64,
) -> Result<(), NoRoom> {
    let needed = footprint.bytes();
    if needed <= available {
        return Ok(());
    }
    Err(NoRoom {
        volume: volume.display().to_string(),
        backup: backup.to_string(),
        footprint,
        needed,
        available,
    })
}

/// Bytes an unprivileged writer may still write on the filesystem of
/// `volume` (`statvfs`: available blocks times the fragment size).
// `statvfs`'s counts are `u64` on 64-bit Linux, narrower elsewhere.
#[allow(clippy::useless_conversion)]
pub fn available_bytes(volume: &Path) -> Result<u64, FileError> {
    let stats = statvfs(volume).map_err(|errno| FileError {
        action: "measuring the filesystem of",
        path: volume.to_path_buf(),
        source: errno.into(),
    })?;
    Ok(u64::from(stats.blocks_available()).saturating_mul(u64::from(stats.fragment_size())))
}

/// `1234.5 MiB`.
fn mib(bytes: u64) -> String {
    // Precision is not needed beyond a tenth of a MiB.
    #[allow(clippy::cast_precision_loss)]
    let mib = bytes as f64 / (1024.0 * 1024.0);
    format!("{mib:.1} MiB")
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1024 * 1024;

    #[test]
    fn a_restore_writes_four_snapshots_two_wal_files_and_twice_its_segments() {
        let footprint = Footprint {
            snapshot_bytes: 100 * MIB,
            segment_bytes: 0,
        };
        assert_eq!(footprint.bytes(), 400 * MIB + 128_000_000);
        let with_segments = Footprint {
            segment_bytes: 5 * MIB,
            ..footprint
        };
        assert_eq!(with_segments.bytes(), footprint.bytes() + 10 * MIB);
    }

    #[test]
    fn a_restore_that_fits_goes_ahead() {
        let footprint = Footprint {
            snapshot_bytes: 100 * MIB,
            segment_bytes: MIB,
        };
        let volume = Path::new("/var/lib/etcd");
        assert_eq!(check(volume, "b", footprint, footprint.bytes()), Ok(()));
        assert_eq!(
            check(volume, "b", footprint, 10 * footprint.bytes()),
            Ok(())
        );
    }

    #[test]
    fn a_restore_that_does_not_fit_is_refused_with_the_figures() {
        let footprint = Footprint {
            snapshot_bytes: 300 * MIB,
            segment_bytes: 2 * MIB,
        };
        let volume = Path::new("/var/lib/etcd");
        let refusal = check(
            volume,
            "full-20260301T120000.000Z-r42",
            footprint,
            1024 * MIB,
        )
        .expect_err("1 GiB is not enough for a 300 MiB snapshot");
        assert_eq!(refusal.needed, footprint.bytes());
        assert_eq!(refusal.available, 1024 * MIB);
        let message = refusal.to_string();
        for figure in [
            "/var/lib/etcd",
            "full-20260301T120000.000Z-r42",
            "about 1326.1 MiB",
            "300.0 MiB snapshot",
            "61.0 MiB of WAL",
            "2.0 MiB of segments",
            "1024.0 MiB is free",
            "nothing was restored",
        ] {
            assert!(message.contains(figure), "{figure:?} in {message}");
        }
        // One byte short is short.
        assert!(check(volume, "b", footprint, footprint.bytes() - 1).is_err());
    }

    #[test]
    fn the_refusal_is_the_whole_detail_of_the_restore_pods_report() {
        let footprint = Footprint {
            snapshot_bytes: 8 * 1024 * MIB,
            segment_bytes: 40 * MIB,
        };
        let refusal = check(
            Path::new("/var/lib/etcd"),
            "full-20260301T120000.000Z-r123456789",
            footprint,
            MIB,
        )
        .expect_err("refused");
        let error = super::super::RestoreVolumeError::from(
            super::super::backup::RestoreBackupError::from(refusal.clone()),
        );
        let report = error.report();
        assert_eq!(report.detail, refusal.to_string(), "not cut");
        assert!(
            report
                .text_line()
                .starts_with("restore-volume failed: not enough room on the volume"),
            "{}",
            report.text_line()
        );
    }

    #[test]
    fn the_free_room_is_that_of_the_volumes_filesystem() {
        let dir = tempfile::tempdir().expect("tempdir");
        let available = available_bytes(dir.path()).expect("statvfs");
        let stats = statvfs(dir.path()).expect("statvfs");
        #[allow(clippy::useless_conversion)]
        let expected = u64::from(stats.blocks_available()) * u64::from(stats.fragment_size());
        // Other writers on this machine may move it a little in between.
        assert!(
            available.abs_diff(expected) < 64 * MIB,
            "{available} {expected}"
        );
        assert!(available_bytes(&dir.path().join("absent")).is_err());
    }
}
