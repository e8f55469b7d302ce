//! `etcd-lab logs`: a container's log file, written by the node agent under
//! `logs/nodes/<node>/pods/<namespace>_<pod>_<uid>/<container>.log`.

use std::path::PathBuf;

use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;

use crate::error::{LabError, Result};
use crate::lab::Lab;

/// The log file of `container` (the first one when `None`) of pod `namespace/pod`.
pub async fn container_log(
    lab: &Lab,
    namespace: &str,
    pod: &str,
    container: Option<&str>,
) -> Result<PathBuf> {
    let pods: Api<Pod> = Api::namespaced(lab.kube_client().await?, namespace);
    let object = pods.get(pod).await?;
    let uid = object.metadata.uid.clone().unwrap_or_default();
    let spec = object
        .spec
        .ok_or_else(|| LabError::Invalid(format!("pod {namespace}/{pod} has no spec")))?;
    let node = spec.node_name.ok_or_else(|| {
        LabError::Invalid(format!("pod {namespace}/{pod} is not scheduled to a node"))
    })?;
    let container = match container {
        Some(name) => name.to_owned(),
        None => spec
            .containers
            .first()
            .map(|c| c.name.clone())
            .ok_or_else(|| LabError::Invalid(format!("pod {namespace}/{pod} has no container")))?,
    };
    let pods_dir = lab.paths().node_logs(&node).join("pods");
    let candidates = [
        pods_dir
            .join(format!("{namespace}_{pod}_{uid}"))
            .join(format!("{container}.log")),
        pods_dir.join(pod).join(format!("{container}.log")),
    ];
    candidates
        .iter()
        .find(|p| p.is_file())
        .cloned()
        .ok_or_else(|| {
            LabError::Invalid(format!(
                "no log of container {container} of pod {namespace}/{pod} on {node} (looked at {})",
                candidates[0].display()
            ))
        })
}
