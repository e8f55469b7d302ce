//! State shared by the agent's tasks: the node's pod workers, its status loop
//! and the kubelet API.

use std::collections::BTreeMap;
use std::sync::Mutex;

use etcd_lab_common::cgroup::NodeCgroups;
use kube::Client;
use tokio::sync::Notify;

use crate::config::AgentConfig;

/// What every pod worker and the node status loop share.
pub(crate) struct NodeContext {
    pub client: Client,
    pub config: AgentConfig,
    pub cgroups: NodeCgroups,
    /// Pod uid -> unique names of the attachable volumes it uses.
    volumes_in_use: Mutex<BTreeMap<String, Vec<String>>>,
    /// Wakes the node status loop (volumes in use changed).
    pub node_changed: Notify,
    /// The pods that have a worker on this node: (namespace, name) -> uid,
    /// for the kubelet API to find a pod by the name in its path.
    pods: Mutex<BTreeMap<(String, String), String>>,
}

impl NodeContext {
    pub fn new(client: Client, config: AgentConfig, cgroups: NodeCgroups) -> Self {
        Self {
            client,
            config,
            cgroups,
            volumes_in_use: Mutex::new(BTreeMap::new()),
            node_changed: Notify::new(),
            pods: Mutex::new(BTreeMap::new()),
        }
    }

    /// Records the attachable volumes of a pod (empty to forget the pod).
    pub fn set_volumes_in_use(&self, pod_uid: &str, names: Vec<String>) {
        let mut map = self
            .volumes_in_use
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let changed = if names.is_empty() {
            map.remove(pod_uid).is_some()
        } else {
            map.insert(pod_uid.to_owned(), names.clone()).as_ref() != Some(&names)
        };
        drop(map);
        if changed {
            self.node_changed.notify_one();
        }
    }

    /// Sorted, de-duplicated volumes in use on the node.
    pub fn volumes_in_use(&self) -> Vec<String> {
        let map = self
            .volumes_in_use
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let mut all: Vec<String> = map.values().flatten().cloned().collect();
        all.sort();
        all.dedup();
        all
    }

    /// Records that pod `namespace/name` of uid `uid` has a worker (a pod
    /// of the same name replaces an earlier one).
    pub fn pod_started(&self, namespace: &str, name: &str, uid: &str) {
        self.pods
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert((namespace.to_owned(), name.to_owned()), uid.to_owned());
    }

    /// Forgets the pod of uid `uid` once its worker finished.
    pub fn pod_finished(&self, uid: &str) {
        self.pods
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|_, u| u != uid);
    }

    /// The uid of pod `namespace/name` while it has a worker on this node.
    pub fn pod_uid(&self, namespace: &str, name: &str) -> Option<String> {
        self.pods
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&(namespace.to_owned(), name.to_owned()))
            .cloned()
    }
}
