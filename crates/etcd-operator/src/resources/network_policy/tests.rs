//! YAML in (an `EtcdCluster`), the NetworkPolicy out.

use k8s_openapi::api::networking::v1::{NetworkPolicy, NetworkPolicyIngressRule};
use serde_json::{Value, json};

use super::*;
use crate::api::identity::MemberIdentity;
use crate::planner::Bootstrap;
use crate::resources::{MemberAddressing, member_pod};

fn cluster(spec: &str) -> EtcdCluster {
    crate::resources::tests::cluster_with(spec)
}

fn policy(spec: &str) -> NetworkPolicy {
    network_policy(&cluster(spec), &OperatorPods::default()).expect("enabled")
}

/// The rules, as JSON.
fn rules(policy: &NetworkPolicy) -> Vec<NetworkPolicyIngressRule> {
    policy
        .spec
        .as_ref()
        .and_then(|s| s.ingress.clone())
        .expect("ingress rules")
}

/// The sources of the one rule that opens TCP `port` (`Value::Null`: from
/// anywhere); panics unless exactly one rule names the port.
fn sources_of(policy: &NetworkPolicy, port: u16) -> Value {
    let matching: Vec<_> = rules(policy)
        .into_iter()
        .filter(|r| {
            r.ports.iter().flatten().any(|p| {
                p.protocol.as_deref() == Some("TCP")
                    && p.port == Some(IntOrString::Int(i32::from(port)))
            })
        })
        .collect();
    assert_eq!(matching.len(), 1, "rules for port {port}: {matching:?}");
    serde_json::to_value(&matching[0].from).expect("serialises")
}

fn members() -> Value {
    json!({"podSelector": {"matchLabels": {
        "app.kubernetes.io/name": "etcd",
        "app.kubernetes.io/instance": "demo",
        "durable-etcd.io/cluster": "demo",
    }}})
}

fn operator() -> Value {
    json!({
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "etcd-operator-system"}},
        "podSelector": {"matchLabels": {"app.kubernetes.io/name": "etcd-operator"}},
    })
}

#[test]
fn by_default_peers_come_from_members_and_clients_from_the_namespace_and_the_operator() {
    let policy = policy("");
    assert_eq!(policy.metadata.name.as_deref(), Some("demo-members"));
    assert_eq!(policy.metadata.namespace.as_deref(), Some("prod"));
    let owner = &policy.metadata.owner_references.as_ref().expect("owner")[0];
    assert_eq!(
        (owner.uid.as_str(), owner.controller),
        ("1234-5678", Some(true))
    );
    let spec = policy.spec.as_ref().expect("spec");
    assert_eq!(
        serde_json::to_value(&spec.pod_selector).expect("serialises"),
        members()["podSelector"]
    );
    assert_eq!(spec.policy_types, Some(vec!["Ingress".to_string()]));
    assert_eq!(spec.egress, None, "what members send is not limited");

    assert_eq!(sources_of(&policy, PEER_PORT), json!([members()]));
    assert_eq!(sources_of(&policy, BRIDGE_PEER_PORT), json!([members()]));
    assert_eq!(
        sources_of(&policy, CLIENT_PORT),
        json!([{"podSelector": {}}, operator()])
    );
    assert_eq!(sources_of(&policy, VOLUME_USAGE_PORT), json!([operator()]));
    assert_eq!(
        sources_of(&policy, METRICS_PORT),
        Value::Null,
        "from anywhere"
    );
    assert_eq!(rules(&policy).len(), 4);
}

#[test]
fn clients_from_adds_peers_to_the_client_port_only() {
    let policy = policy(
        r#"
  networkPolicy:
    clientsFrom:
      - namespaceSelector: {matchLabels: {team: billing}}
      - namespaceSelector: {matchExpressions: [{key: env, operator: In, values: [prod]}]}
        podSelector: {matchLabels: {app: api}}
      - ipBlock: {cidr: 10.0.0.0/8, except: [10.1.0.0/16]}
"#,
    );
    assert_eq!(
        sources_of(&policy, CLIENT_PORT),
        json!([
            {"podSelector": {}},
            operator(),
            {"namespaceSelector": {"matchLabels": {"team": "billing"}}},
            {"namespaceSelector": {"matchExpressions": [{"key": "env", "operator": "In", "values": ["prod"]}]},
             "podSelector": {"matchLabels": {"app": "api"}}},
            {"ipBlock": {"cidr": "10.0.0.0/8", "except": ["10.1.0.0/16"]}},
        ])
    );
    assert_eq!(sources_of(&policy, PEER_PORT), json!([members()]));
}

#[test]
fn metrics_from_narrows_or_closes_the_metrics_port() {
    let narrowed = policy(
        r#"
  networkPolicy:
    metricsFrom:
      - namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: monitoring}}
"#,
    );
    assert_eq!(
        sources_of(&narrowed, METRICS_PORT),
        json!([{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}])
    );
    // An ingress rule with an empty `from` would let everyone in: a closed
    // port has no rule at all.
    let closed = policy("  networkPolicy: {metricsFrom: []}");
    assert!(
        rules(&closed)
            .iter()
            .flat_map(|r| r.ports.iter().flatten())
            .all(|p| p.port != Some(IntOrString::Int(i32::from(METRICS_PORT))))
    );
    assert_eq!(rules(&closed).len(), 3);
}

#[test]
fn disabled_means_no_policy() {
    let cluster = cluster("  networkPolicy: {enabled: false, clientsFrom: [{podSelector: {}}]}");
    assert_eq!(network_policy(&cluster, &OperatorPods::default()), None);
}

#[test]
fn the_operator_is_found_where_it_runs() {
    let operator = OperatorPods {
        namespace: "platform".to_string(),
        labels: BTreeMap::new(),
    };
    let policy = network_policy(&cluster(""), &operator).expect("enabled");
    assert_eq!(
        sources_of(&policy, VOLUME_USAGE_PORT),
        json!([{
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "platform"}},
            "podSelector": {},
        }])
    );
}

/// A port added to the member Pod without a rule would be closed by the
/// policy: every port the Pod declares is named.
#[test]
fn every_port_of_a_member_pod_has_a_rule() {
    let cluster = cluster("");
    let pod = member_pod(
        &cluster,
        &MemberAddressing::new("demo", "prod"),
        "example.org/etcd-operator:dev",
        0,
        &Bootstrap::New {
            token: "demo-1234".to_string(),
            initial_members: vec![0, 1, 2],
        },
        &MemberIdentity {
            cluster_token: "demo-1234".to_string(),
            cluster_id: None,
            member_id: None,
        },
    );
    let policy = policy("");
    let declared: Vec<_> = pod
        .spec
        .expect("spec")
        .containers
        .iter()
        .flat_map(|c| c.ports.iter().flatten())
        .map(|p| p.container_port)
        .collect();
    assert_eq!(declared.len(), 4, "{declared:?}");
    for port in declared {
        let port = u16::try_from(port).expect("a port");
        sources_of(&policy, port);
    }
    // The member Pods carry the labels the policy selects.
    let selector = members()["podSelector"]["matchLabels"].clone();
    let labels = serde_json::to_value(pod.metadata.labels).expect("serialises");
    for (key, value) in selector.as_object().expect("labels") {
        assert_eq!(&labels[key], value, "{key}");
    }
}
