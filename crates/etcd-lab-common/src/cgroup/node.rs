//! The groups of one node: `<root>/etcd-lab/node-NODE/pod-UID-CONTAINER`.

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::lab::LAB_GROUP;

/// The cgroups of one node.
#[derive(Debug, Clone)]
pub struct NodeCgroups {
    node_dir: PathBuf,
}

impl NodeCgroups {
    /// `<root>/etcd-lab/node-NODE`.
    pub fn new(root: &Path, node: &str) -> Self {
        Self {
            node_dir: root.join(LAB_GROUP).join(format!("node-{node}")),
        }
    }

    /// The node's cgroup.
    pub fn node_dir(&self) -> &Path {
        &self.node_dir
    }

    /// Cgroup of one container of a pod.
    pub fn container(&self, pod_uid: &str, container: &str) -> PathBuf {
        self.node_dir.join(format!("pod-{pod_uid}-{container}"))
    }

    /// Kills every container cgroup of the node (left over by an earlier
    /// agent) and removes them.
    pub async fn kill_all_containers(&self) {
        let Ok(entries) = std::fs::read_dir(&self.node_dir) else {
            return;
        };
        for entry in entries.flatten() {
            if entry.file_name().to_string_lossy().starts_with("pod-") {
                kill_and_remove(&entry.path()).await;
            }
        }
    }
}

/// Kills every process of a cgroup (`cgroup.kill`) and removes it once empty.
pub async fn kill_and_remove(cgroup: &Path) {
    if !cgroup.exists() {
        return;
    }
    if let Err(e) = std::fs::write(cgroup.join("cgroup.kill"), "1") {
        tracing::warn!("cannot kill cgroup {}: {e}", cgroup.display());
    }
    for _ in 0..50 {
        if std::fs::remove_dir(cgroup).is_ok() || !cgroup.exists() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tracing::warn!("cgroup {} did not empty", cgroup.display());
}

/// Whether any process is left in the cgroup.
pub fn is_populated(cgroup: &Path) -> bool {
    std::fs::read_to_string(cgroup.join("cgroup.procs"))
        .map(|s| !s.trim().is_empty())
        .unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn containers_are_below_the_node_below_the_lab() {
        let c = NodeCgroups::new(Path::new("/sys/fs/cgroup/unified"), "n1");
        assert_eq!(
            c.container("u1", "etcd"),
            PathBuf::from("/sys/fs/cgroup/unified/etcd-lab/node-n1/pod-u1-etcd")
        );
    }
}
