//! A deleted node loses its disks: the local volumes on it are destroyed
//! (whatever still had them mounted loses them). The PV objects stay (their claims and pods see a volume whose
//! node is gone, as on a real cluster); released ones are then deleted by
//! [`super::reclaim`].
//!
//! Only nodes seen alive and then seen gone count as deleted: a node that
//! has not registered yet (the lab is starting) never loses its data.

use std::collections::BTreeSet;
use std::sync::Arc;

use etcd_lab_node::volume::disk;
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{Node, PersistentVolume};
use kube::api::ListParams;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use kube::{Api, ResourceExt};

use super::layout::{data_dir, local_volume_node};
use super::{Context, StorageError};

/// Tracks the nodes known to exist and reports the ones that went away.
#[derive(Debug, Default)]
pub struct NodeTracker {
    known: BTreeSet<String>,
    relisting: Option<BTreeSet<String>>,
}

impl NodeTracker {
    /// Feeds one watch event; returns the names of nodes now known deleted.
    pub fn observe(&mut self, event: Event<Node>) -> Vec<String> {
        match event {
            Event::Apply(node) => {
                self.known.insert(node.name_any());
                Vec::new()
            }
            Event::Delete(node) => {
                let name = node.name_any();
                self.known.remove(&name);
                vec![name]
            }
            Event::Init => {
                self.relisting = Some(BTreeSet::new());
                Vec::new()
            }
            Event::InitApply(node) => {
                self.relisting
                    .get_or_insert_with(BTreeSet::new)
                    .insert(node.name_any());
                Vec::new()
            }
            Event::InitDone => {
                let listed = self.relisting.take().unwrap_or_default();
                let gone = self.known.difference(&listed).cloned().collect();
                self.known = listed;
                gone
            }
        }
    }
}

/// Watches nodes until the watch ends.
pub async fn run(ctx: Arc<Context>) {
    let nodes: Api<Node> = Api::all(ctx.client.clone());
    let mut tracker = NodeTracker::default();
    let mut events = watcher::watcher(nodes, watcher::Config::default())
        .default_backoff()
        .boxed();
    loop {
        match events.try_next().await {
            Ok(Some(event)) => {
                for node in tracker.observe(event) {
                    if let Err(e) = remove_local_volumes(&ctx, &node).await {
                        tracing::warn!(%node, "cannot remove local volumes of deleted node: {e}");
                    }
                }
            }
            Ok(None) => return,
            Err(e) => tracing::debug!("node watch: {e}"),
        }
    }
}

async fn remove_local_volumes(ctx: &Context, node: &str) -> Result<(), StorageError> {
    let volumes: Api<PersistentVolume> = Api::all(ctx.client.clone());
    for volume in volumes.list(&ListParams::default()).await? {
        if local_volume_node(&volume).as_deref() != Some(node) {
            continue;
        }
        if let Some(dir) = data_dir(&volume, &ctx.lab_dir) {
            let path = dir.clone();
            tokio::task::spawn_blocking(move || disk::destroy(&path)).await??;
            tracing::info!(%node, volume = %volume.name_any(), path = %dir.display(), "node deleted: local volume data removed");
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(name: &str) -> Node {
        serde_json::from_value(serde_json::json!({"metadata": {"name": name}})).unwrap()
    }

    #[test]
    fn nodes_never_seen_are_not_reported_deleted() {
        let mut tracker = NodeTracker::default();
        assert!(tracker.observe(Event::Init).is_empty());
        assert!(tracker.observe(Event::InitDone).is_empty());
        assert!(tracker.observe(Event::Apply(node("n1"))).is_empty());
        assert_eq!(
            tracker.observe(Event::Delete(node("n1"))),
            vec!["n1".to_owned()]
        );
    }

    #[test]
    fn nodes_missing_from_a_relist_are_reported_deleted() {
        let mut tracker = NodeTracker::default();
        tracker.observe(Event::Init);
        tracker.observe(Event::InitApply(node("n1")));
        tracker.observe(Event::InitApply(node("n2")));
        assert!(tracker.observe(Event::InitDone).is_empty());
        tracker.observe(Event::Init);
        tracker.observe(Event::InitApply(node("n2")));
        assert_eq!(tracker.observe(Event::InitDone), vec!["n1".to_owned()]);
    }
}
