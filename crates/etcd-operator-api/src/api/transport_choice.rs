//! What the spec asks of a cluster's transport ([`crate::transport`]):
//! mutual TLS for a new cluster, "as it runs" for one bootstrapped in
//! plaintext before TLS was the default, plaintext only when asked for at
//! creation, and TLS never turned off.

use super::{EtcdCluster, EtcdClusterStatus, TlsSpec};
use crate::transport::{Intent, Transport};

/// The transport the spec asks for, given the stage the cluster runs.
///
/// `spec.tls` absent means TLS for a new cluster and "as it runs" for one
/// that was bootstrapped in plaintext before TLS was the default (its
/// clients would be cut off otherwise): setting `spec.tls` turns TLS on.
/// `spec.tls.disabled` keeps a plaintext cluster plaintext; TLS is never
/// turned off (every client that trusts it would lose its secure channel
/// silently), which is reported.
pub fn intent(spec: Option<&TlsSpec>, running: Transport) -> Intent {
    match spec {
        Some(tls) if tls.disabled && running != Transport::Plaintext => Intent {
            tls: true,
            refused: Some(
                "spec.tls.disabled is set but the members already serve TLS; turning TLS off is not supported, so TLS stays on".to_string(),
            ),
        },
        Some(tls) => Intent {
            tls: !tls.disabled,
            refused: None,
        },
        None => Intent {
            tls: running != Transport::Plaintext,
            refused: None,
        },
    }
}

/// The stage a cluster runs as far as the operator knows before it reads
/// the member list: the stage status recorded, else the most advanced
/// stage a member Pod runs, else what the spec asks for a cluster that has
/// never run (`bootstrapped` false) or ran before TLS was the default.
pub fn running(
    recorded: Option<Transport>,
    pods: impl IntoIterator<Item = Transport>,
    spec: Option<&TlsSpec>,
    bootstrapped: bool,
) -> Transport {
    if let Some(recorded) = recorded {
        return recorded;
    }
    if let Some(most_advanced) = pods.into_iter().max() {
        return most_advanced;
    }
    match spec {
        Some(tls) if tls.disabled => Transport::Plaintext,
        Some(_) => Transport::Tls,
        None if bootstrapped => Transport::Plaintext,
        None => Transport::Tls,
    }
}

/// The stage status records, or what the spec asks before the first
/// status: for readers that never write it (the backup controllers, the
/// `kubectl etcd` plugin).
pub fn recorded(cluster: &EtcdCluster) -> Transport {
    let status = cluster.status.as_ref();
    running(
        status.and_then(|s| s.transport),
        [],
        cluster.spec.tls.as_ref(),
        bootstrapped(status),
    )
}

/// The cluster has run: status names its ID or its members.
pub fn bootstrapped(status: Option<&EtcdClusterStatus>) -> bool {
    status.is_some_and(|s| s.cluster_id.is_some() || !s.members.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn disabled_keeps_a_plaintext_cluster_plaintext_and_never_turns_tls_off() {
        let disabled = TlsSpec {
            disabled: true,
            ..TlsSpec::default()
        };
        let refused = intent(Some(&disabled), Transport::Tls);
        assert!(refused.tls);
        assert!(refused.refused.is_some());
        assert!(!intent(Some(&disabled), Transport::Plaintext).tls);
        assert!(intent(Some(&TlsSpec::default()), Transport::Plaintext).tls);
    }

    #[test]
    fn an_absent_spec_means_tls_for_new_clusters_and_as_it_runs_for_old_ones() {
        let none: [Transport; 0] = [];
        let new = running(None, none, None, false);
        assert_eq!(new, Transport::Tls);
        assert!(intent(None, new).tls);
        let old_plaintext = running(None, none, None, true);
        assert_eq!(old_plaintext, Transport::Plaintext);
        assert!(!intent(None, old_plaintext).tls);
        // Pods say what runs before the spec does; status before both.
        assert_eq!(
            running(
                None,
                [Transport::Plaintext],
                Some(&TlsSpec::default()),
                true
            ),
            Transport::Plaintext
        );
        assert_eq!(
            running(
                None,
                [Transport::Plaintext, Transport::BridgingPeers],
                None,
                true
            ),
            Transport::BridgingPeers
        );
        assert_eq!(
            running(
                Some(Transport::ReturningPeers),
                [Transport::BridgingPeers],
                None,
                true
            ),
            Transport::ReturningPeers
        );
    }
}
