//! Pure address plan of the lab network (see `docs/architecture.md`).

use std::collections::BTreeSet;
use std::net::Ipv4Addr;

/// Host end of the uplink veth; also the API server's advertise address and the DNS address.
pub const HOST_IP: Ipv4Addr = Ipv4Addr::new(10, 244, 0, 1);
/// Router end of the uplink veth.
pub const ROUTER_UPLINK_IP: Ipv4Addr = Ipv4Addr::new(10, 244, 0, 2);
/// The whole lab pod/node range.
pub const LAB_CIDR: &str = "10.244.0.0/16";
/// The service (ClusterIP) range.
pub const SERVICE_CIDR: &str = "10.96.0.0/16";
/// Third octet of the client subnet.
pub const CLIENT_OCTET: u8 = 250;
/// First pod address (last octet) on a node subnet.
pub const FIRST_POD_OCTET: u8 = 10;
/// Last pod address (last octet) on a node subnet.
pub const LAST_POD_OCTET: u8 = 250;

/// The router namespace.
pub const ROUTER_NETNS: &str = "etcdlab-router";
/// The client namespace used by `etcd-lab exec`.
pub const CLIENT_NETNS: &str = "etcdlab-client";
/// Host end of the uplink veth.
pub const UPLINK_HOST: &str = "etcdlab0";

/// Gateway of node `index`'s subnet: the bridge address `10.244.<i>.1`.
pub fn node_gateway(index: u8) -> Ipv4Addr {
    Ipv4Addr::new(10, 244, index, 1)
}

/// The node's own address `10.244.<i>.2` (its InternalIP).
pub fn node_ip(index: u8) -> Ipv4Addr {
    Ipv4Addr::new(10, 244, index, 2)
}

/// `10.244.<i>.0/24`.
pub fn node_subnet(index: u8) -> String {
    format!("10.244.{index}.0/24")
}

/// Client namespace address.
pub fn client_ip() -> Ipv4Addr {
    Ipv4Addr::new(10, 244, CLIENT_OCTET, 2)
}

/// Whether `index` is usable as a node index (1..=249; 250 is the client).
pub fn valid_node_index(index: u8) -> bool {
    (1..CLIENT_OCTET).contains(&index)
}

/// Picks the lowest free pod address of node `index`, given the addresses in use.
pub fn allocate_pod_ip(index: u8, used: &BTreeSet<Ipv4Addr>) -> Option<Ipv4Addr> {
    (FIRST_POD_OCTET..=LAST_POD_OCTET)
        .map(|octet| Ipv4Addr::new(10, 244, index, octet))
        .find(|ip| !used.contains(ip))
}

/// Whether `ip` is a pod address of node `index`.
pub fn is_pod_ip_of(index: u8, ip: Ipv4Addr) -> bool {
    let o = ip.octets();
    o[0] == 10 && o[1] == 244 && o[2] == index && (FIRST_POD_OCTET..=LAST_POD_OCTET).contains(&o[3])
}

/// MAC address of the interface that holds `ip` in a lab namespace:
/// `0a:58:` followed by the four bytes of the address (locally
/// administered, unicast; the scheme of OVN-Kubernetes). A pod made again
/// with an address an earlier pod had (same name, same node) gets the same
/// MAC, so the neighbour entries the node, the router and the other pods
/// still hold for the address stay right. With a random MAC they would send
/// to the gone pod's MAC until the entry expires (15 to 45 s reachable time,
/// then the unicast probes): the node's probes would time out meanwhile.
pub fn mac_of(ip: Ipv4Addr) -> String {
    let [a, b, c, d] = ip.octets();
    format!("0a:58:{a:02x}:{b:02x}:{c:02x}:{d:02x}")
}

/// Name of a pod's network namespace: `etcdlab-pod-<first 8 of uid>`.
pub fn pod_netns_name(pod_uid: &str) -> String {
    format!("etcdlab-pod-{}", short_uid(pod_uid))
}

/// Router-side veth name of a pod (at most 15 bytes).
pub fn pod_veth_name(pod_uid: &str) -> String {
    format!("vp{}", short_uid(pod_uid))
}

/// Name of a node's network namespace.
pub fn node_netns_name(node: &str) -> String {
    format!("etcdlab-{node}")
}

fn short_uid(uid: &str) -> String {
    uid.chars()
        .filter(|c| c.is_ascii_alphanumeric())
        .take(8)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allocates_lowest_free_address_in_range() {
        let mut used = BTreeSet::new();
        assert_eq!(
            allocate_pod_ip(3, &used),
            Some(Ipv4Addr::new(10, 244, 3, 10))
        );
        used.insert(Ipv4Addr::new(10, 244, 3, 10));
        used.insert(Ipv4Addr::new(10, 244, 3, 12));
        assert_eq!(
            allocate_pod_ip(3, &used),
            Some(Ipv4Addr::new(10, 244, 3, 11))
        );
    }

    #[test]
    fn allocation_fails_when_subnet_is_full() {
        let used: BTreeSet<_> = (FIRST_POD_OCTET..=LAST_POD_OCTET)
            .map(|o| Ipv4Addr::new(10, 244, 1, o))
            .collect();
        assert_eq!(allocate_pod_ip(1, &used), None);
    }

    #[test]
    fn mac_follows_the_address() {
        assert_eq!(mac_of(Ipv4Addr::new(10, 244, 1, 10)), "0a:58:0a:f4:01:0a");
        assert_ne!(
            mac_of(Ipv4Addr::new(10, 244, 1, 10)),
            mac_of(Ipv4Addr::new(10, 244, 1, 11))
        );
    }

    #[test]
    fn names_fit_linux_limits() {
        let uid = "0f3c9a2e-1b2c-4d5e-8f90-123456789abc";
        assert_eq!(pod_netns_name(uid), "etcdlab-pod-0f3c9a2e");
        assert!(pod_veth_name(uid).len() <= 15);
        assert!(is_pod_ip_of(2, Ipv4Addr::new(10, 244, 2, 10)));
        assert!(!is_pod_ip_of(2, Ipv4Addr::new(10, 244, 2, 2)));
    }
}
