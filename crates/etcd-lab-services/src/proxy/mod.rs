//! Service proxy, as kube-proxy's nftables mode: ClusterIP:port DNAT to
//! ready endpoints in the router namespace, where all lab traffic between
//! the host, nodes and pods is routed. The rules are computed in
//! [`ruleset`] and loaded atomically by [`crate::nft_table`].

mod cidr;
pub mod ruleset;

use std::sync::Arc;

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::Api;
use tokio::sync::Notify;

pub use cidr::Ipv4Cidr;

use crate::informer::reflect;
use crate::nft_table::{self, Rendered};

/// Why the service proxy could not start.
#[derive(Debug, thiserror::Error)]
pub enum ProxyError {
    #[error("invalid CIDR {0:?}")]
    InvalidCidr(String),
}

/// Keeps table `ip etcdlab-services` in `router_netns` in line with the
/// Services and EndpointSlices, forever.
pub async fn run(
    client: kube::Client,
    router_netns: String,
    service_cidr: Ipv4Cidr,
) -> Result<(), ProxyError> {
    let changed = Arc::new(Notify::new());
    let (services, services_driver) = reflect(Api::<Service>::all(client.clone()), changed.clone());
    let (slices, slices_driver) = reflect(Api::<EndpointSlice>::all(client), changed.clone());
    let ready = async {
        services.wait_until_ready().await.is_ok() && slices.wait_until_ready().await.is_ok()
    };
    let program = nft_table::keep_loaded(&router_netns, "service proxy", &changed, ready, || {
        let services = services.state();
        let slices = slices.state();
        let ports = ruleset::service_ports(
            &services.iter().map(AsRef::as_ref).collect::<Vec<_>>(),
            &slices.iter().map(AsRef::as_ref).collect::<Vec<_>>(),
            service_cidr,
        );
        Rendered {
            script: ruleset::ruleset(&ports),
            summary: format!("{} ports", ports.len()),
        }
    });
    tokio::join!(services_driver, slices_driver, program);
    Ok(())
}
