//! The revision of the member Pod template: one hash of every spec field
//! that shapes a member's Pod. A member whose Pod carries another hash runs
//! an older template and is replaced by the rollout, one member at a time.
//! The Pod's extra labels and annotations are left out: they change in
//! place, without replacing a Pod.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::identity::{CLUSTER_LABEL, INSTANCE_LABEL, MANAGED_BY_LABEL, NAME_LABEL, ORDINAL_LABEL};
use super::{EtcdClusterSpec, TlsSpec};
use crate::transport::Transport;

/// The Pod annotation that records which labels and annotations of
/// `spec.pod` were applied to the Pod, so that a key removed from the spec
/// is removed from the Pod (and no other key is touched).
pub const TEMPLATE_METADATA_ANNOTATION: &str = "durable-etcd.io/template-metadata";

/// The keys of `spec.pod.labels` and `spec.pod.annotations` applied to a Pod.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
pub struct AppliedKeys {
    /// Label keys.
    #[serde(default)]
    pub labels: Vec<String>,
    /// Annotation keys.
    #[serde(default)]
    pub annotations: Vec<String>,
}

impl AppliedKeys {
    /// The keys a spec applies.
    pub fn of(spec: &EtcdClusterSpec) -> Self {
        Self {
            labels: user_labels(spec).into_keys().collect(),
            annotations: spec.pod.annotations.keys().cloned().collect(),
        }
    }

    /// The annotation value.
    pub fn encode(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }

    /// Reads the annotation value; `None` when it cannot be read.
    pub fn decode(value: &str) -> Option<Self> {
        serde_json::from_str(value).ok()
    }
}

/// The labels the operator sets on every member Pod: a user label under
/// one of these keys is not applied (the operator's own wins).
pub const OPERATOR_LABEL_KEYS: [&str; 5] = [
    NAME_LABEL,
    INSTANCE_LABEL,
    CLUSTER_LABEL,
    MANAGED_BY_LABEL,
    ORDINAL_LABEL,
];

/// `spec.pod.labels` without the operator's own keys.
pub fn user_labels(spec: &EtcdClusterSpec) -> BTreeMap<String, String> {
    spec.pod
        .labels
        .iter()
        .filter(|(k, _)| !OPERATOR_LABEL_KEYS.contains(&k.as_str()))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

/// The Pod annotation that records the template a member Pod was built from.
pub const TEMPLATE_HASH_ANNOTATION: &str = "durable-etcd.io/pod-template-hash";

/// Raised when a release of the operator changes the Pods it builds from the
/// same spec (a new flag, another probe): members then roll to the new shape.
/// 2: the `volume-usage` sidecar.
/// 3: a startup probe (`/livez` every second), after which the kubelet
/// probes readiness at once.
/// 4: etcd's corruption checks (`InitialCorruptCheck`, `CompactHashCheck`,
/// `--corrupt-check-time`).
const POD_SHAPE: u32 = 4;

/// The hash of the Pod template a spec asks for: 16 hex digits over the etcd
/// version, the etcd tuning (with `quota_backend_bytes`, the quota the Pods
/// run with: derived from the volumes the members have, it rolls the
/// members once every volume grew, never for a size the StorageClass
/// refused) and the member Pod template without its labels
/// and annotations. Fields that never reach the Pod (replicas, storage,
/// recovery, `paused`) and those that change in place are left out, so
/// changing them rolls nothing. A TLS cluster's hash also covers
/// `tls_revision`, what its members must have loaded (the CAs they trust
/// and the one their certificates come from), so each step of a CA
/// rotation restarts them; a renewed leaf does not change it.
pub fn template_hash(
    spec: &EtcdClusterSpec,
    quota_backend_bytes: i64,
    transport: Transport,
    tls_revision: Option<&str>,
) -> String {
    let mut pod = spec.pod.clone();
    pod.labels.clear();
    pod.annotations.clear();
    // The quota the Pods run with, derived from the volumes when unset.
    let mut etcd = spec.etcd.clone();
    etcd.quota_backend_bytes = quota_backend_bytes;
    let mut inputs = serde_json::json!({
        "shape": POD_SHAPE,
        "version": spec.version,
        "image": spec.image,
        "etcd": etcd,
        "pod": pod,
    });
    // TLS changes the Pods (URLs, flags, mounts); a plaintext cluster's
    // hash is what it was before TLS existed, so nothing rolls for it, and
    // a TLS cluster's is what it was before the stages of turning TLS on
    // existed (`disabled` never reaches a Pod: TLS is not turned off).
    if let (true, Some(inputs)) = (transport.serves_tls(), inputs.as_object_mut()) {
        // Named client certificates never reach a Pod either, nor who
        // starts a CA rotation (each step rolls the members by the
        // revision).
        let tls = TlsSpec {
            disabled: false,
            client_certificates: Vec::new(),
            built_in: super::BuiltInIssuer::default(),
            ..spec.tls.clone().unwrap_or_default()
        };
        let mut tls = serde_json::json!({ "spec": tls, "revision": tls_revision });
        if let (true, Some(tls)) = (transport.is_turning_tls_on(), tls.as_object_mut()) {
            tls.insert("stage".to_string(), serde_json::json!(transport));
        }
        inputs.insert("tls".to_string(), tls);
    }
    // serde_json writes struct fields in declaration order and maps in key
    // order: the same spec always gives the same bytes.
    let digest = Sha256::digest(inputs.to_string().as_bytes());
    digest
        .iter()
        .take(8)
        .map(|byte| format!("{byte:02x}"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn applied_keys_leave_out_the_operators_labels_and_read_back() {
        let mut spec = EtcdClusterSpec::default();
        spec.pod.labels.insert("team".into(), "a".into());
        spec.pod.labels.insert(CLUSTER_LABEL.into(), "other".into());
        spec.pod.annotations.insert("note".into(), "x".into());
        let keys = AppliedKeys::of(&spec);
        assert_eq!(keys.labels, ["team"]);
        assert_eq!(keys.annotations, ["note"]);
        assert_eq!(AppliedKeys::decode(&keys.encode()), Some(keys));
        assert_eq!(AppliedKeys::decode("not json"), None);
    }

    #[test]
    fn the_hash_follows_every_field_that_reaches_the_pod_and_no_other() {
        let base = EtcdClusterSpec::default();
        let hash = template_hash(
            &base,
            base.quota_backend_bytes(),
            Transport::Plaintext,
            None,
        );
        assert_eq!(hash.len(), 16);
        assert_eq!(
            hash,
            template_hash(
                &base.clone(),
                base.quota_backend_bytes(),
                Transport::Plaintext,
                None
            ),
            "deterministic"
        );

        let mut version = base.clone();
        version.version = "3.7.3".to_string();
        let mut tuning = base.clone();
        tuning.etcd.snapshot_count = 5000;
        let mut pod = base.clone();
        pod.pod.priority_class_name = Some("high".to_string());
        let mut image = base.clone();
        image.image = Some("mirror.example/etcd:3.6.16-0".to_string());
        for changed in [&version, &tuning, &pod, &image] {
            assert_ne!(
                template_hash(
                    changed,
                    changed.quota_backend_bytes(),
                    Transport::Plaintext,
                    None
                ),
                hash
            );
        }

        let mut replicas = base.clone();
        replicas
            .pod
            .labels
            .insert("team".to_string(), "storage".to_string());
        replicas
            .pod
            .annotations
            .insert("note".to_string(), "in place".to_string());
        replicas.replicas = 5;
        replicas.paused = true;
        replicas.maintenance.defrag.schedule = Some("@daily".to_string());
        assert_eq!(
            template_hash(
                &replicas,
                replicas.quota_backend_bytes(),
                Transport::Plaintext,
                None
            ),
            hash
        );
    }

    #[test]
    fn the_quota_the_pods_run_with_rolls_them_and_storage_size_alone_does_not() {
        let spec = EtcdClusterSpec::default();
        let quota = spec.quota_backend_bytes();
        let mut grown = spec.clone();
        grown.storage.size =
            k8s_openapi::apimachinery::pkg::api::resource::Quantity("5Gi".to_string());
        assert_eq!(
            template_hash(&grown, quota, Transport::Plaintext, None),
            template_hash(&spec, quota, Transport::Plaintext, None),
            "a size the volumes do not have yet rolls nothing"
        );
        assert_ne!(
            template_hash(
                &grown,
                grown.quota_backend_bytes(),
                Transport::Plaintext,
                None
            ),
            template_hash(&spec, quota, Transport::Plaintext, None),
            "a quota derived from grown volumes rolls the members"
        );
    }

    #[test]
    fn the_tls_revision_and_stage_count_for_a_tls_cluster_only() {
        let plain = EtcdClusterSpec::default();
        let hash = |spec: &EtcdClusterSpec, stage, revision| {
            template_hash(spec, spec.quota_backend_bytes(), stage, revision)
        };
        assert_eq!(
            hash(&plain, Transport::Plaintext, Some("r1")),
            hash(&plain, Transport::Plaintext, None),
            "a plaintext cluster has no TLS revision"
        );
        let explicit = EtcdClusterSpec {
            tls: Some(crate::api::TlsSpec::default()),
            ..EtcdClusterSpec::default()
        };
        let disabled = EtcdClusterSpec {
            tls: Some(crate::api::TlsSpec {
                disabled: true,
                ..crate::api::TlsSpec::default()
            }),
            ..EtcdClusterSpec::default()
        };
        // TLS by default, asked for, or kept on against `disabled`: the
        // same Pods, so the same hash.
        let tls = hash(&explicit, Transport::Tls, Some("r1"));
        assert_eq!(hash(&plain, Transport::Tls, Some("r1")), tls);
        assert_eq!(hash(&disabled, Transport::Tls, Some("r1")), tls);
        // An application's client certificate restarts no member.
        let with_app = EtcdClusterSpec {
            tls: Some(crate::api::TlsSpec {
                client_certificates: vec![crate::api::NamedClientCertificate {
                    name: "apiserver".into(),
                }],
                ..crate::api::TlsSpec::default()
            }),
            ..EtcdClusterSpec::default()
        };
        assert_eq!(hash(&with_app, Transport::Tls, Some("r1")), tls);
        // Nor does who starts a CA rotation.
        let manual = EtcdClusterSpec {
            tls: Some(crate::api::TlsSpec {
                built_in: crate::api::BuiltInIssuer {
                    ca_rotation: crate::api::CaRotationPolicy::Manual,
                },
                ..crate::api::TlsSpec::default()
            }),
            ..EtcdClusterSpec::default()
        };
        assert_eq!(hash(&manual, Transport::Tls, Some("r1")), tls);
        assert_ne!(tls, hash(&plain, Transport::Plaintext, Some("r1")));
        assert_ne!(tls, hash(&explicit, Transport::Tls, Some("r2")));
        let stages = [
            Transport::Plaintext,
            Transport::BridgingPeers,
            Transport::ReturningPeers,
            Transport::Tls,
        ]
        .map(|stage| hash(&explicit, stage, Some("r1")));
        let distinct: std::collections::BTreeSet<_> = stages.iter().collect();
        assert_eq!(distinct.len(), stages.len(), "each stage rolls the members");
    }
}
