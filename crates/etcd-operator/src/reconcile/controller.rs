//! The kube-rs `Controller`: EtcdClusters and the objects they own (Pods,
//! PVCs, Services, PDBs), plus Nodes mapped to the clusters that have
//! members on them. Each pass runs the pipeline of [`super::pipeline`].
//!
//! EtcdClusters are watched as untyped objects (`DynamicObject`): a list or
//! watch of typed objects fails as a whole when one object does not decode
//! (a newer CRD version, a field of another type), and then no cluster at
//! all is reconciled. Untyped, the watch cannot fail per object; each pass
//! reads and decodes its own cluster, and an object this operator cannot
//! read is reported on that object alone. A pass that panics likewise
//! fails for its cluster only.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use futures::{FutureExt, StreamExt};
use k8s_openapi::api::core::v1::{Node, PersistentVolume, PersistentVolumeClaim, Pod, Service};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{ApiResource, DynamicObject, ListParams};
use kube::runtime::controller::{self, Action};
use kube::runtime::events::{Recorder, Reporter};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{Controller, PredicateConfig, WatchStreamExt, watcher};
use kube::{Api, Client, Resource, ResourceExt};

use super::context::{Context, ControllerConfig};
use super::error::{Category, ReconcileError};
use super::node_index::{ClusterKey, NodeIndex};
use super::pipeline;
use super::tls_memory::TlsMemory;
use super::vanished::touched_or_vanished;
use super::watch_backoff::{WatchBackoff, paused_after_errors};
use super::watch_task::in_own_task;
use super::watched::WatchedObjects;
use crate::api::EtcdBackupSchedule;
use crate::api::identity::MANAGED_BY_LABEL;
use crate::controller_kit::{events, scope};
use crate::telemetry::{Health, Metrics};

/// How long the controller gathers changes of one cluster into one pass.
const PASS_DEBOUNCE: Duration = Duration::from_millis(100);

/// The controller could not run.
#[derive(Debug, thiserror::Error)]
pub enum ControllerError {
    /// The EtcdCluster CRD is not installed or not readable.
    #[error(
        "cannot list EtcdClusters (is the CRD installed? `etcd-operator crd | kubectl apply -f -`): {0}"
    )]
    CrdMissing(#[source] kube::Error),
}

/// Runs the controller until SIGTERM/SIGINT.
pub async fn run(
    client: Client,
    config: ControllerConfig,
    metrics: Metrics,
    health: Health,
) -> Result<(), ControllerError> {
    let resource = pipeline::cluster_resource();
    let clusters = scope::untyped(&client, config.namespace.as_deref(), &resource);
    // Metadata only: an object this operator cannot decode must not stop it.
    clusters
        .list_metadata(&ListParams::default().limit(1))
        .await
        .map_err(ControllerError::CrdMissing)?;

    let owned = watcher::Config::default().labels(&format!("{MANAGED_BY_LABEL}=etcd-operator"));
    let namespace = config.namespace.as_deref();
    let nodes = NodeIndex::default();
    let node_map = nodes.clone();
    let node_changes = super::node_changes::NodeChanges::default();
    let node_resource = resource.clone();

    // Every watch keeps a copy (a reflector store) that passes plan from;
    // the owned kinds and Nodes also start passes.
    let (pods, pod_changes) = copied(scope::typed::<Pod>(&client, namespace), owned.clone());
    let (pvcs, pvc_changes) = copied(
        scope::typed::<PersistentVolumeClaim>(&client, namespace),
        owned.clone(),
    );
    let (services, service_changes) =
        copied(scope::typed::<Service>(&client, namespace), owned.clone());
    let (pdbs, pdb_changes) = copied(
        scope::typed::<PodDisruptionBudget>(&client, namespace),
        owned.clone(),
    );
    let (policies, policy_changes) =
        copied(scope::typed::<NetworkPolicy>(&client, namespace), owned);
    let (node_copies, node_events) =
        copied(Api::<Node>::all(client.clone()), watcher::Config::default());
    let (volumes, volume_events) = copied(
        Api::<PersistentVolume>::all(client.clone()),
        watcher::Config::default(),
    );
    let schedule_resource = ApiResource::erase::<EtcdBackupSchedule>(&());
    let (schedules, schedule_events) = copied_untyped(
        scope::untyped(&client, namespace, &schedule_resource),
        schedule_resource.clone(),
    );
    let schedule_cluster = resource.clone();

    // Clusters: every change is copied; only a change of what a person
    // writes (spec, labels, annotations, deletion) starts a pass, not the
    // status the operator writes itself (the pass that wrote it has asked
    // for its next pass already).
    let cluster_copy = reflector::store::Writer::new(resource.clone());
    let cluster_store = cluster_copy.as_reader();
    let cluster_changes = in_own_task(
        "EtcdCluster",
        paused_after_errors(watcher(clusters, watcher::Config::default()))
            .reflect(cluster_copy)
            .applied_objects()
            .predicate_filter(written_by_people, PredicateConfig::default()),
    );
    let controller = Controller::for_stream_with(cluster_changes, cluster_store, resource)
        .owns_stream(pod_changes)
        .owns_stream(pvc_changes)
        .owns_stream(service_changes)
        .owns_stream(pdb_changes)
        .owns_stream(policy_changes)
        .watches_stream(node_events, move |node: Node| {
            if node_changes.changed(&node) {
                clusters_on_node(&node_map, &node, &node_resource)
            } else {
                Vec::new()
            }
        })
        // A schedule's status feeds its cluster's (newest backup, BackupReady).
        .watches_stream_with(
            schedule_events,
            move |schedule: DynamicObject| cluster_of_schedule(&schedule, &schedule_cluster),
            schedule_resource.clone(),
        );
    let watched = WatchedObjects::new(
        controller.store(),
        pods,
        pvcs,
        services,
        pdbs,
        policies,
        node_copies,
        volumes,
        schedules,
        schedule_resource,
    );
    // PersistentVolumes start no pass: drained here to keep their copy.
    tokio::spawn(volume_events.for_each(|_| async {}));
    let synced = watched.clone();
    tokio::spawn(async move { synced.wait_synced().await });
    let context = Arc::new(Context {
        recorder: Recorder::new(client.clone(), reporter()),
        client: client.clone(),
        metrics,
        nodes,
        config: config.clone(),
        watched,
        certificates: TlsMemory::default(),
    });

    health.set_ready(true);
    tracing::info!(namespace = ?config.namespace, "controller running");
    controller
        .with_config(
            controller::Config::default()
                // Changes within this time start one pass. Short, so that a
                // deleted member Pod is seen at once; a pass that finds
                // nothing to change reads no object from the API server.
                .debounce(PASS_DEBOUNCE)
                .concurrency(config.concurrency),
        )
        // The watches keep their errors (`watch_task`); should one reach
        // the merged triggers, they pause briefly, not for kube's 30 s.
        .trigger_backoff(WatchBackoff::default())
        .shutdown_on_signal()
        .run(reconcile, error_policy, context)
        .for_each(|result| async move {
            match result {
                Ok((cluster, _)) => tracing::debug!(cluster = %cluster, "reconciled"),
                Err(controller::Error::ReconcilerFailed(error, cluster))
                    if error.category() == Category::Conflict =>
                {
                    tracing::info!(cluster = %cluster, step = error.step(), category = error.category().as_str(), "{error}")
                }
                Err(controller::Error::ReconcilerFailed(error, cluster)) => {
                    tracing::warn!(cluster = %cluster, step = error.step(), category = error.category().as_str(), "{error}")
                }
                Err(error) => tracing::debug!("controller: {error}"),
            }
        })
        .await;
    health.set_ready(false);
    tracing::info!("controller stopped");
    Ok(())
}

/// A watch of `api` that keeps a copy of what it sees, and the stream of
/// changed objects (deleted ones included, and those that vanished while
/// the watch was away).
fn copied<K>(
    api: Api<K>,
    config: watcher::Config,
) -> (
    Store<K>,
    impl futures::Stream<Item = Result<K, watcher::Error>> + Send + 'static,
)
where
    K: Resource<DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
{
    let (store, writer) = reflector::store();
    let changes = in_own_task(
        kind_name::<K>(),
        touched_or_vanished(paused_after_errors(watcher(api, config)).reflect(writer)),
    );
    (store, changes)
}

/// The short name of a watched kind, for logs.
fn kind_name<K>() -> &'static str {
    let name = std::any::type_name::<K>();
    name.rsplit("::").next().unwrap_or(name)
}

/// [`copied`] for an untyped kind.
fn copied_untyped(
    api: Api<DynamicObject>,
    resource: ApiResource,
) -> (
    Store<DynamicObject>,
    impl futures::Stream<Item = Result<DynamicObject, watcher::Error>> + Send + 'static,
) {
    let writer = reflector::store::Writer::new(resource);
    let store = writer.as_reader();
    let changes = in_own_task(
        "EtcdBackupSchedule",
        touched_or_vanished(
            paused_after_errors(watcher(api, watcher::Config::default())).reflect(writer),
        ),
    );
    (store, changes)
}

/// What of a cluster a change of starts a pass: its generation (the spec),
/// labels, annotations and deletion mark; the status is left out.
fn written_by_people(cluster: &DynamicObject) -> Option<u64> {
    use std::hash::{Hash, Hasher};
    let meta = &cluster.metadata;
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    meta.generation.hash(&mut hasher);
    meta.labels.hash(&mut hasher);
    meta.annotations.hash(&mut hasher);
    meta.deletion_timestamp
        .as_ref()
        .map(|t| t.0.to_string())
        .hash(&mut hasher);
    Some(hasher.finish())
}

/// The cluster a backup schedule names.
fn cluster_of_schedule(
    schedule: &DynamicObject,
    resource: &ApiResource,
) -> Option<ObjectRef<DynamicObject>> {
    let cluster = schedule.data["spec"]["clusterName"].as_str()?;
    let namespace = schedule.namespace()?;
    Some(ObjectRef::new_with(cluster, resource.clone()).within(&namespace))
}

fn reporter() -> Reporter {
    Reporter {
        controller: "etcd-operator".into(),
        instance: std::env::var("POD_NAME").ok(),
    }
}

fn clusters_on_node(
    index: &NodeIndex,
    node: &Node,
    resource: &ApiResource,
) -> Vec<ObjectRef<DynamicObject>> {
    index
        .clusters_on(&node.name_any())
        .into_iter()
        .map(|ClusterKey { namespace, name }| {
            ObjectRef::new_with(&name, resource.clone()).within(&namespace)
        })
        .collect()
}

async fn reconcile(
    cluster: Arc<DynamicObject>,
    ctx: Arc<Context>,
) -> Result<Action, ReconcileError> {
    ctx.metrics.reconcile_started();
    let started = std::time::Instant::now();
    let result = guarded(pipeline::pass(&ctx, &cluster)).await;
    if let Err(ReconcileError::Panicked(message)) = &result {
        tracing::error!(cluster = %cluster.name_any(), "reconcile pass panicked: {message}");
        let event = events::warning("Reconcile", "ReconcilePanicked", message);
        let reference = cluster.object_ref(&pipeline::cluster_resource());
        events::publish(&ctx.recorder, &reference, &event).await;
    }
    ctx.metrics
        .reconcile_finished(started.elapsed().as_secs_f64());
    result
}

/// Runs one pass; a panic becomes an error of this pass (and so of this
/// cluster only) instead of ending the controller of every cluster.
async fn guarded<F>(pass: F) -> Result<Action, ReconcileError>
where
    F: std::future::Future<Output = Result<Action, ReconcileError>>,
{
    match AssertUnwindSafe(pass).catch_unwind().await {
        Ok(result) => result,
        Err(panic) => Err(ReconcileError::Panicked(panic_message(panic.as_ref()))),
    }
}

fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".to_owned())
}

fn error_policy(_cluster: Arc<DynamicObject>, error: &ReconcileError, ctx: Arc<Context>) -> Action {
    let category = error.category();
    ctx.metrics
        .reconcile_failed(error.step(), category.as_str());
    Action::requeue(category.retry_after())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_panicking_pass_fails_for_its_cluster_only() {
        let result = guarded(async {
            let members: Vec<u32> = Vec::new();
            // A bug met on one cluster's objects.
            let first = members.iter().copied().next();
            if first.is_none() {
                panic!("no member at ordinal {}", members.len());
            }
            Ok(Action::await_change())
        })
        .await;
        match result {
            Err(ReconcileError::Panicked(message)) => assert_eq!(message, "no member at ordinal 0"),
            other => panic!("expected a panicked pass, got {other:?}"),
        }
        assert!(guarded(async { Ok(Action::await_change()) }).await.is_ok());
    }

    #[test]
    fn a_status_written_starts_no_pass_a_spec_or_annotation_edit_does() {
        let cluster = |generation: i64, annotation: &str, ready: i64| -> DynamicObject {
            serde_json::from_value(serde_json::json!({
                "apiVersion": "durable-etcd.io/v1alpha1",
                "kind": "EtcdCluster",
                "metadata": {"name": "main", "namespace": "prod", "generation": generation,
                    "annotations": {"durable-etcd.io/renew-certificates": annotation}},
                "spec": {"replicas": 3},
                "status": {"readyMembers": ready}
            }))
            .expect("a cluster")
        };
        let base = written_by_people(&cluster(1, "a", 3));
        assert_eq!(base, written_by_people(&cluster(1, "a", 2)));
        assert_ne!(base, written_by_people(&cluster(2, "a", 3)));
        assert_ne!(base, written_by_people(&cluster(1, "b", 3)));
        let mut deleted = cluster(1, "a", 3);
        deleted.metadata.deletion_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
            ));
        assert_ne!(base, written_by_people(&deleted));
    }

    #[test]
    fn nodes_map_to_untyped_cluster_references() {
        let index = NodeIndex::default();
        index.set_nodes(
            ClusterKey {
                namespace: "prod".into(),
                name: "main".into(),
            },
            ["n1".to_owned()],
        );
        let node: Node =
            serde_json::from_value(serde_json::json!({ "metadata": { "name": "n1" } }))
                .expect("a node");
        let resource = pipeline::cluster_resource();
        let refs = clusters_on_node(&index, &node, &resource);
        assert_eq!(
            refs,
            vec![ObjectRef::new_with("main", resource).within("prod")]
        );
    }
}
