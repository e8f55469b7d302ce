//! Creates and removes the lab's namespaces, links and routes.

use std::net::Ipv4Addr;
use std::path::Path;

use etcd_lab_common::IoContext;

use super::addressing::{
    CLIENT_NETNS, CLIENT_OCTET, HOST_IP, LAB_CIDR, ROUTER_NETNS, ROUTER_UPLINK_IP, SERVICE_CIDR,
    UPLINK_HOST, client_ip, mac_of, node_gateway, node_ip, node_netns_name, pod_netns_name,
    pod_veth_name, valid_node_index,
};
use super::command::{ip, ip_quiet, netns_list, run};
use super::{NetworkError, partition};

const UPLINK_ROUTER: &str = "etcdlab0r";
const CLIENT_BRIDGE: &str = "br-client";

fn netns_exists(name: &str) -> Result<bool, NetworkError> {
    Ok(netns_list()?.iter().any(|n| n == name))
}

fn add_netns(name: &str) -> Result<(), NetworkError> {
    if netns_exists(name)? {
        ip_quiet(&["netns", "del", name]);
    }
    ip(&["netns", "add", name])?;
    ip(&["-n", name, "link", "set", "lo", "up"])?;
    Ok(())
}

/// Creates the router namespace, the uplink veth, the host routes to the lab
/// and service ranges, and the `inet etcdlab` nft table. Idempotent: an
/// existing router is replaced.
pub fn setup_router() -> Result<(), NetworkError> {
    ip_quiet(&["link", "del", UPLINK_HOST]);
    add_netns(ROUTER_NETNS)?;
    run(
        "ip",
        &[
            "netns",
            "exec",
            ROUTER_NETNS,
            "sysctl",
            "-q",
            "-w",
            "net.ipv4.ip_forward=1",
        ],
    )?;
    // Frames between two namespaces on one node's bridge pass the router's
    // IPv4 hooks too (br_netfilter), so NetworkPolicy enforcement and
    // partitions see them as they see routed traffic.
    run(
        "ip",
        &[
            "netns",
            "exec",
            ROUTER_NETNS,
            "sysctl",
            "-q",
            "-w",
            "net.bridge.bridge-nf-call-iptables=1",
        ],
    )
    .map_err(|e| NetworkError::Command {
        command: "sysctl net.bridge.bridge-nf-call-iptables=1 in the router".to_owned(),
        stderr: format!("{e} (the kernel needs br_netfilter for NetworkPolicy enforcement)"),
    })?;
    ip(&[
        "link",
        "add",
        UPLINK_HOST,
        "type",
        "veth",
        "peer",
        "name",
        UPLINK_ROUTER,
        "netns",
        ROUTER_NETNS,
    ])?;
    ip(&["addr", "add", &format!("{HOST_IP}/24"), "dev", UPLINK_HOST])?;
    ip(&["link", "set", UPLINK_HOST, "up"])?;
    ip(&[
        "-n",
        ROUTER_NETNS,
        "addr",
        "add",
        &format!("{ROUTER_UPLINK_IP}/24"),
        "dev",
        UPLINK_ROUTER,
    ])?;
    ip(&["-n", ROUTER_NETNS, "link", "set", UPLINK_ROUTER, "up"])?;
    let via = ROUTER_UPLINK_IP.to_string();
    ip(&[
        "route",
        "replace",
        LAB_CIDR,
        "via",
        &via,
        "dev",
        UPLINK_HOST,
    ])?;
    ip(&[
        "route",
        "replace",
        SERVICE_CIDR,
        "via",
        &via,
        "dev",
        UPLINK_HOST,
    ])?;
    partition::install_table()?;
    Ok(())
}

/// Creates bridge `br-n<i>` in the router and the node namespace
/// `etcdlab-<node>` with `eth0` = `10.244.<i>.2/24`. Idempotent.
pub fn setup_node(node: &str, index: u8) -> Result<(), NetworkError> {
    if !valid_node_index(index) {
        return Err(NetworkError::InvalidIndex(index));
    }
    let bridge = format!("br-n{index}");
    add_bridge(&bridge, node_gateway(index))?;
    let netns = node_netns_name(node);
    add_netns(&netns)?;
    attach_namespace(
        &netns,
        &format!("vn{index}"),
        &bridge,
        node_ip(index),
        node_gateway(index),
    )
}

/// Removes a node's namespace and bridge.
pub fn teardown_node(node: &str, index: u8) {
    ip_quiet(&["netns", "del", &node_netns_name(node)]);
    ip_quiet(&["-n", ROUTER_NETNS, "link", "del", &format!("vn{index}")]);
    ip_quiet(&["-n", ROUTER_NETNS, "link", "del", &format!("br-n{index}")]);
}

/// Creates pod namespace `etcdlab-pod-<uid8>` with `eth0` = `ip/24` on the
/// node's bridge. Replaces a namespace left over by a previous run.
pub fn setup_pod(pod_uid: &str, node_index: u8, address: Ipv4Addr) -> Result<String, NetworkError> {
    let netns = pod_netns_name(pod_uid);
    let veth = pod_veth_name(pod_uid);
    ip_quiet(&["-n", ROUTER_NETNS, "link", "del", &veth]);
    add_netns(&netns)?;
    attach_namespace(
        &netns,
        &veth,
        &format!("br-n{node_index}"),
        address,
        node_gateway(node_index),
    )?;
    Ok(netns)
}

/// Removes a pod's namespace (its veth goes with it).
pub fn teardown_pod(pod_uid: &str) {
    ip_quiet(&["netns", "del", &pod_netns_name(pod_uid)]);
    ip_quiet(&["-n", ROUTER_NETNS, "link", "del", &pod_veth_name(pod_uid)]);
}

/// Creates the client namespace on `br-client` and its
/// `/etc/netns/etcdlab-client/resolv.conf` pointing at the lab DNS.
pub fn setup_client(dns_search: &str) -> Result<(), NetworkError> {
    let gateway = Ipv4Addr::new(10, 244, CLIENT_OCTET, 1);
    add_bridge(CLIENT_BRIDGE, gateway)?;
    add_netns(CLIENT_NETNS)?;
    attach_namespace(CLIENT_NETNS, "vclient", CLIENT_BRIDGE, client_ip(), gateway)?;
    let dir = Path::new("/etc/netns").join(CLIENT_NETNS);
    std::fs::create_dir_all(&dir).context(|| format!("create {}", dir.display()))?;
    let file = dir.join("resolv.conf");
    let contents = format!("nameserver {HOST_IP}\nsearch {dns_search}\noptions ndots:5\n");
    std::fs::write(&file, contents).context(|| format!("write {}", file.display()))?;
    Ok(())
}

/// Creates `bridge` in the router, replacing one left over, as the
/// gateway `gateway/24`, with the fixed MAC `mac_of(gateway)`. A bridge
/// whose MAC is not set takes the lowest MAC of its ports and changes it
/// whenever a Pod's veth joins or leaves: the node and its Pods would keep
/// sending to the gateway's old MAC, which after the veth left is no
/// longer the bridge's, so their traffic out of the node (to the API
/// server, to other nodes) was lost until their neighbour entry for the
/// gateway expired, up to a minute with TCP's backoff.
fn add_bridge(bridge: &str, gateway: Ipv4Addr) -> Result<(), NetworkError> {
    ip_quiet(&["-n", ROUTER_NETNS, "link", "del", bridge]);
    ip(&[
        "-n",
        ROUTER_NETNS,
        "link",
        "add",
        bridge,
        "address",
        &mac_of(gateway),
        "type",
        "bridge",
    ])?;
    ip(&[
        "-n",
        ROUTER_NETNS,
        "addr",
        "add",
        &format!("{gateway}/24"),
        "dev",
        bridge,
    ])?;
    ip(&["-n", ROUTER_NETNS, "link", "set", bridge, "up"])?;
    Ok(())
}

/// Creates veth `outer` in the router (on `bridge`) whose peer is `eth0` in
/// `netns`, addressed `address/24` (MAC `mac_of(address)`) with a default
/// route via `gateway`.
fn attach_namespace(
    netns: &str,
    outer: &str,
    bridge: &str,
    address: Ipv4Addr,
    gateway: Ipv4Addr,
) -> Result<(), NetworkError> {
    ip(&[
        "-n",
        ROUTER_NETNS,
        "link",
        "add",
        outer,
        "type",
        "veth",
        "peer",
        "name",
        "eth0",
        "netns",
        netns,
    ])?;
    ip(&["-n", ROUTER_NETNS, "link", "set", outer, "master", bridge])?;
    ip(&["-n", ROUTER_NETNS, "link", "set", outer, "up"])?;
    ip(&[
        "-n",
        netns,
        "link",
        "set",
        "eth0",
        "address",
        &mac_of(address),
    ])?;
    ip(&[
        "-n",
        netns,
        "addr",
        "add",
        &format!("{address}/24"),
        "dev",
        "eth0",
    ])?;
    ip(&["-n", netns, "link", "set", "eth0", "up"])?;
    ip(&[
        "-n",
        netns,
        "route",
        "add",
        "default",
        "via",
        &gateway.to_string(),
    ])?;
    Ok(())
}

/// Removes everything the lab network created: every `etcdlab-*` namespace
/// (router, nodes, pods, client; links, bridges and nft tables go with
/// them), the uplink, and `/etc/netns/etcdlab-*`.
pub fn teardown_all() -> Result<(), NetworkError> {
    for name in netns_list()? {
        if name.starts_with("etcdlab-") {
            ip_quiet(&["netns", "del", &name]);
        }
    }
    ip_quiet(&["link", "del", UPLINK_HOST]);
    let etc = Path::new("/etc/netns");
    if let Ok(entries) = std::fs::read_dir(etc) {
        for entry in entries.flatten() {
            if entry.file_name().to_string_lossy().starts_with("etcdlab-") {
                let path = entry.path();
                std::fs::remove_dir_all(&path).context(|| format!("remove {}", path.display()))?;
            }
        }
    }
    let left: Vec<String> = netns_list()?
        .into_iter()
        .filter(|n| n.starts_with("etcdlab-"))
        .collect();
    if left.is_empty() {
        Ok(())
    } else {
        Err(NetworkError::Leftover(left.join(", ")))
    }
}
