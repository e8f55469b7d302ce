//! The generated CustomResourceDefinitions.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;

use super::{EtcdBackup, EtcdBackupSchedule, EtcdCluster};

/// Failure to render the CRD.
#[derive(Debug, thiserror::Error)]
pub enum CrdError {
    /// The CRD could not be serialised to YAML.
    #[error("cannot render the CRD as YAML: {0}")]
    Yaml(#[from] serde_saphyr::ser_error::Error),
}

/// The `EtcdCluster` CRD, generated from the Rust types.
pub fn crd() -> CustomResourceDefinition {
    EtcdCluster::crd()
}

/// Every CRD this operator serves, in the order `etcd-operator crd` prints
/// them: `EtcdCluster`, `EtcdBackup`, `EtcdBackupSchedule`.
pub fn crds() -> Vec<CustomResourceDefinition> {
    vec![
        EtcdCluster::crd(),
        EtcdBackup::crd(),
        EtcdBackupSchedule::crd(),
    ]
}

/// Every CRD as one multi-document YAML stream, as printed by
/// `etcd-operator crd`: each document starts with `---` and equals the file
/// `deploy/crds/<plural>.yaml`.
pub fn crds_yaml() -> Result<String, CrdError> {
    let mut out = String::new();
    for crd in crds() {
        out.push_str("---\n");
        out.push_str(&serde_saphyr::to_string(&crd)?);
    }
    Ok(out)
}

/// The `EtcdCluster` CRD as YAML, as committed under `deploy/crds/` and
/// printed by `etcd-operator crd`.
pub fn crd_yaml() -> Result<String, CrdError> {
    Ok(serde_saphyr::to_string(&crd())?)
}

#[cfg(test)]
mod tests {
    use serde_json::Value;

    use super::*;

    fn spec_schema() -> Value {
        let crd = serde_json::to_value(crd()).expect("crd serialises");
        crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"].clone()
    }

    fn rules(schema: &Value) -> Vec<String> {
        schema["x-kubernetes-validations"]
            .as_array()
            .map(|rules| {
                rules
                    .iter()
                    .filter_map(|r| r["rule"].as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default()
    }

    #[test]
    fn names_group_and_scope() {
        let crd = crd();
        assert_eq!(
            crd.metadata.name.as_deref(),
            Some("etcdclusters.durable-etcd.io")
        );
        assert_eq!(crd.spec.group, "durable-etcd.io");
        assert_eq!(crd.spec.scope, "Namespaced");
        assert_eq!(crd.spec.names.plural, "etcdclusters");
        assert_eq!(crd.spec.versions[0].name, "v1alpha1");
        let columns: Vec<_> = crd.spec.versions[0]
            .additional_printer_columns
            .iter()
            .flatten()
            .map(|c| c.name.as_str())
            .collect();
        assert_eq!(
            columns,
            [
                "Replicas",
                "Ready",
                "Version",
                "Updated",
                "Available",
                "Recovery Point",
                "Phase",
                "Age"
            ]
        );
    }

    #[test]
    fn spec_has_defaults_and_bounds() {
        let spec = spec_schema();
        let props = &spec["properties"];
        assert_eq!(props["replicas"]["default"], 3);
        assert_eq!(props["replicas"]["minimum"].as_f64(), Some(1.0));
        assert_eq!(props["replicas"]["maximum"].as_f64(), Some(9.0));
        assert_eq!(props["version"]["default"], "3.6.16");
        assert!(
            rules(&props["version"])
                .iter()
                .any(|r| r.contains(crate::api::version::PATTERN))
        );
        assert_eq!(props["memberFailureTimeout"]["default"], "300s");
        assert_eq!(props["paused"]["default"], false);
        assert_eq!(props["storage"]["properties"]["size"]["default"], "1Gi");
        assert_eq!(
            props["storage"]["properties"]["retentionPolicy"]["default"],
            "Keep"
        );
        assert_eq!(
            props["recovery"]["properties"]["policy"]["default"],
            "Manual"
        );
        assert_eq!(
            props["etcd"]["properties"]["heartbeatIntervalMs"]["default"],
            100
        );
        assert_eq!(
            props["etcd"]["properties"]["electionTimeoutMs"]["default"],
            1000
        );
    }

    #[test]
    fn spec_carries_the_cel_rules() {
        let spec = spec_schema();
        let props = &spec["properties"];
        let storage = rules(&props["storage"]);
        assert!(
            storage
                .iter()
                .any(|r| r.contains("self.storageClassName == oldSelf.storageClassName"))
        );
        // storage.size may go back down: volumes never shrink, the
        // operator keeps them (see planner::volume_size).
        assert!(!storage.iter().any(|r| r.contains("oldSelf.size")));
        let tuning = rules(&props["etcd"]);
        assert!(
            tuning
                .iter()
                .any(|r| r == "self.electionTimeoutMs >= 5 * self.heartbeatIntervalMs")
        );
        let timeout = rules(&props["memberFailureTimeout"]);
        assert!(timeout.iter().any(|r| r.contains("duration(self)")));
    }

    /// A `null` in a field the operator reads as unset is dropped by the
    /// API server (not stored): an object whose `bootstrap` or destination
    /// kind is `null` cannot slip past the rules that look for them, and a
    /// `null` size is defaulted rather than stored where a quantity must be.
    #[test]
    fn fields_the_rules_look_at_are_not_nullable() {
        let spec = spec_schema();
        let props = &spec["properties"];
        assert_eq!(props["bootstrap"].get("nullable"), None);
        assert_eq!(
            props["bootstrap"]["properties"]["fromBackup"].get("nullable"),
            None
        );
        assert_eq!(
            props["recovery"]["properties"]["backup"].get("nullable"),
            None
        );
        assert_eq!(props["storage"]["properties"]["size"]["nullable"], false);
        let destination =
            &props["bootstrap"]["properties"]["fromBackup"]["properties"]["destination"];
        for kind in ["local", "s3", "gcs", "azure", "encryption"] {
            assert_eq!(
                destination["properties"][kind].get("nullable"),
                None,
                "{kind}"
            );
        }
    }

    #[test]
    fn the_cluster_name_is_checked_at_the_root() {
        let crd = serde_json::to_value(crd()).expect("crd serialises");
        let root = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"];
        let root_rules = rules(root);
        assert!(
            root_rules
                .iter()
                .any(|r| r == "self.metadata.name.size() <= 56"),
            "{root_rules:?}"
        );
        assert!(
            root_rules
                .iter()
                .any(|r| r.contains("self.metadata.name.matches(")),
            "{root_rules:?}"
        );
    }

    /// The rule keeping applications' certificates off the operator's own
    /// common names sits at the root, the only place that sees the
    /// cluster's name, and lists every reserved name the operator knows
    /// (`addressing::is_reserved_common_name`). The API server's judgement
    /// of it is `tests/e2e_admission.rs`.
    #[test]
    fn the_reserved_client_certificate_names_are_checked_at_the_root() {
        use crate::addressing::{CLUSTER_COMMON_NAME_SUFFIXES, FIXED_RESERVED_COMMON_NAMES};
        let crd = serde_json::to_value(crd()).expect("crd serialises");
        let root = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"];
        let root_rules = rules(root);
        let rule = root_rules
            .iter()
            .find(|r| r.contains("self.spec.tls.clientCertificates"))
            .expect("a root rule on spec.tls.clientCertificates");
        for name in FIXED_RESERVED_COMMON_NAMES {
            assert!(rule.contains(&format!("'{name}'")), "{name}: {rule}");
        }
        for suffix in CLUSTER_COMMON_NAME_SUFFIXES {
            assert!(
                rule.contains(&format!("self.metadata.name + '{suffix}'")),
                "{suffix}: {rule}"
            );
        }
    }

    #[test]
    fn every_spec_and_status_field_is_documented() {
        let crd = serde_json::to_value(crd()).expect("crd serialises");
        let root = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"];
        let mut undocumented = Vec::new();
        for top in ["spec", "status"] {
            walk(&root[top], top, &mut undocumented);
        }
        assert!(
            undocumented.is_empty(),
            "fields without description: {undocumented:?}"
        );

        fn walk(schema: &Value, path: &str, undocumented: &mut Vec<String>) {
            // Kubernetes' own types (Affinity, Condition, ...) are documented
            // upstream; check ours down to the first foreign type.
            if path.matches('.').count() > 3 {
                return;
            }
            if let Some(props) = schema["properties"].as_object() {
                for (name, sub) in props {
                    let sub_path = format!("{path}.{name}");
                    if sub["description"].as_str().is_none_or(str::is_empty) {
                        undocumented.push(sub_path.clone());
                    }
                    walk(sub, &sub_path, undocumented);
                    walk(&sub["items"], &sub_path, undocumented);
                }
            }
        }
    }

    #[test]
    fn yaml_renders() {
        let yaml = crd_yaml().expect("yaml");
        assert!(yaml.contains("kind: CustomResourceDefinition"));
        assert!(yaml.contains("x-kubernetes-validations"));
    }
}
