//! Configuration of the `etcd-lab services` process.

use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};

use etcd_lab_common::IoContext;
use serde::{Deserialize, Serialize};

use crate::error::ServicesError;

/// Everything the services process needs, read from the JSON file given to
/// `etcd-lab services --config FILE`.
///
/// Only `kubeconfig` and `lab_dir` are required; the other fields default to
/// the lab's fixed layout (see `docs/architecture.md`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServicesConfig {
    /// Admin kubeconfig of the lab's API server.
    pub kubeconfig: PathBuf,
    /// `$ETCD_LAB_DIR`: volumes live under `network-volumes/` and
    /// `nodes/<node>/volumes/`.
    pub lab_dir: PathBuf,
    /// Where the cluster DNS server listens (UDP and TCP).
    #[serde(default = "default_dns_listen")]
    pub dns_listen: SocketAddr,
    /// The cluster domain served by the DNS server.
    #[serde(default = "default_cluster_domain")]
    pub cluster_domain: String,
    /// Network namespace of the lab router, where the service proxy programs
    /// nftables.
    #[serde(default = "default_router_netns")]
    pub router_netns: String,
    /// The Service ClusterIP range (`--service-cluster-ip-range` of the API
    /// server); the proxy only programs ClusterIPs inside it.
    #[serde(default = "default_service_cidr")]
    pub service_cidr: String,
    /// The lab host's address on the lab network (the API server's
    /// advertise address): NetworkPolicies do not judge its traffic, as a
    /// network plugin lets a node's own traffic through.
    #[serde(default = "default_lab_host_ip")]
    pub lab_host_ip: Ipv4Addr,
}

fn default_dns_listen() -> SocketAddr {
    SocketAddr::from(([10, 244, 0, 1], 53))
}

fn default_cluster_domain() -> String {
    "cluster.local".to_owned()
}

fn default_router_netns() -> String {
    "etcdlab-router".to_owned()
}

fn default_service_cidr() -> String {
    "10.96.0.0/16".to_owned()
}

fn default_lab_host_ip() -> Ipv4Addr {
    Ipv4Addr::new(10, 244, 0, 1)
}

impl ServicesConfig {
    /// A configuration with the lab's defaults for everything but the paths.
    pub fn new(kubeconfig: impl Into<PathBuf>, lab_dir: impl Into<PathBuf>) -> Self {
        Self {
            kubeconfig: kubeconfig.into(),
            lab_dir: lab_dir.into(),
            dns_listen: default_dns_listen(),
            cluster_domain: default_cluster_domain(),
            router_netns: default_router_netns(),
            service_cidr: default_service_cidr(),
            lab_host_ip: default_lab_host_ip(),
        }
    }

    /// Reads a configuration from a JSON file.
    pub fn from_file(path: &Path) -> Result<Self, ServicesError> {
        let text =
            std::fs::read_to_string(path).context(|| format!("read config {}", path.display()))?;
        serde_json::from_str(&text).map_err(|source| ServicesError::ParseConfig {
            path: path.to_owned(),
            source,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_fill_missing_fields() {
        let config: ServicesConfig = serde_json::from_str(
            r#"{"kubeconfig": "/var/lib/etcd-lab/kubeconfig", "lab_dir": "/var/lib/etcd-lab"}"#,
        )
        .unwrap();
        assert_eq!(
            config,
            ServicesConfig::new("/var/lib/etcd-lab/kubeconfig", "/var/lib/etcd-lab")
        );
        assert_eq!(config.dns_listen.to_string(), "10.244.0.1:53");
    }
}
