//! Watches the pods bound to this node and keeps one worker per pod.

use std::collections::HashMap;
use std::sync::Arc;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};

use crate::node_context::NodeContext;
use crate::pod::worker::{self, PodHandle};

/// Runs until the watch stream ends (never, in practice).
pub(crate) async fn watch_pods(ctx: Arc<NodeContext>) {
    let api = Api::<Pod>::all(ctx.client.clone());
    let config =
        watcher::Config::default().fields(&format!("spec.nodeName={}", ctx.config.node_name));
    let mut stream = watcher::watcher(api, config).default_backoff().boxed();
    let mut workers: HashMap<String, PodHandle> = HashMap::new();
    let mut relisted: Option<Vec<String>> = None;
    while let Some(event) = stream.next().await {
        workers.retain(|uid, h| {
            let finished = h.task.is_finished();
            if finished {
                ctx.pod_finished(uid);
            }
            !finished
        });
        match event {
            Ok(Event::Apply(pod)) | Ok(Event::InitApply(pod)) => {
                let Some(uid) = pod.metadata.uid.clone() else {
                    continue;
                };
                if let Some(seen) = relisted.as_mut() {
                    seen.push(uid.clone());
                }
                let pod = Arc::new(pod);
                match workers.get(&uid) {
                    Some(h) => {
                        let _ = h.updates.send(Some(pod));
                    }
                    None => {
                        ctx.pod_started(
                            pod.metadata.namespace.as_deref().unwrap_or("default"),
                            pod.metadata.name.as_deref().unwrap_or(""),
                            &uid,
                        );
                        workers.insert(uid, worker::spawn(ctx.clone(), pod));
                    }
                }
            }
            Ok(Event::Delete(pod)) => {
                if let Some(h) = pod.metadata.uid.as_ref().and_then(|u| workers.get(u)) {
                    let _ = h.updates.send(None);
                }
            }
            Ok(Event::Init) => relisted = Some(Vec::new()),
            Ok(Event::InitDone) => {
                if let Some(seen) = relisted.take() {
                    for (uid, h) in &workers {
                        if !seen.contains(uid) {
                            let _ = h.updates.send(None);
                        }
                    }
                }
            }
            Err(e) => tracing::warn!("pod watch: {e}"),
        }
    }
}
