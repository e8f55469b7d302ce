//! Which clusters have members on which node, so that a change of a Node
//! (NotReady, deleted, out-of-service taint) triggers the reconcile of the
//! clusters it hosts.
//!
//! The index is fed by `observe` (every pass knows the nodes of the
//! cluster's pods), so it costs no extra watch. After an operator restart it
//! is empty until every cluster has been reconciled once, which the
//! controller does at start-up anyway.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, RwLock};

/// A cluster, by namespace and name.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ClusterKey {
    /// Namespace of the EtcdCluster.
    pub namespace: String,
    /// Name of the EtcdCluster.
    pub name: String,
}

/// Node name -> clusters with a pod on it. Cheap to clone, shared.
#[derive(Debug, Clone, Default)]
pub struct NodeIndex {
    inner: Arc<RwLock<BTreeMap<ClusterKey, BTreeSet<String>>>>,
}

impl NodeIndex {
    /// Records the nodes that host `cluster`'s pods now.
    pub fn set_nodes(&self, cluster: ClusterKey, nodes: impl IntoIterator<Item = String>) {
        let nodes: BTreeSet<String> = nodes.into_iter().collect();
        let mut map = match self.inner.write() {
            Ok(map) => map,
            Err(poisoned) => poisoned.into_inner(),
        };
        if nodes.is_empty() {
            map.remove(&cluster);
        } else {
            map.insert(cluster, nodes);
        }
    }

    /// Forgets a deleted cluster.
    pub fn forget(&self, cluster: &ClusterKey) {
        let mut map = match self.inner.write() {
            Ok(map) => map,
            Err(poisoned) => poisoned.into_inner(),
        };
        map.remove(cluster);
    }

    /// The clusters with a pod on `node`.
    pub fn clusters_on(&self, node: &str) -> Vec<ClusterKey> {
        let map = match self.inner.read() {
            Ok(map) => map,
            Err(poisoned) => poisoned.into_inner(),
        };
        map.iter()
            .filter(|(_, nodes)| nodes.contains(node))
            .map(|(cluster, _)| cluster.clone())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(name: &str) -> ClusterKey {
        ClusterKey {
            namespace: "default".into(),
            name: name.into(),
        }
    }

    #[test]
    fn maps_a_node_to_the_clusters_it_hosts() {
        let index = NodeIndex::default();
        index.set_nodes(key("a"), ["n1".to_string(), "n2".to_string()]);
        index.set_nodes(key("b"), ["n2".to_string(), "n3".to_string()]);
        assert_eq!(index.clusters_on("n1"), vec![key("a")]);
        assert_eq!(index.clusters_on("n2"), vec![key("a"), key("b")]);
        assert!(index.clusters_on("n4").is_empty());
    }

    #[test]
    fn follows_pods_that_moved_and_deleted_clusters() {
        let index = NodeIndex::default();
        index.set_nodes(key("a"), ["n1".to_string()]);
        index.set_nodes(key("a"), ["n2".to_string()]);
        assert!(index.clusters_on("n1").is_empty());
        index.forget(&key("a"));
        assert!(index.clusters_on("n2").is_empty());
    }
}
