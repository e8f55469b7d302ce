//! `config.json`: the lab's shape and the flags used at `up`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use etcd_lab_common::IoContext;
use serde::{Deserialize, Serialize};

use crate::error::{LabError, Result};
use crate::pki::write_file;

/// One lab node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeConfig {
    /// `lab-node-<index>`.
    pub name: String,
    /// 1-based; the node's subnet is `10.244.<index>.0/24`.
    pub index: u8,
    /// `topology.kubernetes.io/zone`.
    pub zone: String,
}

/// The lab's shape.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LabConfig {
    pub nodes: Vec<NodeConfig>,
    pub zones: u8,
    /// kube-controller-manager flags (without `--`) that differ from the defaults.
    #[serde(default)]
    pub controller_manager_flags: BTreeMap<String, String>,
    /// The `etcd-lab` binary that runs the agents (to restart them later).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub etcd_lab_binary: Option<PathBuf>,
    /// The image registry the nodes pull from; `None` when the lab runs
    /// without images (every image maps to files of this machine).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub registry: Option<etcd_lab_node::config::RegistryConfig>,
}

/// Name of the `i`-th zone (0-based): `zone-a`, `zone-b`, ...
pub fn zone_name(i: u8) -> String {
    let letter = char::from(b'a' + (i % 26));
    if i < 26 {
        format!("zone-{letter}")
    } else {
        format!("zone-{letter}{}", i / 26)
    }
}

/// Name of the node with 1-based `index`.
pub fn node_name(index: u8) -> String {
    format!("lab-node-{index}")
}

impl LabConfig {
    /// `nodes` nodes named `lab-node-1..N`, spread round robin over `zones` zones.
    pub fn new(
        nodes: u8,
        zones: u8,
        controller_manager_flags: BTreeMap<String, String>,
    ) -> Result<Self> {
        if nodes == 0 || nodes > 200 {
            return Err(LabError::Invalid(format!(
                "--nodes must be within 1..=200, not {nodes}"
            )));
        }
        if zones == 0 {
            return Err(LabError::Invalid("--zones must be at least 1".into()));
        }
        Ok(Self {
            nodes: (1..=nodes)
                .map(|index| NodeConfig {
                    name: node_name(index),
                    index,
                    zone: zone_name((index - 1) % zones),
                })
                .collect(),
            zones,
            controller_manager_flags,
            etcd_lab_binary: None,
            registry: None,
        })
    }

    pub fn load(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path).context(|| format!("read {}", path.display()))?;
        serde_json::from_str(&text).map_err(|source| LabError::Json {
            path: path.to_owned(),
            source,
        })
    }

    pub fn save(&self, path: &Path) -> Result<()> {
        let text = serde_json::to_string_pretty(self).map_err(|source| LabError::Json {
            path: path.to_owned(),
            source,
        })?;
        write_file(path, text.as_bytes(), 0o644)
    }

    /// Same nodes, zones and flags (what `up` must not change under a running lab).
    pub fn same_shape(&self, other: &Self) -> bool {
        self.nodes == other.nodes
            && self.zones == other.zones
            && self.controller_manager_flags == other.controller_manager_flags
    }

    pub fn node(&self, name: &str) -> Option<&NodeConfig> {
        self.nodes.iter().find(|n| n.name == name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nodes_spread_round_robin_over_zones() {
        let config = LabConfig::new(4, 3, BTreeMap::new()).unwrap();
        let shape: Vec<(&str, u8, &str)> = config
            .nodes
            .iter()
            .map(|n| (n.name.as_str(), n.index, n.zone.as_str()))
            .collect();
        assert_eq!(
            shape,
            [
                ("lab-node-1", 1, "zone-a"),
                ("lab-node-2", 2, "zone-b"),
                ("lab-node-3", 3, "zone-c"),
                ("lab-node-4", 4, "zone-a"),
            ]
        );
    }

    #[test]
    fn rejects_an_empty_lab() {
        assert!(LabConfig::new(0, 3, BTreeMap::new()).is_err());
        assert!(LabConfig::new(3, 0, BTreeMap::new()).is_err());
    }
}
