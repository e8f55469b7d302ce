//! Loop devices (`/dev/loopN`): the block devices the lab's disk images are
//! mounted through. Found through sysfs, attached and detached with
//! `losetup` (util-linux).

use std::path::{Path, PathBuf};
use std::process::Command;

use etcd_lab_common::IoContext;

use super::DiskError;

/// A loop device bound to a file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoopDevice {
    /// `loop3`.
    pub name: String,
    /// The file it reads and writes.
    pub backing_file: PathBuf,
    /// The file was removed while bound (the device keeps its data alive).
    pub backing_deleted: bool,
}

impl LoopDevice {
    /// `/dev/loop3`.
    pub fn path(&self) -> PathBuf {
        Path::new("/dev").join(&self.name)
    }
}

/// Parses `/sys/block/loopN/loop/backing_file`: a path, followed by
/// ` (deleted)` once the file was removed.
pub fn parse_backing_file(text: &str) -> (PathBuf, bool) {
    let text = text.strip_suffix('\n').unwrap_or(text);
    match text.strip_suffix(" (deleted)") {
        Some(path) => (PathBuf::from(path), true),
        None => (PathBuf::from(text), false),
    }
}

/// Every bound loop device of the machine.
pub fn list() -> Vec<LoopDevice> {
    let Ok(entries) = std::fs::read_dir("/sys/block") else {
        return Vec::new();
    };
    let mut devices: Vec<LoopDevice> = entries
        .flatten()
        .filter_map(|entry| {
            let name = entry.file_name().to_string_lossy().into_owned();
            if !name.starts_with("loop") {
                return None;
            }
            let text = std::fs::read_to_string(entry.path().join("loop/backing_file")).ok()?;
            let (backing_file, backing_deleted) = parse_backing_file(&text);
            Some(LoopDevice {
                name,
                backing_file,
                backing_deleted,
            })
        })
        .collect();
    devices.sort_by(|a, b| a.name.cmp(&b.name));
    devices
}

/// The loop devices bound to `image` (which still exists).
pub fn of_file(image: &Path) -> Vec<LoopDevice> {
    let image = image.canonicalize().unwrap_or_else(|_| image.to_owned());
    list()
        .into_iter()
        .filter(|d| !d.backing_deleted && d.backing_file == image)
        .collect()
}

/// The loop devices bound to files at or below `root`, removed or not.
pub fn under(root: &Path) -> Vec<LoopDevice> {
    let root = root.canonicalize().unwrap_or_else(|_| root.to_owned());
    list()
        .into_iter()
        .filter(|d| d.backing_file.starts_with(&root))
        .collect()
}

/// Whether something holds the device exclusively: a mounted filesystem,
/// in any mount namespace (an exclusive open fails with `EBUSY`).
pub fn is_held(device: &LoopDevice) -> bool {
    use std::os::unix::fs::OpenOptionsExt;
    let opened = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(nix::fcntl::OFlag::O_EXCL.bits())
        .open(device.path());
    matches!(opened, Err(e) if e.raw_os_error() == Some(nix::errno::Errno::EBUSY as i32))
}

/// Binds `image` to a free loop device (created by the kernel through
/// `/dev/loop-control` when none is free).
pub fn attach(image: &Path) -> Result<LoopDevice, DiskError> {
    let out = super::run(
        Command::new("losetup")
            .arg("--find")
            .arg("--show")
            .arg(image),
    )?;
    let path = PathBuf::from(out.trim());
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .filter(|n| n.starts_with("loop"))
        .ok_or_else(|| DiskError::Command {
            command: format!("losetup --find --show {}", image.display()),
            message: format!("unexpected answer {out:?}"),
        })?;
    let backing_file = image
        .canonicalize()
        .context(|| format!("resolve {}", image.display()))?;
    Ok(LoopDevice {
        name,
        backing_file,
        backing_deleted: false,
    })
}

/// Unbinds the device; one still held (mounted in some namespace) is
/// unbound by the kernel as soon as the last holder lets go.
pub fn detach(device: &LoopDevice) -> Result<(), DiskError> {
    super::run(Command::new("losetup").arg("--detach").arg(device.path())).map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backing_file_of_a_removed_file_is_marked_deleted() {
        assert_eq!(
            parse_backing_file("/lab/network-volumes/pvc-1.img\n"),
            (PathBuf::from("/lab/network-volumes/pvc-1.img"), false)
        );
        assert_eq!(
            parse_backing_file("/lab/network-volumes/pvc-1.img (deleted)\n"),
            (PathBuf::from("/lab/network-volumes/pvc-1.img"), true)
        );
    }

    #[test]
    fn device_path_is_under_dev() {
        let device = LoopDevice {
            name: "loop7".into(),
            backing_file: "/x.img".into(),
            backing_deleted: false,
        };
        assert_eq!(device.path(), PathBuf::from("/dev/loop7"));
    }
}
