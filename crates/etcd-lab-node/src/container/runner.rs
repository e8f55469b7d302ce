//! `etcd-lab run-container`: turns the current process into the container.
//!
//! Order matters: join the cgroup (so every later process is tracked), join
//! the pod's network namespace, unshare mount + UTS (+ PID for an image's
//! container), make every mount private, build the root (a tmpfs, or an
//! overlay on the image's root filesystem), make it the root (pivot_root)
//! and drop the node's mounts, drop to the container's user, exec.
//!
//! On the fast path there is no fork: the agent's child *is* the container
//! process. An image's container gets a PID namespace of its own, whose
//! first process (PID 1 there) must be a child: this process stays
//! outside as its parent, passes on every signal the agent sends and exits
//! as the container does ([`pid_namespace`](super::pid_namespace)).

use std::convert::Infallible;
use std::ffi::CString;
use std::fs::File;
use std::os::unix::fs::symlink;
use std::path::{Component, Path, PathBuf};

use etcd_lab_common::IoContext;
use nix::mount::{MntFlags, MsFlags, mount, umount2};
use nix::sched::{CloneFlags, setns, unshare};
use nix::unistd::{Gid, Uid, chdir, execve, pivot_root, setgid, setgroups, sethostname, setuid};

use super::ContainerError;
use super::spec::{ContainerSpec, resolve_executable};

/// Host directories shared read-only with every container.
const HOST_DIRS: &[&str] = &["usr", "bin", "sbin", "lib", "lib64", "etc"];

/// Reads the spec at `spec_path` and execs the container (an image's
/// container: supervises its PID 1, see [`pid_namespace`](super::pid_namespace)).
/// Returns only on error.
pub fn run_container(spec_path: &Path) -> Result<Infallible, ContainerError> {
    let spec = ContainerSpec::load(spec_path)?;
    if spec.image_root.is_some() {
        check_argv(&spec)?;
        join_namespaces(&spec)?;
        return super::pid_namespace::supervise_init(spec_path);
    }
    exec_container(&spec)
}

/// The second step of an image's container (`run-container --init`): PID 1
/// of its namespace, in the cgroup and network its parent joined.
/// Returns only on error.
pub fn run_container_init(spec_path: &Path) -> Result<Infallible, ContainerError> {
    let spec = ContainerSpec::load(spec_path)?;
    super::pid_namespace::enter_as_init()?;
    enter_and_exec(&spec)
}

/// Execs the container described by `spec`. Returns only on error.
pub fn exec_container(spec: &ContainerSpec) -> Result<Infallible, ContainerError> {
    check_argv(spec)?;
    join_namespaces(spec)?;
    enter_and_exec(spec)
}

fn check_argv(spec: &ContainerSpec) -> Result<(), ContainerError> {
    if spec.argv.is_empty() {
        return Err(ContainerError::Spec("empty argv".into()));
    }
    Ok(())
}

/// The container's cgroup (first, so that every later process is
/// tracked) and the pod's network namespace.
fn join_namespaces(spec: &ContainerSpec) -> Result<(), ContainerError> {
    if let Some(cgroup) = &spec.cgroup {
        join_cgroup(cgroup)?;
    }
    let netns_path = Path::new("/run/netns").join(&spec.netns);
    let netns = File::open(&netns_path).context(|| format!("open {}", netns_path.display()))?;
    setns(&netns, CloneFlags::CLONE_NEWNET).map_err(|e| sys("setns (net)", e))?;
    Ok(())
}

/// Mount and UTS namespaces, the root, the user; then exec.
fn enter_and_exec(spec: &ContainerSpec) -> Result<Infallible, ContainerError> {
    let mut flags = CloneFlags::CLONE_NEWNS;
    if spec.hostname.is_some() {
        flags |= CloneFlags::CLONE_NEWUTS;
    }
    unshare(flags).map_err(|e| sys("unshare", e))?;
    if let Some(hostname) = &spec.hostname {
        sethostname(hostname).map_err(|e| sys("sethostname", e))?;
    }
    do_mount(
        None,
        Path::new("/"),
        None,
        MsFlags::MS_REC | MsFlags::MS_PRIVATE,
        "make / private",
    )?;
    let root = build_root(spec)?;
    enter_root(&root)?;
    if spec.image_root.is_some() && spec.read_only_root {
        // Every mount point exists by now; the mounts on them stay as set.
        remount_read_only(Path::new("/"))?;
    }
    if let Some(dir) = &spec.working_dir {
        std::fs::create_dir_all(dir).ok();
        chdir(dir).map_err(|e| sys(&format!("chdir {}", dir.display()), e))?;
    }
    let executable = resolve_executable(&spec.argv[0], &spec.env, |p| Path::new(p).is_file())
        .ok_or_else(|| ContainerError::NotFound(spec.argv[0].clone()))?;
    let path = cstring(&executable)?;
    let argv = spec
        .argv
        .iter()
        .map(|a| cstring(a))
        .collect::<Result<Vec<_>, _>>()?;
    let env = spec
        .env
        .iter()
        .map(|(k, v)| cstring(&format!("{k}={v}")))
        .collect::<Result<Vec<_>, _>>()?;
    drop_privileges(spec)?;
    execve(&path, &argv, &env).map_err(|e| sys(&format!("exec {executable}"), e))
}

fn join_cgroup(cgroup: &Path) -> Result<(), ContainerError> {
    std::fs::create_dir_all(cgroup).context(|| format!("create {}", cgroup.display()))?;
    let procs = cgroup.join("cgroup.procs");
    std::fs::write(&procs, std::process::id().to_string())
        .context(|| format!("write {}", procs.display()))?;
    Ok(())
}

fn drop_privileges(spec: &ContainerSpec) -> Result<(), ContainerError> {
    let gid = spec.gid.or(spec.uid).map(Gid::from_raw);
    let mut groups: Vec<Gid> = spec
        .supplementary_groups
        .iter()
        .copied()
        .map(Gid::from_raw)
        .collect();
    if let Some(g) = gid
        && !groups.contains(&g)
    {
        groups.insert(0, g);
    }
    if spec.uid.is_some() || spec.gid.is_some() || !groups.is_empty() {
        setgroups(&groups).map_err(|e| sys("setgroups", e))?;
    }
    if let Some(g) = gid {
        setgid(g).map_err(|e| sys("setgid", e))?;
    }
    if let Some(u) = spec.uid {
        setuid(Uid::from_raw(u)).map_err(|e| sys("setuid", e))?;
    }
    Ok(())
}

/// Mounts a tmpfs at `spec.root_dir` and builds the container's root: the
/// tmpfs itself holding the host's directories, or an overlay on the
/// image's root filesystem whose writable layer lives in the tmpfs.
/// Returns the root to enter.
fn build_root(spec: &ContainerSpec) -> Result<PathBuf, ContainerError> {
    let scratch = &spec.root_dir;
    std::fs::create_dir_all(scratch).context(|| format!("create {}", scratch.display()))?;
    do_mount(
        Some(Path::new("tmpfs")),
        scratch,
        Some("tmpfs"),
        MsFlags::MS_NOSUID,
        "mount root tmpfs",
    )?;
    let root = match &spec.image_root {
        Some(image) => overlay_on_image(scratch, image)?,
        None => {
            host_directories(spec, scratch)?;
            scratch.clone()
        }
    };
    let root = &root;
    if spec.image_root.is_none() {
        // The host's directories hold no /tmp of the container's: give it
        // one. An image's /tmp is the image's, writable unless the root
        // is read-only, as with a container runtime.
        let tmp = root.join("tmp");
        mkdir(&tmp)?;
        do_mount_data(
            Some(Path::new("tmpfs")),
            &tmp,
            Some("tmpfs"),
            MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
            "mode=1777",
            "mount /tmp",
        )?;
        for dir in ["run", "var/tmp", "root"] {
            mkdir(&root.join(dir))?;
        }
    }
    let proc = root.join("proc");
    mkdir(&proc)?;
    do_mount(
        Some(Path::new("proc")),
        &proc,
        Some("proc"),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC,
        "mount /proc",
    )?;
    let dev = root.join("dev");
    mkdir(&dev)?;
    if spec.image_root.is_some() {
        container_dev(&dev)?;
    } else {
        do_mount(
            Some(Path::new("/dev")),
            &dev,
            None,
            MsFlags::MS_BIND | MsFlags::MS_REC,
            "bind /dev",
        )?;
    }
    let sys_dir = root.join("sys");
    mkdir(&sys_dir)?;
    bind(Path::new("/sys"), &sys_dir, true)?;
    if spec.image_root.is_some() {
        mkdir(&root.join("etc"))?;
    }
    if root.join("etc").is_dir() {
        bind(&spec.hosts_file, &root.join("etc/hosts"), true)?;
        bind(&spec.resolv_conf, &root.join("etc/resolv.conf"), true)?;
        if let Some(hostname) = &spec.hostname {
            // The pod's name, as a kubelet mounts it (not the node's file).
            let file = spec.root_dir.with_extension("hostname");
            std::fs::write(&file, format!("{hostname}\n"))
                .context(|| format!("write {}", file.display()))?;
            bind(&file, &root.join("etc/hostname"), true)?;
        }
    }
    for m in &spec.mounts {
        let target = inside_root(root, &m.target)?;
        bind(&m.source, &target, m.read_only)?;
    }
    Ok(root.clone())
}

/// The devices a container runtime gives a container (not the node's
/// disks and loop devices): a tmpfs with the host's `null`, `zero`, `full`,
/// `random`, `urandom` and `tty` bound in, the standard links into
/// `/proc/self/fd`, and a `/dev/shm` of its own.
fn container_dev(dev: &Path) -> Result<(), ContainerError> {
    do_mount_data(
        Some(Path::new("tmpfs")),
        dev,
        Some("tmpfs"),
        MsFlags::MS_NOSUID | MsFlags::MS_NOEXEC,
        "mode=755",
        "mount /dev",
    )?;
    for name in ["null", "zero", "full", "random", "urandom", "tty"] {
        bind(&Path::new("/dev").join(name), &dev.join(name), false)?;
    }
    for (link, target) in [
        ("fd", "/proc/self/fd"),
        ("stdin", "/proc/self/fd/0"),
        ("stdout", "/proc/self/fd/1"),
        ("stderr", "/proc/self/fd/2"),
    ] {
        let path = dev.join(link);
        symlink(target, &path).context(|| format!("symlink {}", path.display()))?;
    }
    let shm = dev.join("shm");
    mkdir(&shm)?;
    do_mount_data(
        Some(Path::new("tmpfs")),
        &shm,
        Some("tmpfs"),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC,
        "mode=1777",
        "mount /dev/shm",
    )
}

/// The fast path's root: the host's directories, read-only, with the
/// image's files over `/usr/local/bin`.
fn host_directories(spec: &ContainerSpec, root: &Path) -> Result<(), ContainerError> {
    for dir in HOST_DIRS {
        let host = Path::new("/").join(dir);
        let inside = root.join(dir);
        match std::fs::symlink_metadata(&host) {
            Ok(meta) if meta.file_type().is_symlink() => {
                let target =
                    std::fs::read_link(&host).context(|| format!("readlink {}", host.display()))?;
                symlink(&target, &inside).context(|| format!("symlink {}", inside.display()))?;
            }
            Ok(_) => bind(&host, &inside, true)?,
            Err(_) => {}
        }
    }
    // Image files: a small tmpfs over /usr/local/bin holding one bind per file.
    if !spec.image_files.is_empty() {
        let bin = root.join("usr/local/bin");
        if !bin.is_dir() {
            return Err(ContainerError::Spec(
                "the host has no /usr/local/bin to mount the image on".into(),
            ));
        }
        do_mount(
            Some(Path::new("tmpfs")),
            &bin,
            Some("tmpfs"),
            MsFlags::empty(),
            "mount image tmpfs",
        )?;
        for file in &spec.image_files {
            bind(&file.source, &bin.join(&file.name), true)?;
        }
        remount_read_only(&bin)?;
    }
    Ok(())
}

/// An overlay on the image's root filesystem at `<scratch>/root`, its
/// writable layer in the scratch tmpfs (gone with the container, as a
/// runtime's is).
fn overlay_on_image(scratch: &Path, image: &Path) -> Result<PathBuf, ContainerError> {
    let upper = scratch.join("upper");
    let work = scratch.join("work");
    let root = scratch.join("root");
    for dir in [&upper, &work, &root] {
        mkdir(dir)?;
    }
    let options = format!(
        "lowerdir={},upperdir={},workdir={}",
        image.display(),
        upper.display(),
        work.display()
    );
    do_mount_data(
        Some(Path::new("overlay")),
        &root,
        Some("overlay"),
        MsFlags::empty(),
        &options,
        "mount the image's root (overlay)",
    )?;
    Ok(root)
}

/// Where the node's root is put while the container's root takes its
/// place; removed right after.
const OLD_ROOT: &str = ".old-root";

/// Makes the built root the root of the container's mount namespace and
/// drops every other mount from it. The namespace started as a copy of the
/// node's mounts, volumes of other pods included; kept (as a `chroot`
/// would keep them), they would hold those volumes' filesystems for as
/// long as this container runs, and no volume could be unmounted, checked
/// or grown offline while any container started after it was mounted runs.
fn enter_root(root: &Path) -> Result<(), ContainerError> {
    let old_root = root.join(OLD_ROOT);
    mkdir(&old_root)?;
    pivot_root(root, &old_root).map_err(|e| sys("pivot_root", e))?;
    chdir("/").map_err(|e| sys("chdir /", e))?;
    let old_root = Path::new("/").join(OLD_ROOT);
    umount2(&old_root, MntFlags::MNT_DETACH).map_err(|e| sys("unmount the node's root", e))?;
    std::fs::remove_dir(&old_root).context(|| format!("remove {}", old_root.display()))?;
    Ok(())
}

/// Joins an absolute container path to the root, refusing `..`.
pub(crate) fn inside_root(root: &Path, target: &Path) -> Result<PathBuf, ContainerError> {
    let mut out = root.to_path_buf();
    for c in target.components() {
        match c {
            Component::Normal(part) => out.push(part),
            Component::RootDir | Component::CurDir => {}
            Component::ParentDir | Component::Prefix(_) => {
                return Err(ContainerError::Spec(format!(
                    "mount path {} leaves the container",
                    target.display()
                )));
            }
        }
    }
    Ok(out)
}

fn bind(source: &Path, target: &Path, read_only: bool) -> Result<(), ContainerError> {
    let meta = std::fs::metadata(source).context(|| format!("stat {}", source.display()))?;
    if meta.is_dir() {
        mkdir(target)?;
    } else if !target.exists() {
        if let Some(parent) = target.parent() {
            mkdir(parent)?;
        }
        File::create(target).context(|| format!("create {}", target.display()))?;
    }
    do_mount(
        Some(source),
        target,
        None,
        MsFlags::MS_BIND | MsFlags::MS_REC,
        &format!("bind {}", source.display()),
    )?;
    if read_only {
        remount_read_only(target)?;
    }
    Ok(())
}

fn remount_read_only(target: &Path) -> Result<(), ContainerError> {
    do_mount(
        None,
        target,
        None,
        MsFlags::MS_BIND | MsFlags::MS_REMOUNT | MsFlags::MS_RDONLY,
        &format!("remount {} read-only", target.display()),
    )
}

fn mkdir(dir: &Path) -> Result<(), ContainerError> {
    std::fs::create_dir_all(dir).context(|| format!("create {}", dir.display()))?;
    Ok(())
}

fn do_mount(
    source: Option<&Path>,
    target: &Path,
    fstype: Option<&str>,
    flags: MsFlags,
    what: &str,
) -> Result<(), ContainerError> {
    mount(source, target, fstype, flags, None::<&str>).map_err(|e| sys(what, e))
}

fn do_mount_data(
    source: Option<&Path>,
    target: &Path,
    fstype: Option<&str>,
    flags: MsFlags,
    data: &str,
    what: &str,
) -> Result<(), ContainerError> {
    mount(source, target, fstype, flags, Some(data)).map_err(|e| sys(what, e))
}

fn cstring(s: &str) -> Result<CString, ContainerError> {
    CString::new(s).map_err(|_| ContainerError::Spec(format!("NUL byte in {s:?}")))
}

fn sys(context: &str, source: nix::Error) -> ContainerError {
    ContainerError::Sys {
        context: context.to_owned(),
        source,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mount_targets_stay_inside_root() {
        let root = Path::new("/r");
        assert_eq!(
            inside_root(root, Path::new("/var/lib/etcd")).ok(),
            Some(PathBuf::from("/r/var/lib/etcd"))
        );
        assert!(inside_root(root, Path::new("/../etc")).is_err());
    }
}
