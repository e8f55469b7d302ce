//! Finds a running container of a pod on this node, as the kubelet asks its
//! runtime before an exec: the pod from the agent's pod workers (see
//! [`NodeContext::pod_uid`]), the container running when its cgroup holds a
//! process, and the spec it runs with as its pod worker wrote it when it
//! started it (`pod/worker/process.rs`: `PODS_DIR/UID/containers/NAME.json`,
//! the worker's `RunningProcess.spec`).

use std::path::PathBuf;

use etcd_lab_common::cgroup;

use crate::container::ContainerSpec;
use crate::node_context::NodeContext;

/// A running container, and where a command run in it writes its spec.
#[derive(Debug, Clone)]
pub struct RunningContainer {
    pub spec: ContainerSpec,
    /// The directory of the pod's container specs.
    pub specs_dir: PathBuf,
}

/// What the lookup found.
#[derive(Debug)]
pub enum Lookup {
    /// No pod of that name (and uid, when given) runs on this node.
    NoPod,
    /// The pod is here; the container is not running.
    NotRunning,
    Running(Box<RunningContainer>),
}

/// Looks up container `container` of pod `namespace/pod` (of uid
/// `pod_uid` when given).
pub fn find(
    ctx: &NodeContext,
    namespace: &str,
    pod: &str,
    pod_uid: Option<&str>,
    container: &str,
) -> Lookup {
    let Some(uid) = ctx.pod_uid(namespace, pod) else {
        return Lookup::NoPod;
    };
    if pod_uid.is_some_and(|wanted| wanted != uid) {
        return Lookup::NoPod;
    }
    if !is_running(ctx, &uid, container) {
        return Lookup::NotRunning;
    }
    let specs_dir = ctx.config.pods_dir().join(&uid).join("containers");
    match ContainerSpec::load(&specs_dir.join(format!("{container}.json"))) {
        Ok(spec) => Lookup::Running(Box::new(RunningContainer { spec, specs_dir })),
        Err(e) => {
            tracing::debug!(%uid, container, "no spec of the running container: {e}");
            Lookup::NotRunning
        }
    }
}

/// Whether a process of the container is alive (its cgroup is populated).
pub fn is_running(ctx: &NodeContext, pod_uid: &str, container: &str) -> bool {
    cgroup::is_populated(&ctx.cgroups.container(pod_uid, container))
}
