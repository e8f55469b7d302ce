//! NetworkPolicy enforcement for ingress, as a network plugin does it:
//! the lab's NetworkPolicies, Pods and Namespaces are watched, the Pods
//! each policy isolates and what each lets in are computed in
//! [`ingress`] (from [`inventory`], with [`selector`]), and the table of
//! [`ruleset`] is loaded into the router namespace on every change.
//! Pods no policy selects accept everything. Egress is not enforced.

pub mod ingress;
pub mod inventory;
pub mod ruleset;
pub mod selector;

use std::net::Ipv4Addr;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Namespace, Pod};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::Api;
use tokio::sync::Notify;

use crate::informer::reflect;
use crate::nft_table::{self, Rendered};

/// Keeps table `inet etcdlab-policy` in `router_netns` in line with the
/// NetworkPolicies, Pods and Namespaces, forever; traffic from `lab_host`
/// is never judged.
pub async fn run(client: kube::Client, router_netns: String, lab_host: Ipv4Addr) {
    let changed = Arc::new(Notify::new());
    let (policies, policies_driver) =
        reflect(Api::<NetworkPolicy>::all(client.clone()), changed.clone());
    let (pods, pods_driver) = reflect(Api::<Pod>::all(client.clone()), changed.clone());
    let (namespaces, namespaces_driver) = reflect(Api::<Namespace>::all(client), changed.clone());
    let ready = async {
        let (p, q, n) = futures::join!(
            policies.wait_until_ready(),
            pods.wait_until_ready(),
            namespaces.wait_until_ready()
        );
        p.is_ok() && q.is_ok() && n.is_ok()
    };
    let program = nft_table::keep_loaded(&router_netns, "network policy", &changed, ready, || {
        let policies = policies.state();
        let pods = pods.state();
        let namespaces = namespaces.state();
        let inventory = inventory::Inventory::new(
            &pods.iter().map(AsRef::as_ref).collect::<Vec<_>>(),
            &namespaces.iter().map(AsRef::as_ref).collect::<Vec<_>>(),
        );
        let guarded = ingress::guarded_pods(
            &policies.iter().map(AsRef::as_ref).collect::<Vec<_>>(),
            &inventory,
        );
        Rendered {
            script: ruleset::ruleset(&guarded, lab_host),
            summary: format!("{} Pods isolated", guarded.len()),
        }
    });
    tokio::join!(policies_driver, pods_driver, namespaces_driver, program);
}
