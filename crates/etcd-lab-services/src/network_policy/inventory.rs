//! The Pods and Namespaces as NetworkPolicies see them: each running Pod's
//! address, node, labels and named ports, and each namespace's labels
//! (pure).

use std::collections::BTreeMap;
use std::net::Ipv4Addr;

use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::ResourceExt;

/// The label the API server gives every namespace: its own name.
pub const NAMESPACE_NAME_LABEL: &str = "kubernetes.io/metadata.name";

/// A transport protocol a policy port names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Protocol {
    Tcp,
    Udp,
    Sctp,
}

impl Protocol {
    /// `TCP`, `UDP` or `SCTP` (absent: TCP, the API's default).
    pub fn parse(protocol: Option<&str>) -> Option<Self> {
        match protocol.unwrap_or("TCP") {
            "TCP" => Some(Self::Tcp),
            "UDP" => Some(Self::Udp),
            "SCTP" => Some(Self::Sctp),
            _ => None,
        }
    }

    /// The name nft knows it by.
    pub fn nft(self) -> &'static str {
        match self {
            Self::Tcp => "tcp",
            Self::Udp => "udp",
            Self::Sctp => "sctp",
        }
    }
}

/// A named container port, which a policy may name instead of a number.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NamedPort {
    pub name: String,
    pub protocol: Protocol,
    pub port: u16,
}

/// A Pod with a Pod network address that may send or receive traffic.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodView {
    pub namespace: String,
    pub name: String,
    pub ip: Ipv4Addr,
    /// The address of its node (`status.hostIP`): the kubelet's probes
    /// come from there.
    pub node_ip: Option<Ipv4Addr>,
    pub labels: BTreeMap<String, String>,
    pub ports: Vec<NamedPort>,
}

impl PodView {
    /// The view of `pod`; `None` for a Pod without an IPv4 Pod address, on
    /// the host network, or finished (its address may already be another
    /// Pod's).
    pub fn of(pod: &Pod) -> Option<Self> {
        let status = pod.status.as_ref()?;
        if matches!(status.phase.as_deref(), Some("Succeeded" | "Failed")) {
            return None;
        }
        let spec = pod.spec.as_ref()?;
        if spec.host_network == Some(true) {
            return None;
        }
        let ip = status.pod_ip.as_deref()?.parse().ok()?;
        let ports = spec
            .containers
            .iter()
            .flat_map(|c| c.ports.iter().flatten())
            .filter_map(|p| {
                Some(NamedPort {
                    name: p.name.clone()?,
                    protocol: Protocol::parse(p.protocol.as_deref())?,
                    port: u16::try_from(p.container_port).ok()?,
                })
            })
            .collect();
        Some(Self {
            namespace: pod.namespace()?,
            name: pod.name_any(),
            ip,
            node_ip: status.host_ip.as_deref().and_then(|ip| ip.parse().ok()),
            labels: pod.labels().clone(),
            ports,
        })
    }

    /// `namespace/name`.
    pub fn id(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }
}

/// Every Pod that may send or receive, and every namespace's labels.
#[derive(Clone, Debug, Default)]
pub struct Inventory {
    pub pods: Vec<PodView>,
    namespaces: BTreeMap<String, BTreeMap<String, String>>,
}

impl Inventory {
    /// The inventory of these objects.
    pub fn new(pods: &[&Pod], namespaces: &[&Namespace]) -> Self {
        let mut pods: Vec<PodView> = pods.iter().filter_map(|p| PodView::of(p)).collect();
        pods.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
        Self {
            pods,
            namespaces: namespaces
                .iter()
                .map(|ns| (ns.name_any(), ns.labels().clone()))
                .collect(),
        }
    }

    /// The labels of namespace `name`; for a namespace not seen yet, the
    /// one label the API server gives every namespace.
    pub fn namespace_labels(&self, name: &str) -> BTreeMap<String, String> {
        self.namespaces
            .get(name)
            .cloned()
            .unwrap_or_else(|| BTreeMap::from([(NAMESPACE_NAME_LABEL.to_owned(), name.to_owned())]))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(json: serde_json::Value) -> Pod {
        serde_json::from_value(json).unwrap()
    }

    #[test]
    fn a_running_pod_is_seen_with_its_address_node_and_named_ports() {
        let pod = pod(serde_json::json!({
            "metadata": {"name": "demo-0", "namespace": "prod", "labels": {"app": "etcd"}},
            "spec": {"containers": [{"name": "etcd", "ports": [
                {"name": "client", "containerPort": 2379},
                {"name": "dns", "containerPort": 53, "protocol": "UDP"},
                {"containerPort": 9999}
            ]}]},
            "status": {"phase": "Running", "podIP": "10.244.1.10", "hostIP": "10.244.1.2"}
        }));
        let view = PodView::of(&pod).expect("seen");
        assert_eq!(view.id(), "prod/demo-0");
        assert_eq!(view.ip, Ipv4Addr::new(10, 244, 1, 10));
        assert_eq!(view.node_ip, Some(Ipv4Addr::new(10, 244, 1, 2)));
        assert_eq!(view.labels["app"], "etcd");
        assert_eq!(
            view.ports,
            vec![
                NamedPort {
                    name: "client".into(),
                    protocol: Protocol::Tcp,
                    port: 2379
                },
                NamedPort {
                    name: "dns".into(),
                    protocol: Protocol::Udp,
                    port: 53
                }
            ]
        );
    }

    #[test]
    fn pods_without_an_address_of_their_own_are_not_seen() {
        let unscheduled = pod(serde_json::json!({
            "metadata": {"name": "a", "namespace": "prod"},
            "spec": {"containers": []},
            "status": {"phase": "Pending"}
        }));
        let finished = pod(serde_json::json!({
            "metadata": {"name": "b", "namespace": "prod"},
            "spec": {"containers": []},
            "status": {"phase": "Succeeded", "podIP": "10.244.1.11"}
        }));
        let host = pod(serde_json::json!({
            "metadata": {"name": "c", "namespace": "prod"},
            "spec": {"containers": [], "hostNetwork": true},
            "status": {"phase": "Running", "podIP": "10.244.1.2"}
        }));
        for pod in [unscheduled, finished, host] {
            assert_eq!(PodView::of(&pod), None, "{}", pod.name_any());
        }
    }

    #[test]
    fn a_namespace_not_seen_yet_has_its_name_label() {
        let ns: Namespace = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "prod", "labels": {"team": "db", NAMESPACE_NAME_LABEL: "prod"}}
        }))
        .unwrap();
        let inventory = Inventory::new(&[], &[&ns]);
        assert_eq!(inventory.namespace_labels("prod")["team"], "db");
        assert_eq!(
            inventory.namespace_labels("new"),
            BTreeMap::from([(NAMESPACE_NAME_LABEL.to_owned(), "new".to_owned())])
        );
    }
}
