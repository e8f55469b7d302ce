//! Which lab runs on this machine. Namespace, cgroup and port names are
//! fixed, so one lab runs at a time; `/run/etcd-lab/current` names its state
//! directory, so that `up` or `down` of another directory refuses to touch
//! it instead of tearing it down.

use std::path::{Path, PathBuf};

use etcd_lab_common::IoContext;

use crate::cgroup::LabCgroups;
use crate::error::{LabError, Result};

/// The file naming the running lab's state directory.
pub const CURRENT_FILE: &str = "/run/etcd-lab/current";

/// The state directory of the lab that was brought up last, if recorded.
pub fn current() -> Option<PathBuf> {
    let text = std::fs::read_to_string(CURRENT_FILE).ok()?;
    let path = text.trim();
    (!path.is_empty()).then(|| PathBuf::from(path))
}

/// Records `root` as the running lab.
pub fn set(root: &Path) -> Result<()> {
    let file = Path::new(CURRENT_FILE);
    if let Some(parent) = file.parent() {
        std::fs::create_dir_all(parent).context(|| format!("create {}", parent.display()))?;
    }
    std::fs::write(file, root.to_string_lossy().as_bytes())
        .context(|| format!("write {CURRENT_FILE}"))?;
    Ok(())
}

/// Forgets the record if it names `root`.
pub fn clear(root: &Path) {
    if current().is_some_and(|c| c == root) {
        let _ = std::fs::remove_file(CURRENT_FILE);
    }
}

/// Fails when processes of a lab with another state directory run.
pub fn ensure_not_other(root: &Path, cgroups: &LabCgroups) -> Result<()> {
    match conflict(current(), root, !cgroups.pids().is_empty()) {
        Some(other) => Err(LabError::OtherLabRunning(other)),
        None => Ok(()),
    }
}

/// The other lab in the way of the lab at `root`, if any.
fn conflict(current: Option<PathBuf>, root: &Path, lab_running: bool) -> Option<PathBuf> {
    current.filter(|other| lab_running && other != root)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_running_lab_of_another_directory_is_in_the_way() {
        let a = Path::new("/var/lib/etcd-lab");
        let b = PathBuf::from("/var/lib/etcd-lab-test");
        assert_eq!(conflict(Some(b.clone()), a, true), Some(b.clone()));
        assert_eq!(conflict(Some(b.clone()), a, false), None, "leftovers only");
        assert_eq!(conflict(Some(a.to_owned()), a, true), None, "the same lab");
        assert_eq!(conflict(None, a, true), None, "nothing recorded");
        assert_eq!(
            conflict(Some("/var/lib/etcd-lab/".into()), a, true),
            None,
            "a trailing slash names the same directory"
        );
    }
}
