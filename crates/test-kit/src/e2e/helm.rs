//! The operator as `helm` installs it from `charts/etcd-operator`: the
//! pinned Helm of `tools/helm` (built by `tools/build-upstream.sh`) run
//! against the lab's API server, with a Helm home of its own so that
//! nothing of the machine's Helm configuration takes part.
//!
//! Values go to Helm as a file (JSON is YAML), not as `--set`: `--set`
//! splits on commas, and a log filter has them.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams};
use kube::{Api, Client, ResourceExt};
use serde_json::Value;

use crate::TestResult;
use crate::poll::wait_for;
use crate::upstream::built_set;

/// The chart, as committed.
pub fn chart_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../charts/etcd-operator")
}

/// The pinned `helm`, pointed at one cluster.
pub struct Helm {
    binary: PathBuf,
    kubeconfig: PathBuf,
    /// HELM_CONFIG_HOME, HELM_CACHE_HOME, HELM_DATA_HOME and the values
    /// files.
    home: tempfile::TempDir,
}

/// One `helm` run that succeeded: what it printed.
pub struct Output {
    pub stdout: String,
}

impl Helm {
    /// `helm` of `tools/helm` against the cluster of `kubeconfig`.
    pub fn new(kubeconfig: &Path) -> TestResult<Self> {
        Ok(Self {
            binary: built_set("helm")?.join("helm"),
            kubeconfig: kubeconfig.to_owned(),
            home: tempfile::tempdir()?,
        })
    }

    /// Runs `helm <args>`, echoing what it prints; fails with what it
    /// printed unless it succeeds.
    pub async fn run(&self, args: &[&str]) -> TestResult<Output> {
        self.invoke(args, true).await
    }

    /// [`Helm::run`] echoing only stderr (for machine-readable output).
    async fn invoke(&self, args: &[&str], echo_stdout: bool) -> TestResult<Output> {
        let home = self.home.path();
        let output = tokio::process::Command::new(&self.binary)
            .args(args)
            .env("KUBECONFIG", &self.kubeconfig)
            .env("HELM_CONFIG_HOME", home.join("config"))
            .env("HELM_CACHE_HOME", home.join("cache"))
            .env("HELM_DATA_HOME", home.join("data"))
            .stdin(Stdio::null())
            .output()
            .await?;
        let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
        let stderr = String::from_utf8_lossy(&output.stderr);
        let echoed = if echo_stdout { stdout.as_str() } else { "" };
        eprintln!(
            "$ helm {} -> {}\n{echoed}{stderr}",
            args.join(" "),
            output.status
        );
        if !output.status.success() {
            return Err(format!("helm {} failed: {stderr}", args.join(" ")).into());
        }
        Ok(Output { stdout })
    }

    /// `helm install <release> <chart>` into `namespace` (where Helm keeps
    /// the release) with `values`.
    pub async fn install(&self, release: &str, namespace: &str, values: &Value) -> TestResult {
        self.release_chart("install", release, namespace, values)
            .await
    }

    /// `helm upgrade <release> <chart>` with `values` (on the chart's
    /// defaults, as `helm upgrade` does without `--reuse-values`).
    pub async fn upgrade(&self, release: &str, namespace: &str, values: &Value) -> TestResult {
        self.release_chart("upgrade", release, namespace, values)
            .await
    }

    /// `helm <verb> <release> <chart> --namespace <namespace> --values <file>`.
    async fn release_chart(
        &self,
        verb: &str,
        release: &str,
        namespace: &str,
        values: &Value,
    ) -> TestResult {
        let values = self.values_file(release, verb, values)?;
        let chart = chart_dir();
        self.run(&[
            verb,
            release,
            &chart.to_string_lossy(),
            "--namespace",
            namespace,
            "--values",
            &values.to_string_lossy(),
        ])
        .await
        .map(drop)
    }

    /// `helm uninstall <release>`.
    pub async fn uninstall(&self, release: &str, namespace: &str) -> TestResult {
        self.run(&["uninstall", release, "--namespace", namespace])
            .await
            .map(drop)
    }

    /// The status (`deployed`, ...) and revision of `release`, as
    /// `helm status` reports them.
    pub async fn status(&self, release: &str, namespace: &str) -> TestResult<(String, i64)> {
        let output = self
            .invoke(
                &["status", release, "--namespace", namespace, "-o", "json"],
                false,
            )
            .await?;
        let status: Value = serde_json::from_str(&output.stdout)?;
        let state = status["info"]["status"]
            .as_str()
            .ok_or("helm status names no info.status")?
            .to_owned();
        let revision = status["version"]
            .as_i64()
            .ok_or("helm status names no version")?;
        eprintln!("{release}: {state}, revision {revision}");
        Ok((state, revision))
    }

    fn values_file(&self, release: &str, step: &str, values: &Value) -> TestResult<PathBuf> {
        let path = self.home.path().join(format!("{release}-{step}.json"));
        std::fs::write(&path, serde_json::to_vec_pretty(values)?)?;
        Ok(path)
    }
}

/// The names of the CRDs in the chart's `crds/`.
pub fn chart_crd_names() -> TestResult<Vec<String>> {
    let mut names = Vec::new();
    let mut files: Vec<PathBuf> = std::fs::read_dir(chart_dir().join("crds"))?
        .map(|entry| entry.map(|e| e.path()))
        .collect::<Result<_, _>>()?;
    files.sort();
    for file in files {
        let crd: Value = serde_saphyr::from_str(&std::fs::read_to_string(&file)?)?;
        let name = crd["metadata"]["name"]
            .as_str()
            .ok_or_else(|| format!("{} names no CRD", file.display()))?;
        names.push(name.to_owned());
    }
    Ok(names)
}

/// Deletes the operator's CRDs so that a `helm install` creates them from
/// the chart, as on a cluster that never had the operator. Refuses when
/// any custom resource of theirs exists: deleting a CRD deletes every
/// object of its kind, and those would be someone else's.
pub async fn delete_crds(client: &Client) -> TestResult {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    for name in chart_crd_names()? {
        let Some(crd) = crds.get_opt(&name).await? else {
            continue;
        };
        let spec = &crd.spec;
        let version = spec
            .versions
            .iter()
            .find(|v| v.storage)
            .ok_or_else(|| format!("CRD {name} has no storage version"))?;
        let resource = ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk(&spec.group, &version.name, &spec.names.kind),
            &spec.names.plural,
        );
        let objects: Api<DynamicObject> = Api::all_with(client.clone(), &resource);
        let existing = objects.list(&ListParams::default()).await?.items;
        if let Some(object) = existing.first() {
            return Err(format!(
                "the lab holds {} {}/{}, which deleting CRD {name} would delete: run this test on a lab of its own",
                spec.names.kind,
                object.namespace().unwrap_or_default(),
                object.name_any()
            )
            .into());
        }
        crds.delete(&name, &DeleteParams::default()).await?;
    }
    wait_for("the CRDs to be gone", Duration::from_secs(60), || async {
        for name in chart_crd_names()? {
            if crds.get_opt(&name).await?.is_some() {
                return Ok(false);
            }
        }
        Ok(true)
    })
    .await
}

/// The uid of each of the chart's CRDs that is established.
pub async fn established_crds(client: &Client) -> TestResult<Vec<(String, String)>> {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let mut established = Vec::new();
    for name in chart_crd_names()? {
        let Some(crd) = crds.get_opt(&name).await? else {
            continue;
        };
        let ready = crd
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|c| {
                c.iter()
                    .any(|c| c.type_ == "Established" && c.status == "True")
            });
        if ready {
            established.push((name, crd.uid().unwrap_or_default()));
        }
    }
    Ok(established)
}
