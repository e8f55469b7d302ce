//! Writes the pod's status (only when it changed) and deletes the pod
//! object of a finished deletion.

use std::sync::Arc;

use k8s_openapi::api::core::v1::{Pod, PodStatus};
use k8s_openapi::jiff::Timestamp;
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams, Preconditions};

use crate::node_context::NodeContext;
use crate::pod::status::{PodView, build_status};

/// The view to report and the status last written.
#[derive(Default)]
pub(super) struct StatusWriter {
    view: Option<PodView>,
    written: Option<PodStatus>,
    gone: bool,
}

impl StatusWriter {
    /// The view to report from now on.
    pub fn set(&mut self, view: PodView) {
        self.view = Some(view);
    }

    /// The pod object is gone: nothing is written any more.
    pub fn pod_gone(&mut self) {
        self.gone = true;
    }

    /// Writes the status of the current view unless it is the one last
    /// written; a failed write is tried again on the next flush. On success
    /// `pod` becomes the object the API server returned.
    pub async fn flush(&mut self, ctx: &NodeContext, pod: &mut Arc<Pod>, uid: &str, key: &str) {
        let Some(view) = &self.view else {
            return;
        };
        if self.gone {
            return;
        }
        let status = build_status(view, pod.status.as_ref(), Timestamp::now());
        if self.written.as_ref() == Some(&status) {
            return;
        }
        let Ok(mut value) = serde_json::to_value(&status) else {
            return;
        };
        // A merge patch keeps fields it does not name: clear the ones that
        // are set only while the pod has a reason.
        if let Some(obj) = value.as_object_mut() {
            for field in ["reason", "message"] {
                obj.entry(field).or_insert(serde_json::Value::Null);
            }
        }
        let patch = serde_json::json!({ "status": value });
        let api = Api::<Pod>::namespaced(ctx.client.clone(), namespace(pod));
        let name = pod.metadata.name.clone().unwrap_or_default();
        let started = std::time::Instant::now();
        let result = api
            .patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await;
        note_slow_request(key, "status write", started);
        match result {
            Ok(written) => {
                self.written = Some(status);
                if written.metadata.uid.as_deref() == Some(uid) {
                    *pod = Arc::new(written);
                }
            }
            Err(kube::Error::Api(e)) if e.code == 404 => self.gone = true,
            Err(e) => tracing::warn!(pod = %key, "status update failed: {e}"),
        }
    }
}

/// Deletes the pod object at once (its containers are stopped), if it is
/// still the one with `uid`.
pub(super) async fn delete_pod(ctx: &NodeContext, pod: &Pod, uid: &str, key: &str) {
    let name = pod.metadata.name.clone().unwrap_or_default();
    let params = DeleteParams {
        grace_period_seconds: Some(0),
        preconditions: Some(Preconditions {
            uid: Some(uid.to_owned()),
            resource_version: None,
        }),
        ..Default::default()
    };
    let started = std::time::Instant::now();
    let result = Api::<Pod>::namespaced(ctx.client.clone(), namespace(pod))
        .delete(&name, &params)
        .await;
    note_slow_request(key, "final delete", started);
    match result {
        Ok(_) => tracing::info!(pod = %key, "pod deleted"),
        Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => {}
        Err(e) => tracing::warn!(pod = %key, "final delete failed: {e}"),
    }
}

/// A request to the API server slower than this is logged with its time:
/// the teardown of a Pod waits on them.
const SLOW_REQUEST: std::time::Duration = std::time::Duration::from_millis(500);

fn note_slow_request(key: &str, what: &str, started: std::time::Instant) {
    let took = started.elapsed();
    if took >= SLOW_REQUEST {
        tracing::warn!(pod = %key, "{what} took {:.1} s", took.as_secs_f64());
    }
}

fn namespace(pod: &Pod) -> &str {
    pod.metadata.namespace.as_deref().unwrap_or("default")
}
