//! Watch-fed copies of the objects a pass reads, and the two ways a pass
//! reads them ([`Reads`]).
//!
//! A pass first plans from these copies (no request to the API server).
//! If that plan would change anything (a step, an Event, a status write),
//! the pass starts again from fresh reads of the API server and acts only
//! on what those say, exactly as a pass without copies would: every write
//! is planned from a fresh read (durability rule 8). An idle cluster thus
//! costs no API request, and a stale copy can only delay a step until the
//! watch delivers the change (which also starts a pass), never cause one.
//!
//! Secrets are not watched (the operator may not list Secrets); the
//! certificates of a TLS cluster are remembered from the last fresh pass
//! instead ([`super::tls_material::Remembered`]).

use std::fmt::Debug;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use k8s_openapi::api::core::v1::{Node, PersistentVolume, PersistentVolumeClaim, Pod, Service};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{ApiResource, DynamicObject, ListParams};
use kube::core::Selector;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Api, Client, Resource, ResourceExt};
use serde::de::DeserializeOwned;

/// The copies, each kept current by a watch the controller runs.
#[derive(Clone)]
pub struct WatchedObjects {
    /// EtcdClusters (the controller's own store).
    pub clusters: Store<DynamicObject>,
    /// Pods the operator manages.
    pub pods: Store<Pod>,
    /// PVCs the operator manages.
    pub pvcs: Store<PersistentVolumeClaim>,
    /// Services the operator manages.
    pub services: Store<Service>,
    /// PodDisruptionBudgets the operator manages.
    pub pdbs: Store<PodDisruptionBudget>,
    /// NetworkPolicies the operator manages.
    pub policies: Store<NetworkPolicy>,
    /// Every Node.
    pub nodes: Store<Node>,
    /// Every PersistentVolume.
    pub volumes: Store<PersistentVolume>,
    /// EtcdBackupSchedules (untyped: one that does not decode is reported
    /// on its own).
    pub schedules: Store<DynamicObject>,
    /// The ApiResource of EtcdBackupSchedules.
    pub schedule_resource: ApiResource,
    /// Whether every copy has had its first full list.
    synced: Arc<AtomicBool>,
}

impl WatchedObjects {
    /// The copies; not read until [`Self::wait_synced`] has seen each one
    /// listed.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        clusters: Store<DynamicObject>,
        pods: Store<Pod>,
        pvcs: Store<PersistentVolumeClaim>,
        services: Store<Service>,
        pdbs: Store<PodDisruptionBudget>,
        policies: Store<NetworkPolicy>,
        nodes: Store<Node>,
        volumes: Store<PersistentVolume>,
        schedules: Store<DynamicObject>,
        schedule_resource: ApiResource,
    ) -> Self {
        Self {
            clusters,
            pods,
            pvcs,
            services,
            pdbs,
            policies,
            nodes,
            volumes,
            schedules,
            schedule_resource,
            synced: Arc::new(AtomicBool::new(false)),
        }
    }

    /// Marks the copies readable once every one has been listed (a copy
    /// before its first list would say "no objects", which is not true).
    pub async fn wait_synced(&self) {
        let all = futures::future::join_all([
            listed("EtcdClusters", self.clusters.wait_until_ready()),
            listed("Pods", self.pods.wait_until_ready()),
            listed("PersistentVolumeClaims", self.pvcs.wait_until_ready()),
            listed("Services", self.services.wait_until_ready()),
            listed("PodDisruptionBudgets", self.pdbs.wait_until_ready()),
            listed("NetworkPolicies", self.policies.wait_until_ready()),
            listed("Nodes", self.nodes.wait_until_ready()),
            listed("PersistentVolumes", self.volumes.wait_until_ready()),
            listed("EtcdBackupSchedules", self.schedules.wait_until_ready()),
        ])
        .await;
        if all.iter().all(|listed| *listed) {
            self.synced.store(true, Ordering::Release);
            tracing::info!("watched copies listed: idle passes read no object from the API server");
        }
    }

    /// Whether the copies can be read.
    pub fn synced(&self) -> bool {
        self.synced.load(Ordering::Acquire)
    }
}

/// Waits for one copy's first list; false if its watch ended first.
fn listed<'a, F>(
    kind: &'static str,
    ready: F,
) -> std::pin::Pin<Box<dyn std::future::Future<Output = bool> + Send + 'a>>
where
    F: std::future::Future<Output = Result<(), kube::runtime::reflector::store::WriterDropped>>
        + Send
        + 'a,
{
    Box::pin(async move {
        let result = ready.await;
        match &result {
            Ok(()) => tracing::debug!("copy of {kind} listed"),
            Err(_) => tracing::warn!(
                "the watch of {kind} ended before its first list: passes read from the API server"
            ),
        }
        result.is_ok()
    })
}

/// Where a pass reads Kubernetes objects from.
#[derive(Clone, Copy)]
pub enum Reads<'a> {
    /// The API server: what every write is planned from.
    Fresh(&'a Client),
    /// The watch-fed copies: what an idle pass plans from.
    Watched(&'a Client, &'a WatchedObjects),
}

impl<'a> Reads<'a> {
    /// The API client (for what is never copied).
    pub fn client(&self) -> &'a Client {
        match self {
            Self::Fresh(client) | Self::Watched(client, _) => client,
        }
    }

    /// Whether these reads are fresh from the API server.
    pub fn is_fresh(&self) -> bool {
        matches!(self, Self::Fresh(_))
    }

    /// The objects of kind `K` in `namespace` (every namespace when `None`)
    /// whose labels match `selector`.
    pub async fn list<K: Watched>(
        &self,
        namespace: Option<&str>,
        selector: &Selector,
    ) -> Result<Vec<K>, kube::Error> {
        match self {
            Self::Fresh(client) => {
                let params = ListParams::default().labels_from(selector);
                Ok(K::api(client, namespace).list(&params).await?.items)
            }
            Self::Watched(_, copies) => Ok(K::store(copies)
                .state_filter_selector(selector)
                .into_iter()
                .filter(|o| namespace.is_none() || o.namespace().as_deref() == namespace)
                .map(Arc::unwrap_or_clone)
                .collect()),
        }
    }

    /// The object of kind `K` named `name` in `namespace`, if it exists.
    /// From the copies, an object the operator does not label is absent:
    /// a plan that acts on its absence is made again from fresh reads.
    pub async fn get<K: Watched>(
        &self,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Option<K>, kube::Error> {
        match self {
            Self::Fresh(client) => K::api(client, namespace).get_opt(name).await,
            Self::Watched(_, copies) => {
                let mut key = ObjectRef::<K>::new(name);
                if let Some(namespace) = namespace {
                    key = key.within(namespace);
                }
                Ok(K::store(copies).get(&key).map(Arc::unwrap_or_clone))
            }
        }
    }
}

/// A kind whose objects the controller keeps copies of.
pub trait Watched:
    Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static
{
    /// The copies of this kind.
    fn store(copies: &WatchedObjects) -> &Store<Self>;

    /// The API of this kind in `namespace` (every namespace when `None`;
    /// always every one for a cluster-scoped kind).
    fn api(client: &Client, namespace: Option<&str>) -> Api<Self>;
}

macro_rules! watched {
    ($kind:ty, $field:ident, $api:expr) => {
        impl Watched for $kind {
            fn store(copies: &WatchedObjects) -> &Store<Self> {
                &copies.$field
            }

            fn api(client: &Client, namespace: Option<&str>) -> Api<Self> {
                $api(client.clone(), namespace)
            }
        }
    };
}

/// The API of a namespaced kind: in `namespace`, or every one.
fn namespaced<K>(client: Client, namespace: Option<&str>) -> Api<K>
where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>,
{
    match namespace {
        Some(namespace) => Api::namespaced(client, namespace),
        None => Api::all(client),
    }
}

/// The API of a cluster-scoped kind.
fn cluster_wide<K>(client: Client, _namespace: Option<&str>) -> Api<K>
where
    K: Resource<Scope = k8s_openapi::ClusterResourceScope, DynamicType = ()>,
{
    Api::all(client)
}

watched!(Pod, pods, namespaced);
watched!(PersistentVolumeClaim, pvcs, namespaced);
watched!(Service, services, namespaced);
watched!(PodDisruptionBudget, pdbs, namespaced);
watched!(NetworkPolicy, policies, namespaced);
watched!(Node, nodes, cluster_wide);
watched!(PersistentVolume, volumes, cluster_wide);

/// The selector of one label.
pub fn label_selector(key: &str, value: &str) -> Selector {
    Selector::from_iter([(key.to_owned(), value.to_owned())])
}
