//! Where volumes live in the lab directory: each is a directory (where its
//! filesystem is mounted while pods use it) and its disk image beside it
//! (`<dir>.img`, `etcd_lab_node::volume::disk`).
//!
//! - network volumes: `LAB_DIR/network-volumes/<volumeHandle>`;
//! - local volumes: `LAB_DIR/nodes/<node>/volumes/<pv name>`.

use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::PersistentVolume;

use super::{ANN_PROVISIONED_BY, LOCAL_PROVISIONER, NETWORK_DRIVER};

/// Directory of the network volume with this CSI volume handle.
pub fn network_volume_dir(lab_dir: &Path, volume_handle: &str) -> PathBuf {
    lab_dir.join("network-volumes").join(volume_handle)
}

/// Directory of the local volume `name` on `node`.
pub fn local_volume_dir(lab_dir: &Path, node: &str, name: &str) -> PathBuf {
    lab_dir.join("nodes").join(node).join("volumes").join(name)
}

/// A single path component: no separators, not `.` or `..`, not empty.
pub fn is_plain_name(name: &str) -> bool {
    !name.is_empty() && name != "." && name != ".." && !name.contains(['/', '\0'])
}

/// The data directory of a PV this process provisioned, or `None` for any
/// other PV or one whose path points outside the lab's volume directories.
pub fn data_dir(volume: &PersistentVolume, lab_dir: &Path) -> Option<PathBuf> {
    let provisioner = volume
        .metadata
        .annotations
        .as_ref()?
        .get(ANN_PROVISIONED_BY)?;
    let spec = volume.spec.as_ref()?;
    match provisioner.as_str() {
        NETWORK_DRIVER => {
            let csi = spec.csi.as_ref()?;
            (csi.driver == NETWORK_DRIVER && is_plain_name(&csi.volume_handle))
                .then(|| network_volume_dir(lab_dir, &csi.volume_handle))
        }
        LOCAL_PROVISIONER => {
            let path = PathBuf::from(&spec.local.as_ref()?.path);
            let relative = path.strip_prefix(lab_dir.join("nodes")).ok()?;
            let parts: Vec<_> = relative.iter().filter_map(|p| p.to_str()).collect();
            match parts.as_slice() {
                [node, "volumes", name] if is_plain_name(node) && is_plain_name(name) => Some(path),
                _ => None,
            }
        }
        _ => None,
    }
}

/// The node a local PV of this process lives on.
pub fn local_volume_node(volume: &PersistentVolume) -> Option<String> {
    let provisioner = volume
        .metadata
        .annotations
        .as_ref()?
        .get(ANN_PROVISIONED_BY)?;
    if provisioner != LOCAL_PROVISIONER {
        return None;
    }
    let terms = &volume
        .spec
        .as_ref()?
        .node_affinity
        .as_ref()?
        .required
        .as_ref()?
        .node_selector_terms;
    terms
        .iter()
        .flat_map(|term| term.match_expressions.iter().flatten())
        .find(|e| e.key == "kubernetes.io/hostname" && e.operator == "In")
        .and_then(|e| e.values.as_ref()?.first().cloned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pv(json: serde_json::Value) -> PersistentVolume {
        serde_json::from_value(json).unwrap()
    }

    #[test]
    fn network_volume_data_is_under_network_volumes() {
        let v = pv(serde_json::json!({
            "metadata": {"name": "pvc-1", "annotations": {ANN_PROVISIONED_BY: NETWORK_DRIVER}},
            "spec": {"csi": {"driver": NETWORK_DRIVER, "volumeHandle": "pvc-1"}}
        }));
        assert_eq!(
            data_dir(&v, Path::new("/lab")),
            Some(PathBuf::from("/lab/network-volumes/pvc-1"))
        );
    }

    #[test]
    fn escaping_handles_and_foreign_volumes_have_no_data_dir() {
        let escaping = pv(serde_json::json!({
            "metadata": {"name": "x", "annotations": {ANN_PROVISIONED_BY: NETWORK_DRIVER}},
            "spec": {"csi": {"driver": NETWORK_DRIVER, "volumeHandle": "../../etc"}}
        }));
        assert_eq!(data_dir(&escaping, Path::new("/lab")), None);
        let foreign = pv(serde_json::json!({
            "metadata": {"name": "x"},
            "spec": {"local": {"path": "/lab/nodes/n1/volumes/x"}}
        }));
        assert_eq!(data_dir(&foreign, Path::new("/lab")), None);
        let outside = pv(serde_json::json!({
            "metadata": {"name": "x", "annotations": {ANN_PROVISIONED_BY: LOCAL_PROVISIONER}},
            "spec": {"local": {"path": "/lab/nodes/n1/../../etc"}}
        }));
        assert_eq!(data_dir(&outside, Path::new("/lab")), None);
    }

    #[test]
    fn local_volume_data_and_node() {
        let v = pv(serde_json::json!({
            "metadata": {"name": "pvc-2", "annotations": {ANN_PROVISIONED_BY: LOCAL_PROVISIONER}},
            "spec": {
                "local": {"path": "/lab/nodes/node-1/volumes/pvc-2"},
                "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                    {"key": "kubernetes.io/hostname", "operator": "In", "values": ["node-1"]}
                ]}]}}
            }
        }));
        assert_eq!(
            data_dir(&v, Path::new("/lab")),
            Some(PathBuf::from("/lab/nodes/node-1/volumes/pvc-2"))
        );
        assert_eq!(local_volume_node(&v).as_deref(), Some("node-1"));
    }
}
