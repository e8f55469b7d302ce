//! A built-in CA Secret (`<cluster>-ca`) that is missing: a new CA is
//! generated only for a cluster that has never had one. Once the members
//! trust a CA, a new one would reissue every certificate from a CA they do
//! not trust (they load their trusted CAs only when they start): the
//! operator would be refused, and each member whose mounted certificates
//! refresh would be refused by its peers, down to a real loss of quorum.
//!
//! [`CaHistory`] is what the cluster holds that says it had a CA;
//! [`signs_of_an_earlier_ca`] decides (pure); [`MissingCa`] is what a
//! person reads when the answer is "it had one": the CA certificate found
//! in the leaf Secrets, that its key cannot be recovered, and what to do.

use std::fmt;

use crate::api::EtcdCluster;
use crate::api::transport_choice::bootstrapped;
use crate::tls::read_bundle;
use crate::transport::Transport;

/// What the cluster holds that tells whether it had a CA before its CA
/// Secret went missing.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CaHistory {
    /// Status names the cluster's ID or its members: it has formed.
    pub bootstrapped: bool,
    /// The transport status records the members running.
    pub transport: Option<Transport>,
    /// Status records the CA's expiry (`status.tls.caNotAfter`).
    pub status_records_ca: bool,
    /// Leaf Secrets of the cluster that carry a CA bundle (`ca.crt`): the
    /// Secret's name and the bundle.
    pub leaves_with_ca: Vec<(String, String)>,
}

impl CaHistory {
    /// What status says of `cluster`, with the leaf Secrets found.
    pub fn of(cluster: &EtcdCluster, leaves_with_ca: Vec<(String, String)>) -> Self {
        let status = cluster.status.as_ref();
        Self {
            bootstrapped: bootstrapped(status),
            transport: status.and_then(|s| s.transport),
            status_records_ca: status
                .and_then(|s| s.tls.as_ref())
                .is_some_and(|tls| tls.ca_not_after.is_some()),
            leaves_with_ca,
        }
    }
}

/// Why the cluster is known to have had a CA, one phrase per sign; empty
/// when it never had one, the only case in which a new CA may be
/// generated. A leaf Secret carrying a CA is enough (members may mount
/// it); status counts once the cluster has formed (before, no member has
/// served, and nothing depends on the CA yet).
pub fn signs_of_an_earlier_ca(history: &CaHistory) -> Vec<String> {
    let mut signs = Vec::new();
    if !history.leaves_with_ca.is_empty() {
        let names: Vec<&str> = history
            .leaves_with_ca
            .iter()
            .map(|(name, _)| name.as_str())
            .collect();
        signs.push(format!(
            "Secrets {} carry its certificate",
            names.join(", ")
        ));
    }
    if history.bootstrapped {
        if let Some(transport) = history.transport.filter(|t| t.serves_tls()) {
            signs.push(format!(
                "the members formed and status records them serving TLS ({transport:?})"
            ));
        }
        if history.status_records_ca {
            signs.push("status.tls records its expiry".to_string());
        }
    }
    signs
}

/// A CA Secret missing from a cluster that had a CA: what a person reads
/// (the operator's log, the Warning Event, the `Degraded` condition).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MissingCa {
    /// `<namespace>/<cluster>-ca`.
    pub secret: String,
    /// The cluster's name.
    pub cluster: String,
    /// Why the cluster is known to have had a CA.
    pub signs: Vec<String>,
    /// The CA certificates the leaf Secrets carry: common name and SHA-256
    /// fingerprint, each once.
    pub cas_found: Vec<(String, String)>,
}

impl MissingCa {
    /// The report for Secret `secret` of `cluster`, from what was found.
    pub fn new(secret: String, cluster: String, history: &CaHistory) -> Self {
        let mut cas_found: Vec<(String, String)> = Vec::new();
        for (_, bundle) in &history.leaves_with_ca {
            for facts in read_bundle(bundle).unwrap_or_default() {
                let found = (
                    facts.common_name.unwrap_or_default(),
                    facts.fingerprint_sha256,
                );
                if !cas_found.contains(&found) {
                    cas_found.push(found);
                }
            }
        }
        Self {
            secret,
            cluster,
            signs: signs_of_an_earlier_ca(history),
            cas_found,
        }
    }
}

impl fmt::Display for MissingCa {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Self {
            secret,
            cluster,
            signs,
            cas_found,
        } = self;
        write!(
            f,
            "the CA Secret {secret} is missing, but the cluster has a CA ({}); no new CA is generated and no certificate Secret is written, so the members keep serving with the certificates they hold. ",
            signs.join("; ")
        )?;
        if cas_found.is_empty() {
            write!(f, "No leaf Secret holds the CA certificate. ")?;
        } else {
            let cas: Vec<String> = cas_found
                .iter()
                .map(|(name, fingerprint)| format!("{name:?} (SHA-256 {fingerprint})"))
                .collect();
            write!(
                f,
                "The leaf Secrets carry the CA certificate {}; its private key was only in {secret} and cannot be recovered from the cluster. ",
                cas.join(", ")
            )?;
        }
        write!(
            f,
            "A person must restore Secret {secret} (ca.crt and ca.key) from a backup of the namespace, after which the operator resumes by itself. Without a backup, certificates of this CA can no longer be issued or renewed; do not create a new {secret} by hand (every certificate would be issued again from a CA the running members do not trust), and do not annotate {cluster} to rotate the CA (a rotation starts from the CA Secret). See docs/security.md, \"A deleted CA Secret\"."
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{EtcdClusterSpec, EtcdClusterStatus, TlsStatus};
    use crate::tls::CertificateAuthority;
    use chrono::Utc;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use k8s_openapi::jiff::Timestamp;

    fn ca_pem(name: &str) -> String {
        CertificateAuthority::generate(name, std::time::Duration::from_secs(86_400), Utc::now())
            .expect("CA")
            .cert_pem()
            .to_string()
    }

    fn formed_over(transport: Transport, ca_recorded: bool) -> EtcdCluster {
        let mut cluster = EtcdCluster::new("main", EtcdClusterSpec::default());
        cluster.status = Some(EtcdClusterStatus {
            cluster_id: Some("8e9e05c52164694d".into()),
            transport: Some(transport),
            tls: ca_recorded.then(|| TlsStatus {
                issuer: "BuiltIn".into(),
                ca_not_after: Some(Time(Timestamp::UNIX_EPOCH)),
                ..TlsStatus::default()
            }),
            ..EtcdClusterStatus::default()
        });
        cluster
    }

    /// A cluster that has never had a CA gets one: new, or formed in
    /// plaintext and turning TLS on (no leaf Secret yet).
    #[test]
    fn a_new_ca_is_generated_only_for_a_cluster_that_never_had_one() {
        let new = EtcdCluster::new("main", EtcdClusterSpec::default());
        assert!(signs_of_an_earlier_ca(&CaHistory::of(&new, Vec::new())).is_empty());
        let plaintext = formed_over(Transport::Plaintext, false);
        assert!(signs_of_an_earlier_ca(&CaHistory::of(&plaintext, Vec::new())).is_empty());
        // Status written before the members formed: nothing trusts the CA.
        let mut unformed = formed_over(Transport::Tls, true);
        if let Some(status) = unformed.status.as_mut() {
            status.cluster_id = None;
        }
        assert!(signs_of_an_earlier_ca(&CaHistory::of(&unformed, Vec::new())).is_empty());
    }

    /// The deleted CA Secret of a running TLS cluster is never replaced:
    /// each sign alone is enough.
    #[test]
    fn a_cluster_that_had_a_ca_never_gets_a_new_one() {
        let leaves = vec![("main-server-tls".to_string(), ca_pem("main etcd CA"))];
        let plaintext = formed_over(Transport::Plaintext, false);
        let signs = signs_of_an_earlier_ca(&CaHistory::of(&plaintext, leaves.clone()));
        assert_eq!(signs, ["Secrets main-server-tls carry its certificate"]);
        for transport in [
            Transport::BridgingPeers,
            Transport::ReturningPeers,
            Transport::Tls,
        ] {
            let formed = formed_over(transport, false);
            let signs = signs_of_an_earlier_ca(&CaHistory::of(&formed, Vec::new()));
            assert_eq!(signs.len(), 1, "{transport:?}: {signs:?}");
        }
        let recorded = formed_over(Transport::Plaintext, true);
        let signs = signs_of_an_earlier_ca(&CaHistory::of(&recorded, Vec::new()));
        assert_eq!(signs, ["status.tls records its expiry"]);
        let all = formed_over(Transport::Tls, true);
        assert_eq!(
            signs_of_an_earlier_ca(&CaHistory::of(&all, leaves)).len(),
            3
        );
    }

    /// The report names the missing Secret, the CA found in the leaves
    /// (once, by common name and fingerprint), that its key is lost, and
    /// what a person does.
    #[test]
    fn the_report_names_the_secret_the_ca_found_and_the_way_out() {
        let ca = ca_pem("main etcd CA 2026-01-01T00:00:00Z");
        let fingerprint = read_bundle(&ca).expect("bundle")[0]
            .fingerprint_sha256
            .clone();
        let leaves = vec![
            ("main-server-tls".to_string(), ca.clone()),
            ("main-peer-tls".to_string(), ca),
        ];
        let history = CaHistory::of(&formed_over(Transport::Tls, true), leaves);
        let report = MissingCa::new("db/main-ca".into(), "main".into(), &history);
        assert_eq!(report.cas_found.len(), 1, "one CA, found twice");
        let text = report.to_string();
        for expected in [
            "the CA Secret db/main-ca is missing",
            "Secrets main-server-tls, main-peer-tls carry its certificate",
            "\"main etcd CA 2026-01-01T00:00:00Z\"",
            fingerprint.as_str(),
            "cannot be recovered",
            "restore Secret db/main-ca (ca.crt and ca.key) from a backup",
            "do not create a new db/main-ca by hand",
        ] {
            assert!(text.contains(expected), "{expected:?} not in {text}");
        }
    }
}
