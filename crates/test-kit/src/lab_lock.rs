//! The machine-wide lab lock: one lab runs per machine (fixed namespace,
//! cgroup and address names), so every test and bench that uses a lab holds
//! this lock for as long as it does.
//!
//! A lab lane (`scripts/lab-lane.sh`) is a machine of its own in every way
//! the lab's names touch (network, mount, PID and cgroup namespaces): the
//! lock and the lab's fixed names inside it are the lane's own. Only the
//! file system and the loop devices are shared, so a test there keeps its
//! lab's state directory below the lane's directory ([`lab_dir`]).

use std::fs::File;

/// Where the lock lives.
pub const LAB_LOCK_FILE: &str = "/run/etcd-lab-tests.lock";

/// The environment variable naming the directory of the lab lane this
/// process runs in (set by `scripts/lab-lane.sh`).
pub const LANE_DIR_ENV: &str = "LAB_LANE_DIR";

/// The state directory of a test's lab that would be `dir` outside a lane:
/// `dir` itself there, `<lane dir>/<last component of dir>` inside a lane.
/// Loop devices are machine-wide and a lab finds those of its volumes by
/// their backing files' paths, so labs running side by side need paths of
/// their own; below the lane's directory no path of one lab is a prefix of
/// another's (a lab's processes are also told apart by the state directory
/// on their command line).
pub fn lab_dir(dir: &str) -> String {
    in_lane(std::env::var(LANE_DIR_ENV).ok().as_deref(), dir)
}

/// `dir` moved below `lane` (when set and not empty).
fn in_lane(lane: Option<&str>, dir: &str) -> String {
    match lane {
        Some(lane) if !lane.is_empty() => {
            let name = dir.rsplit('/').find(|c| !c.is_empty()).unwrap_or(dir);
            format!("{}/{name}", lane.trim_end_matches('/'))
        }
        _ => dir.to_owned(),
    }
}

/// Holds the machine-wide lab lock until dropped.
pub struct LabLock {
    _file: File,
}

impl LabLock {
    /// Waits until no other lab test or bench holds the lock, then takes it.
    pub fn acquire() -> Self {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(LAB_LOCK_FILE)
            .expect("lab test lock file");
        file.lock().expect("lab test lock");
        Self { _file: file }
    }
}

/// Whether this process runs as root (the lab creates network namespaces,
/// cgroups and mounts).
pub fn is_root() -> bool {
    nix::unistd::Uid::effective().is_root()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lane_keeps_its_labs_below_its_own_directory() {
        let e2e = "/var/lib/etcd-lab-operator-e2e";
        assert_eq!(in_lane(None, e2e), e2e);
        assert_eq!(in_lane(Some(""), e2e), e2e, "an empty variable is no lane");
        assert_eq!(
            in_lane(Some("/var/lib/etcd-lab-lanes/e2e_scale/"), e2e),
            "/var/lib/etcd-lab-lanes/e2e_scale/etcd-lab-operator-e2e"
        );
        assert_eq!(
            in_lane(Some("/l/lab"), "/var/lib/etcd-lab-test/"),
            "/l/lab/etcd-lab-test"
        );
    }
}
