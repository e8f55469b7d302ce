//! A pod's sandbox: address, network namespace, hosts and resolv.conf files.

use std::collections::BTreeSet;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};

use etcd_lab_common::{IoContext, IoError};
use k8s_openapi::api::core::v1::Pod;

use crate::config::AgentConfig;
use crate::network::{self, addressing};

use super::dns;

/// A ready sandbox.
#[derive(Debug, Clone)]
pub struct Sandbox {
    pub ip: Ipv4Addr,
    pub netns: String,
    pub hosts_file: PathBuf,
    pub resolv_conf: PathBuf,
}

/// Errors while creating a sandbox.
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    #[error("network: {0}")]
    Network(#[from] network::NetworkError),
    #[error(transparent)]
    Io(#[from] IoError),
    #[error("no free pod address left on this node")]
    NoAddress,
}

/// Addresses recorded by the node's pods (`pods/<uid>/ip`).
fn used_addresses(pods_dir: &Path, except: &str) -> BTreeSet<Ipv4Addr> {
    let mut used = BTreeSet::new();
    if let Ok(entries) = std::fs::read_dir(pods_dir) {
        for entry in entries.flatten() {
            if entry.file_name().to_string_lossy() == except {
                continue;
            }
            if let Ok(text) = std::fs::read_to_string(entry.path().join("ip"))
                && let Ok(ip) = text.trim().parse()
            {
                used.insert(ip);
            }
        }
    }
    used
}

/// Creates (or re-creates, after a node restart) the pod's sandbox. The
/// address recorded in `pod_dir/ip` is kept across restarts.
pub fn create(
    config: &AgentConfig,
    pod: &Pod,
    uid: &str,
    pod_dir: &Path,
) -> Result<Sandbox, SandboxError> {
    std::fs::create_dir_all(pod_dir).context(|| format!("create {}", pod_dir.display()))?;
    let ip_file = pod_dir.join("ip");
    let recorded: Option<Ipv4Addr> = std::fs::read_to_string(&ip_file)
        .ok()
        .and_then(|t| t.trim().parse().ok())
        .filter(|ip| addressing::is_pod_ip_of(config.node_index, *ip));
    let ip = match recorded {
        Some(ip) => ip,
        None => {
            let used = used_addresses(&config.pods_dir(), uid);
            let ip = addressing::allocate_pod_ip(config.node_index, &used)
                .ok_or(SandboxError::NoAddress)?;
            std::fs::write(&ip_file, ip.to_string())
                .context(|| format!("write {}", ip_file.display()))?;
            ip
        }
    };
    let netns = network::setup_pod(uid, config.node_index, ip)?;
    let namespace = pod.metadata.namespace.as_deref().unwrap_or("default");
    let hosts_file = pod_dir.join("hosts");
    std::fs::write(
        &hosts_file,
        dns::hosts_file(pod, ip, &config.cluster_domain),
    )
    .context(|| format!("write {}", hosts_file.display()))?;
    let resolv_conf = pod_dir.join("resolv.conf");
    std::fs::write(
        &resolv_conf,
        dns::resolv_conf(namespace, config.dns_ip, &config.cluster_domain),
    )
    .context(|| format!("write {}", resolv_conf.display()))?;
    Ok(Sandbox {
        ip,
        netns,
        hosts_file,
        resolv_conf,
    })
}

/// Removes the pod's network namespace.
pub fn destroy(uid: &str) {
    network::teardown_pod(uid);
}
