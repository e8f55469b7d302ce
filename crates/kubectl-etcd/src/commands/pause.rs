//! `kubectl etcd pause|resume <cluster>`: `spec.paused`.

use kube::api::{Patch, PatchParams};
use serde_json::json;

use super::{cluster_subject, clusters, get_cluster, namespace_flag};
use crate::connect::Target;
use crate::error::{Failure, api_failure};

pub async fn run(target: &Target, name: &str, paused: bool) -> Result<(), Failure> {
    let cluster = get_cluster(target, name).await?;
    let ns = namespace_flag(target);
    if cluster.spec.paused == paused {
        println!(
            "{name} is already {}",
            if paused { "paused" } else { "not paused" }
        );
        return Ok(());
    }
    clusters(target)
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({ "spec": { "paused": paused } })),
        )
        .await
        .map_err(|e| api_failure(e, &cluster_subject(target, name)))?;
    if paused {
        println!(
            "paused {name}: the operator takes no action on it (status is still reported) until `kubectl etcd resume {name} {ns}`"
        );
    } else {
        println!(
            "resumed {name}: the operator acts on it again; follow with `kubectl etcd status {name} {ns}`"
        );
    }
    Ok(())
}
