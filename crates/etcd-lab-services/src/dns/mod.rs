//! Cluster DNS: an authoritative server for the cluster domain whose
//! records come from the real Services, EndpointSlices and Pods
//! ([`records`]), served over UDP and TCP ([`server`]) and refreshed from
//! kube-rs reflectors ([`watch`]). Names outside the cluster domain are
//! refused: the server never forwards.

pub mod records;
pub mod server;
mod watch;

use std::net::SocketAddr;
use std::sync::Arc;

use etcd_lab_common::{IoContext, IoError};
use records::RecordTable;

/// Why the DNS server stopped: binding or serving its address failed.
#[derive(Debug, thiserror::Error)]
pub enum DnsError {
    #[error(transparent)]
    Io(#[from] IoError),
}

/// Serves the cluster domain on `listen` (UDP and TCP) from Services,
/// EndpointSlices and Pods, until a socket fails.
pub async fn run(
    client: kube::Client,
    listen: SocketAddr,
    cluster_domain: String,
) -> Result<(), DnsError> {
    let (udp, tcp) = bind_when_available(listen).await?;
    let (sender, receiver) =
        tokio::sync::watch::channel(Arc::new(RecordTable::new(&cluster_domain)));
    tracing::info!(%listen, domain = %cluster_domain, "dns: serving");
    let serving = || format!("serve {listen}");
    tokio::select! {
        () = watch::run(client, cluster_domain, sender) => Ok(()),
        result = server::serve_udp(udp, receiver.clone()) => Ok(result.context(serving)?),
        result = server::serve_tcp(tcp, receiver) => Ok(result.context(serving)?),
    }
}

/// Binds `listen`, waiting while its address does not exist yet (the lab
/// network creates `10.244.0.1` on the host side of the router uplink).
async fn bind_when_available(
    listen: SocketAddr,
) -> Result<(tokio::net::UdpSocket, tokio::net::TcpListener), DnsError> {
    let mut warned = false;
    loop {
        match server::bind(listen).await {
            Ok(sockets) => return Ok(sockets),
            Err(e) if e.kind() == std::io::ErrorKind::AddrNotAvailable => {
                if !warned {
                    tracing::warn!(%listen, "dns: address not available yet, waiting for the lab network");
                    warned = true;
                }
                tokio::time::sleep(std::time::Duration::from_secs(1)).await;
            }
            Err(source) => return Err(IoError::new(format!("bind {listen}"), source).into()),
        }
    }
}
