//! The operator end to end on the lab (needs root and the upstream
//! binaries): under the machine-wide lab lock, a lab (a healthy one that is
//! up, or our own), the operator's CRDs, one namespace per test, and the
//! operator binary run outside the cluster against the lab's API server;
//! etcd is checked from the host, which routes to the lab's pod network.
//! [`installed_operator`] runs the operator as `deploy/` installs it, in a
//! Pod, for a scenario whose point is the operator inside the cluster.
//!
//! The preamble most scenarios share: [`Harness::create_available`] with a
//! [`cluster_spec`], then a [`Writer`](crate::writer::Writer) whose ledger
//! says that nothing acknowledged was lost.

pub mod cert_manager;
mod cluster;
mod crds;
pub mod helm;
mod identity;
pub mod installed_operator;
pub mod lab;
pub mod operator;

use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::time::{Duration, Instant};

use etcd_lab::Lab;
use etcd_operator_api::api::EtcdCluster;
use k8s_openapi::api::core::v1::{Namespace, Node, PersistentVolumeClaim, Pod};
use kube::api::{DeleteParams, PostParams};
use kube::{Api, Client};
use serde_json::json;

pub use cluster::{cluster_spec, cluster_spec_with, tolerations};
pub use crds::controller_managed_attach;
pub use identity::{Identity, key, value};

use crate::TestResult;
use crate::lab_lock::{LabLock, is_root, lab_dir};
use operator::OperatorProcess;

/// Where a test brings up its own lab when none is up (below the lane's
/// directory in a lab lane: [`lab_dir`]).
pub const OWN_LAB_DIR: &str = "/var/lib/etcd-lab-operator-e2e";
/// Where a bench brings up its own lab when none is up.
pub const OWN_BENCH_LAB_DIR: &str = "/var/lib/etcd-lab-operator-bench";
/// The field manager of the CRDs the end-to-end tests install.
pub const CRD_MANAGER: &str = "e2e";

/// What a scenario gets: the lab, clients, its namespace and the operator.
pub struct Harness {
    pub lab: Lab,
    pub client: Client,
    pub namespace: String,
    pub clusters: Api<EtcdCluster>,
    pub pods: Api<Pod>,
    pub pvcs: Api<PersistentVolumeClaim>,
    pub nodes: Api<Node>,
    pub operator_log: PathBuf,
    operator_binary: PathBuf,
    operator: Option<OperatorProcess>,
}

/// A scenario run on a [`Harness`].
pub type Scenario = for<'a> fn(&'a mut Harness) -> Pin<Box<dyn Future<Output = TestResult> + 'a>>;

/// Runs `scenario` under the lab lock on a lab, in namespace
/// `e2e-<topic>-<pid>`, with `operator` (the binary under test,
/// `env!("CARGO_BIN_EXE_etcd-operator")`). Takes our own lab down when the
/// scenario passes (keeps it with its logs when it fails); a reused lab
/// stays up. Panics with the scenario's error.
pub fn run<S>(topic: &str, operator: &str, scenario: S)
where
    S: for<'a> FnOnce(&'a mut Harness) -> Pin<Box<dyn Future<Output = TestResult> + 'a>>,
{
    if let Err(error) = try_run(topic, Path::new(operator), scenario) {
        panic!("{error}");
    }
}

/// [`run`], returning the scenario's error instead of panicking (for
/// programs such as the chaos campaign).
pub fn try_run<S>(topic: &str, operator: &Path, scenario: S) -> TestResult
where
    S: for<'a> FnOnce(&'a mut Harness) -> Pin<Box<dyn Future<Output = TestResult> + 'a>>,
{
    try_run_on_nodes(topic, operator, lab::DEFAULT_NODES, scenario)
}

/// [`try_run`] on a lab of at least `nodes` nodes (a 5-member cluster
/// needs 5, one member per node).
pub fn try_run_on_nodes<S>(topic: &str, operator: &Path, nodes: u8, scenario: S) -> TestResult
where
    S: for<'a> FnOnce(&'a mut Harness) -> Pin<Box<dyn Future<Output = TestResult> + 'a>>,
{
    if !is_root() {
        return Err("the end-to-end tests need root (the lab creates network namespaces)".into());
    }
    let _lock = LabLock::acquire();
    let started = Instant::now();
    let runtime = tokio::runtime::Runtime::new()?;
    let (lab, own) =
        runtime.block_on(lab::reuse_or_start(&lab_dir(OWN_LAB_DIR), operator, nodes))?;
    let root = lab.paths().root().to_owned();
    let result = runtime.block_on(async {
        let client = lab.kube_client().await?;
        controller_managed_attach(&client).await?;
        let namespace = format!("e2e-{topic}-{}", std::process::id());
        let mut harness = Harness::new(lab, client, namespace, operator, CRD_MANAGER).await?;
        let outcome = scenario(&mut harness).await;
        if outcome.is_ok() {
            harness.delete_namespace().await?;
        } else {
            eprintln!("operator log: {}", harness.operator_log.display());
        }
        outcome.map(|()| harness.lab)
    });
    match (&result, own) {
        (Ok(lab), true) => {
            let _ = lab.down(false);
        }
        (Err(_), true) => {
            if let Ok(lab) = Lab::open(Some(root.clone())) {
                let _ = lab.down(true);
            }
            eprintln!("the lab is down; logs kept in {}/logs", root.display());
        }
        _ => {}
    }
    eprintln!("{topic}: {:?}", started.elapsed());
    result.map(|_| ())
}

/// Runs a bench `scenario` under the lab lock, in namespace `bench-<pid>`;
/// deletes the namespace after, and takes our own lab down, whatever the
/// outcome.
pub fn run_bench(operator: &str, scenario: Scenario) {
    let _lock = LabLock::acquire();
    // `BENCH_OPERATOR_BINARY` measures another build of the operator (an
    // `etcd-lab` binary beside it runs the lab).
    let chosen = std::env::var_os("BENCH_OPERATOR_BINARY").map(std::path::PathBuf::from);
    let operator = chosen.as_deref().unwrap_or(Path::new(operator));
    let runtime = tokio::runtime::Runtime::new().expect("tokio runtime");
    let result = runtime.block_on(async {
        let (lab, own) =
            lab::reuse_or_start(&lab_dir(OWN_BENCH_LAB_DIR), operator, lab::DEFAULT_NODES).await?;
        let client = lab.kube_client().await?;
        let namespace = format!("bench-{}", std::process::id());
        let mut h = Harness::new(lab, client, namespace, operator, "bench").await?;
        let outcome = scenario(&mut h).await;
        h.stop_operator();
        let _ = h.delete_namespace().await;
        if own {
            let _ = h.lab.down(false);
        }
        eprintln!("operator log: {}", h.operator_log.display());
        outcome
    });
    if let Err(error) = result {
        panic!("{error}");
    }
}

impl Harness {
    async fn new(
        lab: Lab,
        client: Client,
        namespace: String,
        operator: &Path,
        crd_manager: &str,
    ) -> TestResult<Self> {
        crds::install(&client, crd_manager).await?;
        let namespaces: Api<Namespace> = Api::all(client.clone());
        namespaces
            .create(
                &PostParams::default(),
                &serde_json::from_value(json!({ "metadata": { "name": namespace } }))?,
            )
            .await?;
        let operator_log = operator::log_path(&namespace);
        eprintln!("operator log: {}", operator_log.display());
        let mut harness = Self {
            clusters: Api::namespaced(client.clone(), &namespace),
            pods: Api::namespaced(client.clone(), &namespace),
            pvcs: Api::namespaced(client.clone(), &namespace),
            nodes: Api::all(client.clone()),
            client,
            namespace,
            lab,
            operator_log,
            operator_binary: operator.to_owned(),
            operator: None,
        };
        harness.start_operator()?;
        Ok(harness)
    }

    /// The operator binary under test.
    pub fn operator_binary(&self) -> &Path {
        &self.operator_binary
    }

    /// The operator's `/metrics` text now.
    pub async fn operator_metrics(&self) -> TestResult<String> {
        operator::scrape(&operator::metrics_address(&self.operator_log)?).await
    }

    /// Stops the operator (as a crash or an upgrade would).
    pub fn stop_operator(&mut self) {
        self.operator = None;
    }

    /// Starts the operator again (appending to the same log).
    pub fn start_operator(&mut self) -> TestResult {
        self.operator = Some(OperatorProcess::start(
            &self.operator_binary,
            &self.lab.kubeconfig_path(),
            &self.operator_log,
        )?);
        Ok(())
    }

    /// Deletes the namespace of the test (its clusters, pods and PVCs).
    async fn delete_namespace(&self) -> TestResult {
        let namespaces: Api<Namespace> = Api::all(self.client.clone());
        namespaces
            .delete(&self.namespace, &DeleteParams::default())
            .await?;
        Ok(())
    }

    /// Waits until every node is registered controller-managed for attach
    /// (see [`controller_managed_attach`]); checked again after `node add`.
    pub async fn mark_nodes(&self) -> TestResult {
        crate::poll::wait_for(
            "nodes registered as controller-managed",
            Duration::from_secs(60),
            || async { Ok(controller_managed_attach(&self.client).await.is_ok()) },
        )
        .await
    }
}

/// Every key under `prefix`, as `client` reads it.
pub async fn keys_under(
    client: &mut etcd_client::Client,
    prefix: &str,
) -> TestResult<std::collections::BTreeSet<String>> {
    let read = client
        .get(prefix, Some(etcd_client::GetOptions::new().with_prefix()))
        .await?;
    Ok(read
        .kvs()
        .iter()
        .filter_map(|kv| kv.key_str().ok().map(str::to_owned))
        .collect())
}

/// An etcd client on these endpoints (connect within 2 s, requests within 5 s).
pub async fn etcd_at(endpoints: Vec<String>) -> TestResult<etcd_client::Client> {
    let options = etcd_client::ConnectOptions::new()
        .with_connect_timeout(Duration::from_secs(2))
        .with_timeout(Duration::from_secs(5));
    Ok(etcd_client::Client::connect(endpoints, Some(options)).await?)
}
