//! The nftables table enforcing ingress policy, computed from the isolated
//! Pods (pure).
//!
//! One table, `inet etcdlab-policy`, in the router namespace, hooked on
//! `forward`. Every packet between the lab's namespaces crosses it there:
//! routed traffic (between nodes, from the host) by the router's own
//! forwarding, and traffic between two namespaces on one node's bridge
//! through the bridge's netfilter calls (`bridge-nf-call-iptables`, which
//! the router turns on). Service traffic arrives after the service proxy's
//! DNAT (prerouting) and before its masquerade (postrouting), so it is
//! judged by its real source Pod and its real destination.
//!
//! - Replies and related packets of an accepted connection pass
//!   (`ct state established,related`): only new connections are judged.
//! - The lab host passes: it stands for the control-plane machine, whose
//!   own traffic (the API server; an operator or test run outside Pods)
//!   is not Pod traffic.
//! - A packet to an isolated Pod jumps to that Pod's chain: its node's
//!   address passes (the kubelet's probes), then each allowance, then a
//!   counted drop. A packet to any other address is not judged.
//!
//! The script deletes and recreates the table in one transaction.

use std::fmt::Write as _;
use std::net::Ipv4Addr;

use super::ingress::{Allowance, GuardedPod, Ports, Sources};

/// Name of the nftables table (family `inet`).
pub const TABLE: &str = "etcdlab-policy";

/// The nft script that replaces the table with rules for `pods`; traffic
/// from `lab_host` is never judged.
pub fn ruleset(pods: &[GuardedPod], lab_host: Ipv4Addr) -> String {
    let mut script = format!(
        "table inet {TABLE}\n\
         delete table inet {TABLE}\n\
         table inet {TABLE} {{\n\
         \tchain forward {{\n\
         \t\ttype filter hook forward priority 0; policy accept;\n\
         \t\tct state established,related accept\n\
         \t\tip saddr {lab_host} accept comment \"the lab host\"\n"
    );
    if !pods.is_empty() {
        let jumps: Vec<String> = pods
            .iter()
            .map(|pod| format!("{} : jump {}", pod.ip, chain_name(pod.ip)))
            .collect();
        let _ = writeln!(script, "\t\tip daddr vmap {{ {} }}", jumps.join(", "));
    }
    script.push_str("\t}\n");
    for pod in pods {
        let _ = writeln!(script, "\tchain {} {{", chain_name(pod.ip));
        if let Some(node) = pod.node_ip {
            let _ = writeln!(script, "\t\tip saddr {node} accept comment \"its node\"");
        }
        for allowance in &pod.allowances {
            if let Some(rule) = rule(allowance) {
                let _ = writeln!(script, "\t\t{rule}");
            }
        }
        let _ = writeln!(
            script,
            "\t\tcounter drop comment \"{}: isolated for ingress\"",
            quoted(&pod.pod)
        );
        script.push_str("\t}\n");
    }
    script.push_str("}\n");
    script
}

/// `pod-10-244-1-10`.
fn chain_name(ip: Ipv4Addr) -> String {
    let [a, b, c, d] = ip.octets();
    format!("pod-{a}-{b}-{c}-{d}")
}

/// The accept rule of an allowance; `None` if it can match nothing.
fn rule(allowance: &Allowance) -> Option<String> {
    let mut rule = String::new();
    match &allowance.sources {
        Sources::Anywhere => {}
        Sources::Addresses(addresses) if addresses.is_empty() => return None,
        Sources::Addresses(addresses) => {
            let list: Vec<String> = addresses.iter().map(ToString::to_string).collect();
            let _ = write!(rule, "ip saddr {{ {} }} ", list.join(", "));
        }
        Sources::Block { cidr, except } => {
            let _ = write!(rule, "ip saddr {cidr} ");
            for range in except {
                let _ = write!(rule, "ip saddr != {range} ");
            }
        }
    }
    match allowance.ports {
        Ports::Any => {}
        Ports::Protocol(protocol) => {
            let _ = write!(rule, "meta l4proto {} ", protocol.nft());
        }
        Ports::Range {
            protocol,
            first,
            last,
        } => {
            let _ = write!(rule, "{} dport {first}", protocol.nft());
            if last != first {
                let _ = write!(rule, "-{last}");
            }
            rule.push(' ');
        }
    }
    let _ = write!(rule, "accept comment \"{}\"", quoted(&allowance.policy));
    Some(rule)
}

fn quoted(text: &str) -> String {
    text.replace('"', "")
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;
    use crate::network_policy::inventory::Protocol;

    const HOST: Ipv4Addr = Ipv4Addr::new(10, 244, 0, 1);

    fn member() -> GuardedPod {
        let allow = |sources, ports| Allowance {
            policy: "prod/demo-members".into(),
            sources,
            ports,
        };
        GuardedPod {
            pod: "prod/demo-0".into(),
            ip: Ipv4Addr::new(10, 244, 1, 10),
            node_ip: Some(Ipv4Addr::new(10, 244, 1, 2)),
            allowances: vec![
                allow(
                    Sources::Addresses(BTreeSet::from([
                        Ipv4Addr::new(10, 244, 1, 10),
                        Ipv4Addr::new(10, 244, 2, 10),
                    ])),
                    Ports::Range {
                        protocol: Protocol::Tcp,
                        first: 2380,
                        last: 2380,
                    },
                ),
                allow(
                    Sources::Block {
                        cidr: "10.244.250.0/24".parse().unwrap(),
                        except: vec!["10.244.250.128/25".parse().unwrap()],
                    },
                    Ports::Range {
                        protocol: Protocol::Tcp,
                        first: 2379,
                        last: 2381,
                    },
                ),
                allow(Sources::Anywhere, Ports::Protocol(Protocol::Udp)),
                allow(Sources::Addresses(BTreeSet::new()), Ports::Any),
            ],
        }
    }

    #[test]
    fn isolated_pods_get_a_chain_that_ends_in_a_drop() {
        let script = ruleset(&[member()], HOST);
        let expected = "\
table inet etcdlab-policy
delete table inet etcdlab-policy
table inet etcdlab-policy {
\tchain forward {
\t\ttype filter hook forward priority 0; policy accept;
\t\tct state established,related accept
\t\tip saddr 10.244.0.1 accept comment \"the lab host\"
\t\tip daddr vmap { 10.244.1.10 : jump pod-10-244-1-10 }
\t}
\tchain pod-10-244-1-10 {
\t\tip saddr 10.244.1.2 accept comment \"its node\"
\t\tip saddr { 10.244.1.10, 10.244.2.10 } tcp dport 2380 accept comment \"prod/demo-members\"
\t\tip saddr 10.244.250.0/24 ip saddr != 10.244.250.128/25 tcp dport 2379-2381 accept comment \"prod/demo-members\"
\t\tmeta l4proto udp accept comment \"prod/demo-members\"
\t\tcounter drop comment \"prod/demo-0: isolated for ingress\"
\t}
}
";
        assert_eq!(script, expected);
    }

    #[test]
    fn without_isolated_pods_nothing_is_judged() {
        let script = ruleset(&[], HOST);
        assert!(!script.contains("vmap"), "{script}");
        assert!(!script.contains("drop"), "{script}");
    }

    #[test]
    fn an_open_rule_accepts_everything() {
        let mut pod = member();
        pod.node_ip = None;
        pod.allowances = vec![Allowance {
            policy: "prod/open".into(),
            sources: Sources::Anywhere,
            ports: Ports::Any,
        }];
        let script = ruleset(&[pod], HOST);
        assert!(
            script.contains("\tchain pod-10-244-1-10 {\n\t\taccept comment \"prod/open\"\n"),
            "{script}"
        );
    }
}
