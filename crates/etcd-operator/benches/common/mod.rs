//! What the operator bench needs of a lab, self-contained: the machine-wide
//! lab lock, a lab (a healthy one that is up, or our own), the CRDs, one
//! namespace, and the operator binary run outside the cluster against the
//! lab's API server.

use std::collections::BTreeMap;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use etcd_lab::{Lab, LabOptions};
use etcd_operator::api::{EtcdCluster, EtcdClusterStatus};
use k8s_openapi::api::core::v1::{Namespace, Pod};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::{Api, Client, ResourceExt};
use serde_json::{Value, json};

pub const OPERATOR: &str = env!("CARGO_BIN_EXE_etcd-operator");
/// Where the bench brings up its own lab when none is up.
const OWN_LAB_DIR: &str = "/var/lib/etcd-lab-operator-bench";

pub type TestResult<T = ()> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

pub struct Harness {
    pub lab: Lab,
    pub namespace: String,
    pub clusters: Api<EtcdCluster>,
    pub pods: Api<Pod>,
    pub operator_log: PathBuf,
    client: Client,
    operator: Option<Child>,
}

pub type Scenario = for<'a> fn(&'a mut Harness) -> Pin<Box<dyn Future<Output = TestResult> + 'a>>;

/// Runs `scenario` under the lab lock, in namespace `bench-<pid>`; deletes the
/// namespace after and takes our own lab down.
pub fn run(scenario: Scenario) {
    let _lock = lab_lock();
    let runtime = tokio::runtime::Runtime::new().expect("tokio runtime");
    let result = runtime.block_on(async {
        let (lab, own) = lab().await?;
        let mut h = Harness::new(lab).await?;
        let outcome = scenario(&mut h).await;
        h.stop_operator();
        let namespaces: Api<Namespace> = Api::all(h.client.clone());
        let _ = namespaces
            .delete(&h.namespace, &DeleteParams::default())
            .await;
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

fn lab_lock() -> std::fs::File {
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open("/run/etcd-lab-tests.lock")
        .expect("lab test lock file");
    file.lock().expect("lab test lock");
    file
}

async fn lab() -> TestResult<(Lab, bool)> {
    for dir in [None, Some(PathBuf::from(OWN_LAB_DIR))] {
        if let Ok(lab) = Lab::open(dir)
            && lab.status().await.is_healthy()
        {
            eprintln!("reusing the lab at {}", lab.paths().root().display());
            return Ok((lab, false));
        }
    }
    let options = LabOptions {
        lab_dir: Some(PathBuf::from(OWN_LAB_DIR)),
        etcd_lab_binary: Some(Path::new(OPERATOR).with_file_name("etcd-lab")),
        controller_manager_flags: BTreeMap::from([(
            "node-monitor-grace-period".to_owned(),
            "20s".to_owned(),
        )]),
        ..LabOptions::default()
    };
    Ok((Lab::up(options).await?, true))
}

impl Harness {
    async fn new(lab: Lab) -> TestResult<Self> {
        let client = lab.kube_client().await?;
        install_crds(&client).await?;
        let namespace = format!("bench-{}", std::process::id());
        let namespaces: Api<Namespace> = Api::all(client.clone());
        namespaces
            .create(
                &PostParams::default(),
                &serde_json::from_value(json!({ "metadata": { "name": namespace } }))?,
            )
            .await?;
        let operator_log = std::env::temp_dir().join(format!("{namespace}-operator.log"));
        let mut h = Self {
            clusters: Api::namespaced(client.clone(), &namespace),
            pods: Api::namespaced(client.clone(), &namespace),
            namespace,
            lab,
            operator_log,
            client,
            operator: None,
        };
        h.start_operator()?;
        Ok(h)
    }

    pub fn stop_operator(&mut self) {
        if let Some(mut child) = self.operator.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    pub fn start_operator(&mut self) -> TestResult {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.operator_log)?;
        self.operator = Some(
            Command::new(OPERATOR)
                .args([
                    "run",
                    "--leader-election=false",
                    "--metrics-address=127.0.0.1:0",
                ])
                .env("KUBECONFIG", self.lab.kubeconfig_path())
                .env("RUST_LOG", "info,kube_runtime::controller=warn")
                .stdout(Stdio::null())
                .stderr(log)
                .spawn()?,
        );
        Ok(())
    }

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

    pub async fn status(&self, name: &str) -> TestResult<EtcdClusterStatus> {
        Ok(self.clusters.get(name).await?.status.unwrap_or_default())
    }
}

impl Drop for Harness {
    fn drop(&mut self) {
        self.stop_operator();
    }
}

pub async fn etcd_at(endpoints: Vec<String>) -> TestResult<etcd_client::Client> {
    let options = etcd_client::ConnectOptions::new()
        .with_connect_timeout(Duration::from_secs(2))
        .with_timeout(Duration::from_secs(5));
    Ok(etcd_client::Client::connect(endpoints, Some(options)).await?)
}

pub fn condition_true(status: &EtcdClusterStatus, type_: &str) -> bool {
    status
        .conditions
        .iter()
        .any(|c| c.type_ == type_ && c.status == "True")
}

async fn install_crds(client: &Client) -> TestResult {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    // Every CRD of the operator (its controllers watch them all).
    for crd in etcd_operator::api::crds() {
        crds.patch(
            &crd.name_any(),
            &PatchParams::apply("bench").force(),
            &Patch::Apply(&crd),
        )
        .await?;
    }
    let crd = etcd_operator::api::crd();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let got = crds.get(&crd.name_any()).await?;
        if got.status.and_then(|s| s.conditions).is_some_and(|c| {
            c.iter()
                .any(|c| c.type_ == "Established" && c.status == "True")
        }) {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err("the CRD is not established".into());
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}
