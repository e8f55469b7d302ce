//! The lab's disks. A persistent volume is a sparse image file
//! `<dir>.img` holding an ext4 filesystem of the volume's size. While pods
//! use the volume, the filesystem is mounted through a loop device at the
//! volume's directory `<dir>`, and bound into each pod that uses it (at
//! `<pod dir>/volumes/pvc/<volume>`, which the container runner binds at
//! the `mountPath`). A full volume is a full filesystem (`ENOSPC`).
//!
//! Who does what, as on a real cluster:
//! - the provisioner creates the image and grows it when the claim grows
//!   ([`ensure_image`]: the controller side of an expansion);
//! - the node agent mounts it for a pod ([`mount_for_pod`]): formats a
//!   blank disk and, when the disk grew, checks and grows the filesystem
//!   before mounting it (the node side of an *offline* expansion: only a
//!   filesystem nobody has mounted grows; resizing a mounted loop
//!   filesystem is refused here); and unmounts it when the pod is gone
//!   ([`unmount_pod_volumes`]): the volume's own mount goes when no pod
//!   binds it any more ([`release_if_unused`]);
//! - reclaim removes a volume nobody uses ([`remove`]); a deleted node's
//!   local volumes go with their mounts ([`destroy`]); lab teardown releases
//!   every mount and loop device under its state directory
//!   ([`release_all_under`]).
//!
//! Every step on one image holds an exclusive lock on the image file, so
//! the agents of different nodes and the services never interleave their
//! steps on one volume. An image is bound to one loop device at most: an
//! image whose device is still held (its filesystem mounted somewhere) is
//! mounted through that device again, which shares the one filesystem;
//! binding it a second time would put two filesystems on one disk.

pub mod ext4;
pub mod loop_device;
pub mod mountinfo;

use std::collections::BTreeSet;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::Command;

use etcd_lab_common::{IoContext, IoError};
use nix::mount::{MntFlags, MsFlags};

use ext4::FilesystemStep;
use mountinfo::Mount;

/// Why a disk step failed.
#[derive(Debug, thiserror::Error)]
pub enum DiskError {
    #[error(transparent)]
    Io(#[from] IoError),
    #[error("{command}: {message}")]
    Command { command: String, message: String },
    #[error("{action}: {source}")]
    Mount {
        action: String,
        #[source]
        source: nix::Error,
    },
    #[error("volume disk image {0} does not exist")]
    NoImage(PathBuf),
    /// The disk grew but its filesystem is still mounted somewhere (another
    /// mount namespace holds it): it cannot be grown offline yet.
    #[error(
        "the filesystem of {image} must grow to its disk but is still mounted elsewhere ({device} is held); waiting for it to be released"
    )]
    Busy { image: PathBuf, device: PathBuf },
    /// Pods still have the volume mounted.
    #[error("volume {dir} is still mounted for pods: {users:?}")]
    InUse { dir: PathBuf, users: Vec<PathBuf> },
}

/// The image file of the volume whose directory is `dir`: `<dir>.img`.
pub fn image_of(dir: &Path) -> PathBuf {
    let mut name = dir.file_name().unwrap_or_default().to_owned();
    name.push(".img");
    dir.with_file_name(name)
}

/// Creates the volume's (empty) directory and its image, a sparse file of
/// `bytes`, or grows an existing image to `bytes`; never shrinks one.
/// Returns the image's length.
pub fn ensure_image(dir: &Path, bytes: u64) -> Result<u64, DiskError> {
    std::fs::create_dir_all(dir)
        .context(|| format!("create volume directory {}", dir.display()))?;
    let image = image_of(dir);
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&image)
        .context(|| format!("create {}", image.display()))?;
    file.lock()
        .context(|| format!("lock {}", image.display()))?;
    let len = file
        .metadata()
        .context(|| format!("stat {}", image.display()))?
        .len();
    if len < bytes {
        file.set_len(bytes)
            .context(|| format!("grow {} to {bytes} bytes", image.display()))?;
    }
    Ok(len.max(bytes))
}

/// Grows the image of the volume at `dir` to `bytes` (never shrinks it):
/// the controller side of an expansion. Fails with [`DiskError::NoImage`]
/// when the volume has no image (its disk is gone).
pub fn grow_image(dir: &Path, bytes: u64) -> Result<u64, DiskError> {
    let image = image_of(dir);
    if !image.is_file() {
        return Err(DiskError::NoImage(image));
    }
    ensure_image(dir, bytes)
}

/// What mounting a volume for a pod found and did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PodMount {
    /// The filesystem's size as mounted (every block, metadata included).
    pub filesystem_bytes: u64,
    /// What was done to the filesystem first; `Ready` also when the volume
    /// was already mounted for another pod (then it keeps its size).
    pub step: FilesystemStep,
}

/// Mounts the volume at `dir` (unless another pod has it mounted already)
/// and binds it at `target` for one pod. Idempotent.
pub fn mount_for_pod(dir: &Path, target: &Path) -> Result<PodMount, DiskError> {
    let image = image_of(dir);
    let _lock = ImageLock::take(&image)?.ok_or_else(|| DiskError::NoImage(image.clone()))?;
    let mounts = mountinfo::read()?;
    let step = if mountinfo::at(&mounts, dir).is_some() {
        FilesystemStep::Ready
    } else {
        stage(&image, dir)?
    };
    if mountinfo::at(&mounts, target).is_none() {
        std::fs::create_dir_all(target).context(|| format!("create {}", target.display()))?;
        sys_mount(Some(dir), target, None, MsFlags::MS_BIND)?;
    }
    let filesystem_bytes = ext4::read_superblock(&image)?
        .map(|sb| sb.bytes())
        .unwrap_or_default();
    Ok(PodMount {
        filesystem_bytes,
        step,
    })
}

/// Prepares the filesystem (nobody has it mounted: formats or grows it as
/// needed), binds the image to a loop device and mounts it at `dir`.
fn stage(image: &Path, dir: &Path) -> Result<FilesystemStep, DiskError> {
    // A device nobody holds is left from an interrupted step.
    for device in loop_device::of_file(image) {
        if !loop_device::is_held(&device) {
            loop_device::detach(&device)?;
        }
    }
    let len = std::fs::metadata(image)
        .context(|| format!("stat {}", image.display()))?
        .len();
    let step = ext4::plan(ext4::read_superblock(image)?, len);
    let (device, attached) = match loop_device::of_file(image).into_iter().next() {
        Some(device) if step == FilesystemStep::Ready => (device, false),
        Some(device) => {
            return Err(DiskError::Busy {
                image: image.to_owned(),
                device: device.path(),
            });
        }
        None => {
            match step {
                FilesystemStep::Format => ext4::format(image)?,
                FilesystemStep::Grow { .. } => ext4::grow(image)?,
                FilesystemStep::Ready => {}
            }
            (loop_device::attach(image)?, true)
        }
    };
    std::fs::create_dir_all(dir).context(|| format!("create {}", dir.display()))?;
    if let Err(e) = sys_mount(Some(&device.path()), dir, Some("ext4"), MsFlags::empty()) {
        if attached {
            let _ = loop_device::detach(&device);
        }
        return Err(e);
    }
    Ok(step)
}

/// Whether a volume's own mount went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Release {
    /// Not mounted (any more); its loop device is detached.
    Released,
    /// Still bound into pods at these paths.
    InUse(Vec<PathBuf>),
}

/// Unmounts the volume at `dir` and detaches its loop device unless pods
/// still have it bound.
pub fn release_if_unused(dir: &Path) -> Result<Release, DiskError> {
    let image = image_of(dir);
    let _lock = ImageLock::take(&image)?;
    release_locked(&image, dir)
}

fn release_locked(image: &Path, dir: &Path) -> Result<Release, DiskError> {
    let mounts = mountinfo::read()?;
    if let Some(own) = mountinfo::at(&mounts, dir) {
        let users = users_of(&mounts, &own.device, dir);
        if !users.is_empty() {
            return Ok(Release::InUse(users));
        }
        unmount(dir)?;
    }
    for device in loop_device::of_file(image) {
        loop_device::detach(&device)?;
    }
    Ok(Release::Released)
}

/// Mount points of the filesystem `device` other than `own`.
fn users_of(mounts: &[Mount], device: &str, own: &Path) -> Vec<PathBuf> {
    mounts
        .iter()
        .filter(|m| m.device == device && m.mount_point != own)
        .map(|m| m.mount_point.clone())
        .collect()
}

/// Unmounts every volume bound under `pod_volumes` (a pod's
/// `volumes/pvc`), then releases each of those volumes that no other pod
/// uses. Tries every one; returns the first failure.
pub fn unmount_pod_volumes(pod_volumes: &Path) -> Result<(), DiskError> {
    let mounts = mountinfo::read()?;
    let bound: Vec<&Mount> = mounts
        .iter()
        .filter(|m| m.mount_point.starts_with(pod_volumes))
        .collect();
    let devices: BTreeSet<&str> = bound.iter().map(|m| m.device.as_str()).collect();
    let mut first_error = None;
    for target in mountinfo::under(&mounts, pod_volumes) {
        if let Err(e) = unmount(&target) {
            first_error.get_or_insert(e);
            continue;
        }
        let _ = std::fs::remove_dir(&target);
    }
    for dir in volume_dirs_of(&mounts, &devices) {
        if let Err(e) = release_if_unused(&dir) {
            first_error.get_or_insert(e);
        }
    }
    first_error.map_or(Ok(()), Err)
}

/// The volumes' own mounts (a directory with its `.img` beside it) of
/// these filesystems.
fn volume_dirs_of(mounts: &[Mount], devices: &BTreeSet<&str>) -> BTreeSet<PathBuf> {
    mounts
        .iter()
        .filter(|m| devices.contains(m.device.as_str()) && image_of(&m.mount_point).is_file())
        .map(|m| m.mount_point.clone())
        .collect()
}

/// Removes a volume nobody uses: its mount (if left), loop device,
/// directory and image. Fails with [`DiskError::InUse`] while pods have it
/// bound, as a CSI driver refuses to delete a volume in use.
pub fn remove(dir: &Path) -> Result<(), DiskError> {
    let image = image_of(dir);
    let _lock = ImageLock::take(&image)?;
    if let Release::InUse(users) = release_locked(&image, dir)? {
        return Err(DiskError::InUse {
            dir: dir.to_owned(),
            users,
        });
    }
    remove_files(&image, dir)
}

/// Removes a volume whose machine is gone: every mount of its filesystem
/// is cut (lazily: a process still inside keeps what it has open), then
/// its loop device, directory and image go.
pub fn destroy(dir: &Path) -> Result<(), DiskError> {
    let image = image_of(dir);
    let _lock = ImageLock::take(&image)?;
    let mounts = mountinfo::read()?;
    if let Some(own) = mountinfo::at(&mounts, dir) {
        let mut all = users_of(&mounts, &own.device, dir);
        all.push(dir.to_owned());
        all.sort_by_key(|p| std::cmp::Reverse(p.components().count()));
        for mount in all {
            detach_mount(&mount)?;
        }
    }
    for device in loop_device::of_file(&image) {
        loop_device::detach(&device)?;
    }
    remove_files(&image, dir)
}

fn remove_files(image: &Path, dir: &Path) -> Result<(), DiskError> {
    let mounts = mountinfo::read()?;
    let inside = mountinfo::under(&mounts, dir);
    if !inside.is_empty() {
        return Err(DiskError::InUse {
            dir: dir.to_owned(),
            users: inside,
        });
    }
    for removed in [std::fs::remove_dir_all(dir), std::fs::remove_file(image)] {
        match removed {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                return Err(IoError::new(format!("remove volume {}", dir.display()), e).into());
            }
            _ => {}
        }
    }
    Ok(())
}

/// Runs `f` on the volume's files: where pods have it mounted, there;
/// otherwise mounted for the time of `f` (a fault injected into a volume
/// nobody uses). Fails while the volume cannot be mounted.
pub fn with_mounted<T>(dir: &Path, f: impl FnOnce(&Path) -> T) -> Result<T, DiskError> {
    let image = image_of(dir);
    let _lock = ImageLock::take(&image)?.ok_or_else(|| DiskError::NoImage(image.clone()))?;
    if mountinfo::at(&mountinfo::read()?, dir).is_some() {
        return Ok(f(dir));
    }
    stage(&image, dir)?;
    let out = f(dir);
    release_locked(&image, dir)?;
    Ok(out)
}

/// Releases every mount at or below `root` (lazily, deepest first) and
/// detaches every loop device whose file is (or was) below `root`. A
/// device still held is detached by the kernel once released. Returns the
/// mounts that could not be removed.
pub fn release_all_under(root: &Path) -> Result<Vec<PathBuf>, DiskError> {
    for mount in mountinfo::under(&mountinfo::read()?, root) {
        if let Err(e) = detach_mount(&mount) {
            tracing::warn!(mount = %mount.display(), "cannot unmount: {e}");
        }
    }
    for device in loop_device::under(root) {
        if let Err(e) = loop_device::detach(&device) {
            tracing::warn!(device = %device.path().display(), "cannot detach: {e}");
        }
    }
    Ok(mountinfo::under(&mountinfo::read()?, root))
}

/// An exclusive lock on an image file for the length of one step.
struct ImageLock {
    _file: File,
}

impl ImageLock {
    /// `None` when the image does not exist.
    fn take(image: &Path) -> Result<Option<Self>, DiskError> {
        let file = match File::open(image) {
            Ok(file) => file,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(IoError::new(format!("open {}", image.display()), e).into()),
        };
        file.lock()
            .context(|| format!("lock {}", image.display()))?;
        Ok(Some(Self { _file: file }))
    }
}

fn sys_mount(
    source: Option<&Path>,
    target: &Path,
    fs_type: Option<&str>,
    flags: MsFlags,
) -> Result<(), DiskError> {
    nix::mount::mount(source, target, fs_type, flags, None::<&str>).map_err(|source_error| {
        DiskError::Mount {
            action: format!(
                "mount {} at {}",
                source.map(|s| s.display().to_string()).unwrap_or_default(),
                target.display()
            ),
            source: source_error,
        }
    })
}

/// Unmounts `path`; one still busy in this namespace (an open file) is
/// detached lazily. Not mounted is not an error.
fn unmount(path: &Path) -> Result<(), DiskError> {
    match nix::mount::umount2(path, MntFlags::empty()) {
        Ok(()) | Err(nix::errno::Errno::EINVAL | nix::errno::Errno::ENOENT) => Ok(()),
        Err(nix::errno::Errno::EBUSY) => detach_mount(path),
        Err(source) => Err(DiskError::Mount {
            action: format!("unmount {}", path.display()),
            source,
        }),
    }
}

fn detach_mount(path: &Path) -> Result<(), DiskError> {
    match nix::mount::umount2(path, MntFlags::MNT_DETACH) {
        Ok(()) | Err(nix::errno::Errno::EINVAL | nix::errno::Errno::ENOENT) => Ok(()),
        Err(source) => Err(DiskError::Mount {
            action: format!("unmount {}", path.display()),
            source,
        }),
    }
}

/// Runs a tool; its stdout on success, its stderr in the error otherwise.
fn run(command: &mut Command) -> Result<String, DiskError> {
    let line = std::iter::once(command.get_program())
        .chain(command.get_args())
        .map(|a| a.to_string_lossy())
        .collect::<Vec<_>>()
        .join(" ");
    let out = command.output().context(|| format!("run {line}"))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(DiskError::Command {
            command: line,
            message: format!(
                "{}: {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            ),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_image_sits_beside_the_volume_directory() {
        assert_eq!(
            image_of(Path::new("/lab/network-volumes/pvc-1")),
            PathBuf::from("/lab/network-volumes/pvc-1.img")
        );
        assert_eq!(
            image_of(Path::new("/lab/nodes/n1/volumes/pvc-1.2")),
            PathBuf::from("/lab/nodes/n1/volumes/pvc-1.2.img")
        );
    }

    #[test]
    fn users_are_the_other_mounts_of_the_same_filesystem() {
        let mounts = mountinfo::parse(
            "90 27 7:3 / /lab/network-volumes/pvc-1 rw - ext4 /dev/loop3 rw\n\
             91 27 7:3 / /lab/nodes/n1/pods/u1/volumes/pvc/data rw - ext4 /dev/loop3 rw\n\
             92 27 7:4 / /lab/network-volumes/pvc-2 rw - ext4 /dev/loop4 rw\n",
        );
        assert_eq!(
            users_of(&mounts, "7:3", Path::new("/lab/network-volumes/pvc-1")),
            vec![PathBuf::from("/lab/nodes/n1/pods/u1/volumes/pvc/data")]
        );
        assert!(users_of(&mounts, "7:4", Path::new("/lab/network-volumes/pvc-2")).is_empty());
    }

    #[test]
    fn ensure_image_creates_a_sparse_file_and_only_grows_it() {
        let dir = tempfile::tempdir().unwrap();
        let volume = dir.path().join("pvc-1");
        assert_eq!(ensure_image(&volume, 64 << 20).unwrap(), 64 << 20);
        assert!(volume.is_dir());
        let image = image_of(&volume);
        let meta = std::fs::metadata(&image).unwrap();
        assert_eq!(meta.len(), 64 << 20);
        use std::os::unix::fs::MetadataExt;
        assert!(meta.blocks() * 512 < 1 << 20, "sparse");
        assert_eq!(ensure_image(&volume, 128 << 20).unwrap(), 128 << 20);
        assert_eq!(ensure_image(&volume, 32 << 20).unwrap(), 128 << 20);
        assert_eq!(std::fs::metadata(&image).unwrap().len(), 128 << 20);
    }

    /// Releases whatever a failed run of the test below left mounted.
    struct Cleanup<'a>(&'a Path);

    impl Drop for Cleanup<'_> {
        fn drop(&mut self) {
            let _ = release_all_under(self.0);
        }
    }

    fn filesystem_size(path: &Path) -> u64 {
        let stat = nix::sys::statvfs::statvfs(path).unwrap();
        stat.blocks() * stat.fragment_size()
    }

    /// The life of a disk with real loop devices and mounts (needs root and
    /// util-linux + e2fsprogs; skipped otherwise): made and mounted for two
    /// pods, kept while one of them still has it, grown on the disk while
    /// mounted but not on the filesystem, grown offline at the next mount
    /// once nobody has it, full at its size, removed.
    #[test]
    fn a_disk_is_mounted_shared_grown_offline_filled_and_removed() {
        let tools = ["losetup", "mkfs.ext4", "resize2fs"]
            .iter()
            .all(|tool| Command::new(tool).arg("-V").output().is_ok());
        if !nix::unistd::Uid::effective().is_root() || !tools {
            eprintln!("needs root, losetup and e2fsprogs: skipped");
            return;
        }
        let lab = tempfile::tempdir().unwrap();
        let _cleanup = Cleanup(lab.path());
        let dir = lab.path().join("network-volumes/pvc-1");
        let pod = |name: &str| lab.path().join("nodes/n1/pods").join(name);
        let target = |name: &str| pod(name).join("volumes/pvc/data");
        ensure_image(&dir, 16 << 20).unwrap();

        let first = mount_for_pod(&dir, &target("a")).unwrap();
        assert_eq!(first.step, FilesystemStep::Format);
        assert_eq!(first.filesystem_bytes, 16 << 20);
        std::fs::write(target("a").join("kept"), b"data").unwrap();
        assert_eq!(std::fs::read(dir.join("kept")).unwrap(), b"data");
        let second = mount_for_pod(&dir, &target("b")).unwrap();
        assert_eq!(second.step, FilesystemStep::Ready);
        assert_eq!(loop_device::of_file(&image_of(&dir)).len(), 1);

        // The controller grows the disk while pods have it mounted.
        ensure_image(&dir, 32 << 20).unwrap();
        unmount_pod_volumes(&pod("a")).unwrap();
        assert!(mountinfo::at(&mountinfo::read().unwrap(), &dir).is_some());
        assert!(matches!(remove(&dir), Err(DiskError::InUse { .. })));
        // Mounted elsewhere: a new pod gets the old size.
        let third = mount_for_pod(&dir, &target("c")).unwrap();
        assert_eq!(third.step, FilesystemStep::Ready);
        assert_eq!(third.filesystem_bytes, 16 << 20);
        unmount_pod_volumes(&pod("b")).unwrap();
        unmount_pod_volumes(&pod("c")).unwrap();
        assert!(mountinfo::at(&mountinfo::read().unwrap(), &dir).is_none());
        assert!(loop_device::of_file(&image_of(&dir)).is_empty());

        // Nobody has it: the next mount grows the filesystem first.
        let grown = mount_for_pod(&dir, &target("d")).unwrap();
        assert_eq!(
            grown.step,
            FilesystemStep::Grow {
                from: 16 << 20,
                to: 32 << 20
            }
        );
        assert_eq!(grown.filesystem_bytes, 32 << 20);
        assert_eq!(std::fs::read(target("d").join("kept")).unwrap(), b"data");
        let size = filesystem_size(&target("d"));
        assert!(size > 16 << 20 && size <= 32 << 20, "{size}");

        // Full at its size: ENOSPC.
        let mut file = File::create(target("d").join("fill")).unwrap();
        let chunk = vec![0u8; 1 << 20];
        let mut written = 0u64;
        let full = loop {
            match std::io::Write::write_all(&mut file, &chunk) {
                Ok(()) => written += chunk.len() as u64,
                Err(e) => break e,
            }
            assert!(written <= 32 << 20, "wrote past the disk's size");
        };
        assert_eq!(full.raw_os_error(), Some(nix::errno::Errno::ENOSPC as i32));
        drop(file);

        unmount_pod_volumes(&pod("d")).unwrap();
        remove(&dir).unwrap();
        assert!(!dir.exists() && !image_of(&dir).exists());
        assert!(loop_device::under(lab.path()).is_empty());
        assert!(mountinfo::under(&mountinfo::read().unwrap(), lab.path()).is_empty());
    }

    /// Removing a volume that was never mounted takes its directory and
    /// image (no mounts or loop devices involved).
    #[test]
    fn remove_takes_directory_and_image() {
        let dir = tempfile::tempdir().unwrap();
        let volume = dir.path().join("pvc-1");
        ensure_image(&volume, 8 << 20).unwrap();
        remove(&volume).unwrap();
        assert!(!volume.exists());
        assert!(!image_of(&volume).exists());
        // Gone already: nothing to do.
        remove(&volume).unwrap();
    }
}
