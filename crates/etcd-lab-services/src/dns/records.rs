//! The record table of the cluster domain, built from Services,
//! EndpointSlices and Pods as CoreDNS's `kubernetes` plugin does (pure).
//!
//! - ClusterIP Service: `svc.ns.svc.<domain>` -> the ClusterIP;
//! - headless Service: `svc.ns.svc.<domain>` -> the ready endpoints (all of
//!   them with `publishNotReadyAddresses`), and per endpoint
//!   `hostname.svc.ns.svc.<domain>` (or `a-b-c-d.svc.ns.svc.<domain>` when
//!   the endpoint has no hostname);
//! - Pod: `a-b-c-d.ns.pod.<domain>` -> the pod IP.

use std::collections::{BTreeMap, BTreeSet};
use std::net::Ipv4Addr;

use k8s_openapi::api::core::v1::{Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;

use crate::service_endpoints::RoutedService;

pub use crate::service_endpoints::SERVICE_NAME_LABEL;

/// Answer of the table for one name.
#[derive(Debug, PartialEq, Eq)]
pub enum Lookup<'a> {
    /// The name is outside the cluster domain: this server does not answer.
    OutOfZone,
    /// The name does not exist in the cluster domain.
    NxDomain,
    /// The name exists; its A records (possibly none).
    Found(&'a BTreeSet<Ipv4Addr>),
}

/// All A records of the cluster domain, by lower-case name without the
/// trailing dot.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RecordTable {
    domain: String,
    names: BTreeMap<String, BTreeSet<Ipv4Addr>>,
}

impl RecordTable {
    /// An empty table for `domain` (`cluster.local`).
    pub fn new(domain: &str) -> Self {
        let mut table = Self {
            domain: normalize(domain),
            names: BTreeMap::new(),
        };
        let domain = table.domain.clone();
        table.insert_name(&format!("svc.{domain}"));
        table.insert_name(&format!("pod.{domain}"));
        table
    }

    /// The cluster domain.
    pub fn domain(&self) -> &str {
        &self.domain
    }

    /// Ensures `name` and every name between it and the domain exist.
    fn insert_name(&mut self, name: &str) -> &mut BTreeSet<Ipv4Addr> {
        let mut rest = name;
        while let Some((_, parent)) = rest.split_once('.') {
            if parent.len() < self.domain.len() {
                break;
            }
            self.names.entry(parent.to_owned()).or_default();
            rest = parent;
        }
        self.names.entry(name.to_owned()).or_default()
    }

    /// Adds an A record.
    pub fn insert(&mut self, name: &str, addr: Ipv4Addr) {
        let name = normalize(name);
        self.insert_name(&name).insert(addr);
    }

    /// Looks a name up (any case, with or without the trailing dot).
    pub fn lookup(&self, name: &str) -> Lookup<'_> {
        let name = normalize(name);
        let in_zone = name == self.domain || name.ends_with(&format!(".{}", self.domain));
        if !in_zone {
            return Lookup::OutOfZone;
        }
        match self.names.get(&name) {
            Some(addrs) => Lookup::Found(addrs),
            None => Lookup::NxDomain,
        }
    }

    /// Number of names with at least one address.
    pub fn record_count(&self) -> usize {
        self.names.values().filter(|a| !a.is_empty()).count()
    }
}

fn normalize(name: &str) -> String {
    name.trim_end_matches('.').to_ascii_lowercase()
}

/// `10.244.1.12` -> `10-244-1-12`, the label CoreDNS uses for an address.
pub fn dashed(addr: Ipv4Addr) -> String {
    addr.to_string().replace('.', "-")
}

/// Builds the table of `domain` from the objects of the cluster.
pub fn build_table(
    domain: &str,
    services: &[&Service],
    slices: &[&EndpointSlice],
    pods: &[&Pod],
) -> RecordTable {
    let mut table = RecordTable::new(domain);
    let domain = table.domain().to_owned();
    for service in services.iter().filter_map(|s| RoutedService::of(s)) {
        let spec = service.spec;
        let service_name = format!("{}.{}.svc.{domain}", service.name, service.namespace);
        let cluster_ips: Vec<&str> = spec
            .cluster_ips
            .iter()
            .flatten()
            .chain(spec.cluster_ip.iter())
            .map(String::as_str)
            .collect();
        let headless = cluster_ips.is_empty() || cluster_ips.contains(&"None");
        if !headless {
            table.insert_name(&service_name);
            for ip in cluster_ips
                .iter()
                .filter_map(|ip| ip.parse::<Ipv4Addr>().ok())
            {
                table.insert(&service_name, ip);
            }
            continue;
        }
        table.insert_name(&service_name);
        let publish_not_ready = spec.publish_not_ready_addresses == Some(true);
        let own_slices = slices.iter().filter(|slice| service.owns_ipv4_slice(slice));
        for endpoint in own_slices.flat_map(|slice| slice.endpoints.iter().flatten()) {
            // A nil `ready` means ready (EndpointConditions API doc).
            let ready = endpoint
                .conditions
                .as_ref()
                .and_then(|c| c.ready)
                .unwrap_or(true);
            if !(ready || publish_not_ready) {
                continue;
            }
            for addr in endpoint
                .addresses
                .iter()
                .filter_map(|a| a.parse::<Ipv4Addr>().ok())
            {
                table.insert(&service_name, addr);
                let label = endpoint.hostname.clone().unwrap_or_else(|| dashed(addr));
                table.insert(&format!("{label}.{service_name}"), addr);
            }
        }
    }
    for pod in pods {
        let Some(namespace) = pod.metadata.namespace.as_deref() else {
            continue;
        };
        let Some(status) = pod.status.as_ref() else {
            continue;
        };
        let ips = status
            .pod_ips
            .iter()
            .flatten()
            .map(|ip| ip.ip.as_str())
            .chain(status.pod_ip.as_deref());
        for addr in ips.filter_map(|ip| ip.parse::<Ipv4Addr>().ok()) {
            table.insert(&format!("{}.{namespace}.pod.{domain}", dashed(addr)), addr);
        }
    }
    table
}

#[cfg(test)]
mod tests {
    use super::*;

    fn service(json: serde_json::Value) -> Service {
        serde_json::from_value(json).unwrap()
    }

    fn slice(json: serde_json::Value) -> EndpointSlice {
        serde_json::from_value(json).unwrap()
    }

    fn found(addrs: &[[u8; 4]]) -> BTreeSet<Ipv4Addr> {
        addrs.iter().map(|a| Ipv4Addr::from(*a)).collect()
    }

    fn etcd_slice() -> EndpointSlice {
        slice(serde_json::json!({
            "metadata": {"name": "etcd-abc", "namespace": "db", "labels": {SERVICE_NAME_LABEL: "etcd"}},
            "addressType": "IPv4",
            "endpoints": [
                {"addresses": ["10.244.1.10"], "hostname": "etcd-0", "conditions": {"ready": true}},
                {"addresses": ["10.244.2.10"], "hostname": "etcd-1", "conditions": {"ready": false}},
                {"addresses": ["10.244.3.10"], "conditions": {}}
            ]
        }))
    }

    #[test]
    fn cluster_ip_service_resolves_to_its_cluster_ip() {
        let svc = service(serde_json::json!({
            "metadata": {"name": "kubernetes", "namespace": "default"},
            "spec": {"clusterIP": "10.96.0.1", "clusterIPs": ["10.96.0.1"]}
        }));
        let table = build_table("cluster.local", &[&svc], &[], &[]);
        assert_eq!(
            table.lookup("kubernetes.default.svc.cluster.local."),
            Lookup::Found(&found(&[[10, 96, 0, 1]]))
        );
        assert_eq!(
            table.lookup("KUBERNETES.Default.svc.cluster.local"),
            Lookup::Found(&found(&[[10, 96, 0, 1]]))
        );
    }

    #[test]
    fn headless_service_resolves_to_ready_endpoints_and_hostnames() {
        let svc = service(serde_json::json!({
            "metadata": {"name": "etcd", "namespace": "db"},
            "spec": {"clusterIP": "None"}
        }));
        let slice = etcd_slice();
        let table = build_table("cluster.local", &[&svc], &[&slice], &[]);
        assert_eq!(
            table.lookup("etcd.db.svc.cluster.local"),
            Lookup::Found(&found(&[[10, 244, 1, 10], [10, 244, 3, 10]]))
        );
        assert_eq!(
            table.lookup("etcd-0.etcd.db.svc.cluster.local"),
            Lookup::Found(&found(&[[10, 244, 1, 10]]))
        );
        assert_eq!(
            table.lookup("etcd-1.etcd.db.svc.cluster.local"),
            Lookup::NxDomain
        );
        assert_eq!(
            table.lookup("10-244-3-10.etcd.db.svc.cluster.local"),
            Lookup::Found(&found(&[[10, 244, 3, 10]]))
        );
    }

    #[test]
    fn publish_not_ready_addresses_includes_unready_endpoints() {
        let svc = service(serde_json::json!({
            "metadata": {"name": "etcd", "namespace": "db"},
            "spec": {"clusterIP": "None", "publishNotReadyAddresses": true}
        }));
        let slice = etcd_slice();
        let table = build_table("cluster.local", &[&svc], &[&slice], &[]);
        assert_eq!(
            table.lookup("etcd-1.etcd.db.svc.cluster.local"),
            Lookup::Found(&found(&[[10, 244, 2, 10]]))
        );
    }

    #[test]
    fn slices_of_other_services_or_namespaces_do_not_leak() {
        let svc = service(serde_json::json!({
            "metadata": {"name": "etcd", "namespace": "other"},
            "spec": {"clusterIP": "None"}
        }));
        let slice = etcd_slice();
        let table = build_table("cluster.local", &[&svc], &[&slice], &[]);
        assert_eq!(
            table.lookup("etcd.other.svc.cluster.local"),
            Lookup::Found(&BTreeSet::new())
        );
        assert_eq!(
            table.lookup("etcd-0.etcd.other.svc.cluster.local"),
            Lookup::NxDomain
        );
    }

    #[test]
    fn pods_resolve_by_dashed_address() {
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "etcd-0", "namespace": "db"},
            "status": {"podIP": "10.244.1.10", "podIPs": [{"ip": "10.244.1.10"}]}
        }))
        .unwrap();
        let table = build_table("cluster.local", &[], &[], &[&pod]);
        assert_eq!(
            table.lookup("10-244-1-10.db.pod.cluster.local"),
            Lookup::Found(&found(&[[10, 244, 1, 10]]))
        );
        assert_eq!(
            table.lookup("10-244-1-11.db.pod.cluster.local"),
            Lookup::NxDomain
        );
    }

    #[test]
    fn names_outside_the_domain_are_out_of_zone_and_parents_exist() {
        let svc = service(serde_json::json!({
            "metadata": {"name": "a", "namespace": "db"},
            "spec": {"clusterIP": "10.96.0.10"}
        }));
        let table = build_table("cluster.local", &[&svc], &[], &[]);
        assert_eq!(table.lookup("example.com"), Lookup::OutOfZone);
        assert_eq!(table.lookup("notcluster.local"), Lookup::OutOfZone);
        assert_eq!(
            table.lookup("db.svc.cluster.local"),
            Lookup::Found(&BTreeSet::new())
        );
        assert_eq!(
            table.lookup("cluster.local"),
            Lookup::Found(&BTreeSet::new())
        );
        assert_eq!(table.lookup("b.db.svc.cluster.local"), Lookup::NxDomain);
    }
}
