//! An `EtcdCluster` of the test's namespace: its spec, its status, its
//! Pods and PVCs, and its etcd as the host reaches it.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use etcd_client::{GetOptions, PutOptions};
use etcd_operator_api::api::{EtcdClusterStatus, MemberRole};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::events::v1::Event;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::{Api, ResourceExt};
use serde_json::{Value, json};

use super::{Harness, Identity, etcd_at, key, value};
use crate::TestResult;
use crate::conditions::{condition_true, pod_ready};
use crate::poll::wait_for;

/// The spec of a cluster of `replicas` members on 1Gi volumes of
/// `storage_class`, serving plain HTTP (`tls.disabled`) so that a
/// scenario's clients need no certificate; the TLS scenarios (and the
/// demo) pass their own `tls` through [`cluster_spec_with`] or leave it
/// out for the default, mutual TLS.
pub fn cluster_spec(replicas: i32, storage_class: &str) -> Value {
    cluster_spec_with(replicas, storage_class, json!({}))
}

/// [`cluster_spec`] with the top-level fields of `more` added (or put in
/// place of its own).
pub fn cluster_spec_with(replicas: i32, storage_class: &str, more: Value) -> Value {
    let mut spec = json!({
        "replicas": replicas,
        "storage": { "storageClassName": storage_class, "size": "1Gi" },
        "tls": { "disabled": true },
    });
    if let (Some(spec), Value::Object(more)) = (spec.as_object_mut(), more) {
        spec.extend(more);
    }
    spec
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

/// Every object `api` lists: name -> UID.
async fn uids<K>(api: &Api<K>) -> TestResult<BTreeMap<String, String>>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    Ok(api
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .map(|o| (o.name_any(), o.meta().uid.clone().unwrap_or_default()))
        .collect())
}

impl Harness {
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

    /// Creates cluster `name` with this spec and waits until it is
    /// Available with as many members as the spec's `replicas`.
    pub async fn create_available(&self, name: &str, spec: Value, timeout: Duration) -> TestResult {
        let members = spec["replicas"]
            .as_i64()
            .and_then(|r| i32::try_from(r).ok())
            .ok_or("the spec names no replicas")?;
        self.create_cluster(name, spec).await?;
        self.wait_available(name, members, timeout).await
    }

    /// The preamble of the scenarios that lose a member: cluster `name`
    /// created with `spec` and Available within 180 s, then `keys` keys
    /// written under `prefix`; returns who the cluster is.
    pub async fn available_with_keys(
        &self,
        name: &str,
        spec: Value,
        prefix: &str,
        keys: usize,
    ) -> TestResult<Identity> {
        self.create_available(name, spec, Duration::from_secs(180))
            .await?;
        self.write_keys(prefix, keys).await?;
        self.identity().await
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

    /// Sets annotation `key` of cluster `name` to `value` (a request such
    /// as `durable-etcd.io/rotate-ca`).
    pub async fn annotate_cluster(&self, name: &str, key: &str, value: &str) -> TestResult {
        self.clusters
            .patch(
                name,
                &PatchParams::default(),
                &Patch::Merge(json!({ "metadata": { "annotations": { key: value } } })),
            )
            .await?;
        Ok(())
    }

    /// The status of cluster `name`.
    pub async fn status(&self, name: &str) -> TestResult<EtcdClusterStatus> {
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
                    .filter(|m| m.role == Some(MemberRole::Voter))
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

    /// Waits until cluster `name`'s condition `type_` is True.
    pub async fn wait_condition(&self, name: &str, type_: &str, timeout: Duration) -> TestResult {
        wait_for(&format!("{name} to be {type_}"), timeout, || async {
            Ok(condition_true(&self.status(name).await?, type_))
        })
        .await
    }

    /// The names of the namespace's Pods.
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

    /// Every Pod of the namespace: name -> UID.
    pub async fn pod_uids(&self) -> TestResult<BTreeMap<String, String>> {
        uids(&self.pods).await
    }

    /// Every PVC of the namespace: name -> UID.
    pub async fn claim_uids(&self) -> TestResult<BTreeMap<String, String>> {
        uids(&self.pvcs).await
    }

    /// The member pods' client endpoints by pod IP: the ready pods, or
    /// every pod with an IP while none is ready yet.
    pub async fn endpoints(&self) -> TestResult<Vec<String>> {
        let pods: Vec<Pod> = self
            .pods
            .list(&crate::member_pods::member_pods())
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

    /// The Pod IPs of cluster `cluster`'s member Pods that have one and
    /// are not being deleted.
    pub async fn member_ips(&self, cluster: &str) -> TestResult<Vec<String>> {
        let pods = self
            .pods
            .list(&ListParams::default().labels(&format!(
                "durable-etcd.io/cluster={cluster},app.kubernetes.io/name=etcd"
            )))
            .await?;
        Ok(pods
            .items
            .iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .filter_map(|p| p.status.as_ref()?.pod_ip.clone())
            .collect())
    }

    /// Asks for a full backup `name` of cluster `cluster` into claim
    /// `claim`, under `path` or at the claim's root without one (an
    /// `EtcdBackup` with a `persistentVolumeClaim` destination).
    pub async fn create_backup_to_claim(
        &self,
        name: &str,
        cluster: &str,
        claim: &str,
        path: Option<&str>,
    ) -> TestResult {
        let backups: Api<etcd_operator_api::api::EtcdBackup> =
            Api::namespaced(self.client.clone(), &self.namespace);
        let mut destination = json!({ "claimName": claim });
        if let Some(path) = path {
            destination["path"] = json!(path);
        }
        backups
            .create(
                &PostParams::default(),
                &serde_json::from_value(json!({
                    "apiVersion": "durable-etcd.io/v1alpha1",
                    "kind": "EtcdBackup",
                    "metadata": { "name": name },
                    "spec": {
                        "clusterName": cluster,
                        "destination": { "persistentVolumeClaim": destination },
                    },
                }))?,
            )
            .await?;
        Ok(())
    }

    /// Creates a 1Gi `ReadWriteOnce` PersistentVolumeClaim `name` on the
    /// lab's network volumes, labelled for backups (a backup destination).
    pub async fn create_claim(&self, name: &str) -> TestResult {
        self.create_claim_labelled(
            name,
            json!({ etcd_operator_api::api::BACKUP_CLAIM_MARKER_LABEL: "true" }),
        )
        .await
    }

    /// Creates a 1Gi `ReadWriteOnce` PersistentVolumeClaim `name` on the
    /// lab's network volumes with `labels`.
    pub async fn create_claim_labelled(&self, name: &str, labels: Value) -> TestResult {
        let claims: Api<k8s_openapi::api::core::v1::PersistentVolumeClaim> =
            Api::namespaced(self.client.clone(), &self.namespace);
        claims
            .create(
                &PostParams::default(),
                &serde_json::from_value(json!({
                    "apiVersion": "v1",
                    "kind": "PersistentVolumeClaim",
                    "metadata": { "name": name, "labels": labels },
                    "spec": {
                        "accessModes": ["ReadWriteOnce"],
                        "storageClassName": "lab-network",
                        "resources": { "requests": { "storage": "1Gi" } },
                    },
                }))?,
            )
            .await?;
        Ok(())
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

    /// Checks that every key under `prefix` has its value (linearizable
    /// read).
    pub async fn check_keys(&self, prefix: &str, count: usize) -> TestResult {
        let values = self.values_under(prefix).await?;
        for i in 0..count {
            if values.get(&key(prefix, i)) != Some(&value(i)) {
                return Err(
                    format!("{} is {:?}", key(prefix, i), values.get(&key(prefix, i))).into(),
                );
            }
        }
        Ok(())
    }

    /// Every key under `prefix` with its value (linearizable read).
    pub async fn values_under(&self, prefix: &str) -> TestResult<BTreeMap<String, String>> {
        let mut client = self.etcd().await?;
        let found = client
            .get(prefix, Some(GetOptions::new().with_prefix()))
            .await?;
        Ok(found
            .kvs()
            .iter()
            .map(|kv| {
                (
                    kv.key_str().unwrap_or_default().to_owned(),
                    kv.value_str().unwrap_or_default().to_owned(),
                )
            })
            .collect())
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

    /// The Events (`events.k8s.io/v1`) of the test's namespace about the
    /// object named `name`.
    pub async fn events_about(&self, name: &str) -> TestResult<Vec<Event>> {
        let events: Api<Event> = Api::namespaced(self.client.clone(), &self.namespace);
        Ok(events
            .list(&ListParams::default())
            .await?
            .items
            .into_iter()
            .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name))
            .collect())
    }

    /// Waits until the object named `name` has a Warning Event of `reason`
    /// whose note names `fragment`.
    pub async fn wait_warning_event(
        &self,
        name: &str,
        reason: &str,
        fragment: &str,
        timeout: Duration,
    ) -> TestResult {
        wait_for(
            &format!("a Warning Event {reason} on {name}"),
            timeout,
            || async {
                Ok(self.events_about(name).await?.iter().any(|e| {
                    e.type_.as_deref() == Some("Warning")
                        && e.reason.as_deref() == Some(reason)
                        && e.note.as_deref().is_some_and(|n| n.contains(fragment))
                }))
            },
        )
        .await
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_member_pod_label_is_the_operators_ordinal_label() {
        assert_eq!(
            crate::member_pods::MEMBER_POD_LABEL,
            etcd_operator_api::api::identity::ORDINAL_LABEL
        );
    }
}
