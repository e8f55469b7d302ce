//! cert-manager on the lab: its CRDs and its controller (the pinned set
//! `tools/cert-manager`, built by `tools/build-upstream.sh` with the CRDs
//! of the same release in `crds/`), run outside the cluster against the
//! lab's API server like the operator, and a CA issuer made the way
//! cert-manager's documentation makes one (a self-signed issuer signs a CA
//! certificate, whose Secret backs a CA issuer).

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams};
use kube::{Api, Client, ResourceExt};
use serde_json::{Value, json};

use crate::TestResult;
use crate::poll::wait_for;
use crate::upstream::built_set;

/// The cert-manager controller process, killed when dropped.
pub struct CertManagerProcess(Child);

impl CertManagerProcess {
    /// Runs the controller against the cluster of `kubeconfig`, appending
    /// its log to `log`.
    pub fn start(kubeconfig: &Path, log: &Path) -> TestResult<Self> {
        let binary = built_set("cert-manager")?.join("cert-manager-controller");
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)?;
        let child = Command::new(binary)
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()?;
        Ok(Self(child))
    }
}

impl Drop for CertManagerProcess {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Applies cert-manager's CRDs (every file of the set's `crds/`) and waits
/// until they are established.
pub async fn install_crds(client: &Client) -> TestResult {
    let dir = built_set("cert-manager")?.join("crds");
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let mut names = Vec::new();
    let mut files: Vec<_> = std::fs::read_dir(&dir)?
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|path| path.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    for file in files {
        let text = std::fs::read_to_string(&file)?;
        let crd: CustomResourceDefinition =
            serde_saphyr::from_str(&text).map_err(|e| format!("{}: {e}", file.display()))?;
        crds.patch(
            &crd.name_any(),
            &PatchParams::apply("e2e").force(),
            &Patch::Apply(&crd),
        )
        .await?;
        names.push(crd.name_any());
    }
    if names.is_empty() {
        return Err(format!("no CRD in {}", dir.display()).into());
    }
    wait_for(
        "cert-manager's CRDs to be established",
        Duration::from_secs(60),
        || async {
            for name in &names {
                let crd = crds.get(name).await?;
                let established = crd.status.and_then(|s| s.conditions).is_some_and(|c| {
                    c.iter()
                        .any(|c| c.type_ == "Established" && c.status == "True")
                });
                if !established {
                    return Ok(false);
                }
            }
            Ok(true)
        },
    )
    .await
}

/// A cert-manager resource of `cert-manager.io/v1`.
pub fn resource(kind: &str, plural: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("cert-manager.io", "v1", kind),
        plural,
    )
}

fn object(resource: &ApiResource, name: &str, spec: Value) -> DynamicObject {
    let mut object = DynamicObject::new(name, resource);
    object.data = json!({ "spec": spec });
    object
}

/// Whether a cert-manager object's `Ready` condition is `True`.
pub fn is_ready(object: &DynamicObject) -> bool {
    object.data["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|c| c["type"] == "Ready" && c["status"] == "True")
}

/// An `Issuer` `name` in `namespace` backed by a CA of its own (the
/// Secret `<name>-ca`, signed by a self-signed issuer), once Ready.
pub async fn ca_issuer(client: &Client, namespace: &str, name: &str) -> TestResult {
    let issuers: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), namespace, &resource("Issuer", "issuers"));
    let certificates: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        namespace,
        &resource("Certificate", "certificates"),
    );
    let self_signed = format!("{name}-self-signed");
    let ca = format!("{name}-ca");
    issuers
        .create(
            &PostParams::default(),
            &object(
                &resource("Issuer", "issuers"),
                &self_signed,
                json!({ "selfSigned": {} }),
            ),
        )
        .await?;
    certificates
        .create(
            &PostParams::default(),
            &object(
                &resource("Certificate", "certificates"),
                &ca,
                json!({
                    "isCA": true,
                    "commonName": format!("{name} etcd CA"),
                    "secretName": ca,
                    "duration": "87600h",
                    "privateKey": { "algorithm": "ECDSA", "size": 256 },
                    "issuerRef": { "name": self_signed, "kind": "Issuer", "group": "cert-manager.io" },
                }),
            ),
        )
        .await?;
    issuers
        .create(
            &PostParams::default(),
            &object(
                &resource("Issuer", "issuers"),
                name,
                json!({ "ca": { "secretName": ca } }),
            ),
        )
        .await?;
    wait_for(
        "the CA issuer to be Ready",
        Duration::from_secs(120),
        || async { Ok(is_ready(&issuers.get(name).await?)) },
    )
    .await
}
