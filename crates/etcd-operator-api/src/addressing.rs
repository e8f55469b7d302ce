//! Names and addresses of a cluster's objects and members, the ports and
//! the ID format of etcd. One place, below everything else, so the planner,
//! the builders and the reconciler always agree.

use crate::transport::Transport;

/// The default DNS domain of a Kubernetes cluster.
pub const DEFAULT_CLUSTER_DOMAIN: &str = "cluster.local";
pub use crate::transport::{CLIENT_PORT, PEER_PORT};
/// Port of etcd's `/metrics`, `/livez`, `/readyz` and `/health` (plain HTTP,
/// `--listen-metrics-urls`), independent of the TLS of the client port.
pub const METRICS_PORT: u16 = 2381;

/// The member (Pod) name of an ordinal: `<cluster>-<ordinal>`.
pub fn member_name(cluster: &str, ordinal: u32) -> String {
    format!("{cluster}-{ordinal}")
}

/// The PVC holding the data of an ordinal: `data-<cluster>-<ordinal>`.
pub fn pvc_name(cluster: &str, ordinal: u32) -> String {
    format!("data-{}", member_name(cluster, ordinal))
}

/// The headless Service that gives each member its peer DNS name.
pub fn peer_service_name(cluster: &str) -> String {
    format!("{cluster}-peer")
}

/// The Service clients use.
pub fn client_service_name(cluster: &str) -> String {
    format!("{cluster}-client")
}

/// Name of the restore Pod of a cluster.
pub fn restore_pod_name(cluster: &str) -> String {
    format!("{cluster}-restore")
}

/// The Secret of a TLS cluster's CA (`ca.crt`, `ca.key`): read by the
/// operator only, never mounted.
pub fn ca_secret_name(cluster: &str) -> String {
    format!("{cluster}-ca")
}

/// A Secret holding one certificate of a TLS cluster (`tls.crt`,
/// `tls.key`, `ca.crt`): `<cluster>-<role>-tls`, where the role is
/// `server`, `peer`, `client` (for users) or `operator`.
pub fn tls_secret_name(cluster: &str, role: &str) -> String {
    format!("{cluster}-{role}-tls")
}

/// The ends that make the common names of a TLS cluster's own
/// certificates from its name: `<cluster>-server` (the members' client
/// port), `<cluster>-peer` (the members' peer port: the only common name
/// `--peer-cert-allowed-cn` lets onto it) and `<cluster>-client` (the
/// users' shared client certificate).
pub const CLUSTER_COMMON_NAME_SUFFIXES: [&str; 3] = ["-server", "-peer", "-client"];

/// The common name of the operator's own client certificate, the same in
/// every cluster.
pub const OPERATOR_COMMON_NAME: &str = "etcd-operator";

/// etcd's superuser: once etcd authentication is on, a client certificate
/// with this common name may do everything, roles and users included.
pub const ETCD_ROOT_USER: &str = "root";

/// The common names reserved in every cluster, whatever its name.
pub const FIXED_RESERVED_COMMON_NAMES: [&str; 2] = [OPERATOR_COMMON_NAME, ETCD_ROOT_USER];

/// The common name of the members' client-port certificate.
pub fn server_common_name(cluster: &str) -> String {
    format!("{cluster}{}", CLUSTER_COMMON_NAME_SUFFIXES[0])
}

/// The common name of the members' peer certificate, the only one etcd
/// accepts on the peer port (`--peer-cert-allowed-cn`).
pub fn peer_common_name(cluster: &str) -> String {
    format!("{cluster}{}", CLUSTER_COMMON_NAME_SUFFIXES[1])
}

/// The common name of the users' shared client certificate
/// (`<cluster>-client-tls`).
pub fn client_common_name(cluster: &str) -> String {
    format!("{cluster}{}", CLUSTER_COMMON_NAME_SUFFIXES[2])
}

/// Whether `name` is a common name no application's certificate
/// (`spec.tls.clientCertificates`) may carry in cluster `cluster`: one of
/// the cluster's own certificates' (one named `<cluster>-peer` would be
/// let onto the peer port as a member), the operator's, or etcd's
/// superuser. The CRD refuses these names (`api::tls`); the operator
/// issues none of them either.
pub fn is_reserved_common_name(cluster: &str, name: &str) -> bool {
    FIXED_RESERVED_COMMON_NAMES.contains(&name)
        || CLUSTER_COMMON_NAME_SUFFIXES
            .iter()
            .any(|suffix| name.strip_suffix(suffix) == Some(cluster))
}

/// The PodDisruptionBudget of the members.
pub fn pdb_name(cluster: &str) -> String {
    cluster.to_string()
}

/// The NetworkPolicy of the members: `<cluster>-members`.
pub fn network_policy_name(cluster: &str) -> String {
    format!("{cluster}-members")
}

/// The ordinal of a member name `<cluster>-<ordinal>`, if it is one.
pub fn ordinal_of_member(cluster: &str, name: &str) -> Option<u32> {
    let rest = name.strip_prefix(cluster)?.strip_prefix('-')?;
    if rest.is_empty() || (rest.len() > 1 && rest.starts_with('0')) {
        return None;
    }
    rest.parse().ok()
}

/// The ordinal of a peer URL whose host is `<cluster>-<ordinal>.<...>`:
/// how an added member that has not started (no name yet) is recognised.
pub fn ordinal_of_peer_url(cluster: &str, url: &str) -> Option<u32> {
    let without_scheme = url.split_once("://").map_or(url, |(_, rest)| rest);
    let host = without_scheme.split([':', '/']).next()?;
    let first_label = host.split('.').next()?;
    ordinal_of_member(cluster, first_label)
}

/// Where a cluster's members are reached.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemberAddressing {
    /// Name of the `EtcdCluster`.
    pub cluster: String,
    /// Its namespace.
    pub namespace: String,
    /// The Kubernetes cluster DNS domain.
    pub cluster_domain: String,
    /// What the members serve clients and peers on (the stage of turning
    /// TLS on, when it is being turned on): every URL follows it.
    pub transport: Transport,
}

impl MemberAddressing {
    /// Plain-HTTP addressing in the default cluster domain.
    pub fn new(cluster: impl Into<String>, namespace: impl Into<String>) -> Self {
        Self {
            cluster: cluster.into(),
            namespace: namespace.into(),
            cluster_domain: DEFAULT_CLUSTER_DOMAIN.to_string(),
            transport: Transport::Plaintext,
        }
    }

    /// Stable DNS name of a member:
    /// `<cluster>-<ordinal>.<cluster>-peer.<ns>.svc.<domain>`.
    pub fn member_host(&self, ordinal: u32) -> String {
        format!(
            "{}.{}.{}.svc.{}",
            member_name(&self.cluster, ordinal),
            peer_service_name(&self.cluster),
            self.namespace,
            self.cluster_domain
        )
    }

    /// The peer URL a member is added or bootstrapped with.
    pub fn peer_url(&self, ordinal: u32) -> String {
        self.transport
            .new_member_peer_url(&self.member_host(ordinal))
    }

    /// The client URL of a member that clients use.
    pub fn client_url(&self, ordinal: u32) -> String {
        format!(
            "{}://{}:{CLIENT_PORT}",
            self.transport.client_scheme(),
            self.member_host(ordinal)
        )
    }

    /// Every client URL a member advertises.
    pub fn advertised_client_urls(&self, ordinal: u32) -> Vec<String> {
        self.transport.client_urls(&self.member_host(ordinal))
    }

    /// The `--initial-cluster` value for a set of ordinals: each member with
    /// the peer URLs etcd's member list holds for it (`known`), else the URL
    /// a member added now is given.
    pub fn initial_cluster(
        &self,
        ordinals: &[u32],
        known: Option<&std::collections::BTreeMap<u32, Vec<String>>>,
    ) -> String {
        ordinals
            .iter()
            .flat_map(|&o| {
                let name = member_name(&self.cluster, o);
                let urls = known
                    .and_then(|k| k.get(&o))
                    .filter(|urls| !urls.is_empty())
                    .cloned()
                    .unwrap_or_else(|| vec![self.peer_url(o)]);
                urls.into_iter().map(move |url| format!("{name}={url}"))
            })
            .collect::<Vec<_>>()
            .join(",")
    }
}

/// Formats a member or cluster ID the way etcd and etcdctl print it
/// (lower-case hex, no prefix).
pub fn format_id(id: u64) -> String {
    format!("{id:x}")
}

/// Parses a member or cluster ID printed in hex, with or without `0x`.
pub fn parse_id(text: &str) -> Option<u64> {
    let text = text.trim();
    u64::from_str_radix(text.strip_prefix("0x").unwrap_or(text), 16).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_hex_with_or_without_0x() {
        assert_eq!(format_id(0x8e9e05c52164694d), "8e9e05c52164694d");
        assert_eq!(parse_id("8e9e05c52164694d"), Some(0x8e9e05c52164694d));
        assert_eq!(parse_id("0x8e9e05c52164694d"), Some(0x8e9e05c52164694d));
        assert_eq!(parse_id("not-hex"), None);
    }

    #[test]
    fn names_follow_the_ordinal() {
        assert_eq!(member_name("demo", 2), "demo-2");
        assert_eq!(pvc_name("demo", 2), "data-demo-2");
        assert_eq!(ordinal_of_member("demo", "demo-2"), Some(2));
        assert_eq!(ordinal_of_member("demo", "demo-02"), None);
        assert_eq!(ordinal_of_member("demo", "demo-x-2"), None);
        assert_eq!(ordinal_of_member("demo", "other-2"), None);
    }

    #[test]
    fn peer_urls_use_the_headless_service_dns() {
        let a = MemberAddressing::new("demo", "prod");
        assert_eq!(
            a.peer_url(1),
            "http://demo-1.demo-peer.prod.svc.cluster.local:2380"
        );
        assert_eq!(ordinal_of_peer_url("demo", &a.peer_url(1)), Some(1));
        let tls = MemberAddressing {
            transport: Transport::Tls,
            ..a.clone()
        };
        assert_eq!(
            tls.client_url(0),
            "https://demo-0.demo-peer.prod.svc.cluster.local:2379"
        );
        assert_eq!(
            a.initial_cluster(&[0, 1], None),
            "demo-0=http://demo-0.demo-peer.prod.svc.cluster.local:2380,demo-1=http://demo-1.demo-peer.prod.svc.cluster.local:2380"
        );
    }

    /// While a transport change moves peer URLs, a joining member lists
    /// each member with the URL etcd holds for it, not the stage's pattern.
    #[test]
    fn the_initial_cluster_of_a_join_takes_the_member_lists_urls() {
        let a = MemberAddressing::new("demo", "prod");
        let moved = "https://demo-0.demo-peer.prod.svc.cluster.local:2382".to_string();
        let known = std::collections::BTreeMap::from([(0, vec![moved.clone()])]);
        assert_eq!(
            a.initial_cluster(&[0, 1], Some(&known)),
            format!("demo-0={moved},demo-1=http://demo-1.demo-peer.prod.svc.cluster.local:2380")
        );
    }
}
