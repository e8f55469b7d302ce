//! The operator installed as `kubectl apply -k deploy/` installs it, in a
//! namespace of the test's own: `deploy/rbac.yaml` and
//! `deploy/operator.yaml` read as they are committed, with their
//! namespace `etcd-operator-system` replaced by the test's and their
//! cluster-wide objects named after it, so that the manifests themselves
//! are what runs (its image is the operator binary under test on the lab's
//! nodes). It watches one namespace only, so it never acts beside another
//! scenario's operator.

use std::path::Path;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{
    ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, LogParams, PostParams,
};
use kube::{Api, Client, ResourceExt};
use serde_json::{Value, json};

use crate::TestResult;
use crate::conditions::pod_ready;
use crate::poll::wait_for;

/// The namespace the manifests install into.
const MANIFEST_NAMESPACE: &str = "etcd-operator-system";
/// The label of the operator's Pods in `deploy/operator.yaml`.
const POD_SELECTOR: &str = "app.kubernetes.io/name=etcd-operator";

/// An installed operator; [`InstalledOperator::uninstall`] removes it.
pub struct InstalledOperator {
    client: Client,
    /// Its namespace.
    pub namespace: String,
    /// Its cluster-wide objects (ClusterRole, ClusterRoleBinding).
    cluster_wide: Vec<(ApiResource, String)>,
}

impl InstalledOperator {
    /// Installs the operator into `namespace`, watching `watched` only,
    /// and waits until its Pod is Ready.
    pub async fn install(client: &Client, namespace: &str, watched: &str) -> TestResult<Self> {
        let deploy = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy");
        let mut installed = Self {
            client: client.clone(),
            namespace: namespace.to_owned(),
            cluster_wide: Vec::new(),
        };
        let mut objects = Vec::new();
        for file in ["operator.yaml", "rbac.yaml"] {
            let text = std::fs::read_to_string(deploy.join(file))?;
            for document in documents(&text)? {
                objects.push(rewrite(document, namespace, watched));
            }
        }
        // The namespace first, the Deployment last (its Pod needs the
        // ServiceAccount).
        objects.sort_by_key(|o| match o["kind"].as_str() {
            Some("Namespace") => 0,
            Some("Deployment") => 2,
            _ => 1,
        });
        for object in objects {
            installed.create(object).await?;
        }
        let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
        wait_for(
            "the installed operator's Pod to be Ready",
            Duration::from_secs(120),
            || async {
                let list = pods
                    .list(&ListParams::default().labels(POD_SELECTOR))
                    .await?;
                Ok(list.items.iter().any(pod_ready))
            },
        )
        .await?;
        Ok(installed)
    }

    async fn create(&mut self, object: Value) -> TestResult {
        let api_version = object["apiVersion"].as_str().unwrap_or_default();
        let kind = object["kind"].as_str().unwrap_or_default().to_owned();
        let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
        let resource = ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk(group, version, &kind),
            &format!("{}s", kind.to_ascii_lowercase()),
        );
        let object: DynamicObject = serde_json::from_value(object)?;
        let api: Api<DynamicObject> = match object.namespace() {
            Some(namespace) => Api::namespaced_with(self.client.clone(), &namespace, &resource),
            None => Api::all_with(self.client.clone(), &resource),
        };
        api.create(&PostParams::default(), &object).await?;
        if object.namespace().is_none() && kind != "Namespace" {
            self.cluster_wide.push((resource, object.name_any()));
        }
        Ok(())
    }

    /// The log of its Pods, for a scenario that failed.
    pub async fn logs(&self) -> String {
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), &self.namespace);
        let mut out = String::new();
        if let Ok(list) = pods.list(&ListParams::default().labels(POD_SELECTOR)).await {
            for pod in list.items {
                let log = pods
                    .logs(&pod.name_any(), &LogParams::default())
                    .await
                    .unwrap_or_else(|e| format!("(no log: {e})"));
                out.push_str(&format!("--- {}\n{log}\n", pod.name_any()));
            }
        }
        out
    }

    /// Deletes its cluster-wide objects and its namespace.
    pub async fn uninstall(self) -> TestResult {
        for (resource, name) in &self.cluster_wide {
            let api: Api<DynamicObject> = Api::all_with(self.client.clone(), resource);
            api.delete(name, &DeleteParams::default()).await?;
        }
        let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(self.client.clone());
        namespaces
            .delete(&self.namespace, &DeleteParams::default())
            .await?;
        Ok(())
    }
}

/// The YAML documents of a manifest, as JSON (comments and empty
/// documents left out).
fn documents(text: &str) -> TestResult<Vec<Value>> {
    let mut documents = Vec::new();
    let mut current = String::new();
    for line in text.lines().chain(std::iter::once("---")) {
        if line.trim_end() == "---" {
            let value: Value = serde_saphyr::from_str(&current)?;
            if !value.is_null() {
                documents.push(value);
            }
            current.clear();
        } else {
            current.push_str(line);
            current.push('\n');
        }
    }
    Ok(documents)
}

/// A manifest's object as installed into `namespace`: namespaced objects
/// moved there, cluster-wide ones named `<name>-<namespace>`, the binding's
/// references followed, and the Deployment watching `watched` only.
fn rewrite(mut object: Value, namespace: &str, watched: &str) -> Value {
    let kind = object["kind"].as_str().unwrap_or_default().to_owned();
    let renamed = |name: &Value| json!(format!("{}-{namespace}", name.as_str().unwrap_or("")));
    match kind.as_str() {
        "Namespace" => object["metadata"]["name"] = json!(namespace),
        "ClusterRole" => object["metadata"]["name"] = renamed(&object["metadata"]["name"]),
        "ClusterRoleBinding" => {
            object["metadata"]["name"] = renamed(&object["metadata"]["name"]);
            object["roleRef"]["name"] = renamed(&object["roleRef"]["name"]);
        }
        _ => {}
    }
    if object["metadata"]["namespace"] == json!(MANIFEST_NAMESPACE) {
        object["metadata"]["namespace"] = json!(namespace);
    }
    if let Some(subjects) = object["subjects"].as_array_mut() {
        for subject in subjects {
            if subject["namespace"] == json!(MANIFEST_NAMESPACE) {
                subject["namespace"] = json!(namespace);
            }
        }
    }
    if kind == "Deployment"
        && let Some(env) = object["spec"]["template"]["spec"]["containers"][0]["env"].as_array_mut()
    {
        env.push(json!({"name": "ETCD_OPERATOR_NAMESPACE", "value": watched}));
    }
    object
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_manifests_move_to_the_namespace_of_the_test() {
        let deploy = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy");
        let mut objects = Vec::new();
        for file in ["operator.yaml", "rbac.yaml"] {
            let text = std::fs::read_to_string(deploy.join(file)).unwrap();
            for document in documents(&text).unwrap() {
                objects.push(rewrite(document, "e2e-op", "e2e-watched"));
            }
        }
        let text = serde_json::to_string(&objects).unwrap();
        assert!(!text.contains(MANIFEST_NAMESPACE), "{text}");
        let kinds: Vec<&str> = objects.iter().filter_map(|o| o["kind"].as_str()).collect();
        for kind in [
            "Namespace",
            "Deployment",
            "ServiceAccount",
            "ClusterRole",
            "ClusterRoleBinding",
        ] {
            assert!(kinds.contains(&kind), "{kinds:?}");
        }
        let binding = objects
            .iter()
            .find(|o| o["kind"] == "ClusterRoleBinding")
            .unwrap();
        assert_eq!(binding["roleRef"]["name"], "etcd-operator-e2e-op");
        assert_eq!(binding["subjects"][0]["namespace"], "e2e-op");
        let deployment = objects.iter().find(|o| o["kind"] == "Deployment").unwrap();
        assert!(text.contains("\"ETCD_OPERATOR_NAMESPACE\""));
        assert_eq!(deployment["metadata"]["namespace"], "e2e-op");
    }

    /// The default install (`kubectl apply -k deploy/`) watches every
    /// namespace, so it writes Secrets cluster-wide (a TLS cluster's CA and
    /// certificates live in the cluster's namespace, which the install
    /// cannot know). It may never enumerate them: no `list` or `watch` on
    /// Secrets, so it reads only the Secrets a spec names; no wildcard
    /// anywhere; no `exec`. And each Secret rule says why it is there.
    #[test]
    fn the_default_install_reads_only_named_secrets_and_grants_no_wildcard() {
        let deploy = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy");
        let text = std::fs::read_to_string(deploy.join("rbac.yaml")).unwrap();
        let roles: Vec<Value> = documents(&text)
            .unwrap()
            .into_iter()
            .filter(|o| o["kind"] == "ClusterRole" || o["kind"] == "Role")
            .collect();
        assert!(!roles.is_empty());
        let strings = |v: &Value| -> Vec<String> {
            v.as_array()
                .map(|a| {
                    a.iter()
                        .filter_map(|s| s.as_str().map(str::to_owned))
                        .collect()
                })
                .unwrap_or_default()
        };
        let mut secret_verbs = Vec::new();
        for rule in roles
            .iter()
            .flat_map(|r| r["rules"].as_array().cloned().unwrap_or_default())
        {
            let (resources, verbs) = (strings(&rule["resources"]), strings(&rule["verbs"]));
            assert!(
                !resources
                    .iter()
                    .chain(&verbs)
                    .chain(&strings(&rule["apiGroups"]))
                    .any(|s| s == "*"),
                "a wildcard: {rule}"
            );
            assert!(!resources.iter().any(|r| r.ends_with("/exec")), "{rule}");
            if resources.iter().any(|r| r == "secrets") {
                secret_verbs.extend(verbs);
            }
        }
        assert!(!secret_verbs.is_empty(), "the operator writes TLS Secrets");
        for verb in ["list", "watch"] {
            assert!(!secret_verbs.iter().any(|v| v == verb), "{secret_verbs:?}");
        }
        // The reason for cluster-wide Secret writes is written beside them.
        let rule_at = text.find("resources: [\"secrets\"]").unwrap();
        let comment = &text[rule_at.saturating_sub(1200)..rule_at];
        assert!(
            comment.contains("Why cluster-wide:"),
            "the Secret rule of deploy/rbac.yaml says why it is cluster-wide"
        );
    }
}
