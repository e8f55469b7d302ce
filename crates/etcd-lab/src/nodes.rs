//! Lab nodes: their network namespaces and their agents (`etcd-lab node-agent`).

use std::path::Path;

use etcd_lab_common::IoContext;
use etcd_lab_node::agent::{AgentConfig, NodeCapacity};
use etcd_lab_node::config::RegistryConfig;
use etcd_lab_node::network::{self, addressing};

use crate::cgroup::LabCgroups;
use crate::config::{LabConfig, NodeConfig};
use crate::error::{LabError, Result};
use crate::kubeconfig;
use crate::paths::LabPaths;
use crate::pki::{Pki, write_file};
use crate::process::{self, ProcessSpec};
use crate::upstream::Binaries;

/// DNS search path of the client namespace (`etcd-lab exec`).
pub const CLIENT_DNS_SEARCH: &str = "default.svc.cluster.local svc.cluster.local cluster.local";

/// Process name of a node's agent (log and pid file).
pub fn agent_name(node: &str) -> String {
    format!("node-agent-{node}")
}

/// The agent's cgroup below `etcd-lab/`; the node's pods go beside it.
pub fn agent_cgroup(node: &str) -> String {
    format!("node-{node}/agent")
}

/// The router, one namespace per node and the client namespace.
pub fn setup_network(config: &LabConfig) -> Result<()> {
    network::setup_router().map_err(|e| LabError::Network(e.to_string()))?;
    for node in &config.nodes {
        network::setup_node(&node.name, node.index)
            .map_err(|e| LabError::Network(format!("node {}: {e}", node.name)))?;
    }
    network::setup_client(CLIENT_DNS_SEARCH).map_err(|e| LabError::Network(e.to_string()))
}

/// Writes the node's credentials and agent configuration, then starts its
/// agent inside the node's network namespace.
pub fn start_agent(
    paths: &LabPaths,
    pki: &Pki,
    cgroups: &LabCgroups,
    binaries: &Binaries,
    etcd_lab_binary: &Path,
    registry: Option<&RegistryConfig>,
    node: &NodeConfig,
) -> Result<i32> {
    let node_ip = addressing::node_ip(node.index);
    pki.ensure_node(&node.name, node_ip)?;
    let node_kubeconfig = paths.kubeconfigs().join(&node.name);
    // The agent lives in the node's namespace: it reaches the API server
    // through the router, at the API server's lab address.
    kubeconfig::write(
        &node_kubeconfig,
        kubeconfig::SERVER_LAB,
        &pki.ca().cert,
        &format!("system:node:{}", node.name),
        &pki.node_client(&node.name),
    )?;
    let serving = pki.kubelet_serving(&node.name);
    let agent = AgentConfig {
        node_name: node.name.clone(),
        node_index: node.index,
        zone: node.zone.clone(),
        node_ip,
        lab_dir: paths.root().to_owned(),
        kubeconfig: node_kubeconfig,
        kubelet_cert: serving.cert,
        kubelet_key: serving.key,
        ca_cert: pki.ca().cert,
        dns_ip: addressing::HOST_IP,
        cluster_domain: "cluster.local".into(),
        etcd_images: binaries.etcd_images.clone(),
        etcd_operator_binary: etcd_lab_binary.with_file_name("etcd-operator"),
        etcd_lab_binary: etcd_lab_binary.to_owned(),
        registry: registry.cloned(),
        capacity: NodeCapacity::default(),
        cgroup_root: Some(cgroups.hierarchy_root().to_owned()),
    };
    let config_path = paths
        .configs()
        .join("nodes")
        .join(format!("{}.json", node.name));
    let text = serde_json::to_string_pretty(&agent).map_err(|source| LabError::Json {
        path: config_path.clone(),
        source,
    })?;
    write_file(&config_path, text.as_bytes(), 0o644)?;
    std::fs::create_dir_all(paths.node_dir(&node.name))
        .context(|| format!("create node dir of {}", node.name))?;
    let name = agent_name(&node.name);
    let spec = ProcessSpec {
        name: name.clone(),
        program: etcd_lab_binary.to_owned(),
        args: vec!["node-agent".into(), "--config".into(), config_path.into()],
        log: paths.log(&name),
        pid_file: paths.pid_file(&name),
        cgroup: agent_cgroup(&node.name),
        netns: Some(addressing::node_netns_name(&node.name)),
        restart_on_exit: false,
    };
    process::spawn(&spec, cgroups)
}
