//! Service proxy: ClusterIP DNAT in the router namespace with nftables.

mod cidr;

pub use cidr::Ipv4Cidr;

/// Why the service proxy stopped.
#[derive(Debug, thiserror::Error)]
pub enum ProxyError {
    #[error("invalid CIDR {0:?}")]
    InvalidCidr(String),
}

/// Keeps table `ip etcdlab-services` in `router_netns` in line with the
/// Services and EndpointSlices.
pub async fn run(
    client: kube::Client,
    router_netns: String,
    service_cidr: Ipv4Cidr,
) -> Result<(), ProxyError> {
    let _ = (client, router_netns, service_cidr);
    std::future::pending().await
}
