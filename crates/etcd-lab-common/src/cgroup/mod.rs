//! The lab's cgroup2 layout: `<cgroup2 root>/etcd-lab/...`. Every process
//! the lab starts is placed in a group below it, so `down` can kill
//! whatever is left (including forks and containers) in one write to
//! `cgroup.kill`; each node's containers are in `etcd-lab/node-NODE/pod-UID-CONTAINER`,
//! so a whole node can be killed or frozen through `node-NODE`.

mod lab;
mod node;

use std::path::{Path, PathBuf};

pub use lab::{LAB_GROUP, LabCgroups};
pub use node::{NodeCgroups, is_populated, kill_and_remove};

use crate::io_error::{IoContext, IoError};

/// Errors of the cgroup layout.
#[derive(Debug, thiserror::Error)]
pub enum CgroupError {
    #[error(
        "no cgroup2 hierarchy found (looked at /sys/fs/cgroup, /sys/fs/cgroup/unified and /proc/mounts)"
    )]
    NoCgroup2,
    #[error(transparent)]
    Io(#[from] IoError),
    #[error("processes {pids:?} in {group} survived SIGKILL")]
    Survivors { group: PathBuf, pids: Vec<i32> },
}

/// Where the cgroup2 hierarchy is mounted: `/sys/fs/cgroup` on a pure
/// cgroup2 system, `/sys/fs/cgroup/unified` on a hybrid one, else the first
/// cgroup2 mount in `/proc/mounts`.
pub fn detect_root() -> Result<PathBuf, CgroupError> {
    for candidate in ["/sys/fs/cgroup", "/sys/fs/cgroup/unified"] {
        let path = Path::new(candidate);
        if path.join("cgroup.controllers").is_file() {
            return Ok(path.to_owned());
        }
    }
    let mounts = std::fs::read_to_string("/proc/mounts").context(|| "read /proc/mounts".into())?;
    cgroup2_mount(&mounts).ok_or(CgroupError::NoCgroup2)
}

/// The first cgroup2 mount point in the text of `/proc/mounts`.
fn cgroup2_mount(mounts: &str) -> Option<PathBuf> {
    mounts.lines().find_map(|line| {
        let mut fields = line.split_whitespace();
        let _source = fields.next()?;
        let target = fields.next()?;
        (fields.next()? == "cgroup2").then(|| PathBuf::from(target))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_cgroup2_mount_among_others() {
        let mounts = "proc /proc proc rw 0 0\n\
                      cgroup /sys/fs/cgroup/cpu cgroup rw,cpu 0 0\n\
                      cgroup2 /run/cgroup2 cgroup2 rw,nsdelegate 0 0\n";
        assert_eq!(cgroup2_mount(mounts), Some(PathBuf::from("/run/cgroup2")));
        assert_eq!(cgroup2_mount("proc /proc proc rw 0 0\n"), None);
    }
}
