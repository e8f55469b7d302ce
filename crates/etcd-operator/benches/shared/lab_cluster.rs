//! An `EtcdCluster` of a bench on the lab: its Ready members' client
//! endpoints, and its deletion with its Pods and volumes.

use std::collections::BTreeSet;
use std::time::Duration;

use etcd_operator::api::identity::cluster_selector;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::{DeleteParams, ListParams};
use test_kit::TestResult;
use test_kit::e2e::Harness;
use test_kit::poll::wait_for_every;

/// How often the Pods are listed while they go.
const POLL: Duration = Duration::from_millis(200);

/// Client endpoints (by pod IP) of the Ready member Pods not being deleted.
pub async fn ready_endpoints(pods: &Api<Pod>, selector: &str) -> TestResult<BTreeSet<String>> {
    let list = ListParams::default().labels(selector);
    Ok(test_kit::writer::ready_endpoints_of(pods, &list)
        .await?
        .into_iter()
        .collect())
}

/// Deletes cluster `name`, waits for its Pods to go, and deletes its PVCs.
pub async fn delete_cluster(h: &Harness, name: &str) -> TestResult {
    h.clusters.delete(name, &DeleteParams::default()).await?;
    let selector = cluster_selector(name);
    wait_for_every(
        &format!("the Pods of {name} gone"),
        Duration::from_secs(180),
        POLL,
        || async {
            Ok(h.pods
                .list(&ListParams::default().labels(&selector))
                .await?
                .items
                .is_empty())
        },
    )
    .await?;
    h.pvcs
        .delete_collection(
            &DeleteParams::default(),
            &ListParams::default().labels(&selector),
        )
        .await?;
    Ok(())
}
