//! Fault injection: what real failures do to processes, disks and traffic.
//! Nothing here edits Kubernetes objects that a real failure would not
//! edit; the upstream controllers do the reacting.

use std::path::{Path, PathBuf};
use std::time::Duration;

use etcd_lab_common::IoContext;
use etcd_lab_node::network::{self, PartitionKind, addressing};
use etcd_lab_node::volume::disk;
use k8s_openapi::api::core::v1::{Node, PersistentVolume, PersistentVolumeClaim, Pod};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use tracing::info;

use crate::config::{NodeConfig, node_name, zone_name};
use crate::controlplane::{Component, ControlPlane};
use crate::error::{LabError, Result};
use crate::lab::Lab;
use crate::nodes;
use crate::pki::Pki;
use crate::process;
use crate::upstream::Binaries;

/// The out-of-service taint an administrator sets after a non-graceful shutdown.
pub const OUT_OF_SERVICE_TAINT: &str = "node.kubernetes.io/out-of-service";

impl Lab {
    fn node_or_error(&self, name: &str) -> Result<NodeConfig> {
        self.config()
            .node(name)
            .cloned()
            .ok_or_else(|| LabError::Invalid(format!("the lab has no node {name}")))
    }

    /// `<cgroup2>/etcd-lab/node-NODE`: the agent and every container of the node.
    fn node_cgroup(&self, name: &str) -> PathBuf {
        self.cgroups().group(&format!("node-{name}"))
    }

    /// Power loss: every process of the node (agent and containers) is
    /// SIGKILLed at once; disks stay.
    pub fn node_stop(&self, name: &str) -> Result<()> {
        self.node_or_error(name)?;
        kill_cgroup(&self.node_cgroup(name))?;
        let _ = std::fs::remove_file(self.paths().pid_file(&nodes::agent_name(name)));
        info!(node = name, "node stopped");
        Ok(())
    }

    /// Power back: the agent starts again and finds the pods still bound to it.
    pub fn node_start(&self, name: &str) -> Result<()> {
        let node = self.node_or_error(name)?;
        let agent = nodes::agent_name(name);
        if process::running(
            &self.paths().pid_file(&agent),
            self.cgroups(),
            &nodes::agent_cgroup(name),
        )
        .is_some()
        {
            return Err(LabError::Invalid(format!("node {name} is running")));
        }
        // Containers of the node died with the power; none may survive a start.
        kill_cgroup(&self.node_cgroup(name))?;
        self.start_agent(&node)?;
        info!(node = name, "node started");
        Ok(())
    }

    /// Stop, stay down for `down_for`, start.
    pub async fn node_reboot(&self, name: &str, down_for: Duration) -> Result<()> {
        self.node_stop(name)?;
        tokio::time::sleep(down_for).await;
        self.node_start(name)
    }

    /// A hung machine: every process of the node is SIGSTOPped (heartbeats pause).
    pub fn node_freeze(&self, name: &str) -> Result<()> {
        self.node_or_error(name)?;
        let group = self.node_cgroup(name);
        // Freeze the group first so no process forks past the signals.
        set_frozen(&group, true)?;
        for pid in pids_in(&group) {
            let _ = kill(Pid::from_raw(pid), Signal::SIGSTOP);
        }
        set_frozen(&group, false)?;
        // The stops take effect as each process is scheduled again.
        for _ in 0..200 {
            if pids_in(&group).iter().all(|pid| stopped(*pid)) {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        info!(node = name, "node frozen");
        Ok(())
    }

    /// The hung machine resumes.
    pub fn node_thaw(&self, name: &str) -> Result<()> {
        self.node_or_error(name)?;
        for pid in pids_in(&self.node_cgroup(name)) {
            let _ = kill(Pid::from_raw(pid), Signal::SIGCONT);
        }
        info!(node = name, "node thawed");
        Ok(())
    }

    /// Drops the node's traffic (dropped packets in the router's firewall).
    pub fn node_partition(&self, name: &str, from: PartitionKind) -> Result<()> {
        let node = self.node_or_error(name)?;
        network::partition_node(node.index, from).map_err(|e| LabError::Network(e.to_string()))
    }

    /// Removes every partition of the node.
    pub fn node_heal(&self, name: &str) -> Result<()> {
        let node = self.node_or_error(name)?;
        network::heal_node(node.index).map_err(|e| LabError::Network(e.to_string()))
    }

    /// The machine is gone for good: processes killed, its network and
    /// local volumes destroyed, its Node object deleted.
    pub async fn node_delete(&mut self, name: &str) -> Result<()> {
        let node = self.node_or_error(name)?;
        let group = self.node_cgroup(name);
        kill_cgroup(&group)?;
        remove_cgroup_tree(&group);
        let _ = std::fs::remove_file(self.paths().pid_file(&nodes::agent_name(name)));
        let client = self.kube_client().await?;
        let pods: Api<Pod> = Api::all(client.clone());
        let on_node = pods
            .list(&ListParams::default().fields(&format!("spec.nodeName={name}")))
            .await?;
        for pod in on_node.items {
            if let Some(uid) = pod.metadata.uid {
                network::teardown_pod(&uid);
            }
        }
        network::teardown_node(name, node.index);
        let disk = self.paths().node_dir(name);
        if disk.exists() {
            // The node's pods lose their volumes: network volumes no pod
            // elsewhere has mounted are released with them.
            let released = disk::unmount_pod_volumes(&disk.join("pods"));
            // Its local volumes go with the machine: every mount cut, loop
            // device detached, image removed. (Deleting the Node object
            // alone, with the machine alive, leaves them as they are.)
            let destroyed = destroy_local_volumes(&disk.join("volumes"));
            crate::teardown::unmount_under(&disk)?;
            released?;
            destroyed?;
            std::fs::remove_dir_all(&disk).context(|| format!("remove {}", disk.display()))?;
        }
        let nodes: Api<Node> = Api::all(client);
        match nodes.delete(name, &DeleteParams::default()).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(e) => return Err(e.into()),
        }
        let mut config = self.config().clone();
        config.nodes.retain(|n| n.name != name);
        config.save(&self.paths().config_json())?;
        self.set_config(config);
        info!(node = name, "node deleted");
        Ok(())
    }

    /// A new, empty node (next free index; zone round robin unless given).
    pub fn node_add(&mut self, name: Option<&str>, zone: Option<&str>) -> Result<NodeConfig> {
        let mut config = self.config().clone();
        let index = config.nodes.iter().map(|n| n.index).max().unwrap_or(0) + 1;
        if !addressing::valid_node_index(index) {
            return Err(LabError::Invalid(format!("no free node index ({index})")));
        }
        let name = name.map_or_else(|| node_name(index), str::to_owned);
        if config.node(&name).is_some() {
            return Err(LabError::Invalid(format!("node {name} exists")));
        }
        let node = NodeConfig {
            name,
            index,
            zone: zone.map_or_else(|| zone_name((index - 1) % config.zones), str::to_owned),
        };
        network::setup_node(&node.name, node.index)
            .map_err(|e| LabError::Network(format!("node {}: {e}", node.name)))?;
        config.nodes.push(node.clone());
        config.save(&self.paths().config_json())?;
        self.set_config(config);
        self.start_agent(&node)?;
        info!(node = node.name, "node added");
        Ok(node)
    }

    /// Sets `node.kubernetes.io/out-of-service=nodeshutdown:NoExecute`, as an
    /// administrator does after a non-graceful shutdown.
    pub async fn node_taint_out_of_service(&self, name: &str) -> Result<()> {
        let nodes: Api<Node> = Api::all(self.kube_client().await?);
        let node = nodes.get(name).await?;
        let mut taints = node.spec.and_then(|s| s.taints).unwrap_or_default();
        if taints.iter().any(|t| t.key == OUT_OF_SERVICE_TAINT) {
            return Ok(());
        }
        taints.push(k8s_openapi::api::core::v1::Taint {
            key: OUT_OF_SERVICE_TAINT.into(),
            value: Some("nodeshutdown".into()),
            effect: "NoExecute".into(),
            time_added: None,
        });
        let patch = serde_json::json!({ "spec": { "taints": taints } });
        nodes
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await?;
        Ok(())
    }

    /// The data directory of a PVC's volume: where its filesystem is
    /// mounted while pods use it.
    pub async fn volume_dir(&self, namespace: &str, claim: &str) -> Result<PathBuf> {
        let client = self.kube_client().await?;
        let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), namespace);
        let pvc = claims.get(claim).await?;
        let volume = pvc
            .spec
            .and_then(|s| s.volume_name)
            .filter(|v| !v.is_empty())
            .ok_or_else(|| LabError::Invalid(format!("PVC {namespace}/{claim} is not bound")))?;
        let pv = Api::<PersistentVolume>::all(client).get(&volume).await?;
        let spec = pv
            .spec
            .ok_or_else(|| LabError::Invalid(format!("PV {volume} has no spec")))?;
        if let Some(local) = spec.local {
            return Ok(PathBuf::from(local.path));
        }
        if let Some(csi) = spec.csi {
            let handle = PathBuf::from(&csi.volume_handle);
            return Ok(if handle.is_absolute() {
                handle
            } else {
                self.paths().network_volumes().join(handle)
            });
        }
        Err(LabError::Invalid(format!(
            "PV {volume} is neither a lab-local nor a lab-network volume"
        )))
    }

    /// A lost or replaced disk: the volume's data is emptied, in use or not
    /// (a volume no pod uses is mounted for the time of the wipe).
    pub async fn volume_wipe(&self, namespace: &str, claim: &str) -> Result<PathBuf> {
        let dir = self.volume_dir(namespace, claim).await?;
        on_volume_files(&dir, wipe).await?;
        Ok(dir)
    }

    /// Flips bytes of one file of the volume: the largest whose path contains
    /// `pattern` (any file when `None`). Returns the file.
    pub async fn volume_corrupt(
        &self,
        namespace: &str,
        claim: &str,
        pattern: Option<&str>,
    ) -> Result<PathBuf> {
        let dir = self.volume_dir(namespace, claim).await?;
        let pattern = pattern.map(str::to_owned);
        on_volume_files(&dir, move |dir| corrupt(dir, pattern.as_deref())).await
    }

    /// An OOM kill: SIGKILL to a container's processes (the first container
    /// when `None`); the pod's restartPolicy decides what follows.
    pub async fn pod_kill(
        &self,
        namespace: &str,
        pod: &str,
        container: Option<&str>,
    ) -> Result<usize> {
        let pods: Api<Pod> = Api::namespaced(self.kube_client().await?, namespace);
        let object = pods.get(pod).await?;
        let uid = object.metadata.uid.unwrap_or_default();
        let spec = object
            .spec
            .ok_or_else(|| LabError::Invalid(format!("pod {namespace}/{pod} has no spec")))?;
        let node = spec
            .node_name
            .ok_or_else(|| LabError::Invalid(format!("pod {namespace}/{pod} is not scheduled")))?;
        let container = match container {
            Some(c) => c.to_owned(),
            None => spec
                .containers
                .first()
                .map(|c| c.name.clone())
                .unwrap_or_default(),
        };
        let group = self
            .node_cgroup(&node)
            .join(format!("pod-{uid}-{container}"));
        let pids = pids_in(&group);
        if pids.is_empty() {
            return Err(LabError::Invalid(format!(
                "container {container} of pod {namespace}/{pod} runs no process ({})",
                group.display()
            )));
        }
        for pid in &pids {
            let _ = kill(Pid::from_raw(*pid), Signal::SIGKILL);
        }
        Ok(pids.len())
    }

    /// The control plane's API server goes away (running pods keep running).
    pub fn apiserver_stop(&self) -> Result<()> {
        let component = Component::ApiServer;
        if let Some(pid) = process::running(
            &self.paths().pid_file(component.name()),
            self.cgroups(),
            &component.cgroup(),
        ) {
            process::stop(pid, Duration::from_secs(10));
        }
        Ok(())
    }

    /// The API server comes back.
    pub async fn apiserver_start(&self) -> Result<()> {
        let binaries = Binaries::locate()?;
        let pki = Pki::ensure(&self.paths().pki())?;
        let control_plane = ControlPlane {
            paths: self.paths(),
            pki: &pki,
            binaries: &binaries,
            cgroups: self.cgroups(),
            controller_manager_flags: &self.config().controller_manager_flags,
        };
        control_plane
            .start(Component::ApiServer, Duration::from_secs(120))
            .await?;
        Ok(())
    }

    fn start_agent(&self, node: &NodeConfig) -> Result<i32> {
        let binaries = Binaries::locate()?;
        let pki = Pki::ensure(&self.paths().pki())?;
        let etcd_lab_binary = match &self.config().etcd_lab_binary {
            Some(path) => path.clone(),
            None => std::env::current_exe().context(|| "locate the etcd-lab binary".into())?,
        };
        nodes::start_agent(
            self.paths(),
            &pki,
            self.cgroups(),
            &binaries,
            &etcd_lab_binary,
            self.config().registry.as_ref(),
            node,
        )
    }
}

fn kill_cgroup(group: &Path) -> Result<()> {
    if !group.exists() {
        return Ok(());
    }
    // Thaw first: a frozen or stopped process dies only once it runs.
    let _ = set_frozen(group, false);
    let kill_file = group.join("cgroup.kill");
    std::fs::write(&kill_file, "1").context(|| format!("write {}", kill_file.display()))?;
    for pid in pids_in(group) {
        let _ = kill(Pid::from_raw(pid), Signal::SIGCONT);
    }
    for _ in 0..200 {
        if pids_in(group).is_empty() {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(25));
    }
    Err(LabError::Timeout(format!(
        "processes of {} survived SIGKILL",
        group.display()
    )))
}

fn remove_cgroup_tree(group: &Path) {
    if let Ok(entries) = std::fs::read_dir(group) {
        for entry in entries.flatten() {
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                remove_cgroup_tree(&entry.path());
            }
        }
    }
    let _ = std::fs::remove_dir(group);
}

fn set_frozen(group: &Path, frozen: bool) -> Result<()> {
    let file = group.join("cgroup.freeze");
    if !file.exists() {
        return Ok(());
    }
    std::fs::write(&file, if frozen { "1" } else { "0" })
        .context(|| format!("write {}", file.display()))?;
    Ok(())
}

/// Whether a process is stopped by a signal (state `T`) or gone.
fn stopped(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .is_none_or(|state| state == "T" || state == "Z"),
        Err(_) => true,
    }
}

/// Every pid in a cgroup and its children.
fn pids_in(group: &Path) -> Vec<i32> {
    let mut pids = Vec::new();
    if let Ok(text) = std::fs::read_to_string(group.join("cgroup.procs")) {
        pids.extend(text.lines().filter_map(|l| l.trim().parse::<i32>().ok()));
    }
    if let Ok(entries) = std::fs::read_dir(group) {
        for entry in entries.flatten() {
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                pids.extend(pids_in(&entry.path()));
            }
        }
    }
    pids
}

/// Runs `f` on the files of the volume at `dir`, on a blocking thread: in
/// place while pods have the volume mounted, else with the volume mounted
/// for the time of `f`.
pub(crate) async fn on_volume_files<T: Send + 'static>(
    dir: &Path,
    f: impl FnOnce(&Path) -> Result<T> + Send + 'static,
) -> Result<T> {
    let on = dir.to_owned();
    tokio::task::spawn_blocking(move || disk::with_mounted(&on, f))
        .await
        .map_err(|e| LabError::Invalid(format!("volume {}: {e}", dir.display())))??
}

/// Removes everything in the volume at `dir`.
fn wipe(dir: &Path) -> Result<()> {
    let entries = std::fs::read_dir(dir).context(|| format!("read volume {}", dir.display()))?;
    for entry in entries.flatten() {
        let path = entry.path();
        let removed = if entry.file_type().is_ok_and(|t| t.is_dir()) {
            std::fs::remove_dir_all(&path)
        } else {
            std::fs::remove_file(&path)
        };
        removed.context(|| format!("remove {}", path.display()))?;
    }
    Ok(())
}

/// Flips bytes of the largest non-empty file under `dir` whose path
/// contains `pattern` (any file when `None`); returns the file.
fn corrupt(dir: &Path, pattern: Option<&str>) -> Result<PathBuf> {
    let mut files = Vec::new();
    collect_files(dir, &mut files);
    let target = files
        .into_iter()
        .filter(|(path, len)| {
            *len > 0 && pattern.is_none_or(|p| path.to_string_lossy().contains(p))
        })
        .max_by_key(|(_, len)| *len)
        .map(|(path, _)| path)
        .ok_or_else(|| {
            LabError::Invalid(format!(
                "no non-empty file{} in {}",
                pattern
                    .map(|p| format!(" matching {p:?}"))
                    .unwrap_or_default(),
                dir.display()
            ))
        })?;
    flip_bytes(&target)?;
    Ok(target)
}

fn collect_files(dir: &Path, files: &mut Vec<(PathBuf, u64)>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let Ok(meta) = entry.metadata() else { continue };
        if meta.is_dir() {
            collect_files(&entry.path(), files);
        } else if meta.is_file() {
            files.push((entry.path(), meta.len()));
        }
    }
}

/// Inverts 16 bytes spread over the file (a damaged disk, not a truncation).
/// Each byte is written in place, so a process that has the file mapped
/// (etcd's database) sees the damage as a failing disk would show it,
/// without the file ever being shorter.
fn flip_bytes(path: &Path) -> Result<()> {
    use std::os::unix::fs::FileExt;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .context(|| format!("open {}", path.display()))?;
    let len = file
        .metadata()
        .context(|| format!("stat {}", path.display()))?
        .len();
    for i in 0..16u64 {
        let at = ((len / 17) * (i + 1)).min(len.saturating_sub(1));
        let mut byte = [0u8; 1];
        file.read_exact_at(&mut byte, at)
            .context(|| format!("read {}", path.display()))?;
        file.write_all_at(&[!byte[0]], at)
            .context(|| format!("write {}", path.display()))?;
    }
    file.sync_all()
        .context(|| format!("sync {}", path.display()))?;
    Ok(())
}

/// Parses `peers`, `apiserver` or `all`.
pub fn parse_partition(kind: &str) -> Result<PartitionKind> {
    kind.parse()
        .map_err(|e: network::NetworkError| LabError::Invalid(e.to_string()))
}

/// Destroys every local volume in a node's volume directory (each a
/// directory with its image beside it).
fn destroy_local_volumes(volumes: &Path) -> Result<()> {
    let Ok(entries) = std::fs::read_dir(volumes) else {
        return Ok(());
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            disk::destroy(&path)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn corruption_changes_bytes_but_not_length() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("db");
        std::fs::write(&file, vec![0u8; 4096]).unwrap();
        flip_bytes(&file).unwrap();
        let after = std::fs::read(&file).unwrap();
        assert_eq!(after.len(), 4096);
        assert_eq!(after.iter().filter(|b| **b == 0xff).count(), 16);
    }
}
