//! One measurement of a member's volume: `statvfs` of the data dir's
//! filesystem and the space etcd's own files take. Reads only: it opens
//! no file, it stats them.

use std::io::ErrorKind;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use nix::sys::statvfs::statvfs;

use crate::pod_contract::VolumeUsage;
use crate::pod_programs::file_error::FileError;

/// etcd's database file, under the data dir.
pub const DB_FILE: &str = "member/snap/db";
/// etcd's write-ahead log directory, under the data dir.
pub const WAL_DIR: &str = "member/wal";
/// etcd's snapshot directory (the db file included), under the data dir.
pub const SNAP_DIR: &str = "member/snap";

/// `st_blocks` counts 512-byte units whatever the filesystem's block size.
const STAT_BLOCK_BYTES: u64 = 512;

/// Measures the volume of `data_dir`. Only `statvfs` can fail the
/// measurement; a path of etcd's that is absent or unreadable is left out
/// of it (and an unreadable one logged).
///
/// Before etcd first starts the data dir may not exist yet: its parent,
/// the root of the volume, is measured then.
// `statvfs`'s counts are `u64` on 64-bit Linux, narrower elsewhere.
#[allow(clippy::useless_conversion)]
pub fn measure(data_dir: &Path) -> Result<VolumeUsage, FileError> {
    let measured = if data_dir.exists() {
        data_dir
    } else {
        data_dir.parent().unwrap_or(data_dir)
    };
    let stats = statvfs(measured).map_err(|errno| FileError {
        action: "measuring the filesystem of",
        path: measured.to_path_buf(),
        source: errno.into(),
    })?;
    let fragment = u64::from(stats.fragment_size());
    let blocks = u64::from(stats.blocks());
    let files = u64::from(stats.files());
    Ok(VolumeUsage {
        capacity_bytes: blocks.saturating_mul(fragment),
        available_bytes: u64::from(stats.blocks_available()).saturating_mul(fragment),
        used_bytes: blocks
            .saturating_sub(u64::from(stats.blocks_free()))
            .saturating_mul(fragment),
        available_inodes: (files > 0).then(|| u64::from(stats.files_available())),
        db_file_bytes: etcd_path_bytes(data_dir, DB_FILE),
        wal_bytes: etcd_path_bytes(data_dir, WAL_DIR),
        snap_dir_bytes: etcd_path_bytes(data_dir, SNAP_DIR),
    })
}

fn etcd_path_bytes(data_dir: &Path, relative: &str) -> Option<u64> {
    let path = data_dir.join(relative);
    match allocated_bytes(&path) {
        Ok(bytes) => bytes,
        Err(error) => {
            tracing::warn!("{error}");
            None
        }
    }
}

/// The bytes allocated to the regular files at `path` (a file, or every
/// file under a directory, as `du` counts them, symbolic links not
/// followed); `None` when `path` does not exist. A file removed while the
/// directory is read (etcd purges WAL and snapshot files) counts nothing.
pub fn allocated_bytes(path: &Path) -> Result<Option<u64>, FileError> {
    let top = match std::fs::symlink_metadata(path) {
        Ok(meta) => meta,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(None),
        Err(source) => {
            return Err(FileError {
                action: "reading the size of",
                path: path.to_path_buf(),
                source,
            });
        }
    };
    if !top.is_dir() {
        return Ok(Some(file_bytes(&top)));
    }
    let mut total: u64 = 0;
    let mut dirs: Vec<PathBuf> = vec![path.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        let entries = match std::fs::read_dir(&dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == ErrorKind::NotFound && dir != path => continue,
            Err(source) => {
                return Err(FileError {
                    action: "listing",
                    path: dir,
                    source,
                });
            }
        };
        for entry in entries {
            let entry = entry.map_err(|source| FileError {
                action: "listing",
                path: dir.clone(),
                source,
            })?;
            let meta = match entry.metadata() {
                Ok(meta) => meta,
                Err(e) if e.kind() == ErrorKind::NotFound => continue,
                Err(source) => {
                    return Err(FileError {
                        action: "reading the size of",
                        path: entry.path(),
                        source,
                    });
                }
            };
            if meta.is_dir() {
                dirs.push(entry.path());
            } else {
                total = total.saturating_add(file_bytes(&meta));
            }
        }
    }
    Ok(Some(total))
}

fn file_bytes(meta: &std::fs::Metadata) -> u64 {
    if meta.is_file() {
        meta.blocks().saturating_mul(STAT_BLOCK_BYTES)
    } else {
        0
    }
}
