//! Service proxy, as kube-proxy's nftables mode: ClusterIP:port DNAT to
//! ready endpoints in the router namespace, where all lab traffic between
//! the host, nodes and pods is routed. The rules are computed in
//! [`ruleset`] and loaded atomically by [`apply`].

mod apply;
mod cidr;
pub mod ruleset;

use std::sync::Arc;
use std::time::Duration;

use etcd_lab_common::IoError;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::Api;
use tokio::sync::Notify;

pub use cidr::Ipv4Cidr;

use crate::informer::reflect;

/// How long a burst of changes may last before the table is rewritten.
const DEBOUNCE: Duration = Duration::from_millis(200);
/// The table is rewritten at least this often, in case the router
/// namespace was recreated.
const RESYNC: Duration = Duration::from_secs(10);

/// Why the service proxy stopped or could not program a change.
#[derive(Debug, thiserror::Error)]
pub enum ProxyError {
    #[error("invalid CIDR {0:?}")]
    InvalidCidr(String),
    /// Running `nft` or feeding it the ruleset failed.
    #[error(transparent)]
    Io(#[from] IoError),
    #[error("nft in netns {netns} failed: {stderr}")]
    Nft { netns: String, stderr: String },
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
    let program = async {
        // Rules from a partial list would cut working Services: wait for
        // both initial lists.
        if services.wait_until_ready().await.is_err() || slices.wait_until_ready().await.is_err() {
            return;
        }
        let mut applied: Option<String> = None;
        let mut last_write = tokio::time::Instant::now();
        loop {
            let services = services.state();
            let slices = slices.state();
            let ports = ruleset::service_ports(
                &services.iter().map(AsRef::as_ref).collect::<Vec<_>>(),
                &slices.iter().map(AsRef::as_ref).collect::<Vec<_>>(),
                service_cidr,
            );
            let script = ruleset::ruleset(&ports);
            let stale = last_write.elapsed() >= RESYNC;
            if applied.as_deref() != Some(script.as_str()) || stale {
                match apply::load(&router_netns, &script).await {
                    Ok(()) => {
                        if applied.as_deref() != Some(script.as_str()) {
                            tracing::info!(ports = ports.len(), "service proxy: rules updated");
                        }
                        applied = Some(script);
                        last_write = tokio::time::Instant::now();
                    }
                    Err(e) => {
                        tracing::warn!("service proxy: {e}");
                        applied = None;
                    }
                }
            }
            let retry = if applied.is_some() {
                RESYNC
            } else {
                Duration::from_secs(1)
            };
            tokio::select! {
                () = changed.notified() => tokio::time::sleep(DEBOUNCE).await,
                () = tokio::time::sleep(retry) => {}
            }
        }
    };
    tokio::join!(services_driver, slices_driver, program);
    Ok(())
}
