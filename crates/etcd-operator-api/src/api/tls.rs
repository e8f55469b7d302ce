//! Transport security of a cluster: mutual TLS for clients and peers.

use kube::KubeSchema;
use serde::{Deserialize, Serialize};

use crate::addressing::{CLUSTER_COMMON_NAME_SUFFIXES, FIXED_RESERVED_COMMON_NAMES};

/// `EtcdCluster` annotation asking for every certificate of a TLS cluster
/// to be issued again now (after a key may have leaked, or to test
/// renewal): a new value is a new request; `status.tls.renewedFor` names
/// the value whose renewal is done. Members pick the new certificates up
/// without a restart.
pub const RENEW_CERTIFICATES_ANNOTATION: &str = "durable-etcd.io/renew-certificates";

/// Annotation of the CA Secret `<cluster>-ca`: the value of
/// [`RENEW_CERTIFICATES_ANNOTATION`] whose renewal is done (kept with the
/// certificates, so a lost status never renews them twice).
pub const RENEWED_FOR_ANNOTATION: &str = "durable-etcd.io/certificates-renewed-for";

/// `EtcdCluster` annotation asking for the cluster's CA to be replaced by a
/// new one without a failed handshake: a new value is a new request. The
/// operator trusts a new CA beside the old, issues every certificate from
/// it, then retires the old one, restarting the members one at a time
/// after each step (see `status.tls.caRotation`); `status.tls.caRotatedFor`
/// names the value whose rotation is done.
pub const ROTATE_CA_ANNOTATION: &str = "durable-etcd.io/rotate-ca";

/// Annotation of the CA Secret: the value of [`ROTATE_CA_ANNOTATION`]
/// whose rotation is in progress.
pub const CA_ROTATION_FOR_ANNOTATION: &str = "durable-etcd.io/ca-rotation-for";

/// Annotation of the CA Secret: the request whose rotation is done (the
/// value of [`ROTATE_CA_ANNOTATION`], or `automatic-<serial>` for one the
/// operator started by itself).
pub const CA_ROTATED_FOR_ANNOTATION: &str = "durable-etcd.io/ca-rotated-for";

/// Annotation of the CA Secret: the last value of [`ROTATE_CA_ANNOTATION`]
/// a rotation was started for, so that an automatic rotation done since
/// does not make the same request new again.
pub const CA_ROTATION_ASKED_FOR_ANNOTATION: &str = "durable-etcd.io/ca-rotation-asked-for";

/// Annotation of the CA Secret: the names of
/// `spec.tls.clientCertificates` whose Secrets exist (comma-separated), so
/// that a name removed from the spec has its Secret deleted.
pub const NAMED_CLIENT_CERTIFICATES_ANNOTATION: &str = "durable-etcd.io/named-client-certificates";

/// Mutual TLS for etcd's client and peer ports. Every member serves TLS on
/// both and asks every client and peer for a certificate signed by the
/// cluster's CA (`--client-cert-auth`, `--peer-client-cert-auth`); the
/// metrics port (2381: `/metrics`, `/livez`, `/readyz`) stays plain HTTP
/// for probes and scrapers and serves no key.
///
/// A cluster without `spec.tls` gets mutual TLS from the built-in issuer
/// when it is created; one that was bootstrapped in plaintext before TLS
/// was the default stays plaintext until `spec.tls` is set, which turns
/// TLS on as a rolling change (see `status.transport`). TLS is never
/// turned off.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = super::rules::rule("!has(self.disabled) || !self.disabled || !has(self.clientCertificates) || size(self.clientCertificates) == 0", "tls.clientCertificates needs TLS: a cluster with tls.disabled has no CA to issue them"))]
#[x_kube(validation = super::rules::rule("!has(self.certManager) || !has(self.builtIn) || !has(self.builtIn.caRotation)", "tls.certManager and tls.builtIn are two issuers: set one"))]
#[x_kube(validation = super::rules::rule("!has(self.certManager) || !has(self.disabled) || !self.disabled", "tls.certManager issues TLS certificates: it cannot go with tls.disabled"))]
pub struct TlsSpec {
    /// The operator's own CA for this cluster: generated once, kept in the
    /// Secret `<cluster>-ca` (never mounted into a Pod), issuing the
    /// members' server and peer certificates and the client certificates
    /// of the operator and of users (`<cluster>-client-tls`).
    #[serde(default)]
    pub built_in: BuiltInIssuer,
    /// cert-manager issues the certificates instead of the built-in
    /// issuer: the operator makes a cert-manager `Certificate` per leaf
    /// (`<cluster>-server-tls`, `-peer-tls`, `-client-tls`,
    /// `-operator-tls`, `-client-<name>-tls`), each writing the Secret of
    /// its name (`tls.crt`, `tls.key`, `ca.crt`), and the members trust the
    /// `ca.crt` the issuer writes. cert-manager renews them (etcd reads its
    /// certificate files at every handshake: no restart); a change of the
    /// issuer's CA restarts the members one at a time onto it, so a CA
    /// rotation must keep the old CA in the bundle the issuer writes until
    /// every leaf is renewed. Set at creation only (switching issuers
    /// changes the CA every member and client trusts).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "CertManagerIssuer")]
    pub cert_manager: Option<CertManagerIssuer>,
    /// Plain HTTP for clients and peers, with no authentication: anyone
    /// who reaches the ports reads and writes every key. For a cluster
    /// whose network is secured otherwise. Only a cluster created with it
    /// (or bootstrapped in plaintext) stays plaintext: it cannot be set on
    /// a cluster that serves TLS.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub disabled: bool,
    /// Client certificates for applications, one per name, besides the
    /// users' `<cluster>-client-tls`: each in the Secret
    /// `<cluster>-client-<name>-tls` (`tls.crt`, `tls.key`, `ca.crt`), its
    /// common name the name (etcd's user name for it once authentication
    /// is on). Renewed and carried through a CA rotation like every leaf;
    /// adding or removing one restarts no member. A name removed from the
    /// list has its Secret deleted; the certificate itself stays valid
    /// until it expires or the CA is rotated (etcd checks no revocation
    /// list).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32))]
    #[x_kube(validation = super::rules::rule("self.all(a, self.exists_one(b, b.name == a.name))", "tls.clientCertificates: each name once"))]
    pub client_certificates: Vec<NamedClientCertificate>,
}

/// The admission rule of the `EtcdCluster` root (where the cluster's name
/// is seen) that keeps `spec.tls.clientCertificates` off the common names
/// the operator uses for itself ([`is_reserved_common_name`]): an
/// application's certificate named `<cluster>-peer` would be let onto the
/// peer port as a member, one named like the operator's or `root` would
/// act as them once etcd authentication is on. A list stored before this
/// rule is kept while unchanged, so that such an object can still be
/// updated otherwise (its status written); the operator issues no
/// certificate under a reserved name. (The stored list is compared whole:
/// looking each name up in `oldSelf` costs more than the API server lets
/// a rule cost.)
///
/// [`is_reserved_common_name`]: crate::addressing::is_reserved_common_name
pub fn reserved_client_certificate_names() -> kube::core::Rule {
    let reserved: Vec<String> = FIXED_RESERVED_COMMON_NAMES
        .iter()
        .map(|name| format!("'{name}'"))
        .chain(
            CLUSTER_COMMON_NAME_SUFFIXES
                .iter()
                .map(|suffix| format!("self.metadata.name + '{suffix}'")),
        )
        .collect();
    let mut shown: Vec<String> = CLUSTER_COMMON_NAME_SUFFIXES
        .iter()
        .map(|s| format!("<cluster>{s}"))
        .chain(FIXED_RESERVED_COMMON_NAMES.iter().map(|n| n.to_string()))
        .collect();
    let last = shown.pop().unwrap_or_default();
    super::rules::rule(
        format!(
            "!has(self.spec.tls) || !has(self.spec.tls.clientCertificates) \
             || self.spec.tls.clientCertificates.all(c, !(c.name in [{}])) \
             || (oldSelf.hasValue() && has(oldSelf.value().spec.tls) && has(oldSelf.value().spec.tls.clientCertificates) && oldSelf.value().spec.tls.clientCertificates == self.spec.tls.clientCertificates)",
            reserved.join(", ")
        ),
        format!(
            "spec.tls.clientCertificates: the names {} and {last} are reserved: they are the common names of the members' and the operator's own certificates and of etcd's superuser (a certificate named <cluster>-peer would be accepted on the peer port as a member)",
            shown.join(", ")
        ),
    )
    .optional_old_self(true)
}

/// cert-manager as the issuer of a cluster's certificates
/// (`spec.tls.certManager`).
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct CertManagerIssuer {
    /// The cert-manager issuer that signs every certificate of the
    /// cluster: an `Issuer` in the cluster's namespace or a
    /// `ClusterIssuer`. Its CA (the `ca.crt` it writes into each Secret)
    /// is the one every member and client trusts.
    pub issuer_ref: IssuerReference,
}

/// A cert-manager issuer by name and kind.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct IssuerReference {
    /// The issuer's name.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
    /// `Issuer` (the default; in the cluster's namespace) or
    /// `ClusterIssuer`.
    #[serde(default)]
    pub kind: IssuerKind,
    /// The issuer's API group; `cert-manager.io` when unset (an external
    /// issuer names its own).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub group: Option<String>,
}

/// The kind of a cert-manager issuer.
#[derive(
    schemars::JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq,
)]
pub enum IssuerKind {
    /// An `Issuer` in the cluster's namespace.
    #[default]
    Issuer,
    /// A `ClusterIssuer`.
    ClusterIssuer,
}

impl IssuerKind {
    /// The kind's name in a cert-manager `issuerRef`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Issuer => "Issuer",
            Self::ClusterIssuer => "ClusterIssuer",
        }
    }
}

/// One named client certificate (`spec.tls.clientCertificates`).
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct NamedClientCertificate {
    /// The application's name: its Secret is `<cluster>-client-<name>-tls`
    /// and its certificate's common name is this name. Reserved:
    /// `<cluster>-server`, `<cluster>-peer`, `<cluster>-client`,
    /// `etcd-operator` and `root`, the common names of the cluster's and
    /// the operator's own certificates and etcd's superuser.
    #[schemars(length(min = 1, max = 40))]
    #[x_kube(validation = super::rules::rule(format!("self.matches('{}')", super::rules::DNS1123_LABEL), "a client certificate's name must be lower-case letters, digits and '-', starting and ending with a letter or digit"))]
    pub name: String,
}

/// The built-in issuer. Certificates are ECDSA P-256; leaves live 90 days
/// and are renewed in place at two-thirds of their life (etcd reads its
/// certificate files at every handshake, so no restart is needed); the CA
/// lives 10 years and is rotated at two-thirds of its life (see
/// `caRotation`).
///
/// A Secret `<cluster>-ca` made before the cluster (`ca.crt`: a CA
/// certificate, `ca.key`: its PKCS#8 private key) is used as the cluster's
/// CA instead of a generated one.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct BuiltInIssuer {
    /// Who starts a rotation of the CA. `Automatic` (the default): the
    /// operator starts one by itself once the CA has passed two-thirds of
    /// its life (about 6 years 8 months into a generated CA), with the
    /// same three rolling steps as a rotation asked for with the
    /// annotation `durable-etcd.io/rotate-ca`; its request is named
    /// `automatic-<serial of the CA replaced>` in `status.tls`. `Manual`:
    /// only the annotation starts one; `Degraded` and a Warning Event say
    /// when the CA has less than 90 days left.
    #[serde(default, skip_serializing_if = "CaRotationPolicy::is_automatic")]
    pub ca_rotation: CaRotationPolicy,
}

/// Who starts a rotation of a cluster's CA (`spec.tls.builtIn.caRotation`).
#[derive(
    schemars::JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq,
)]
pub enum CaRotationPolicy {
    /// The operator, at two-thirds of the CA's life, or a person with the
    /// annotation.
    #[default]
    Automatic,
    /// Only a person, with the annotation.
    Manual,
}

impl CaRotationPolicy {
    /// Whether it is [`CaRotationPolicy::Automatic`].
    pub fn is_automatic(&self) -> bool {
        *self == Self::Automatic
    }
}
