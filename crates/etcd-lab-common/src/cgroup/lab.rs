//! The lab's subtree: `<root>/etcd-lab`, with a group per process the lab
//! starts.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::{CgroupError, detect_root};
use crate::io_error::{IoContext, IoError};

/// Name of the lab's group under the cgroup2 root.
pub const LAB_GROUP: &str = "etcd-lab";

/// The lab's subtree of the cgroup2 hierarchy.
#[derive(Debug, Clone)]
pub struct LabCgroups {
    root: PathBuf,
}

impl LabCgroups {
    /// The lab's subtree under the detected cgroup2 mount point.
    pub fn detect() -> Result<Self, CgroupError> {
        Ok(Self {
            root: detect_root()?,
        })
    }

    /// The lab's subtree under a given cgroup2 mount point.
    pub fn at(root: impl Into<PathBuf>) -> Self {
        Self { root: root.into() }
    }

    /// The cgroup2 mount point.
    pub fn hierarchy_root(&self) -> &Path {
        &self.root
    }

    /// `<root>/etcd-lab`.
    pub fn lab(&self) -> PathBuf {
        self.root.join(LAB_GROUP)
    }

    /// `<root>/etcd-lab/<relative>`.
    pub fn group(&self, relative: &str) -> PathBuf {
        self.lab().join(relative)
    }

    /// Creates `<root>/etcd-lab/<relative>` and returns its path.
    pub fn create(&self, relative: &str) -> Result<PathBuf, CgroupError> {
        let path = self.group(relative);
        std::fs::create_dir_all(&path).context(|| format!("create cgroup {}", path.display()))?;
        Ok(path)
    }

    /// Whether `pid` is in the lab's subtree (at `relative`, or anywhere when `None`).
    pub fn holds(&self, pid: i32, relative: Option<&str>) -> bool {
        let Ok(text) = std::fs::read_to_string(format!("/proc/{pid}/cgroup")) else {
            return false;
        };
        let Some(path) = text.lines().find_map(|l| l.strip_prefix("0::")) else {
            return false;
        };
        let expected = match relative {
            Some(rel) => format!("/{LAB_GROUP}/{rel}"),
            None => format!("/{LAB_GROUP}"),
        };
        // The hierarchy root may itself be a nested cgroup namespace view.
        path.ends_with(&expected) || path.contains(&format!("{expected}/"))
    }

    /// Every pid in the lab's subtree.
    pub fn pids(&self) -> Vec<i32> {
        let mut pids = Vec::new();
        collect_pids(&self.lab(), &mut pids);
        pids
    }

    /// Kills every process in the lab's subtree and removes the groups.
    pub fn destroy(&self, timeout: Duration) -> Result<(), CgroupError> {
        let lab = self.lab();
        if !lab.exists() {
            return Ok(());
        }
        let kill = lab.join("cgroup.kill");
        if kill.exists() {
            std::fs::write(&kill, "1").context(|| format!("write {}", kill.display()))?;
        } else {
            for pid in self.pids() {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(pid),
                    nix::sys::signal::Signal::SIGKILL,
                );
            }
        }
        let deadline = Instant::now() + timeout;
        while !self.pids().is_empty() {
            if Instant::now() > deadline {
                return Err(CgroupError::Survivors {
                    group: lab,
                    pids: self.pids(),
                });
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        remove_tree(&lab)
    }
}

fn collect_pids(dir: &Path, pids: &mut Vec<i32>) {
    if let Ok(text) = std::fs::read_to_string(dir.join("cgroup.procs")) {
        pids.extend(text.lines().filter_map(|l| l.trim().parse::<i32>().ok()));
    }
    if let Ok(entries) = std::fs::read_dir(dir) {
        for entry in entries.flatten() {
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                collect_pids(&entry.path(), pids);
            }
        }
    }
}

/// Removes a cgroup directory and its children, deepest first.
fn remove_tree(dir: &Path) -> Result<(), CgroupError> {
    if let Ok(entries) = std::fs::read_dir(dir) {
        for entry in entries.flatten() {
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                remove_tree(&entry.path())?;
            }
        }
    }
    // A group is removable a moment after its last process is reaped.
    let mut last = None;
    for _ in 0..100 {
        match std::fs::remove_dir(dir) {
            Ok(()) => return Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) => last = Some(e),
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    match last {
        Some(e) => Err(IoError::new(format!("remove cgroup {}", dir.display()), e).into()),
        None => Ok(()),
    }
}
