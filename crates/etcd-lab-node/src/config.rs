//! The node agent's configuration, written by `etcd-lab up` as JSON; read
//! by every part of the node (agent, pod workers, kubelet API).

use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};

use etcd_lab_common::{IoContext, IoError};
use serde::{Deserialize, Serialize};

/// Everything the node agent needs to play the kubelet of one lab node.
///
/// The CLI writes this as JSON and starts `etcd-lab node-agent --config FILE`
/// inside the node's network namespace `etcdlab-NODE`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AgentConfig {
    /// Node name (also the Node object's name).
    pub node_name: String,
    /// 1-based index of the node in the lab; its subnet is `10.244.<index>.0/24`.
    pub node_index: u8,
    /// Value of the `topology.kubernetes.io/zone` label.
    pub zone: String,
    /// The node's InternalIP, `10.244.<index>.2`.
    pub node_ip: Ipv4Addr,
    /// `$ETCD_LAB_DIR`.
    pub lab_dir: PathBuf,
    /// Kubeconfig with the node's client certificate
    /// (CN `system:node:NAME`, O `system:nodes`).
    pub kubeconfig: PathBuf,
    /// Serving certificate of the kubelet API on `node_ip:10250` (PEM).
    pub kubelet_cert: PathBuf,
    /// Private key of `kubelet_cert` (PEM).
    pub kubelet_key: PathBuf,
    /// The lab CA (PEM); also given to pods as `ca.crt` of service-account tokens.
    pub ca_cert: PathBuf,
    /// Cluster DNS address written into each pod's `resolv.conf`.
    #[serde(default = "default_dns_ip")]
    pub dns_ip: Ipv4Addr,
    /// Cluster domain, `cluster.local`.
    #[serde(default = "default_cluster_domain")]
    pub cluster_domain: String,
    /// Image catalog: exact etcd version (e.g. `3.6.5`) -> directory holding
    /// `etcd`, `etcdctl` and `etcdutl`.
    pub etcd_images: BTreeMap<String, PathBuf>,
    /// The `etcd-operator` binary served for `*/etcd-operator` images.
    pub etcd_operator_binary: PathBuf,
    /// The `etcd-lab` binary, spawned as `etcd-lab run-container --spec FILE`.
    pub etcd_lab_binary: PathBuf,
    /// The lab's image registry. When set, images are pulled from it and
    /// containers run in their image's root filesystem; when absent (the
    /// lab found no images), images map to files of this machine.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub registry: Option<RegistryConfig>,
    /// Capacity reported in the Node status.
    #[serde(default)]
    pub capacity: NodeCapacity,
    /// Root of the cgroup2 hierarchy to use; detected when absent
    /// (`/sys/fs/cgroup` or `/sys/fs/cgroup/unified` when it is cgroup2,
    /// else the first cgroup2 mount).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cgroup_root: Option<PathBuf>,
}

/// Where images come from and where they are unpacked.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RegistryConfig {
    /// `HOST:PORT` of the registry (plain HTTP, on the lab's host address).
    pub address: String,
    /// The `crane` binary that speaks to it.
    pub crane: PathBuf,
    /// Directory of unpacked images, by digest (shared by the lab's nodes).
    pub store: PathBuf,
}

/// Capacity (= allocatable) reported by the node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeCapacity {
    /// CPU quantity, e.g. `4`.
    pub cpu: String,
    /// Memory quantity, e.g. `8Gi`.
    pub memory: String,
    /// Maximum number of pods.
    pub pods: u32,
}

impl Default for NodeCapacity {
    fn default() -> Self {
        Self {
            cpu: "4".into(),
            memory: "8Gi".into(),
            pods: 110,
        }
    }
}

fn default_dns_ip() -> Ipv4Addr {
    Ipv4Addr::new(10, 244, 0, 1)
}

fn default_cluster_domain() -> String {
    "cluster.local".into()
}

impl AgentConfig {
    /// Reads a JSON config file.
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path)
            .context(|| format!("read agent config {}", path.display()))?;
        serde_json::from_str(&text).map_err(|source| ConfigError::Parse {
            path: path.to_owned(),
            source,
        })
    }

    /// `LAB_DIR/logs/nodes/NODE`.
    pub fn node_log_dir(&self) -> PathBuf {
        self.lab_dir.join("logs/nodes").join(&self.node_name)
    }

    /// `LAB_DIR/nodes/NODE`: the node's disk.
    pub fn node_dir(&self) -> PathBuf {
        self.lab_dir.join("nodes").join(&self.node_name)
    }

    /// `LAB_DIR/nodes/NODE/pods`: per-pod state (emptyDirs, specs, hosts files).
    pub fn pods_dir(&self) -> PathBuf {
        self.node_dir().join("pods")
    }

    /// `LAB_DIR/network-volumes`: the directories CSI volume handles point into.
    pub fn network_volumes_dir(&self) -> PathBuf {
        self.lab_dir.join("network-volumes")
    }
}

/// Errors while loading an [`AgentConfig`].
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error(transparent)]
    Io(#[from] IoError),
    #[error("invalid agent config {path}: {source}")]
    Parse {
        path: PathBuf,
        source: serde_json::Error,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_through_json_with_defaults() {
        let json = r#"{
            "nodeName": "n1", "nodeIndex": 1, "zone": "z1", "nodeIp": "10.244.1.2",
            "labDir": "/var/lib/etcd-lab", "kubeconfig": "/k", "kubeletCert": "/c",
            "kubeletKey": "/k2", "caCert": "/ca", "etcdImages": {"3.6.5": "/e"},
            "etcdOperatorBinary": "/op", "etcdLabBinary": "/lab"
        }"#;
        let config: AgentConfig = serde_json::from_str(json).expect("parse");
        assert_eq!(config.dns_ip, Ipv4Addr::new(10, 244, 0, 1));
        assert_eq!(config.cluster_domain, "cluster.local");
        assert_eq!(config.capacity.pods, 110);
        let back: AgentConfig =
            serde_json::from_str(&serde_json::to_string(&config).expect("ser")).expect("parse");
        assert_eq!(back, config);
    }
}
