//! `etcd-lab down`: stop every process, remove the network, unmount what the
//! lab mounted and detach the loop devices of its volume disks, and (unless
//! data is kept) remove the state directory.

use std::path::{Path, PathBuf};
use std::time::Duration;

use etcd_lab_common::IoContext;
use etcd_lab_node::volume::disk::{self, loop_device, mountinfo};
use tracing::info;

use crate::cgroup::LabCgroups;
use crate::controlplane::Component;
use crate::error::{LabError, Result};
use crate::paths::LabPaths;
use crate::process;

/// Whether anything of a lab exists: live pid files, the cgroup subtree,
/// lab network namespaces, mounts under the state directory or loop
/// devices of its volume disks.
pub fn has_leftovers(paths: &LabPaths, cgroups: &LabCgroups) -> bool {
    cgroups.lab().exists()
        || !lab_netns().is_empty()
        || !mounts_under(paths.root()).is_empty()
        || !loop_devices_under(paths.root()).is_empty()
}

/// Stops everything. Keeps `$ETCD_LAB_DIR` (minus pid files) when `keep_data`.
/// Refuses (without touching anything) while a lab of another state
/// directory runs.
pub fn down(paths: &LabPaths, cgroups: &LabCgroups, keep_data: bool) -> Result<()> {
    crate::current::ensure_not_other(paths.root(), cgroups)?;
    // Agents and services first (they stop their pods), then the control
    // plane from the top, the backing etcd last.
    let mut pid_files: Vec<PathBuf> = std::fs::read_dir(paths.run())
        .map(|entries| {
            entries
                .flatten()
                .map(|e| e.path())
                .filter(|p| p.extension().is_some_and(|e| e == "pid"))
                .collect()
        })
        .unwrap_or_default();
    let rank = |path: &PathBuf| {
        let name = path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        Component::ALL
            .iter()
            .rev()
            .position(|c| c.name() == name)
            .map_or(0, |p| p + 1)
    };
    pid_files.sort_by_key(rank);
    for pid_file in &pid_files {
        if let Some(pid) = process::read_pid(pid_file)
            && process::alive(pid)
            && cgroups.holds(pid, None)
        {
            info!(pid, file = %pid_file.display(), "stopping");
            process::stop(pid, Duration::from_secs(5));
        }
        let _ = std::fs::remove_file(pid_file);
    }
    // Whatever is left in the subtree (containers, forks) is killed at once.
    cgroups.destroy(Duration::from_secs(10))?;
    etcd_lab_node::network::teardown_all().map_err(|e| LabError::Network(e.to_string()))?;
    unmount_under(paths.root())?;
    crate::current::clear(paths.root());
    if keep_data {
        let run = paths.run();
        if run.exists() {
            std::fs::remove_dir_all(&run).context(|| format!("remove {}", run.display()))?;
        }
    } else if paths.root().exists() {
        std::fs::remove_dir_all(paths.root())
            .context(|| format!("remove {}", paths.root().display()))?;
    }
    Ok(())
}

/// Names of the lab's network namespaces that exist.
pub fn lab_netns() -> Vec<String> {
    std::fs::read_dir("/run/netns")
        .map(|entries| {
            entries
                .flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with("etcdlab-"))
                .collect()
        })
        .unwrap_or_default()
}

/// Mount points at or below `root` in this mount namespace.
pub fn mounts_under(root: &Path) -> Vec<PathBuf> {
    mountinfo::read()
        .map(|mounts| mountinfo::under(&mounts, root))
        .unwrap_or_default()
}

/// Loop devices bound to files at or below `root` (the lab's volume
/// disks), including files already removed.
pub fn loop_devices_under(root: &Path) -> Vec<PathBuf> {
    loop_device::under(root).iter().map(|d| d.path()).collect()
}

/// Unmounts everything at or below `root` (lazily, deepest first) and
/// detaches the loop devices of disks below it; fails when mounts are left.
/// Only the lab's own: nothing outside `root` is touched.
pub(crate) fn unmount_under(root: &Path) -> Result<()> {
    let left = disk::release_all_under(root)?;
    if left.is_empty() {
        Ok(())
    } else {
        Err(LabError::Invalid(format!(
            "mounts left under {}: {left:?}",
            root.display()
        )))
    }
}
