//! The nftables ruleset of the service proxy, computed from Services and
//! EndpointSlices (pure).
//!
//! One table, `ip etcdlab-services`, in the router namespace:
//! - `prerouting` (nat): per Service port, DNAT from `ClusterIP:port` to one
//!   endpoint chosen with `numgen random mod N`;
//! - `postrouting` (nat): masquerade of DNATed connections, so replies come
//!   back through the router;
//! - `reject-endpointless` (filter, prerouting, before the DNAT): Service
//!   ports without endpoints are rejected at once (TCP reset, ICMP port
//!   unreachable), as kube-proxy does. In the forward hook the packet would
//!   never arrive: the router has no route for the service range.
//!
//! The script deletes and recreates the table in one transaction, so it
//! applies atomically whether the table exists or not.

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::net::Ipv4Addr;

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::{Endpoint, EndpointSlice};

use super::Ipv4Cidr;
use crate::service_endpoints::RoutedService;

/// Name of the nftables table (family `ip`).
pub const TABLE: &str = "etcdlab-services";

/// One Service port and where its traffic goes.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct ServicePort {
    /// `namespace/name:port-name`, for comments.
    pub id: String,
    pub cluster_ip: Ipv4Addr,
    /// `tcp`, `udp` or `sctp`.
    pub protocol: String,
    pub port: u16,
    /// Endpoint address and target port, sorted.
    pub endpoints: Vec<(Ipv4Addr, u16)>,
}

/// The Service ports to program: ClusterIP services with an IPv4 ClusterIP
/// inside `service_cidr`, each with its usable endpoints.
pub fn service_ports(
    services: &[&Service],
    slices: &[&EndpointSlice],
    service_cidr: Ipv4Cidr,
) -> Vec<ServicePort> {
    let mut ports = Vec::new();
    for service in services.iter().filter_map(|s| RoutedService::of(s)) {
        let spec = service.spec;
        let Some(cluster_ip) = spec
            .cluster_ip
            .as_deref()
            .and_then(|ip| ip.parse::<Ipv4Addr>().ok())
            .filter(|ip| service_cidr.contains(*ip))
        else {
            continue;
        };
        let own_slices: Vec<&EndpointSlice> = slices
            .iter()
            .copied()
            .filter(|slice| service.owns_ipv4_slice(slice))
            .collect();
        for port in spec.ports.iter().flatten() {
            let Ok(number) = u16::try_from(port.port) else {
                continue;
            };
            let protocol = port
                .protocol
                .as_deref()
                .unwrap_or("TCP")
                .to_ascii_lowercase();
            let port_name = port.name.as_deref().unwrap_or("");
            ports.push(ServicePort {
                id: format!("{}/{}:{port_name}", service.namespace, service.name),
                cluster_ip,
                endpoints: endpoints_of(&own_slices, port_name, &protocol),
                protocol,
                port: number,
            });
        }
    }
    ports.sort();
    ports
}

/// Ready endpoints of a Service port; when none is ready, the serving ones
/// that are terminating (kube-proxy's fallback).
fn endpoints_of(
    slices: &[&EndpointSlice],
    port_name: &str,
    protocol: &str,
) -> Vec<(Ipv4Addr, u16)> {
    let collect = |usable: &dyn Fn(&Endpoint) -> bool| -> BTreeSet<(Ipv4Addr, u16)> {
        let mut found = BTreeSet::new();
        for slice in slices {
            let target_port = slice.ports.iter().flatten().find(|p| {
                p.name.as_deref().unwrap_or("") == port_name
                    && p.protocol
                        .as_deref()
                        .unwrap_or("TCP")
                        .eq_ignore_ascii_case(protocol)
            });
            let Some(target_port) = target_port
                .and_then(|p| p.port)
                .and_then(|p| u16::try_from(p).ok())
            else {
                continue;
            };
            for endpoint in slice.endpoints.iter().flatten().filter(|e| usable(e)) {
                for addr in endpoint.addresses.iter().filter_map(|a| a.parse().ok()) {
                    found.insert((addr, target_port));
                }
            }
        }
        found
    };
    let condition = |e: &Endpoint,
                     pick: fn(
        &k8s_openapi::api::discovery::v1::EndpointConditions,
    ) -> Option<bool>| { e.conditions.as_ref().and_then(pick) };
    // A nil `ready` or `serving` means true; a nil `terminating` means false.
    let ready = collect(&|e| condition(e, |c| c.ready).unwrap_or(true));
    let chosen = if ready.is_empty() {
        collect(&|e| {
            condition(e, |c| c.serving).unwrap_or(true)
                && condition(e, |c| c.terminating).unwrap_or(false)
        })
    } else {
        ready
    };
    chosen.into_iter().collect()
}

/// The nft script that replaces the table with rules for `ports`.
pub fn ruleset(ports: &[ServicePort]) -> String {
    let mut dnat = String::new();
    let mut reject = String::new();
    for port in ports {
        let matcher = format!(
            "ip daddr {} {} dport {}",
            port.cluster_ip, port.protocol, port.port
        );
        let comment = format!("comment \"{}\"", port.id.replace('"', ""));
        if port.endpoints.is_empty() {
            let how = if port.protocol == "tcp" {
                " with tcp reset"
            } else {
                ""
            };
            let _ = writeln!(reject, "\t\t{matcher} reject{how} {comment}");
            continue;
        }
        let targets: Vec<String> = port
            .endpoints
            .iter()
            .enumerate()
            .map(|(i, (addr, target))| format!("{i} : {addr} . {target}"))
            .collect();
        let _ = writeln!(
            dnat,
            "\t\t{matcher} dnat to numgen random mod {} map {{ {} }} {comment}",
            port.endpoints.len(),
            targets.join(", ")
        );
    }
    format!(
        "table ip {TABLE}\n\
         delete table ip {TABLE}\n\
         table ip {TABLE} {{\n\
         \tchain prerouting {{\n\
         \t\ttype nat hook prerouting priority dstnat; policy accept;\n\
         {dnat}\
         \t}}\n\
         \tchain output {{\n\
         \t\ttype nat hook output priority -100; policy accept;\n\
         {dnat}\
         \t}}\n\
         \tchain postrouting {{\n\
         \t\ttype nat hook postrouting priority srcnat; policy accept;\n\
         \t\tct status dnat masquerade\n\
         \t}}\n\
         \tchain reject-endpointless {{\n\
         \t\ttype filter hook prerouting priority -110; policy accept;\n\
         {reject}\
         \t}}\n\
         }}\n"
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::service_endpoints::SERVICE_NAME_LABEL;

    fn cidr() -> Ipv4Cidr {
        "10.96.0.0/16".parse().unwrap()
    }

    fn kubernetes_service() -> Service {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "kubernetes", "namespace": "default"},
            "spec": {"clusterIP": "10.96.0.1", "ports": [
                {"name": "https", "port": 443, "protocol": "TCP", "targetPort": 6443}
            ]}
        }))
        .unwrap()
    }

    fn kubernetes_slice() -> EndpointSlice {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "kubernetes", "namespace": "default", "labels": {SERVICE_NAME_LABEL: "kubernetes"}},
            "addressType": "IPv4",
            "endpoints": [{"addresses": ["10.244.0.1"], "conditions": {"ready": true}}],
            "ports": [{"name": "https", "port": 6443, "protocol": "TCP"}]
        }))
        .unwrap()
    }

    #[test]
    fn kubernetes_service_reaches_the_api_server() {
        let service = kubernetes_service();
        let slice = kubernetes_slice();
        let ports = service_ports(&[&service], &[&slice], cidr());
        assert_eq!(
            ports,
            vec![ServicePort {
                id: "default/kubernetes:https".to_owned(),
                cluster_ip: Ipv4Addr::new(10, 96, 0, 1),
                protocol: "tcp".to_owned(),
                port: 443,
                endpoints: vec![(Ipv4Addr::new(10, 244, 0, 1), 6443)],
            }]
        );
        let script = ruleset(&ports);
        assert!(script.contains(
            "ip daddr 10.96.0.1 tcp dport 443 dnat to numgen random mod 1 map { 0 : 10.244.0.1 . 6443 } comment \"default/kubernetes:https\""
        ), "{script}");
        assert!(
            script.starts_with("table ip etcdlab-services\ndelete table ip etcdlab-services\n")
        );
        assert!(script.contains("ct status dnat masquerade"));
    }

    #[test]
    fn only_ready_endpoints_of_the_matching_port_are_used() {
        let service: Service = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "etcd-client", "namespace": "db"},
            "spec": {"clusterIP": "10.96.4.2", "ports": [
                {"name": "client", "port": 2379},
                {"name": "metrics", "port": 8080}
            ]}
        }))
        .unwrap();
        let slice: EndpointSlice = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "etcd-client-x", "namespace": "db", "labels": {SERVICE_NAME_LABEL: "etcd-client"}},
            "addressType": "IPv4",
            "endpoints": [
                {"addresses": ["10.244.2.10"], "conditions": {"ready": true}},
                {"addresses": ["10.244.1.10"]},
                {"addresses": ["10.244.3.10"], "conditions": {"ready": false}}
            ],
            "ports": [{"name": "client", "port": 2379, "protocol": "TCP"}, {"name": "metrics", "port": 9090}]
        }))
        .unwrap();
        let ports = service_ports(&[&service], &[&slice], cidr());
        assert_eq!(ports.len(), 2);
        assert_eq!(
            ports[0].endpoints,
            vec![
                (Ipv4Addr::new(10, 244, 1, 10), 2379),
                (Ipv4Addr::new(10, 244, 2, 10), 2379)
            ]
        );
        assert_eq!(ports[1].port, 8080);
        assert_eq!(ports[1].endpoints[0].1, 9090);
        let script = ruleset(&ports);
        assert!(
            script.contains(
                "numgen random mod 2 map { 0 : 10.244.1.10 . 2379, 1 : 10.244.2.10 . 2379 }"
            ),
            "{script}"
        );
    }

    #[test]
    fn terminating_serving_endpoints_are_a_fallback_only() {
        let service: Service = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "s", "namespace": "db"},
            "spec": {"clusterIP": "10.96.4.3", "ports": [{"port": 80}]}
        }))
        .unwrap();
        let slice: EndpointSlice = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "s-1", "namespace": "db", "labels": {SERVICE_NAME_LABEL: "s"}},
            "addressType": "IPv4",
            "endpoints": [
                {"addresses": ["10.244.1.11"], "conditions": {"ready": false, "serving": true, "terminating": true}}
            ],
            "ports": [{"port": 8080}]
        }))
        .unwrap();
        let ports = service_ports(&[&service], &[&slice], cidr());
        assert_eq!(
            ports[0].endpoints,
            vec![(Ipv4Addr::new(10, 244, 1, 11), 8080)]
        );
    }

    #[test]
    fn headless_foreign_and_endpointless_services() {
        let headless: Service = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "etcd", "namespace": "db"},
            "spec": {"clusterIP": "None", "ports": [{"port": 2380}]}
        }))
        .unwrap();
        let outside: Service = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "x", "namespace": "db"},
            "spec": {"clusterIP": "192.168.0.1", "ports": [{"port": 80}]}
        }))
        .unwrap();
        let empty: Service = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "empty", "namespace": "db"},
            "spec": {"clusterIP": "10.96.9.9", "ports": [{"port": 80}, {"port": 53, "protocol": "UDP"}]}
        }))
        .unwrap();
        let ports = service_ports(&[&headless, &outside, &empty], &[], cidr());
        assert_eq!(ports.len(), 2);
        let script = ruleset(&ports);
        assert!(
            script.contains("ip daddr 10.96.9.9 tcp dport 80 reject with tcp reset"),
            "{script}"
        );
        assert!(
            script.contains("ip daddr 10.96.9.9 udp dport 53 reject comment"),
            "{script}"
        );
        assert!(!script.contains("dnat to"));
    }
}
