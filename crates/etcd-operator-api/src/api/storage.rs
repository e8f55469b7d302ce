//! Storage of the members' data directories.

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::KubeSchema;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::rules;

/// Persistent storage of each member: one PersistentVolumeClaim per member.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = kube::core::Rule::new("has(self.storageClassName) == has(oldSelf.storageClassName) && (!has(self.storageClassName) || self.storageClassName == oldSelf.storageClassName)").message("storage.storageClassName is immutable"))]
pub struct StorageSpec {
    /// StorageClass of the members' volumes; the cluster default when unset.
    /// Immutable. A class whose volumes can attach on any node (network
    /// disks) lets a member move when its node is confirmed gone; node-local
    /// volumes are lost with their node and the member is then replaced.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 253))]
    #[x_kube(validation = rules::rule(format!("self == '' || self.matches('{}')", rules::DNS1123_SUBDOMAIN), "storage.storageClassName must be the name of a StorageClass (lower-case letters, digits, '-' and '.'), or empty for volumes without a class"))]
    pub storage_class_name: Option<String>,

    /// Size of each member's volume: a positive quantity such as `10Gi`.
    /// A larger size grows the volumes where the StorageClass allows
    /// volume expansion; volumes never shrink, so a smaller size (back to
    /// what the volumes have, after a class refused to grow them) changes
    /// no volume, and new volumes are never smaller than the members'
    /// largest. etcd's derived quota follows the volumes as they are.
    #[serde(default = "default_size")]
    #[schemars(extend("nullable" = false))]
    #[x_kube(validation = rules::rule("isQuantity(string(self)) && quantity(string(self)).isGreaterThan(quantity('0'))", "storage.size must be a positive quantity such as 10Gi"))]
    pub size: Quantity,

    /// What happens to a member's PVC when scale-down removes the member:
    /// `Keep` (default) leaves it for a person to inspect and delete;
    /// `Delete` deletes it once the member is removed and its Pod is gone.
    #[serde(default)]
    pub retention_policy: RetentionPolicy,
}

/// What happens to the PVC of a member removed by scale-down.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum RetentionPolicy {
    /// Keep the PVC; a person deletes it.
    #[default]
    Keep,
    /// Delete the PVC once the member has been removed and its Pod is gone.
    Delete,
}

fn default_size() -> Quantity {
    Quantity("1Gi".to_string())
}

impl Default for StorageSpec {
    fn default() -> Self {
        Self {
            storage_class_name: None,
            size: default_size(),
            retention_policy: RetentionPolicy::default(),
        }
    }
}
