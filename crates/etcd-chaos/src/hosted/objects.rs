//! What the tenant's workload does and sees: a writer that creates
//! ConfigMaps through the tenant API server and records each one the API
//! server acknowledged, and an informer (kube-rs' watcher, as controllers
//! use it) whose cache is compared with the API server's list.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{ListParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, ResourceExt};
use serde_json::json;
use tokio::task::JoinHandle;

/// The tenant namespace the workload writes in.
pub const NAMESPACE: &str = "default";

/// The name of the `n`-th object.
pub fn object_name(n: u64) -> String {
    format!("object-{n:06}")
}

/// A ConfigMap the writer creates.
fn object(name: &str) -> ConfigMap {
    serde_json::from_value(json!({
        "metadata": { "name": name },
        "data": { "written-by": "etcd-hosted" },
    }))
    .unwrap_or_default()
}

/// Creates objects one after another until stopped.
pub struct ObjectWriter {
    stop: Arc<AtomicBool>,
    next: Arc<AtomicU64>,
    acknowledged: Arc<Mutex<Vec<(String, u64)>>>,
    failed: Arc<AtomicU64>,
    task: JoinHandle<()>,
}

impl ObjectWriter {
    /// Starts writing through `client`, an object every 50 ms.
    pub fn start(client: kube::Client) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let next = Arc::new(AtomicU64::new(0));
        let acknowledged = Arc::new(Mutex::new(Vec::new()));
        let failed = Arc::new(AtomicU64::new(0));
        let task = tokio::spawn(write(
            Api::namespaced(client, NAMESPACE),
            stop.clone(),
            next.clone(),
            acknowledged.clone(),
            failed.clone(),
        ));
        Self {
            stop,
            next,
            acknowledged,
            failed,
            task,
        }
    }

    /// Objects acknowledged so far.
    pub fn acknowledged(&self) -> Vec<String> {
        self.acknowledged_at()
            .into_iter()
            .map(|(name, _)| name)
            .collect()
    }

    /// Objects acknowledged so far, each with the resource version the API
    /// server gave it (etcd's revision of the write).
    pub fn acknowledged_at(&self) -> Vec<(String, u64)> {
        self.acknowledged
            .lock()
            .map(|a| a.clone())
            .unwrap_or_default()
    }

    /// Creations that failed or timed out (their outcome is unknown).
    pub fn failed(&self) -> u64 {
        self.failed.load(Ordering::SeqCst)
    }

    /// Creations tried.
    pub fn tried(&self) -> u64 {
        self.next.load(Ordering::SeqCst)
    }

    /// Stops after the creation in flight.
    pub async fn stop(self) -> Vec<String> {
        self.stop.store(true, Ordering::SeqCst);
        let _ = self.task.await;
        self.acknowledged
            .lock()
            .map(|a| a.iter().map(|(name, _)| name.clone()).collect())
            .unwrap_or_default()
    }
}

async fn write(
    api: Api<ConfigMap>,
    stop: Arc<AtomicBool>,
    next: Arc<AtomicU64>,
    acknowledged: Arc<Mutex<Vec<(String, u64)>>>,
    failed: Arc<AtomicU64>,
) {
    while !stop.load(Ordering::SeqCst) {
        let name = object_name(next.fetch_add(1, Ordering::SeqCst));
        let created = tokio::time::timeout(
            Duration::from_secs(15),
            api.create(&PostParams::default(), &object(&name)),
        )
        .await;
        match created {
            Ok(Ok(created)) => {
                let revision = created
                    .metadata
                    .resource_version
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(0);
                if let Ok(mut acknowledged) = acknowledged.lock() {
                    acknowledged.push((name, revision));
                }
            }
            _ => {
                failed.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Every object of the tenant namespace, as a list through the tenant API
/// server reads it.
pub async fn listed(client: &kube::Client) -> kube::Result<BTreeSet<String>> {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), NAMESPACE);
    Ok(api
        .list(&ListParams::default())
        .await?
        .items
        .iter()
        .map(ResourceExt::name_any)
        .filter(|n| n.starts_with("object-"))
        .collect())
}

/// An informer of the tenant namespace's ConfigMaps: its cache, when it
/// listed everything again, and the errors its watch met.
pub struct Informer {
    seen: Arc<Mutex<Seen>>,
    task: JoinHandle<()>,
}

/// What the informer has seen so far.
#[derive(Default)]
struct Seen {
    cache: BTreeSet<String>,
    /// When each full list (the first one included) ended.
    relisted_at: Vec<Instant>,
    errors: u64,
    last_error: Option<String>,
}

impl Informer {
    /// Starts watching through `client`.
    pub fn start(client: kube::Client) -> Self {
        let seen = Arc::new(Mutex::new(Seen::default()));
        let api: Api<ConfigMap> = Api::namespaced(client, NAMESPACE);
        let task = tokio::spawn(inform(api, seen.clone()));
        Self { seen, task }
    }

    fn with<T>(&self, read: impl FnOnce(&Seen) -> T) -> T {
        match self.seen.lock() {
            Ok(seen) => read(&seen),
            Err(poisoned) => read(&poisoned.into_inner()),
        }
    }

    /// The names in the cache now.
    pub fn cache(&self) -> BTreeSet<String> {
        self.with(|s| s.cache.clone())
    }

    /// Full lists so far (the first one included).
    pub fn relists(&self) -> u64 {
        self.with(|s| s.relisted_at.len() as u64)
    }

    /// How long after `instant` the first full list since then ended.
    pub fn relisted_after(&self, instant: Instant) -> Option<Duration> {
        self.with(|s| {
            s.relisted_at
                .iter()
                .find(|at| **at > instant)
                .map(|at| at.duration_since(instant))
        })
    }

    /// Errors the watch met (each followed by a retry).
    pub fn errors(&self) -> u64 {
        self.with(|s| s.errors)
    }

    /// The last error the watch met.
    pub fn last_error(&self) -> Option<String> {
        self.with(|s| s.last_error.clone())
    }

    /// Stops the informer.
    pub fn stop(self) {
        self.task.abort();
    }
}

async fn inform(api: Api<ConfigMap>, seen: Arc<Mutex<Seen>>) {
    let mut events = watcher(api, watcher::Config::default())
        .default_backoff()
        .boxed();
    let mut listing = BTreeSet::new();
    let ours = |object: &ConfigMap| Some(object.name_any()).filter(|n| n.starts_with("object-"));
    while let Some(event) = events.next().await {
        let Ok(mut seen) = seen.lock() else {
            return;
        };
        match event {
            Err(error) => {
                seen.errors += 1;
                seen.last_error = Some(error.to_string());
            }
            Ok(watcher::Event::Init) => listing.clear(),
            Ok(watcher::Event::InitApply(object)) => listing.extend(ours(&object)),
            Ok(watcher::Event::InitDone) => {
                seen.relisted_at.push(Instant::now());
                seen.cache = std::mem::take(&mut listing);
            }
            Ok(watcher::Event::Apply(object)) => seen.cache.extend(ours(&object)),
            Ok(watcher::Event::Delete(object)) => {
                if let Some(name) = ours(&object) {
                    seen.cache.remove(&name);
                }
            }
        }
    }
}
