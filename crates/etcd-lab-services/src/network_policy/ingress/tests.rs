//! Policies, Pods and Namespaces in; isolated Pods and their ways in out.

use k8s_openapi::api::core::v1::{Namespace, Pod};
use serde_json::{Value, json};

use super::*;

fn ip(last: &str) -> Ipv4Addr {
    last.parse().unwrap()
}

fn pod(namespace: &str, name: &str, address: &str, labels: Value) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {"containers": [{"name": "main", "ports": [
            {"name": "client", "containerPort": 2379},
            {"name": "peer", "containerPort": 2380}
        ]}]},
        "status": {"phase": "Running", "podIP": address, "hostIP": "10.244.1.2"}
    }))
    .unwrap()
}

fn namespace(name: &str, labels: Value) -> Namespace {
    let mut labels = labels;
    labels[NAMESPACE_NAME] = json!(name);
    serde_json::from_value(json!({"metadata": {"name": name, "labels": labels}})).unwrap()
}

const NAMESPACE_NAME: &str = super::super::inventory::NAMESPACE_NAME_LABEL;

fn policy(namespace: &str, name: &str, spec: Value) -> NetworkPolicy {
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec
    }))
    .unwrap()
}

/// prod (team=db): two members of cluster demo and a tool; apps
/// (team=web): an API server and a worker; other: one Pod.
fn inventory() -> Inventory {
    let member = json!({"cluster": "demo"});
    let pods = [
        pod("prod", "demo-0", "10.244.1.10", member.clone()),
        pod("prod", "demo-1", "10.244.2.10", member),
        pod("prod", "tool", "10.244.1.11", json!({})),
        pod("apps", "api", "10.244.2.11", json!({"app": "api"})),
        pod("apps", "worker", "10.244.3.11", json!({"app": "worker"})),
        pod("other", "x", "10.244.3.10", json!({"cluster": "demo"})),
    ];
    let namespaces = [
        namespace("prod", json!({"team": "db"})),
        namespace("apps", json!({"team": "web"})),
        namespace("other", json!({})),
    ];
    Inventory::new(
        &pods.iter().collect::<Vec<_>>(),
        &namespaces.iter().collect::<Vec<_>>(),
    )
}

fn members_policy() -> NetworkPolicy {
    policy(
        "prod",
        "demo-members",
        json!({
            "podSelector": {"matchLabels": {"cluster": "demo"}},
            "policyTypes": ["Ingress"],
            "ingress": [
                {"from": [{"podSelector": {"matchLabels": {"cluster": "demo"}}}],
                 "ports": [{"protocol": "TCP", "port": 2380}]},
                {"from": [{"podSelector": {}},
                          {"namespaceSelector": {"matchLabels": {"team": "web"}},
                           "podSelector": {"matchLabels": {"app": "api"}}}],
                 "ports": [{"port": 2379}]},
                {"ports": [{"port": 2381}]}
            ]
        }),
    )
}

fn addresses(list: &[&str]) -> Sources {
    Sources::Addresses(list.iter().map(|a| ip(a)).collect())
}

fn tcp(port: u16) -> Ports {
    Ports::Range {
        protocol: Protocol::Tcp,
        first: port,
        last: port,
    }
}

fn ways_in(pod: &GuardedPod) -> Vec<(Sources, Ports)> {
    pod.allowances
        .iter()
        .map(|a| (a.sources.clone(), a.ports.clone()))
        .collect()
}

#[test]
fn the_members_policy_isolates_the_members_only() {
    let guarded = guarded_pods(&[&members_policy()], &inventory());
    let names: Vec<_> = guarded.iter().map(|g| g.pod.as_str()).collect();
    assert_eq!(
        names,
        ["prod/demo-0", "prod/demo-1"],
        "other/x has the label in another namespace"
    );
    let demo0 = &guarded[0];
    assert_eq!(demo0.ip, ip("10.244.1.10"));
    assert_eq!(demo0.node_ip, Some(ip("10.244.1.2")));
    assert_eq!(
        ways_in(demo0),
        vec![
            (addresses(&["10.244.1.10", "10.244.2.10"]), tcp(2380)),
            (
                addresses(&["10.244.1.10", "10.244.1.11", "10.244.2.10", "10.244.2.11"]),
                tcp(2379)
            ),
            (Sources::Anywhere, tcp(2381)),
        ]
    );
    assert!(
        demo0
            .allowances
            .iter()
            .all(|a| a.policy == "prod/demo-members")
    );
}

#[test]
fn only_ingress_policies_isolate() {
    let egress_only = policy(
        "apps",
        "egress",
        json!({"podSelector": {}, "policyTypes": ["Egress"], "egress": [{}]}),
    );
    assert!(guarded_pods(&[&egress_only], &inventory()).is_empty());
    // Without policyTypes a policy always isolates for ingress; with no
    // rule nothing gets in.
    let deny_all = policy("apps", "deny", json!({"podSelector": {}}));
    let guarded = guarded_pods(&[&deny_all], &inventory());
    assert_eq!(guarded.len(), 2);
    assert!(guarded.iter().all(|g| g.allowances.is_empty()));
}

#[test]
fn policies_on_one_pod_add_up() {
    let web = policy(
        "prod",
        "from-web",
        json!({
            "podSelector": {"matchLabels": {"cluster": "demo"}},
            "ingress": [{"from": [{"namespaceSelector": {"matchLabels": {"team": "web"}}}]}]
        }),
    );
    let guarded = guarded_pods(&[&members_policy(), &web], &inventory());
    let demo0 = &guarded[0];
    assert_eq!(demo0.allowances.len(), 4);
    assert_eq!(
        demo0.allowances[3],
        Allowance {
            policy: "prod/from-web".into(),
            sources: addresses(&["10.244.2.11", "10.244.3.11"]),
            ports: Ports::Any,
        }
    );
}

#[test]
fn namespace_selectors_select_namespaces_by_their_labels() {
    let from = |peers: Value| {
        let p = policy(
            "prod",
            "p",
            json!({"podSelector": {"matchLabels": {"cluster": "demo"}},
                   "ingress": [{"from": peers}]}),
        );
        ways_in(&guarded_pods(&[&p], &inventory())[0])
    };
    // Every namespace, every Pod.
    assert_eq!(
        from(json!([{"namespaceSelector": {}}])),
        vec![(
            addresses(&[
                "10.244.1.10",
                "10.244.1.11",
                "10.244.2.10",
                "10.244.2.11",
                "10.244.3.10",
                "10.244.3.11"
            ]),
            Ports::Any
        )]
    );
    // By name, through the label every namespace has.
    assert_eq!(
        from(json!([{"namespaceSelector": {"matchExpressions": [
            {"key": NAMESPACE_NAME, "operator": "In", "values": ["other"]}
        ]}}])),
        vec![(addresses(&["10.244.3.10"]), Ports::Any)]
    );
    // A selector nothing matches: no source at all.
    assert_eq!(
        from(json!([{"namespaceSelector": {"matchLabels": {"team": "none"}}}])),
        vec![]
    );
}

#[test]
fn ip_blocks_keep_their_exceptions() {
    let p = policy(
        "prod",
        "p",
        json!({"podSelector": {"matchLabels": {"cluster": "demo"}},
        "ingress": [{"from": [
            {"ipBlock": {"cidr": "10.244.250.0/24", "except": ["10.244.250.128/25"]}},
            {"ipBlock": {"cidr": "fd00::/8"}}
        ]}]}),
    );
    assert_eq!(
        ways_in(&guarded_pods(&[&p], &inventory())[0]),
        vec![(
            Sources::Block {
                cidr: "10.244.250.0/24".parse().unwrap(),
                except: vec!["10.244.250.128/25".parse().unwrap()],
            },
            Ports::Any
        )]
    );
}

#[test]
fn ports_by_number_range_protocol_or_name_of_the_destination() {
    let p = policy(
        "prod",
        "p",
        json!({"podSelector": {"matchLabels": {"cluster": "demo"}},
        "ingress": [{"ports": [
            {"port": "peer"},
            {"port": "peer", "protocol": "UDP"},
            {"port": "metrics"},
            {"port": 7000, "endPort": 7010},
            {"protocol": "UDP"},
            {"protocol": "SCTP", "port": 9},
            {"protocol": "ICMP", "port": 1}
        ]}]}),
    );
    assert_eq!(
        ways_in(&guarded_pods(&[&p], &inventory())[0]),
        vec![
            (Sources::Anywhere, tcp(2380)),
            (
                Sources::Anywhere,
                Ports::Range {
                    protocol: Protocol::Tcp,
                    first: 7000,
                    last: 7010
                }
            ),
            (Sources::Anywhere, Ports::Protocol(Protocol::Udp)),
            (
                Sources::Anywhere,
                Ports::Range {
                    protocol: Protocol::Sctp,
                    first: 9,
                    last: 9
                }
            ),
        ]
    );
}
