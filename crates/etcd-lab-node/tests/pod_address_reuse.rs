//! A pod address given again to a new pod on the same node (a pod deleted
//! and made again with the same name gets the same address) is reachable at
//! once from the node, the router and the node's other pods, although each
//! of them still remembers the old pod's MAC address for it. Real
//! namespaces, veths and TCP connections. Needs root; skipped (passes
//! without doing anything) otherwise.

mod common;

use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

use common::{Listener, TestNode, connects};
use etcd_lab_node::network;

#[test]
fn a_reused_pod_address_is_reachable_at_once() {
    let Some(node) = TestNode::set_up("reuse", 247) else {
        return;
    };
    let (node_netns, node_index) = (node.netns.clone(), node.index);
    let ip = Ipv4Addr::new(10, 244, node_index, 10);
    let sibling_ip = Ipv4Addr::new(10, 244, node_index, 11);
    let (old_uid, new_uid, sibling_uid) = (
        "a0a0a0a0-0000-4000-8000-000000000001",
        "b0b0b0b0-0000-4000-8000-000000000002",
        "c0c0c0c0-0000-4000-8000-000000000003",
    );
    let sibling = network::setup_pod(sibling_uid, node_index, sibling_ip).expect("sibling pod");
    let old = network::setup_pod(old_uid, node_index, ip).expect("old pod");

    // The node, the router and a sibling pod talk to the old pod: each
    // learns its MAC address for `ip`.
    let listener = Listener::start(&old, ip);
    for from in [&node_netns, network::ROUTER_NETNS, &sibling] {
        assert!(
            connects(from, ip, Duration::from_secs(2)),
            "{from} reaches the old pod"
        );
    }
    drop(listener);
    network::teardown_pod(old_uid);

    let new = network::setup_pod(new_uid, node_index, ip).expect("new pod");
    let _listener = Listener::start(&new, ip);
    let mut unreachable = Vec::new();
    for from in [&node_netns, network::ROUTER_NETNS, &sibling] {
        let started = Instant::now();
        if !connects(from, ip, Duration::from_secs(3)) {
            unreachable.push(format!("{from} (gave up after {:?})", started.elapsed()));
        }
    }

    network::teardown_pod(new_uid);
    network::teardown_pod(sibling_uid);
    node.tear_down();
    assert!(
        unreachable.is_empty(),
        "the new pod at {ip} is not reachable from: {}",
        unreachable.join(", ")
    );
}
