//! The labels of a cluster's objects: what selects its members and what
//! marks one member's Pod and PVC.

use std::collections::BTreeMap;

use crate::api::identity::{
    APP_NAME, CLUSTER_LABEL, INSTANCE_LABEL, MANAGED_BY_LABEL, MANAGER, NAME_LABEL, ORDINAL_LABEL,
};

/// Labels selecting every member Pod of a cluster.
pub fn selector_labels(cluster: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        (NAME_LABEL.to_string(), APP_NAME.to_string()),
        (INSTANCE_LABEL.to_string(), cluster.to_string()),
        (CLUSTER_LABEL.to_string(), cluster.to_string()),
    ])
}

/// The labels of the objects of member `ordinal` (its PVC and Pod).
pub fn member_labels(cluster: &str, ordinal: u32) -> BTreeMap<String, String> {
    labels(cluster, Some(ordinal))
}

pub(super) fn labels(cluster: &str, ordinal: Option<u32>) -> BTreeMap<String, String> {
    let mut labels = selector_labels(cluster);
    labels.insert(MANAGED_BY_LABEL.to_string(), MANAGER.to_string());
    if let Some(ordinal) = ordinal {
        labels.insert(ORDINAL_LABEL.to_string(), ordinal.to_string());
    }
    labels
}
