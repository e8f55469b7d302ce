//! Which Pods NetworkPolicies isolate for ingress and what each lets in
//! (pure): the API's semantics, resolved against the inventory into
//! addresses and port ranges.
//!
//! - A policy selects the Pods of its namespace its `podSelector` matches;
//!   it isolates them for ingress when its `policyTypes` hold `Ingress`
//!   (absent: always).
//! - An isolated Pod accepts what any rule of any policy selecting it
//!   allows: the union. A Pod no policy isolates accepts everything.
//! - A rule's `from` (absent or empty: every source) lists peers:
//!   `podSelector` alone selects Pods of the policy's namespace;
//!   `namespaceSelector` (with an optional `podSelector`) Pods of the
//!   namespaces it selects; `ipBlock` a CIDR minus its `except` ranges.
//! - A rule's `ports` (absent or empty: every port) name a protocol (TCP by
//!   default), a number or a named port of the destination Pod, and an
//!   optional `endPort`.

use std::collections::{BTreeMap, BTreeSet};
use std::net::Ipv4Addr;

use k8s_openapi::api::networking::v1::{
    NetworkPolicy, NetworkPolicyIngressRule, NetworkPolicyPort,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::ResourceExt;

use super::inventory::{Inventory, PodView, Protocol};
use super::selector::matches;
use crate::proxy::Ipv4Cidr;

/// Where allowed traffic may come from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Sources {
    /// Every source.
    Anywhere,
    /// These Pod addresses (never empty).
    Addresses(BTreeSet<Ipv4Addr>),
    /// A CIDR without its `except` ranges.
    Block {
        cidr: Ipv4Cidr,
        except: Vec<Ipv4Cidr>,
    },
}

/// Which ports allowed traffic may go to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Ports {
    /// Every protocol and port.
    Any,
    /// Every port of a protocol.
    Protocol(Protocol),
    /// `first..=last` of a protocol.
    Range {
        protocol: Protocol,
        first: u16,
        last: u16,
    },
}

/// One way into an isolated Pod.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Allowance {
    /// The policy it comes from, `namespace/name`.
    pub policy: String,
    pub sources: Sources,
    pub ports: Ports,
}

/// A Pod isolated for ingress and every way in.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GuardedPod {
    /// `namespace/name`.
    pub pod: String,
    pub ip: Ipv4Addr,
    pub node_ip: Option<Ipv4Addr>,
    /// Empty: nothing may open a connection to it.
    pub allowances: Vec<Allowance>,
}

/// The Pods `policies` isolate for ingress, by address.
pub fn guarded_pods(policies: &[&NetworkPolicy], inventory: &Inventory) -> Vec<GuardedPod> {
    let mut guarded: BTreeMap<Ipv4Addr, GuardedPod> = BTreeMap::new();
    for policy in policies.iter().copied().filter(|p| isolates_ingress(p)) {
        let (Some(namespace), Some(spec)) = (policy.namespace(), policy.spec.as_ref()) else {
            continue;
        };
        let selector = spec.pod_selector.clone().unwrap_or_default();
        let selected: Vec<&PodView> = inventory
            .pods
            .iter()
            .filter(|p| p.namespace == namespace && matches(&selector, &p.labels))
            .collect();
        if selected.is_empty() {
            continue;
        }
        let id = format!("{namespace}/{}", policy.name_any());
        let rules: Vec<(&NetworkPolicyIngressRule, Vec<Sources>)> = spec
            .ingress
            .iter()
            .flatten()
            .map(|rule| (rule, sources(rule, &namespace, inventory)))
            .collect();
        for pod in selected {
            // Two Pods on one address (one of them stale) get the union.
            let entry = guarded.entry(pod.ip).or_insert_with(|| GuardedPod {
                pod: pod.id(),
                ip: pod.ip,
                node_ip: pod.node_ip,
                allowances: Vec::new(),
            });
            for (rule, sources) in &rules {
                let ports = ports(rule, pod);
                for sources in sources {
                    for ports in &ports {
                        entry.allowances.push(Allowance {
                            policy: id.clone(),
                            sources: sources.clone(),
                            ports: ports.clone(),
                        });
                    }
                }
            }
        }
    }
    guarded.into_values().collect()
}

/// Whether the policy isolates the Pods it selects for ingress.
fn isolates_ingress(policy: &NetworkPolicy) -> bool {
    policy
        .spec
        .as_ref()
        .and_then(|s| s.policy_types.as_ref())
        .is_none_or(|types| types.iter().any(|t| t == "Ingress"))
}

/// The sources of a rule of a policy in `namespace` (empty: none).
fn sources(
    rule: &NetworkPolicyIngressRule,
    namespace: &str,
    inventory: &Inventory,
) -> Vec<Sources> {
    let peers = rule.from.as_deref().unwrap_or_default();
    if peers.is_empty() {
        return vec![Sources::Anywhere];
    }
    let mut addresses = BTreeSet::new();
    let mut blocks = Vec::new();
    for peer in peers {
        if let Some(block) = &peer.ip_block {
            // An IPv6 block matches nothing in the lab's IPv4 network.
            if let Ok(cidr) = block.cidr.parse() {
                let except = block
                    .except
                    .iter()
                    .flatten()
                    .filter_map(|e| e.parse().ok())
                    .collect();
                blocks.push(Sources::Block { cidr, except });
            }
            continue;
        }
        let in_namespace = |pod: &PodView| match &peer.namespace_selector {
            Some(selector) => matches(selector, &inventory.namespace_labels(&pod.namespace)),
            None => peer.pod_selector.is_some() && pod.namespace == namespace,
        };
        let every_pod = LabelSelector::default();
        let pod_selector = peer.pod_selector.as_ref().unwrap_or(&every_pod);
        addresses.extend(
            inventory
                .pods
                .iter()
                .filter(|pod| in_namespace(pod) && matches(pod_selector, &pod.labels))
                .map(|pod| pod.ip),
        );
    }
    let mut sources = Vec::new();
    if !addresses.is_empty() {
        sources.push(Sources::Addresses(addresses));
    }
    sources.extend(blocks);
    sources
}

/// The ports of a rule on Pod `pod` (empty: none).
fn ports(rule: &NetworkPolicyIngressRule, pod: &PodView) -> Vec<Ports> {
    let ports = rule.ports.as_deref().unwrap_or_default();
    if ports.is_empty() {
        return vec![Ports::Any];
    }
    ports.iter().filter_map(|port| resolve(port, pod)).collect()
}

/// A policy port on `pod`: `None` for a protocol the lab does not know, a
/// number out of range, or a name none of the Pod's ports carries.
fn resolve(port: &NetworkPolicyPort, pod: &PodView) -> Option<Ports> {
    let protocol = Protocol::parse(port.protocol.as_deref())?;
    let first = match port.port.as_ref() {
        None => return Some(Ports::Protocol(protocol)),
        Some(IntOrString::Int(number)) => u16::try_from(*number).ok().filter(|n| *n > 0)?,
        Some(IntOrString::String(name)) => {
            return pod
                .ports
                .iter()
                .find(|p| &p.name == name && p.protocol == protocol)
                .map(|p| Ports::Range {
                    protocol,
                    first: p.port,
                    last: p.port,
                });
        }
    };
    let last = match port.end_port {
        Some(end) => u16::try_from(end).ok().filter(|end| *end >= first)?,
        None => first,
    };
    Some(Ports::Range {
        protocol,
        first,
        last,
    })
}

#[cfg(test)]
mod tests;
