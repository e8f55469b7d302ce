//! A full disk: the filesystem of a claim's volume filled from outside by
//! one file, [`FILL_FILE`] at its root, until only a given number of bytes
//! is left to unprivileged writers, and emptied again.
//!
//! "Available" is what `statvfs` calls `f_bavail` and `df` shows as
//! *Available*: free blocks less the blocks kept for root and ext4's own
//! reserve for delayed allocation. That is what an unprivileged process
//! (etcd in a member pod runs as a non-root user) can still use, so with
//! nothing left its next write that needs a block fails with `ENOSPC`.
//! Lab volumes are formatted as the kubelet formats them, with no blocks
//! kept for root (`-m0`), so there root is as full as everyone else.
//!
//! The fill file's blocks are allocated with `fallocate`, so they are
//! really taken (a sparse file would take none). The file is written
//! through the volume's own mount while pods use the volume (the one
//! filesystem they share), and with the volume mounted for the time of the
//! step otherwise, as [`Lab::volume_wipe`] does.
use std::fmt;
use std::fs::{File, OpenOptions};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use etcd_lab_common::{IoContext, IoError};
use nix::fcntl::{FallocateFlags, fallocate};

use crate::error::{LabError, Result};
use crate::faults::on_volume_files;
use crate::lab::Lab;

/// The fill file, at the root of the volume's filesystem.
pub const FILL_FILE: &str = ".etcd-lab-fill";

/// Rounds of adjusting the fill file: ext4 takes blocks of extent tree
/// beside the data, so an allocation can miss the target by a few blocks
/// (or run out of them before its end).
const MAX_ROUNDS: usize = 8;

/// What [`Lab::volume_fill`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Filled {
    /// The fill file.
    pub file: PathBuf,
    /// Bytes allocated to the fill file by this step.
    pub allocated: u64,
    /// Bytes given back by this step (an earlier fill left less than asked).
    pub released: u64,
    /// The fill file's size now.
    pub fill_bytes: u64,
    /// Bytes available to unprivileged writers now (`f_bavail`).
    pub available: u64,
}

impl fmt::Display for Filled {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: ", self.file.display())?;
        if self.released > 0 {
            write!(f, "released {} bytes", self.released)?;
        } else {
            write!(f, "allocated {} bytes", self.allocated)?;
        }
        write!(
            f,
            " (fill file {} bytes); {} bytes available to non-root writers",
            self.fill_bytes, self.available
        )
    }
}

/// What [`Lab::volume_unfill`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unfilled {
    /// The fill file (removed).
    pub file: PathBuf,
    /// Bytes the fill file held (0 when there was none).
    pub freed: u64,
    /// Bytes available to unprivileged writers now (`f_bavail`).
    pub available: u64,
}

impl fmt::Display for Unfilled {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: freed {} bytes; {} bytes available to non-root writers",
            self.file.display(),
            self.freed,
            self.available
        )
    }
}

impl Lab {
    /// Fills the filesystem of the volume bound to `namespace/claim` with
    /// [`FILL_FILE`] until `leave` bytes (rounded down to whole blocks) are
    /// available to unprivileged writers. An earlier fill file grows or
    /// shrinks to that; with less than `leave` available and no fill file,
    /// nothing changes.
    pub async fn volume_fill(&self, namespace: &str, claim: &str, leave: u64) -> Result<Filled> {
        let dir = self.volume_dir(namespace, claim).await?;
        on_volume_files(&dir, move |root| fill(root, leave)).await
    }

    /// Removes the fill file of the volume bound to `namespace/claim`.
    pub async fn volume_unfill(&self, namespace: &str, claim: &str) -> Result<Unfilled> {
        let dir = self.volume_dir(namespace, claim).await?;
        on_volume_files(&dir, unfill).await
    }
}

/// Bytes available to unprivileged writers on the filesystem of `path`,
/// and its block size.
fn available(path: &Path) -> Result<(u64, u64)> {
    let stat = nix::sys::statvfs::statvfs(path)
        .map_err(|e| IoError::new(format!("statvfs {}", path.display()), e.into()))?;
    let block = stat.fragment_size().max(1);
    Ok((stat.blocks_available().saturating_mul(block), block))
}

/// The fill file's next length towards `target` available bytes, or
/// `None` when it is there or cannot get closer.
fn next_length(fill_len: u64, available: u64, target: u64) -> Option<u64> {
    if available > target {
        Some(fill_len + (available - target))
    } else if available < target && fill_len > 0 {
        Some(fill_len.saturating_sub(target - available))
    } else {
        None
    }
}

fn fill(root: &Path, leave: u64) -> Result<Filled> {
    let path = root.join(FILL_FILE);
    let file = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .open(&path)
        .context(|| format!("open {}", path.display()))?;
    let start = length(&file, &path)?;
    let (mut now_available, block) = available(root)?;
    let target = leave / block * block;
    let mut fill_len = start;
    for _ in 0..MAX_ROUNDS {
        let Some(next) = next_length(fill_len, now_available, target) else {
            break;
        };
        if next > fill_len {
            allocate(&file, fill_len, next - fill_len, &path)?;
        } else {
            file.set_len(next)
                .context(|| format!("shrink {} to {next} bytes", path.display()))?;
        }
        let now = (length(&file, &path)?, available(root)?.0);
        if now == (fill_len, now_available) {
            break;
        }
        (fill_len, now_available) = now;
    }
    file.sync_all()
        .context(|| format!("sync {}", path.display()))?;
    Ok(Filled {
        file: path,
        allocated: fill_len.saturating_sub(start),
        released: start.saturating_sub(fill_len),
        fill_bytes: fill_len,
        available: available(root)?.0,
    })
}

/// Allocates `bytes` more blocks at the end of the fill file. Running out
/// of blocks is no error: what was allocated stays, and the next round
/// reads where the filesystem is.
fn allocate(file: &File, from: u64, bytes: u64, path: &Path) -> Result<()> {
    let offset = i64::try_from(from).map_err(|_| too_large(path, from))?;
    let len = i64::try_from(bytes).map_err(|_| too_large(path, bytes))?;
    match fallocate(file, FallocateFlags::empty(), offset, len) {
        Ok(()) | Err(nix::errno::Errno::ENOSPC) => Ok(()),
        Err(e) => Err(IoError::new(
            format!("allocate {bytes} bytes at {from} in {}", path.display()),
            e.into(),
        )
        .into()),
    }
}

fn too_large(path: &Path, bytes: u64) -> LabError {
    LabError::Invalid(format!("{}: {bytes} bytes is too large", path.display()))
}

fn length(file: &File, path: &Path) -> Result<u64> {
    Ok(file
        .metadata()
        .context(|| format!("stat {}", path.display()))?
        .len())
}

fn unfill(root: &Path) -> Result<Unfilled> {
    let path = root.join(FILL_FILE);
    let freed = match std::fs::metadata(&path) {
        Ok(meta) => meta.blocks() * 512,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => 0,
        Err(e) => return Err(IoError::new(format!("stat {}", path.display()), e).into()),
    };
    match std::fs::remove_file(&path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            return Err(IoError::new(format!("remove {}", path.display()), e).into());
        }
        _ => {}
    }
    // ext4 reuses freed blocks once the journal has committed their release.
    let dir = File::open(root).context(|| format!("open {}", root.display()))?;
    nix::unistd::syncfs(&dir)
        .map_err(|e| IoError::new(format!("syncfs {}", root.display()), e.into()))?;
    Ok(Unfilled {
        file: path,
        freed,
        available: available(root)?.0,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    #[test]
    fn grows_the_fill_file_by_what_is_available_beyond_the_target() {
        assert_eq!(next_length(0, 50 * MIB, 0), Some(50 * MIB));
        assert_eq!(next_length(10 * MIB, 40 * MIB, 8 * MIB), Some(42 * MIB));
    }

    #[test]
    fn shrinks_the_fill_file_when_less_than_the_target_is_left() {
        assert_eq!(next_length(42 * MIB, 4 * MIB, 8 * MIB), Some(38 * MIB));
        assert_eq!(next_length(MIB, 0, 8 * MIB), Some(0));
    }

    #[test]
    fn stops_at_the_target_or_with_no_fill_file_to_shrink() {
        assert_eq!(next_length(42 * MIB, 8 * MIB, 8 * MIB), None);
        assert_eq!(next_length(0, 4 * MIB, 8 * MIB), None);
        assert_eq!(next_length(0, 0, 0), None);
    }
}
