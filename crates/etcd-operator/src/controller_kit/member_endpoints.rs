//! The etcd client endpoints the controllers dial: the cluster reconciler
//! to observe a cluster, the backup controllers to take a snapshot from one
//! of its members.
//!
//! Pods are dialled by pod IP: it works from inside the cluster and from an
//! operator running outside it with a route to the pod network, where the
//! members' DNS names do not resolve. Every pod that has an IP is included,
//! ready or not, Terminating or not: an endpoint that does not answer is
//! data for the planner, never an error.

use k8s_openapi::api::core::v1::Pod;

/// URL of one member's client endpoint.
pub fn client_url(scheme: &str, pod_ip: &str, port: u16) -> String {
    if pod_ip.contains(':') {
        format!("{scheme}://[{pod_ip}]:{port}")
    } else {
        format!("{scheme}://{pod_ip}:{port}")
    }
}

/// The client endpoints of `pods`, by pod IP, sorted and without duplicates.
pub fn pod_endpoints<'a>(
    pods: impl IntoIterator<Item = &'a Pod>,
    scheme: &str,
    port: u16,
) -> Vec<String> {
    let mut endpoints: Vec<String> = pods
        .into_iter()
        .filter_map(|pod| pod.status.as_ref()?.pod_ip.as_deref())
        .filter(|ip| !ip.is_empty())
        .map(|ip| client_url(scheme, ip, port))
        .collect();
    endpoints.sort();
    endpoints.dedup();
    endpoints
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::PodStatus;

    fn pod(ip: Option<&str>) -> Pod {
        Pod {
            status: Some(PodStatus {
                pod_ip: ip.map(str::to_owned),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn dials_every_pod_that_has_an_ip() {
        let pods = [
            pod(Some("10.244.2.11")),
            pod(None),
            pod(Some("10.244.1.10")),
            pod(Some("")),
            pod(Some("10.244.1.10")),
            Pod::default(),
        ];
        assert_eq!(
            pod_endpoints(&pods, "http", 2379),
            vec!["http://10.244.1.10:2379", "http://10.244.2.11:2379"]
        );
    }

    #[test]
    fn brackets_ipv6_addresses() {
        assert_eq!(
            client_url("https", "fd00::5", 2379),
            "https://[fd00::5]:2379"
        );
    }
}
