//! A continuous writer with a ledger of acknowledged writes: puts
//! `<prefix>key-N` = `value-N` for N = 0, 1, ... through the ready members,
//! records each N that etcd acknowledged, and at the end checks that every
//! acknowledged write is there with its value. A write whose outcome is
//! unknown (an error, a timeout) is not in the ledger: it may or may not
//! have been applied, and each key is written once, so it cannot hide a
//! lost one.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use etcd_client::PutOptions;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::ListParams;
use tokio::sync::Mutex;
use tokio::task::JoinHandle;

use crate::TestResult;
use crate::conditions::pod_ready;
use crate::e2e::{Harness, etcd_at, key, value};

/// Pause between two writes.
const PAUSE: Duration = Duration::from_millis(50);

/// A writer running in the background until [`Writer::stop`].
pub struct Writer {
    prefix: String,
    stop: Arc<AtomicBool>,
    attempted: Arc<AtomicUsize>,
    acknowledged: Arc<Mutex<Vec<usize>>>,
    task: JoinHandle<()>,
}

/// What a stopped writer did.
#[derive(Debug, Clone)]
pub struct Ledger {
    /// The key prefix written under.
    pub prefix: String,
    /// Writes tried (acknowledged or not).
    pub attempted: usize,
    /// The N of every acknowledged write, in order.
    pub acknowledged: Vec<usize>,
}

impl Harness {
    /// Starts a [`Writer`] under `prefix` through the member Pods of the
    /// test's namespace.
    pub fn start_writer(&self, prefix: &str) -> Writer {
        Writer::start(self.pods.clone(), prefix)
    }
}

impl Writer {
    /// Starts writing under `prefix` through the ready member Pods of `pods`.
    pub fn start(pods: Api<Pod>, prefix: &str) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let attempted = Arc::new(AtomicUsize::new(0));
        let acknowledged = Arc::new(Mutex::new(Vec::new()));
        let task = tokio::spawn(write_continuously(
            pods,
            prefix.to_owned(),
            stop.clone(),
            attempted.clone(),
            acknowledged.clone(),
        ));
        Self {
            prefix: prefix.to_owned(),
            stop,
            attempted,
            acknowledged,
            task,
        }
    }

    /// How many writes were acknowledged so far.
    pub async fn acknowledged(&self) -> usize {
        self.acknowledged.lock().await.len()
    }

    /// Stops the writer (after the write in flight) and returns its ledger.
    pub async fn stop(self) -> Ledger {
        self.stop.store(true, Ordering::SeqCst);
        let _ = self.task.await;
        Ledger {
            prefix: self.prefix,
            attempted: self.attempted.load(Ordering::SeqCst),
            acknowledged: self.acknowledged.lock().await.clone(),
        }
    }
}

impl Ledger {
    /// Checks that at least `at_least` writes were acknowledged and that
    /// every acknowledged write is present with its value (a linearizable
    /// read through the members).
    pub async fn verify(&self, h: &Harness, at_least: usize) -> TestResult {
        eprintln!(
            "writer: {} writes tried, {} acknowledged",
            self.attempted,
            self.acknowledged.len()
        );
        if self.acknowledged.len() < at_least {
            return Err(format!(
                "the writer made too little progress: {} writes acknowledged of {} tried, {at_least} wanted",
                self.acknowledged.len(),
                self.attempted
            )
            .into());
        }
        let values = h.values_under(&self.prefix).await?;
        let lost: Vec<usize> = self
            .acknowledged
            .iter()
            .copied()
            .filter(|i| values.get(&key(&self.prefix, *i)) != Some(&value(*i)))
            .collect();
        if !lost.is_empty() {
            return Err(format!(
                "{} acknowledged writes are lost or changed: {lost:?}",
                lost.len()
            )
            .into());
        }
        eprintln!(
            "every one of the {} acknowledged writes is present",
            self.acknowledged.len()
        );
        Ok(())
    }
}

/// The client endpoints of the ready, not terminating member Pods.
pub async fn ready_endpoints(pods: &Api<Pod>) -> TestResult<Vec<String>> {
    ready_endpoints_of(pods, &crate::member_pods::member_pods()).await
}

/// [`ready_endpoints`] of the Pods `list` selects.
pub async fn ready_endpoints_of(pods: &Api<Pod>, list: &ListParams) -> TestResult<Vec<String>> {
    Ok(ready_ips_of(pods, list)
        .await?
        .into_iter()
        .map(|ip| format!("http://{ip}:2379"))
        .collect())
}

/// The Pod IPs of the ready, not terminating Pods `list` selects.
pub async fn ready_ips_of(pods: &Api<Pod>, list: &ListParams) -> TestResult<Vec<String>> {
    Ok(pods
        .list(list)
        .await?
        .items
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none() && pod_ready(p))
        .filter_map(|p| p.status.as_ref()?.pod_ip.clone())
        .collect())
}

async fn write_continuously(
    pods: Api<Pod>,
    prefix: String,
    stop: Arc<AtomicBool>,
    attempted: Arc<AtomicUsize>,
    acknowledged: Arc<Mutex<Vec<usize>>>,
) {
    let mut next = 0;
    let mut client = None;
    while !stop.load(Ordering::SeqCst) {
        if client.is_none() {
            client = match ready_endpoints(&pods).await {
                Ok(endpoints) if !endpoints.is_empty() => etcd_at(endpoints).await.ok(),
                _ => None,
            };
        }
        let Some(c) = client.as_mut() else {
            tokio::time::sleep(Duration::from_millis(500)).await;
            continue;
        };
        attempted.fetch_add(1, Ordering::SeqCst);
        match c
            .put(key(&prefix, next), value(next), None::<PutOptions>)
            .await
        {
            Ok(_) => acknowledged.lock().await.push(next),
            // Unknown outcome: not acknowledged; reconnect to the members
            // there are now.
            Err(_) => client = None,
        }
        next += 1;
        tokio::time::sleep(PAUSE).await;
    }
}
