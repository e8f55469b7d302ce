//! The cert-manager `Certificate`s of a cluster whose certificates
//! cert-manager issues (`spec.tls.certManager`): one per leaf, named like
//! the Secret it writes, with the names and usages of the built-in
//! issuer's leaves ([`certificate_names`], [`TlsRole::usage`]).

use kube::ResourceExt;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind};
use serde_json::{Value, json};

use super::tls::{TlsRole, certificate_names, leaf_secret_name, metadata};
use crate::addressing::MemberAddressing;
use crate::api::identity::CLUSTER_LABEL;
use crate::api::{CertManagerIssuer, EtcdCluster};
use crate::tls::LeafUsage;

/// cert-manager's API group.
pub const GROUP: &str = "cert-manager.io";

/// Label of a `Certificate`: the role of its leaf (`server`, `peer`,
/// `client`, `operator`, `client-<name>`).
pub const ROLE_LABEL: &str = "durable-etcd.io/certificate-role";

/// The leaves' lifetime and renewal point, as the built-in issuer's: 90
/// days, renewed a month before they end.
const DURATION: &str = "2160h";
const RENEW_BEFORE: &str = "720h";

/// The `Certificate` resource of cert-manager's `v1` API.
pub fn certificate_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(GROUP, "v1", "Certificate"),
        "certificates",
    )
}

/// The `Certificate` of `role`'s leaf, issued by `issuer`.
pub fn certificate(
    cluster: &EtcdCluster,
    addressing: &MemberAddressing,
    role: &TlsRole,
    issuer: &CertManagerIssuer,
) -> DynamicObject {
    let secret = leaf_secret_name(&addressing.cluster, role);
    let names = certificate_names(addressing, role);
    let mut meta = metadata(cluster, secret.clone());
    meta.labels
        .get_or_insert_default()
        .insert(ROLE_LABEL.to_string(), role.as_str().into_owned());
    let usages = match role.usage() {
        LeafUsage::Server => vec!["digital signature", "server auth"],
        LeafUsage::Client => vec!["digital signature", "client auth"],
        LeafUsage::Peer => vec!["digital signature", "server auth", "client auth"],
    };
    let reference = &issuer.issuer_ref;
    let mut issuer_ref = json!({ "name": reference.name, "kind": reference.kind.as_str() });
    issuer_ref["group"] = Value::from(reference.group.as_deref().unwrap_or(GROUP));
    let mut spec = json!({
        "secretName": secret,
        "secretTemplate": { "labels": { CLUSTER_LABEL: cluster.name_any() } },
        "commonName": names.common_name,
        "usages": usages,
        "privateKey": {
            "algorithm": "ECDSA",
            "size": 256,
            "encoding": "PKCS8",
            "rotationPolicy": "Always",
        },
        "duration": DURATION,
        "renewBefore": RENEW_BEFORE,
        "issuerRef": issuer_ref,
    });
    if !names.dns_names.is_empty() {
        spec["dnsNames"] = Value::from(names.dns_names);
    }
    if !names.ip_addresses.is_empty() {
        spec["ipAddresses"] = Value::from(
            names
                .ip_addresses
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>(),
        );
    }
    let mut object = DynamicObject::new(&secret, &certificate_resource()).within(
        meta.namespace
            .as_deref()
            .unwrap_or(addressing.namespace.as_str()),
    );
    object.metadata = meta;
    object.data = json!({ "spec": spec });
    object
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{IssuerKind, IssuerReference};
    use crate::transport::Transport;

    fn cluster() -> EtcdCluster {
        let mut cluster = EtcdCluster::new("main", Default::default());
        cluster.metadata.namespace = Some("db".into());
        cluster.metadata.uid = Some("uid-1".into());
        cluster
    }

    fn addressing() -> MemberAddressing {
        MemberAddressing {
            cluster_domain: "cluster.local".into(),
            transport: Transport::Tls,
            ..MemberAddressing::new("main", "db")
        }
    }

    fn issuer(kind: IssuerKind, group: Option<&str>) -> CertManagerIssuer {
        CertManagerIssuer {
            issuer_ref: IssuerReference {
                name: "etcd-ca".into(),
                kind,
                group: group.map(str::to_owned),
            },
        }
    }

    #[test]
    fn each_leaf_has_a_certificate_writing_its_secret_with_its_names_and_usages() {
        let issuer = issuer(IssuerKind::ClusterIssuer, None);
        let server = certificate(&cluster(), &addressing(), &TlsRole::Server, &issuer);
        assert_eq!(server.metadata.name.as_deref(), Some("main-server-tls"));
        assert_eq!(server.metadata.namespace.as_deref(), Some("db"));
        let spec = &server.data["spec"];
        assert_eq!(spec["secretName"], "main-server-tls");
        assert_eq!(spec["commonName"], "main-server");
        let dns: Vec<&str> = spec["dnsNames"]
            .as_array()
            .expect("dnsNames")
            .iter()
            .filter_map(Value::as_str)
            .collect();
        assert!(dns.contains(&"*.main-peer.db.svc.cluster.local"));
        assert!(dns.contains(&"main-client.db.svc.cluster.local"));
        assert_eq!(spec["ipAddresses"], json!(["127.0.0.1", "::1"]));
        assert_eq!(
            spec["usages"],
            json!(["digital signature", "server auth", "client auth"])
        );
        assert_eq!(
            spec["issuerRef"],
            json!({ "name": "etcd-ca", "kind": "ClusterIssuer", "group": "cert-manager.io" })
        );
        assert_eq!(spec["privateKey"]["algorithm"], "ECDSA");
        assert_eq!(
            spec["privateKey"]["encoding"], "PKCS8",
            "keys as the built-in issuer writes them"
        );
        assert_eq!(
            spec["secretTemplate"]["labels"][CLUSTER_LABEL], "main",
            "the Secret carries the cluster's label, as the operator's own do"
        );
        let labels = server.labels();
        assert_eq!(labels.get(ROLE_LABEL).map(String::as_str), Some("server"));
        assert_eq!(labels.get(CLUSTER_LABEL).map(String::as_str), Some("main"));
        assert!(
            server
                .metadata
                .owner_references
                .as_ref()
                .is_some_and(|refs| refs.iter().any(|r| r.uid == "uid-1")),
            "owned by the cluster"
        );
    }

    #[test]
    fn client_certificates_authenticate_clients_only_and_name_no_host() {
        let issuer = issuer(IssuerKind::Issuer, Some("issuers.example.com"));
        for role in [
            TlsRole::Client,
            TlsRole::Operator,
            TlsRole::NamedClient("app".into()),
        ] {
            let object = certificate(&cluster(), &addressing(), &role, &issuer);
            let spec = &object.data["spec"];
            assert_eq!(spec["usages"], json!(["digital signature", "client auth"]));
            assert!(spec.get("dnsNames").is_none() && spec.get("ipAddresses").is_none());
            assert_eq!(spec["issuerRef"]["kind"], "Issuer");
            assert_eq!(spec["issuerRef"]["group"], "issuers.example.com");
        }
        let app = certificate(
            &cluster(),
            &addressing(),
            &TlsRole::NamedClient("app".into()),
            &issuer,
        );
        assert_eq!(app.data["spec"]["secretName"], "main-client-app-tls");
        assert_eq!(app.data["spec"]["commonName"], "app");
    }
}
