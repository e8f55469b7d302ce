//! Cluster services of etcd-lab, run as one process (`etcd-lab services`) in
//! the host network namespace:
//!
//! - [`storage`]: StorageClasses `lab-network` and `lab-local`, a dynamic
//!   provisioner, the attacher of `network.etcd-lab.dev`, reclaim and
//!   expansion;
//! - [`dns`]: an authoritative DNS server for the cluster domain, built from
//!   Services, EndpointSlices and Pods;
//! - [`proxy`]: ClusterIP load balancing with nftables in the router
//!   namespace, as kube-proxy does;
//! - [`network_policy`]: ingress NetworkPolicy enforced with nftables in
//!   the router namespace, as a network plugin does.
#![forbid(unsafe_code)]

mod config;
pub mod dns;
mod error;
mod informer;
pub mod network_policy;
mod nft_table;
pub mod proxy;
mod service_endpoints;
pub mod storage;

pub use config::ServicesConfig;
pub use error::ServicesError;

use etcd_lab_common::IoContext;
use etcd_lab_common::kube_client::{self, Timeouts};
use tokio::signal::unix::{SignalKind, signal};

/// Runs the provisioner, the attacher, the DNS server, the service proxy
/// and the NetworkPolicy enforcement until SIGTERM or SIGINT. Returns an
/// error if any of them fails for good.
pub async fn run(config: ServicesConfig) -> Result<(), ServicesError> {
    let service_cidr: proxy::Ipv4Cidr = config
        .service_cidr
        .parse()
        .map_err(|e: proxy::ProxyError| ServicesError::InvalidConfig(e.to_string()))?;
    let client = kube_client::from_kubeconfig(&config.kubeconfig, Timeouts::WATCH).await?;
    let mut sigterm =
        signal(SignalKind::terminate()).context(|| "install the SIGTERM handler".into())?;
    let mut sigint =
        signal(SignalKind::interrupt()).context(|| "install the SIGINT handler".into())?;

    let storage = storage::run(client.clone(), config.lab_dir.clone());
    let dns = dns::run(
        client.clone(),
        config.dns_listen,
        config.cluster_domain.clone(),
    );
    let network_policy = network_policy::run(
        client.clone(),
        config.router_netns.clone(),
        config.lab_host_ip,
    );
    let proxy = proxy::run(client, config.router_netns.clone(), service_cidr);
    tracing::info!(dns = %config.dns_listen, netns = %config.router_netns, "cluster services starting");
    tokio::select! {
        result = storage => result?,
        result = dns => result?,
        result = proxy => result?,
        () = network_policy => tracing::warn!("network policy enforcement stopped"),
        _ = sigterm.recv() => tracing::info!("SIGTERM: stopping"),
        _ = sigint.recv() => tracing::info!("SIGINT: stopping"),
    }
    Ok(())
}
