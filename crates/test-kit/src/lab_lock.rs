//! The machine-wide lab lock: one lab runs per machine (fixed namespace,
//! cgroup and address names), so every test and bench that uses a lab holds
//! this lock for as long as it does.

use std::fs::File;

/// Where the lock lives.
pub const LAB_LOCK_FILE: &str = "/run/etcd-lab-tests.lock";

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
