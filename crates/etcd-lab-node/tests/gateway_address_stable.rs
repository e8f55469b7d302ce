//! The gateway a node and its Pods route through (the node's bridge in the
//! router) keeps its MAC address while Pods' veths join and leave the
//! bridge: a node that learned the gateway's address while a Pod was on
//! the bridge still reaches the router at once after that Pod is gone. A
//! bridge whose MAC is not fixed takes the lowest MAC of its ports, so a
//! leaving veth took the address the node had learned with it, and the
//! node's traffic to the API server was lost for up to a minute. Real
//! namespaces, veths and TCP connections. Needs root; skipped (passes
//! without doing anything) otherwise.

mod common;

use std::process::Command;
use std::time::Duration;

use common::{Listener, TestNode, connects};
use etcd_lab_node::network::{self, addressing};

/// A MAC below any the lab gives (and below any random one), so a bridge
/// that follows its ports' MACs takes it while the port is on it.
const LOW_MAC: &str = "02:00:00:00:00:01";
const LOW_PORT: &str = "vlowmac";

fn ip(args: &[&str]) {
    let status = Command::new("ip").args(args).status().expect("run ip");
    assert!(status.success(), "ip {}", args.join(" "));
}

#[test]
fn the_gateway_keeps_its_address_when_a_port_leaves_the_bridge() {
    let Some(node) = TestNode::set_up("gwmac", 246) else {
        return;
    };
    let (node_netns, node_index) = (node.netns.clone(), node.index);
    let gateway = addressing::node_gateway(node_index);
    let bridge = format!("br-n{node_index}");
    let _listener = Listener::start(network::ROUTER_NETNS, gateway);
    let reached_before = connects(&node_netns, gateway, Duration::from_secs(2));

    // A port with a lower MAC joins the bridge; the node learns the
    // gateway's address anew while it is there, then the port leaves.
    let router = network::ROUTER_NETNS;
    ip(&[
        "-n", router, "link", "add", LOW_PORT, "address", LOW_MAC, "type", "veth", "peer", "name",
        "vlowpeer",
    ]);
    ip(&[
        "-n", router, "link", "set", LOW_PORT, "master", &bridge, "up",
    ]);
    ip(&["-n", &node_netns, "neigh", "flush", "all"]);
    let reached_with_port = connects(&node_netns, gateway, Duration::from_secs(2));
    // Let that connection's close end first: a packet from the router to
    // the node after the port left would make the router ask for the
    // node's address, and that request would tell the node the gateway's
    // new MAC. In the lab the router only answers, so nothing did.
    std::thread::sleep(Duration::from_millis(200));
    ip(&["-n", router, "link", "del", LOW_PORT]);
    let reached_after = connects(&node_netns, gateway, Duration::from_secs(2));

    node.tear_down();
    assert!(reached_before, "the node reaches its gateway {gateway}");
    assert!(
        reached_with_port,
        "the node reaches its gateway {gateway} while the port is on the bridge"
    );
    assert!(
        reached_after,
        "the node does not reach its gateway {gateway} once a port left the bridge: the bridge's MAC changed under the node's neighbour entry"
    );
}
