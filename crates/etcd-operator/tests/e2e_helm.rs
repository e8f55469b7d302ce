//! End to end on the lab: the operator's whole life with Helm, from
//! `charts/etcd-operator` and the pinned `helm` (tools/helm). The
//! harness's operator, which runs on the host, is stopped; the operator
//! runs in a Pod (its image is the operator binary under test on the lab's
//! nodes), installed namespaced: it watches the test's namespace through a
//! Role there, with only cluster-scoped reads left in its ClusterRole.
//!
//! - `helm install` on a cluster without the operator's CRDs creates them
//!   from the chart's `crds/`, then the operator's namespace, RBAC and
//!   Deployment; the operator's Pod becomes Ready, and an `EtcdCluster` in
//!   the watched namespace, with the default mutual TLS (its CA and
//!   certificates are Secrets the operator writes through the Role),
//!   becomes Available and takes writes; what the operator writes of its
//!   certificates through that Role works too: a renewal asked for by
//!   annotation is recorded on the CA Secret (`status.tls.renewedFor`), a
//!   named client certificate's Secret is created, then deleted once its
//!   name leaves the spec;
//! - `helm upgrade` with another log level rolls the Deployment to a new
//!   Pod that runs with it, and that new Pod manages the cluster: a member
//!   Pod deleted is created again by it, the cluster is Available again and
//!   every write is still there;
//! - `helm uninstall` removes the operator's namespace, Deployment and
//!   RBAC, and keeps what Helm never deletes: the CRDs (the same objects)
//!   and so the cluster, its volumes and its data.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use etcd_operator::api::{EtcdCluster, RENEW_CERTIFICATES_ANNOTATION};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Namespace, Pod, Secret};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use kube::api::{DeleteParams, ListParams, Patch, PatchParams};
use kube::{Api, Client, ResourceExt};
use serde_json::{Value, json};
use test_kit::TestResult;
use test_kit::conditions::pod_ready;
use test_kit::e2e::helm::{self, Helm};
use test_kit::e2e::{Harness, cluster_spec, key, value};
use test_kit::poll::wait_for;
use test_kit::tls_client::user_client;

const CLUSTER: &str = "charted";
const PREFIX: &str = "helm/";
const KEYS: usize = 20;
/// The label of the operator's Pods.
const OPERATOR_PODS: &str = "app.kubernetes.io/name=etcd-operator";
/// The chart's default log level, and the one the upgrade sets.
const LOG_LEVEL: &str = "info,kube_runtime::controller=warn";
const UPGRADED_LOG_LEVEL: &str = "debug,kube_runtime::controller=warn,hyper=info,tower=info";
/// Resources the chart grants in the watched namespace through the Role,
/// which the ClusterRole must then leave out.
const NAMESPACED_ONLY: [&str; 4] = ["etcdclusters", "secrets", "pods", "persistentvolumeclaims"];

#[test]
fn helm_installs_upgrades_and_uninstalls_the_operator() {
    test_kit::e2e::run("helm", env!("CARGO_BIN_EXE_etcd-operator"), |h| {
        Box::pin(scenario(h))
    });
}

/// Names of the release and of what it installs.
struct Release {
    /// The release, kept in the watched namespace. It names the operator's
    /// Deployment, ServiceAccount and RBAC (it contains "etcd-operator").
    name: String,
    /// The operator's namespace, created by the chart.
    operator_namespace: String,
    /// The namespace the operator watches: the harness's.
    watched: String,
}

impl Release {
    fn values(&self, log_level: &str) -> Value {
        json!({
            "namespace": {"name": self.operator_namespace, "create": true},
            "watchNamespace": self.watched,
            "log": {"level": log_level},
        })
    }
}

async fn scenario(h: &mut Harness) -> TestResult {
    h.stop_operator();
    let helm = Helm::new(&h.lab.kubeconfig_path())?;
    let release = Release {
        name: format!("{}-etcd-operator", h.namespace),
        operator_namespace: format!("{}-operator", h.namespace),
        watched: h.namespace.clone(),
    };
    let outcome = life(h, &helm, &release).await;
    if outcome.is_err() {
        eprintln!(
            "the operator's log:\n{}",
            operator_logs(&h.client, &release.operator_namespace).await
        );
        let _ = helm.uninstall(&release.name, &release.watched).await;
    }
    outcome
}

async fn life(h: &Harness, helm: &Helm, release: &Release) -> TestResult {
    let started = Instant::now();
    helm::delete_crds(&h.client).await?;
    helm.install(&release.name, &release.watched, &release.values(LOG_LEVEL))
        .await?;
    let crds = helm::established_crds(&h.client).await?;
    let expected = helm::chart_crd_names()?;
    if crds.iter().map(|(name, _)| name).ne(expected.iter()) {
        return Err(format!("helm install left CRDs {crds:?}, the chart has {expected:?}").into());
    }
    the_rbac_is_namespaced(&h.client, release).await?;
    let installed = ready_operator_pod(&h.client, release, LOG_LEVEL, None).await?;
    eprintln!(
        "installed: operator Pod {installed} Ready after {:?}",
        started.elapsed()
    );

    // No `spec.tls`: mutual TLS, as a user's cluster gets by default.
    let mut spec = cluster_spec(3, "lab-network");
    if let Some(fields) = spec.as_object_mut() {
        fields.remove("tls");
    }
    h.create_available(CLUSTER, spec, Duration::from_secs(180))
        .await?;
    write_keys(h).await?;
    certificates_are_renewed_issued_and_deleted(h).await?;
    let claims = h.claim_uids().await?;

    let upgraded_at = Instant::now();
    helm.upgrade(
        &release.name,
        &release.watched,
        &release.values(UPGRADED_LOG_LEVEL),
    )
    .await?;
    let (state, revision) = helm.status(&release.name, &release.watched).await?;
    if state != "deployed" || revision != 2 {
        return Err(
            format!("after the upgrade the release is {state}, revision {revision}").into(),
        );
    }
    let upgraded =
        ready_operator_pod(&h.client, release, UPGRADED_LOG_LEVEL, Some(&installed)).await?;
    eprintln!(
        "upgraded: operator Pod {upgraded} replaced {installed} after {:?}",
        upgraded_at.elapsed()
    );
    the_new_operator_manages_the_cluster(h).await?;
    every_key_is_there(h).await?;

    helm.uninstall(&release.name, &release.watched).await?;
    the_operator_is_gone(&h.client, release).await?;
    let kept = helm::established_crds(&h.client).await?;
    if kept != crds {
        return Err(
            format!("helm uninstall changed the CRDs: {crds:?} before, {kept:?} after").into(),
        );
    }
    h.clusters.get(CLUSTER).await?;
    let claims_after = h.claim_uids().await?;
    if claims_after != claims {
        return Err(
            format!("the volumes changed: {claims:?} before, {claims_after:?} after").into(),
        );
    }
    every_key_is_there(h).await?;
    eprintln!(
        "uninstalled: the CRDs, {CLUSTER}, its {} volumes and its {KEYS} keys are kept",
        claims.len()
    );
    Ok(())
}

/// Through the chart's Role alone, the operator renews every certificate
/// on request (recording it on the CA Secret), issues a named client
/// certificate and deletes it once its name is gone from the spec.
async fn certificates_are_renewed_issued_and_deleted(h: &Harness) -> TestResult {
    let clusters: Api<EtcdCluster> = Api::namespaced(h.client.clone(), &h.namespace);
    let secrets: Api<Secret> = Api::namespaced(h.client.clone(), &h.namespace);
    let named = format!("{CLUSTER}-client-app-tls");
    clusters
        .patch(
            CLUSTER,
            &PatchParams::default(),
            &Patch::Merge(json!({
                "metadata": { "annotations": { RENEW_CERTIFICATES_ANNOTATION: "helm-1" } },
                "spec": { "tls": { "clientCertificates": [{ "name": "app" }] } },
            })),
        )
        .await?;
    wait_for(
        "the renewal to be recorded and the named certificate issued",
        Duration::from_secs(90),
        || async {
            let renewed = clusters
                .get(CLUSTER)
                .await?
                .status
                .and_then(|s| s.tls)
                .and_then(|tls| tls.renewed_for);
            Ok(renewed.as_deref() == Some("helm-1") && secrets.get_opt(&named).await?.is_some())
        },
    )
    .await?;
    clusters
        .patch(
            CLUSTER,
            &PatchParams::default(),
            &Patch::Merge(json!({ "spec": { "tls": { "clientCertificates": null } } })),
        )
        .await?;
    wait_for(
        "the named certificate's Secret to be deleted",
        Duration::from_secs(90),
        || async { Ok(secrets.get_opt(&named).await?.is_none()) },
    )
    .await?;
    eprintln!("through the Role: renewal recorded, {named} issued and deleted");
    Ok(())
}

/// The watched namespace's objects come through a Role there; the
/// ClusterRole grants none of them.
async fn the_rbac_is_namespaced(client: &Client, release: &Release) -> TestResult {
    let role = Api::<Role>::namespaced(client.clone(), &release.watched)
        .get(&release.name)
        .await?;
    Api::<RoleBinding>::namespaced(client.clone(), &release.watched)
        .get(&release.name)
        .await?;
    let cluster_role = Api::<ClusterRole>::all(client.clone())
        .get(&release.name)
        .await?;
    let resources = |rules: Option<Vec<k8s_openapi::api::rbac::v1::PolicyRule>>| {
        rules
            .unwrap_or_default()
            .into_iter()
            .flat_map(|r| r.resources.unwrap_or_default())
            .collect::<Vec<_>>()
    };
    let in_role = resources(role.rules);
    let cluster_wide = resources(cluster_role.rules);
    for resource in NAMESPACED_ONLY {
        if !in_role.iter().any(|r| r == resource) || cluster_wide.iter().any(|r| r == resource) {
            return Err(format!(
                "{resource}: Role grants {in_role:?}, ClusterRole grants {cluster_wide:?}"
            )
            .into());
        }
    }
    Ok(())
}

/// Waits until the operator's Deployment has rolled out: one Pod, Ready,
/// running with `log_level`, other than `replaced`. Returns its name.
async fn ready_operator_pod(
    client: &Client,
    release: &Release,
    log_level: &str,
    replaced: Option<&str>,
) -> TestResult<String> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), &release.operator_namespace);
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &release.operator_namespace);
    wait_for(
        "the operator's Deployment to be rolled out",
        Duration::from_secs(180),
        || async {
            let deployment = deployments.get(&release.name).await?;
            let generation = deployment.metadata.generation;
            let status = deployment.status.unwrap_or_default();
            let rolled = status.observed_generation == generation
                && status.updated_replicas == Some(1)
                && status.ready_replicas == Some(1)
                && status.replicas == Some(1);
            let list = pods
                .list(&ListParams::default().labels(OPERATOR_PODS))
                .await?;
            let [pod] = list.items.as_slice() else {
                return Ok(false);
            };
            let this = pod.name_any();
            let level = pod
                .spec
                .as_ref()
                .and_then(|s| s.containers.first())
                .and_then(|c| c.env.as_ref())
                .and_then(|env| env.iter().find(|e| e.name == "RUST_LOG"))
                .and_then(|e| e.value.clone());
            Ok(rolled
                && pod_ready(pod)
                && pod.metadata.deletion_timestamp.is_none()
                && level.as_deref() == Some(log_level)
                && replaced != Some(this.as_str()))
        },
    )
    .await?;
    let list = pods
        .list(&ListParams::default().labels(OPERATOR_PODS))
        .await?;
    list.items
        .first()
        .map(ResourceExt::name_any)
        .ok_or_else(|| "the operator's Pod is gone".into())
}

/// A member Pod deleted is created again, by the operator alone (no
/// controller of Kubernetes creates member Pods), and the cluster is
/// Available again.
async fn the_new_operator_manages_the_cluster(h: &Harness) -> TestResult {
    let before: BTreeMap<String, String> = h.pod_uids().await?;
    let member = before
        .keys()
        .find(|name| name.starts_with(CLUSTER))
        .ok_or("no member Pod")?
        .clone();
    h.pods.delete(&member, &DeleteParams::default()).await?;
    let old_uid = before[&member].clone();
    wait_for(
        &format!("the operator to create {member} again"),
        Duration::from_secs(180),
        || async {
            let Some(pod) = h.pods.get_opt(&member).await? else {
                return Ok(false);
            };
            Ok(pod.uid().as_deref() != Some(old_uid.as_str()) && pod_ready(&pod))
        },
    )
    .await?;
    h.wait_available(CLUSTER, 3, Duration::from_secs(180)).await
}

/// What `helm uninstall` deletes is gone: the operator's namespace (with
/// its Deployment and Pods), its ClusterRole and binding, and the Role and
/// binding in the watched namespace.
async fn the_operator_is_gone(client: &Client, release: &Release) -> TestResult {
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let cluster_roles: Api<ClusterRole> = Api::all(client.clone());
    let cluster_bindings: Api<ClusterRoleBinding> = Api::all(client.clone());
    let roles: Api<Role> = Api::namespaced(client.clone(), &release.watched);
    let bindings: Api<RoleBinding> = Api::namespaced(client.clone(), &release.watched);
    let pods: Api<Pod> = Api::namespaced(client.clone(), &release.operator_namespace);
    wait_for(
        "the operator and its RBAC to be gone",
        Duration::from_secs(180),
        || async {
            Ok(namespaces
                .get_opt(&release.operator_namespace)
                .await?
                .is_none()
                && pods
                    .list(&ListParams::default().labels(OPERATOR_PODS))
                    .await?
                    .items
                    .is_empty()
                && cluster_roles.get_opt(&release.name).await?.is_none()
                && cluster_bindings.get_opt(&release.name).await?.is_none()
                && roles.get_opt(&release.name).await?.is_none()
                && bindings.get_opt(&release.name).await?.is_none())
        },
    )
    .await
}

/// Writes `KEYS` keys under `PREFIX` with the cluster's user client
/// certificate.
async fn write_keys(h: &Harness) -> TestResult {
    let mut client = user_client(h, CLUSTER).await?;
    for i in 0..KEYS {
        client.put(key(PREFIX, i), value(i), None).await?;
    }
    Ok(())
}

/// Every key `write_keys` wrote has its value (linearizable read).
async fn every_key_is_there(h: &Harness) -> TestResult {
    let mut client = user_client(h, CLUSTER).await?;
    let read = client
        .get(PREFIX, Some(etcd_client::GetOptions::new().with_prefix()))
        .await?;
    let values: BTreeMap<&str, &str> = read
        .kvs()
        .iter()
        .filter_map(|kv| Some((kv.key_str().ok()?, kv.value_str().ok()?)))
        .collect();
    for i in 0..KEYS {
        let (key, value) = (key(PREFIX, i), value(i));
        if values.get(key.as_str()) != Some(&value.as_str()) {
            return Err(
                format!("{key} is {:?}, written {value:?}", values.get(key.as_str())).into(),
            );
        }
    }
    Ok(())
}

/// The log of the operator's Pods, for a scenario that failed.
async fn operator_logs(client: &Client, namespace: &str) -> String {
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let mut out = String::new();
    if let Ok(list) = pods
        .list(&ListParams::default().labels(OPERATOR_PODS))
        .await
    {
        for pod in list.items {
            let log = pods
                .logs(&pod.name_any(), &Default::default())
                .await
                .unwrap_or_else(|e| format!("(no log: {e})"));
            out.push_str(&format!("--- {}\n{log}\n", pod.name_any()));
        }
    }
    out
}
