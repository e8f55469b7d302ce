//! The certificates of each TLS cluster as its last full read of its
//! Secrets found them, for passes that plan from the watch-fed copies
//! (the operator may not watch Secrets: it reads only those it names).
//!
//! A remembered reading is used only while everything it was made from is
//! unchanged (the cluster's UID, generation and the renewal and CA-rotation
//! annotations, whether the members serve TLS), no step has been taken
//! since, and for at most [`REREAD_AFTER`] or a tenth of the time left to
//! the earliest expiry, whichever is shorter: renewals are due at two
//! thirds of a certificate's life, so a short-lived certificate is read
//! again well before it is due. Any pass that acts reads the Secrets again.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;

use super::node_index::ClusterKey;
use super::tls_material::TlsMaterial;
use crate::api::{EtcdCluster, RENEW_CERTIFICATES_ANNOTATION, ROTATE_CA_ANNOTATION, TlsStatus};

/// Longest time a reading is used.
pub const REREAD_AFTER: Duration = Duration::from_secs(30 * 60);

/// The readings, by cluster.
#[derive(Default)]
pub struct TlsMemory {
    readings: Mutex<HashMap<ClusterKey, Reading>>,
}

struct Reading {
    inputs: String,
    material: Option<TlsMaterial>,
    until: Instant,
}

impl TlsMemory {
    /// The reading of `cluster` if it may still be used.
    pub fn recall(
        &self,
        key: &ClusterKey,
        cluster: &EtcdCluster,
        tls: bool,
    ) -> Option<Option<TlsMaterial>> {
        let readings = self.readings.lock().ok()?;
        let reading = readings.get(key)?;
        (reading.inputs == inputs(cluster, tls) && Instant::now() < reading.until)
            .then(|| reading.material.clone())
    }

    /// Keeps what a full read of the Secrets found.
    pub fn remember(
        &self,
        key: ClusterKey,
        cluster: &EtcdCluster,
        tls: bool,
        material: Option<TlsMaterial>,
    ) {
        let status = material.as_ref().map(|m| &m.observation.status);
        let until = Instant::now() + use_for(status, Timestamp::now());
        if let Ok(mut readings) = self.readings.lock() {
            readings.insert(
                key,
                Reading {
                    inputs: inputs(cluster, tls),
                    material,
                    until,
                },
            );
        }
    }

    /// Forgets the reading of a cluster (a step was taken, or it is gone).
    pub fn forget(&self, key: &ClusterKey) {
        if let Ok(mut readings) = self.readings.lock() {
            readings.remove(key);
        }
    }
}

/// What a reading was made from.
fn inputs(cluster: &EtcdCluster, tls: bool) -> String {
    let annotation = |name: &str| cluster.annotations().get(name).cloned().unwrap_or_default();
    format!(
        "{}/{}/{}/{}/{tls}",
        cluster.uid().unwrap_or_default(),
        cluster.metadata.generation.unwrap_or_default(),
        annotation(RENEW_CERTIFICATES_ANNOTATION),
        annotation(ROTATE_CA_ANNOTATION),
    )
}

/// How long a reading made at `now` may be used.
fn use_for(status: Option<&TlsStatus>, now: Timestamp) -> Duration {
    let Some(status) = status else {
        return REREAD_AFTER;
    };
    let earliest = status
        .certificates
        .iter()
        .map(|c| c.not_after.0)
        .chain(status.ca_not_after.iter().map(|t| t.0))
        .min();
    match earliest {
        Some(at) => {
            let left = at.duration_since(now).as_secs_f64().max(0.0);
            REREAD_AFTER.min(Duration::from_secs_f64(left / 10.0))
        }
        None => REREAD_AFTER,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_certificates_a_reading_lasts_the_longest_time() {
        assert_eq!(use_for(None, Timestamp::now()), REREAD_AFTER);
    }

    #[test]
    fn a_short_lived_certificate_is_read_again_within_a_tenth_of_its_time_left() {
        let now = Timestamp::now();
        let at = |seconds: i64| {
            k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                now.checked_add(k8s_openapi::jiff::SignedDuration::from_secs(seconds))
                    .expect("a time"),
            )
        };
        let status = TlsStatus {
            certificates: vec![crate::api::CertificateStatus {
                secret: "a-server-tls".into(),
                serial: "1".into(),
                not_before: at(-100),
                not_after: at(200),
            }],
            ..TlsStatus::default()
        };
        let used = use_for(Some(&status), now);
        assert!(
            used <= Duration::from_secs(20) && used >= Duration::from_secs(19),
            "{used:?}"
        );
        let long = TlsStatus {
            ca_not_after: Some(at(90 * 24 * 3600)),
            ..TlsStatus::default()
        };
        assert_eq!(use_for(Some(&long), now), REREAD_AFTER);
    }

    #[test]
    fn inputs_change_with_the_generation_and_the_renewal_annotation() {
        let cluster = |generation: i64, renew: &str| -> EtcdCluster {
            serde_json::from_value(serde_json::json!({
                "apiVersion": "durable-etcd.io/v1alpha1",
                "kind": "EtcdCluster",
                "metadata": {"name": "a", "namespace": "n", "uid": "u", "generation": generation,
                    "annotations": {RENEW_CERTIFICATES_ANNOTATION: renew}},
                "spec": {}
            }))
            .expect("a cluster")
        };
        let base = inputs(&cluster(1, "x"), true);
        assert_eq!(base, inputs(&cluster(1, "x"), true));
        assert_ne!(base, inputs(&cluster(2, "x"), true));
        assert_ne!(base, inputs(&cluster(1, "y"), true));
        assert_ne!(base, inputs(&cluster(1, "x"), false));
    }
}
