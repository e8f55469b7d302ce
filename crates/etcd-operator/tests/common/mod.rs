//! Shared helpers of the end-to-end tests on the lab (needs root and the
//! upstream binaries): the machine-wide lab lock, a lab (a healthy one that
//! is up, or our own), the operator binary run outside the cluster against
//! the lab's API server, one namespace per test, and etcd checks from the
//! host (which routes to the lab's pod network).
//!
//! Needs the `etcd-lab` binary next to the operator's
//! (`cargo build -p etcd-lab -p etcd-operator`): the lab's nodes run the
//! operator binary found beside it as the `member-guard` init container.
#![allow(dead_code)]

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use etcd_client::{GetOptions, PutOptions};
use etcd_lab::{Lab, LabOptions};
use etcd_operator::api::EtcdCluster;
use k8s_openapi::api::core::v1::{Namespace, Node, PersistentVolumeClaim, Pod};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client, ResourceExt};
use serde_json::{Value, json};

pub mod survivor;
pub mod writer;

pub const OPERATOR: &str = env!("CARGO_BIN_EXE_etcd-operator");
/// Where a test brings up its own lab when none is up.
pub const OWN_LAB_DIR: &str = "/var/lib/etcd-lab-operator-e2e";
/// The node-monitor grace period of our own lab: nodes turn NotReady 20 s
/// after their last heartbeat instead of 50 s (shorter tests).
pub const NODE_MONITOR_GRACE: &str = "20s";

pub type TestResult<T = ()> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

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
    operator: Option<Operator>,
}

/// A scenario run on a [`Harness`].
pub type Scenario = for<'a> fn(&'a mut Harness) -> Pin<Box<dyn Future<Output = TestResult> + 'a>>;

/// Runs `scenario` under the lab lock on a lab, in namespace
/// `e2e-<topic>-<pid>`. Takes our own lab down when the scenario passes
/// (keeps it with its logs when it fails); a reused lab stays up.
pub fn run(topic: &str, scenario: Scenario) {
    assert!(
        is_root(),
        "the end-to-end tests need root (the lab creates network namespaces)"
    );
    let _lock = lab_test_lock();
    let started = Instant::now();
    let runtime = tokio::runtime::Runtime::new().expect("tokio runtime");
    let (lab, own) = runtime.block_on(lab()).expect("a lab");
    let root = lab.paths().root().to_owned();
    let result = runtime.block_on(async {
        let mut harness = Harness::new(lab, topic).await?;
        let outcome = scenario(&mut harness).await;
        if outcome.is_ok() {
            harness.cleanup().await?;
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
    if let Err(error) = result {
        panic!("{error}");
    }
}

fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .map(|l| l.split_whitespace().nth(2) == Some("0"))
        })
        .unwrap_or(false)
}

/// The lock the lab's own tests take: one lab test at a time per machine.
fn lab_test_lock() -> std::fs::File {
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open("/run/etcd-lab-tests.lock")
        .expect("lab test lock file");
    file.lock().expect("lab test lock");
    file
}

/// A healthy lab that is up, or our own. Returns whether it is ours.
async fn lab() -> TestResult<(Lab, bool)> {
    for dir in [None, Some(PathBuf::from(OWN_LAB_DIR))] {
        if let Ok(lab) = Lab::open(dir)
            && lab.status().await.is_healthy()
        {
            eprintln!("reusing the lab at {}", lab.paths().root().display());
            return Ok((lab, false));
        }
    }
    let etcd_lab = Path::new(OPERATOR).with_file_name("etcd-lab");
    if !etcd_lab.is_file() {
        return Err(format!(
            "{} is missing: build it with `cargo build -p etcd-lab`",
            etcd_lab.display()
        )
        .into());
    }
    let options = LabOptions {
        lab_dir: Some(PathBuf::from(OWN_LAB_DIR)),
        etcd_lab_binary: Some(etcd_lab),
        controller_manager_flags: BTreeMap::from([(
            "node-monitor-grace-period".to_owned(),
            NODE_MONITOR_GRACE.to_owned(),
        )]),
        ..LabOptions::default()
    };
    let started = Instant::now();
    let lab = Lab::up(options).await?;
    eprintln!("lab up in {:?}", started.elapsed());
    Ok((lab, true))
}

/// The operator process, killed when dropped.
struct Operator(Child);

impl Operator {
    fn start(lab: &Lab, log: &Path) -> TestResult<Self> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)?;
        let child = Command::new(OPERATOR)
            .args([
                "run",
                "--leader-election=false",
                "--metrics-address=127.0.0.1:0",
            ])
            .env("KUBECONFIG", lab.kubeconfig_path())
            .env("RUST_LOG", "info,kube_runtime::controller=warn")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()?;
        Ok(Self(child))
    }
}

impl Drop for Operator {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Harness {
    async fn new(lab: Lab, topic: &str) -> TestResult<Self> {
        let client = lab.kube_client().await?;
        controller_managed_attach(&client).await?;
        install_crd(&client).await?;
        let namespace = format!("e2e-{topic}-{}", std::process::id());
        let namespaces: Api<Namespace> = Api::all(client.clone());
        namespaces
            .create(
                &PostParams::default(),
                &serde_json::from_value(json!({ "metadata": { "name": namespace } }))?,
            )
            .await?;
        let operator_log = std::env::temp_dir().join(format!("{namespace}-operator.log"));
        eprintln!("operator log: {}", operator_log.display());
        let operator = Some(Operator::start(&lab, &operator_log)?);
        Ok(Self {
            clusters: Api::namespaced(client.clone(), &namespace),
            pods: Api::namespaced(client.clone(), &namespace),
            pvcs: Api::namespaced(client.clone(), &namespace),
            nodes: Api::all(client.clone()),
            client,
            namespace,
            lab,
            operator_log,
            operator,
        })
    }

    /// Stops the operator (as a crash or an upgrade would).
    pub fn stop_operator(&mut self) {
        self.operator = None;
    }

    /// Starts the operator again (appending to the same log).
    pub fn start_operator(&mut self) -> TestResult {
        self.operator = Some(Operator::start(&self.lab, &self.operator_log)?);
        Ok(())
    }

    /// Deletes the namespace of the test (its clusters, pods and PVCs).
    async fn cleanup(&mut self) -> TestResult {
        let namespaces: Api<Namespace> = Api::all(self.client.clone());
        namespaces
            .delete(&self.namespace, &DeleteParams::default())
            .await?;
        Ok(())
    }

    /// Creates an `EtcdCluster` named `name` with this spec.
    pub async fn create_cluster(&self, name: &str, spec: Value) -> TestResult {
        self.clusters
            .create(
                &PostParams::default(),
                &serde_json::from_value(json!({
                    "apiVersion": "durable-etcd.io/v1alpha1",
                    "kind": "EtcdCluster",
                    "metadata": { "name": name },
                    "spec": spec,
                }))?,
            )
            .await?;
        Ok(())
    }

    /// Merges `patch` into the spec of cluster `name`.
    pub async fn patch_spec(&self, name: &str, patch: Value) -> TestResult {
        self.clusters
            .patch(
                name,
                &PatchParams::default(),
                &Patch::Merge(&json!({ "spec": patch })),
            )
            .await?;
        Ok(())
    }

    /// The status of cluster `name`.
    pub async fn status(&self, name: &str) -> TestResult<etcd_operator::api::EtcdClusterStatus> {
        Ok(self.clusters.get(name).await?.status.unwrap_or_default())
    }

    /// Waits until cluster `name` is Available with `members` healthy
    /// members in status.
    pub async fn wait_available(&self, name: &str, members: i32, timeout: Duration) -> TestResult {
        let started = Instant::now();
        let result = wait_for(
            &format!("{name} to be Available with {members} members"),
            timeout,
            || async {
                let status = self.status(name).await?;
                let available = condition_true(&status, "Available");
                let voters = status
                    .members
                    .iter()
                    .filter(|m| m.role == Some(etcd_operator::api::MemberRole::Voter))
                    .count();
                // Kept PVCs of scaled-down members are listed without a role.
                let listed = status.members.iter().filter(|m| m.role.is_some()).count();
                Ok(available
                    && status.ready_members == members
                    && voters == usize::try_from(members).unwrap_or(0)
                    && listed == voters)
            },
        )
        .await;
        match &result {
            Ok(()) => eprintln!(
                "{name}: Available with {members} members after {:?}",
                started.elapsed()
            ),
            Err(_) => {
                let status = self.clusters.get(name).await?.status;
                eprintln!("status: {status:#?}\npods: {:?}", self.pod_names().await?);
            }
        }
        result
    }

    pub async fn pod_names(&self) -> TestResult<Vec<String>> {
        Ok(self
            .pods
            .list(&ListParams::default())
            .await?
            .items
            .iter()
            .map(|p| p.name_any())
            .collect())
    }

    /// The member pods' client endpoints by pod IP: the ready pods, or
    /// every pod with an IP while none is ready yet.
    pub async fn endpoints(&self) -> TestResult<Vec<String>> {
        let pods: Vec<Pod> = self
            .pods
            .list(&ListParams::default())
            .await?
            .items
            .into_iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .filter(|p| p.status.as_ref().is_some_and(|s| s.pod_ip.is_some()))
            .collect();
        let ready: Vec<&Pod> = pods.iter().filter(|p| pod_ready(p)).collect();
        let chosen: Vec<&Pod> = if ready.is_empty() {
            pods.iter().collect()
        } else {
            ready
        };
        Ok(chosen
            .iter()
            .filter_map(|p| p.status.as_ref()?.pod_ip.clone())
            .map(|ip| format!("http://{ip}:2379"))
            .collect())
    }

    /// An etcd client on the ready members.
    pub async fn etcd(&self) -> TestResult<etcd_client::Client> {
        etcd_at(self.endpoints().await?).await
    }

    /// Cluster ID and member IDs by name.
    pub async fn identity(&self) -> TestResult<Identity> {
        let mut client = self.etcd().await?;
        let list = client.member_list().await?;
        Ok(Identity {
            cluster_id: list.header().map(|h| h.cluster_id()).unwrap_or_default(),
            members: list
                .members()
                .iter()
                .map(|m| (m.name().to_owned(), (m.id(), m.is_learner())))
                .collect(),
        })
    }

    /// The node of a pod.
    pub async fn node_of(&self, pod: &str) -> TestResult<String> {
        self.pods
            .get(pod)
            .await?
            .spec
            .and_then(|s| s.node_name)
            .ok_or_else(|| format!("pod {pod} is not scheduled").into())
    }

    /// Writes `count` keys under `prefix`.
    pub async fn write_keys(&self, prefix: &str, count: usize) -> TestResult {
        let mut client = self.etcd().await?;
        for i in 0..count {
            client
                .put(key(prefix, i), value(i), None::<PutOptions>)
                .await?;
        }
        Ok(())
    }

    /// Every key under `prefix` with its value (linearizable read).
    pub async fn check_keys(&self, prefix: &str, count: usize) -> TestResult {
        let mut client = self.etcd().await?;
        let found = client
            .get(prefix, Some(GetOptions::new().with_prefix()))
            .await?;
        let values: BTreeMap<String, String> = found
            .kvs()
            .iter()
            .map(|kv| {
                (
                    kv.key_str().unwrap_or_default().to_owned(),
                    kv.value_str().unwrap_or_default().to_owned(),
                )
            })
            .collect();
        for i in 0..count {
            if values.get(&key(prefix, i)) != Some(&value(i)) {
                return Err(
                    format!("{} is {:?}", key(prefix, i), values.get(&key(prefix, i))).into(),
                );
            }
        }
        Ok(())
    }

    /// Asserts that no member has two pods at once (rule 4).
    pub async fn one_pod_per_member(&self) -> TestResult {
        let names = self.pod_names().await?;
        let unique: BTreeSet<&String> = names.iter().collect();
        if unique.len() != names.len() {
            return Err(format!("two pods of one member: {names:?}").into());
        }
        Ok(())
    }

    /// Waits until every node is registered controller-managed for attach (see
    /// [`controller_managed_attach`]); checked again after `node add`.
    pub async fn mark_nodes(&self) -> TestResult {
        wait_for(
            "nodes registered as controller-managed",
            Duration::from_secs(60),
            || async { Ok(controller_managed_attach(&self.client).await.is_ok()) },
        )
        .await
    }
}

/// An etcd client on these endpoints.
pub async fn etcd_at(endpoints: Vec<String>) -> TestResult<etcd_client::Client> {
    let options = etcd_client::ConnectOptions::new()
        .with_connect_timeout(Duration::from_secs(2))
        .with_timeout(Duration::from_secs(5));
    Ok(etcd_client::Client::connect(endpoints, Some(options)).await?)
}

/// Whether a condition of this type is True.
pub fn condition_true(status: &etcd_operator::api::EtcdClusterStatus, type_: &str) -> bool {
    status
        .conditions
        .iter()
        .any(|c| c.type_ == type_ && c.status == "True")
}

pub fn pod_ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// Cluster ID and members (name -> (ID, learner)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    pub cluster_id: u64,
    pub members: BTreeMap<String, (u64, bool)>,
}

impl Identity {
    pub fn id_of(&self, name: &str) -> Option<u64> {
        self.members.get(name).map(|(id, _)| *id)
    }

    pub fn voters(&self) -> usize {
        self.members
            .values()
            .filter(|(_, learner)| !learner)
            .count()
    }
}

pub fn key(prefix: &str, i: usize) -> String {
    format!("{prefix}key-{i:05}")
}

pub fn value(i: usize) -> String {
    format!("value-{i}")
}

/// Tolerations of NotReady/unreachable nodes for the member pods: the pod
/// eviction timeout of a test.
pub fn tolerations(seconds: i64) -> Value {
    json!([
        { "key": "node.kubernetes.io/not-ready", "operator": "Exists",
          "effect": "NoExecute", "tolerationSeconds": seconds },
        { "key": "node.kubernetes.io/unreachable", "operator": "Exists",
          "effect": "NoExecute", "tolerationSeconds": seconds }
    ])
}

/// A real kubelet registers its Node with
/// `volumes.kubernetes.io/controller-managed-attach-detach: "true"`; without
/// it the attach-detach controller creates no VolumeAttachment and pods on
/// `lab-network` volumes never start. The lab's node agent sets it; this
/// checks that it did (no test edits Node objects itself).
pub async fn controller_managed_attach(client: &Client) -> TestResult {
    let nodes: Api<Node> = Api::all(client.clone());
    for node in nodes.list(&ListParams::default()).await?.items {
        let managed = node
            .annotations()
            .get("volumes.kubernetes.io/controller-managed-attach-detach")
            .is_some_and(|v| v == "true");
        if !managed {
            return Err(format!(
                "node {} is not registered as controller-managed for attach",
                node.name_any()
            )
            .into());
        }
    }
    Ok(())
}

async fn install_crd(client: &Client) -> TestResult {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    // Every CRD of the operator (its controllers watch them all).
    for crd in etcd_operator::api::crds() {
        crds.patch(
            &crd.name_any(),
            &PatchParams::apply("e2e").force(),
            &Patch::Apply(&crd),
        )
        .await?;
    }
    let crd = etcd_operator::api::crd();
    wait_for(
        "the CRD to be established",
        Duration::from_secs(30),
        || async {
            let crd = crds.get(&crd.name_any()).await?;
            Ok(crd.status.and_then(|s| s.conditions).is_some_and(|c| {
                c.iter()
                    .any(|c| c.type_ == "Established" && c.status == "True")
            }))
        },
    )
    .await
}

/// Polls `check` every second until it says true.
pub async fn wait_for<F, Fut>(what: &str, timeout: Duration, mut check: F) -> TestResult
where
    F: FnMut() -> Fut,
    Fut: Future<Output = TestResult<bool>>,
{
    let deadline = Instant::now() + timeout;
    let mut last_error = String::new();
    loop {
        match check().await {
            Ok(true) => return Ok(()),
            Ok(false) => {}
            Err(error) => last_error = error.to_string(),
        }
        if Instant::now() > deadline {
            return Err(format!("timed out waiting for {what} ({last_error})").into());
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

impl Harness {
    /// The Events (`events.k8s.io/v1`) of the test's namespace about the
    /// object named `name`.
    pub async fn events_about(
        &self,
        name: &str,
    ) -> TestResult<Vec<k8s_openapi::api::events::v1::Event>> {
        let events: Api<k8s_openapi::api::events::v1::Event> =
            Api::namespaced(self.client.clone(), &self.namespace);
        Ok(events
            .list(&ListParams::default())
            .await?
            .items
            .into_iter()
            .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name))
            .collect())
    }
}
