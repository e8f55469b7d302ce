//! The certificates of a TLS cluster (`spec.tls`): which ones exist, the
//! names each carries, the Secrets that hold them, and where member Pods
//! mount them. Pure; issuing is [`crate::tls`], writing the Secrets is the
//! reconciler's.
//!
//! | Secret | holds | mounted in |
//! | --- | --- | --- |
//! | `<cluster>-ca` | the CA and its key | nothing (the operator reads it) |
//! | `<cluster>-server-tls` | the members' client-port certificate | members |
//! | `<cluster>-peer-tls` | the members' peer certificate | members |
//! | `<cluster>-client-tls` | a client certificate for users | nothing |
//! | `<cluster>-operator-tls` | the operator's client certificate | nothing |
//! | `<cluster>-client-<name>-tls` | a client certificate per `spec.tls.clientCertificates` name | nothing |
//!
//! One server and one peer certificate serve every member: they name every
//! member through the peer Service's wildcard, so a member added later
//! needs no new certificate. Both carry `serverAuth` and `clientAuth`:
//! members dial each other, and with `--client-cert-auth` etcd's own
//! gateway dials its client port presenting the server certificate.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::{Resource, ResourceExt};

use crate::addressing::{
    MemberAddressing, OPERATOR_COMMON_NAME, ca_secret_name, client_common_name,
    client_service_name, peer_common_name, peer_service_name, server_common_name, tls_secret_name,
};
use crate::api::EtcdCluster;
use crate::api::identity::{CLUSTER_LABEL, MANAGED_BY_LABEL, MANAGER};
use crate::tls::LeafUsage;

/// Key of a certificate in its Secret.
pub const CERT_KEY: &str = "tls.crt";
/// Key of its private key.
pub const KEY_KEY: &str = "tls.key";
/// Key of the CA bundle it verifies peers and clients with.
pub const CA_KEY: &str = "ca.crt";
/// Key of the CA's private key in the CA Secret.
pub const CA_PRIVATE_KEY: &str = "ca.key";
/// Key, in the CA Secret, of the CA a rotation brings in (trusted, not
/// signing yet).
pub const INCOMING_CA_KEY: &str = "incoming-ca.crt";
/// Key of that CA's private key.
pub const INCOMING_CA_PRIVATE_KEY: &str = "incoming-ca.key";
/// Key, in the CA Secret, of the CA a rotation retires (trusted, no longer
/// signing).
pub const RETIRING_CA_KEY: &str = "retiring-ca.crt";

/// Where member Pods mount the server certificate.
pub const SERVER_TLS_DIR: &str = "/var/run/etcd-tls/server";
/// Where member Pods mount the peer certificate.
pub const PEER_TLS_DIR: &str = "/var/run/etcd-tls/peer";

/// One certificate of a cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TlsRole {
    /// The members' client port.
    Server,
    /// The members' peer port (and their dialling of each other).
    Peer,
    /// For users: `etcdctl --cert/--key/--cacert`.
    Client,
    /// The operator's own connections.
    Operator,
    /// An application's client certificate, by its name in
    /// `spec.tls.clientCertificates`.
    NamedClient(String),
}

impl TlsRole {
    /// The leaves every TLS cluster has.
    pub const ALL: [Self; 4] = [Self::Server, Self::Peer, Self::Client, Self::Operator];

    /// Every leaf of a cluster whose spec names `named` client
    /// certificates.
    pub fn every(named: impl IntoIterator<Item = String>) -> Vec<Self> {
        Self::ALL
            .into_iter()
            .chain(named.into_iter().map(Self::NamedClient))
            .collect()
    }

    /// `server`, `peer`, `client`, `operator`, `client-<name>`: the part of
    /// its Secret's name between the cluster's and `-tls`.
    pub fn as_str(&self) -> std::borrow::Cow<'static, str> {
        match self {
            Self::Server => "server".into(),
            Self::Peer => "peer".into(),
            Self::Client => "client".into(),
            Self::Operator => "operator".into(),
            Self::NamedClient(name) => format!("client-{name}").into(),
        }
    }

    /// The extended key usages.
    pub fn usage(&self) -> LeafUsage {
        match self {
            Self::Server | Self::Peer => LeafUsage::Peer,
            Self::Client | Self::Operator | Self::NamedClient(_) => LeafUsage::Client,
        }
    }
}

/// What a certificate must say: its common name, DNS names and addresses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CertificateNames {
    /// Subject common name.
    pub common_name: String,
    /// subjectAltName DNS names.
    pub dns_names: Vec<String>,
    /// subjectAltName IP addresses.
    pub ip_addresses: Vec<IpAddr>,
}

/// The name the operator checks member certificates against (it dials
/// members by Pod IP): the client Service's full name.
pub fn server_name(addressing: &MemberAddressing) -> String {
    format!(
        "{}.{}.svc.{}",
        client_service_name(&addressing.cluster),
        addressing.namespace,
        addressing.cluster_domain
    )
}

/// The names `role`'s certificate carries.
pub fn certificate_names(addressing: &MemberAddressing, role: &TlsRole) -> CertificateNames {
    let cluster = &addressing.cluster;
    let namespace = &addressing.namespace;
    let domain = &addressing.cluster_domain;
    let peer = peer_service_name(cluster);
    let client = client_service_name(cluster);
    let members = vec![
        format!("*.{peer}.{namespace}.svc.{domain}"),
        format!("*.{peer}.{namespace}.svc"),
    ];
    match role {
        TlsRole::Server => {
            let mut dns = members;
            dns.extend([
                client.clone(),
                format!("{client}.{namespace}"),
                format!("{client}.{namespace}.svc"),
                server_name(addressing),
                "localhost".to_string(),
            ]);
            CertificateNames {
                common_name: server_common_name(cluster),
                dns_names: dns,
                ip_addresses: vec![
                    IpAddr::V4(Ipv4Addr::LOCALHOST),
                    IpAddr::V6(Ipv6Addr::LOCALHOST),
                ],
            }
        }
        TlsRole::Peer => CertificateNames {
            common_name: peer_common_name(cluster),
            dns_names: members,
            ip_addresses: Vec::new(),
        },
        TlsRole::Client => CertificateNames {
            common_name: client_common_name(cluster),
            dns_names: Vec::new(),
            ip_addresses: Vec::new(),
        },
        TlsRole::Operator => CertificateNames {
            common_name: OPERATOR_COMMON_NAME.to_string(),
            dns_names: Vec::new(),
            ip_addresses: Vec::new(),
        },
        TlsRole::NamedClient(name) => CertificateNames {
            common_name: name.clone(),
            dns_names: Vec::new(),
            ip_addresses: Vec::new(),
        },
    }
}

/// The Secret of `role`'s certificate.
pub fn leaf_secret_name(cluster: &str, role: &TlsRole) -> String {
    tls_secret_name(cluster, &role.as_str())
}

pub(crate) fn metadata(cluster: &EtcdCluster, name: String) -> ObjectMeta {
    ObjectMeta {
        name: Some(name),
        namespace: cluster.namespace(),
        labels: Some(BTreeMap::from([
            (CLUSTER_LABEL.to_string(), cluster.name_any()),
            (MANAGED_BY_LABEL.to_string(), MANAGER.to_string()),
        ])),
        owner_references: cluster.controller_owner_ref(&()).map(|r| vec![r]),
        ..ObjectMeta::default()
    }
}

/// The CA's Secret.
pub fn ca_secret(cluster: &EtcdCluster, cert_pem: &str, key_pem: &str) -> Secret {
    Secret {
        metadata: metadata(cluster, ca_secret_name(&cluster.name_any())),
        data: Some(BTreeMap::from([
            (CA_KEY.to_string(), ByteString(cert_pem.as_bytes().to_vec())),
            (
                CA_PRIVATE_KEY.to_string(),
                ByteString(key_pem.as_bytes().to_vec()),
            ),
        ])),
        type_: Some("Opaque".to_string()),
        ..Secret::default()
    }
}

/// The Secret of one leaf: certificate, key and the CA bundle.
pub fn leaf_secret(
    cluster: &EtcdCluster,
    role: &TlsRole,
    cert_pem: &str,
    key_pem: &str,
    ca_bundle_pem: &str,
) -> Secret {
    Secret {
        metadata: metadata(cluster, leaf_secret_name(&cluster.name_any(), role)),
        data: Some(BTreeMap::from([
            (
                CERT_KEY.to_string(),
                ByteString(cert_pem.as_bytes().to_vec()),
            ),
            (KEY_KEY.to_string(), ByteString(key_pem.as_bytes().to_vec())),
            (
                CA_KEY.to_string(),
                ByteString(ca_bundle_pem.as_bytes().to_vec()),
            ),
        ])),
        type_: Some("kubernetes.io/tls".to_string()),
        ..Secret::default()
    }
}

/// etcd's TLS flags for the certificates mounted at [`SERVER_TLS_DIR`]
/// and [`PEER_TLS_DIR`]: both ports demand a certificate signed by the CA
/// (CIS etcd benchmark 2.1–2.5), no self-signed automatic TLS (2.3, 2.6).
/// The peer port takes only the peer certificate (its common name
/// `<cluster>-peer`), so no client certificate of the same CA can join as
/// a member. etcd's check of a peer certificate's names against the
/// dialling address is off: the one peer certificate names every member by
/// the peer Service's wildcard, which no address lookup can match; the CA
/// and the common name are what authenticate a member.
pub fn etcd_tls_flags(cluster: &str) -> Vec<String> {
    vec![
        format!("--cert-file={SERVER_TLS_DIR}/{CERT_KEY}"),
        format!("--key-file={SERVER_TLS_DIR}/{KEY_KEY}"),
        format!("--trusted-ca-file={SERVER_TLS_DIR}/{CA_KEY}"),
        "--client-cert-auth=true".to_string(),
        "--auto-tls=false".to_string(),
        format!("--peer-cert-file={PEER_TLS_DIR}/{CERT_KEY}"),
        format!("--peer-key-file={PEER_TLS_DIR}/{KEY_KEY}"),
        format!("--peer-trusted-ca-file={PEER_TLS_DIR}/{CA_KEY}"),
        "--peer-client-cert-auth=true".to_string(),
        format!("--peer-cert-allowed-cn={}", peer_common_name(cluster)),
        "--peer-skip-client-san-verification=true".to_string(),
        "--peer-auto-tls=false".to_string(),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addressing() -> MemberAddressing {
        MemberAddressing {
            transport: crate::transport::Transport::Tls,
            ..MemberAddressing::new("demo", "prod")
        }
    }

    /// Whether `pattern` (possibly `*.rest`) covers `host` as Go's and
    /// rustls' verifiers do: a wildcard stands for exactly one label.
    fn covers(pattern: &str, host: &str) -> bool {
        match pattern.strip_prefix("*.") {
            Some(rest) => host
                .split_once('.')
                .is_some_and(|(first, tail)| !first.is_empty() && tail == rest),
            None => pattern == host,
        }
    }

    #[test]
    fn the_server_certificate_names_every_address_a_client_or_member_uses() {
        let a = addressing();
        let names = certificate_names(&a, &TlsRole::Server);
        let wanted = [
            "demo-0.demo-peer.prod.svc.cluster.local",
            "demo-8.demo-peer.prod.svc.cluster.local",
            "demo-client",
            "demo-client.prod",
            "demo-client.prod.svc",
            "demo-client.prod.svc.cluster.local",
            "localhost",
        ];
        for host in wanted {
            assert!(
                names.dns_names.iter().any(|p| covers(p, host)),
                "{host} is not covered by {:?}",
                names.dns_names
            );
        }
        assert!(names.dns_names.iter().any(|p| covers(p, &server_name(&a))));
        assert!(
            names
                .ip_addresses
                .contains(&IpAddr::V4(Ipv4Addr::LOCALHOST))
        );
        for url in [a.client_url(3), a.peer_url(3)] {
            let host = url
                .trim_start_matches("https://")
                .split(':')
                .next()
                .unwrap_or_default()
                .to_string();
            assert!(names.dns_names.iter().any(|p| covers(p, &host)), "{host}");
        }
        assert!(!covers(
            "*.demo-peer.prod.svc.cluster.local",
            "a.b.demo-peer.prod.svc.cluster.local"
        ));
    }

    #[test]
    fn peers_name_every_member_and_members_are_both_server_and_client() {
        let a = addressing();
        let peer = certificate_names(&a, &TlsRole::Peer);
        let host = a.member_host(5);
        assert!(peer.dns_names.iter().any(|p| covers(p, &host)));
        assert_eq!(TlsRole::Server.usage(), LeafUsage::Peer);
        assert_eq!(TlsRole::Peer.usage(), LeafUsage::Peer);
        assert_eq!(TlsRole::Client.usage(), LeafUsage::Client);
        assert_eq!(TlsRole::Operator.usage(), LeafUsage::Client);
        assert_eq!(
            leaf_secret_name("demo", &TlsRole::Client),
            "demo-client-tls"
        );
        let app = TlsRole::NamedClient("apiserver".into());
        assert_eq!(app.usage(), LeafUsage::Client);
        assert_eq!(leaf_secret_name("demo", &app), "demo-client-apiserver-tls");
        let names = certificate_names(&a, &app);
        assert_eq!(names.common_name, "apiserver");
        assert!(names.dns_names.is_empty() && names.ip_addresses.is_empty());
        assert_eq!(
            TlsRole::every(["apiserver".to_string()]),
            vec![
                TlsRole::Server,
                TlsRole::Peer,
                TlsRole::Client,
                TlsRole::Operator,
                app
            ]
        );
        assert_eq!(ca_secret_name("demo"), "demo-ca");
    }

    /// Every certificate the operator issues for itself carries a common
    /// name that no application's certificate may take, the one the peer
    /// port admits included; an application's name that is not reserved
    /// keeps its own.
    #[test]
    fn the_operators_own_certificates_carry_reserved_common_names() {
        use crate::addressing::{ETCD_ROOT_USER, is_reserved_common_name};
        for role in TlsRole::ALL {
            let name = certificate_names(&addressing(), &role).common_name;
            assert!(is_reserved_common_name("demo", &name), "{role:?}: {name}");
        }
        let allowed = etcd_tls_flags("demo")
            .into_iter()
            .find_map(|f| f.strip_prefix("--peer-cert-allowed-cn=").map(str::to_owned))
            .expect("the peer port admits one common name");
        assert!(is_reserved_common_name("demo", &allowed));
        assert!(is_reserved_common_name("demo", ETCD_ROOT_USER));
        // Another cluster's names, and names that only look alike, are free.
        for free in [
            "apiserver",
            "other-peer",
            "demo-peers",
            "demo",
            "peer",
            "demo-peer-x",
        ] {
            assert!(!is_reserved_common_name("demo", free), "{free}");
        }
    }

    fn has_flag(flags: &[String], flag: &str) -> bool {
        flags.iter().any(|f| f == flag)
    }

    #[test]
    fn the_flags_hold_the_cis_etcd_benchmark_section_2() {
        let flags = etcd_tls_flags("demo");
        assert!(has_flag(&flags, "--peer-cert-allowed-cn=demo-peer"));
        assert_eq!(
            certificate_names(&addressing(), &TlsRole::Peer).common_name,
            "demo-peer"
        );
        let has = |flag: &str| flags.iter().any(|f| f == flag);
        // 2.1 cert-file and key-file; 2.4 peer cert and key.
        assert!(flags.iter().any(|f| f.starts_with("--cert-file=")));
        assert!(flags.iter().any(|f| f.starts_with("--key-file=")));
        assert!(flags.iter().any(|f| f.starts_with("--peer-cert-file=")));
        assert!(flags.iter().any(|f| f.starts_with("--peer-key-file=")));
        // 2.2 client-cert-auth; 2.5 peer-client-cert-auth.
        assert!(has("--client-cert-auth=true"));
        assert!(has("--peer-client-cert-auth=true"));
        // 2.3 and 2.6: no automatic self-signed certificates.
        assert!(has("--auto-tls=false"));
        assert!(has("--peer-auto-tls=false"));
        // 2.7: a CA for etcd alone (the cluster's own, not Kubernetes').
        assert!(
            flags
                .iter()
                .any(|f| f.starts_with("--trusted-ca-file=/var/run/etcd-tls/server/"))
        );
    }
}
