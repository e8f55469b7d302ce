//! The revision of the member Pod template: one hash of every spec field
//! that shapes a member's Pod. A member whose Pod carries another hash runs
//! an older template and is replaced by the rollout, one member at a time.

use sha2::{Digest, Sha256};

use super::EtcdClusterSpec;

/// The Pod annotation that records the template a member Pod was built from.
pub const TEMPLATE_HASH_ANNOTATION: &str = "durable-etcd.io/pod-template-hash";

/// Raised when a release of the operator changes the Pods it builds from the
/// same spec (a new flag, another probe): members then roll to the new shape.
const POD_SHAPE: u32 = 1;

/// The hash of the Pod template a spec asks for: 16 hex digits over the etcd
/// version, the etcd tuning and the member Pod template. Fields that never
/// reach the Pod (replicas, storage, recovery, `paused`) are left out, so
/// changing them rolls nothing.
pub fn template_hash(spec: &EtcdClusterSpec) -> String {
    let inputs = serde_json::json!({
        "shape": POD_SHAPE,
        "version": spec.version,
        "etcd": spec.etcd,
        "pod": spec.pod,
    });
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
    fn the_hash_follows_every_field_that_reaches_the_pod_and_no_other() {
        let base = EtcdClusterSpec::default();
        let hash = template_hash(&base);
        assert_eq!(hash.len(), 16);
        assert_eq!(hash, template_hash(&base.clone()), "deterministic");

        let mut version = base.clone();
        version.version = "3.7.3".to_string();
        let mut tuning = base.clone();
        tuning.etcd.snapshot_count = 5000;
        let mut pod = base.clone();
        pod.pod.priority_class_name = Some("high".to_string());
        for changed in [&version, &tuning, &pod] {
            assert_ne!(template_hash(changed), hash);
        }

        let mut replicas = base.clone();
        replicas.replicas = 5;
        replicas.paused = true;
        replicas.storage.size =
            k8s_openapi::apimachinery::pkg::api::resource::Quantity("5Gi".to_string());
        assert_eq!(template_hash(&replicas), hash);
    }
}
