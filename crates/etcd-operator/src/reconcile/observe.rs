//! Observe: everything the planner needs about one cluster, read fresh from
//! the API server and from etcd on every pass (durability rule 8: after any
//! outage the operator re-observes before it acts).
//!
//! Failure rules: if the API server cannot be read, the pass stops with an
//! error and nothing is acted on. etcd is different: members that do not
//! answer are *data* (the etcd layer never fails on an outage), which the
//! planner must treat as "unknown", never as "gone".

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::{Node, PersistentVolume, PersistentVolumeClaim, Pod, Service};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::ListParams;
use kube::{Api, Client, ResourceExt};

use super::endpoints::pod_endpoints;
use super::error::ObserveError;
use crate::api::EtcdCluster;
use crate::api::identity::{CLUSTER_LABEL, ORDINAL_LABEL};
use crate::etcd::{ConnectSettings, ObservedEtcd};
use crate::planner::Children;
use crate::resources::names::{client_service_name, pdb_name, peer_service_name};

/// Client port of every member.
pub const CLIENT_PORT: u16 = 2379;

/// One observation of a cluster: its Kubernetes objects and its etcd view.
#[derive(Debug, Clone)]
pub struct Snapshot {
    /// The cluster's pods (by label), Terminating ones included.
    pub pods: Vec<Pod>,
    /// The cluster's PVCs (by label).
    pub pvcs: Vec<PersistentVolumeClaim>,
    /// The PersistentVolumes bound to those PVCs; `None` when the PV named
    /// by a PVC does not exist.
    pub volumes: BTreeMap<String, Option<PersistentVolume>>,
    /// Which cluster-wide children (Services, PodDisruptionBudget) exist.
    pub children: Children,
    /// Every Node of the Kubernetes cluster by name. A node absent from
    /// this map has been deleted (the list succeeded, so absence is real).
    pub nodes: BTreeMap<String, Node>,
    /// What etcd said, through the pods' client endpoints.
    pub etcd: ObservedEtcd,
    /// The endpoints that were dialled.
    pub endpoints: Vec<String>,
}

impl Snapshot {
    /// Names of the nodes the cluster's pods are bound to.
    pub fn pod_node_names(&self) -> BTreeSet<String> {
        self.pods
            .iter()
            .filter_map(|p| p.spec.as_ref()?.node_name.clone())
            .collect()
    }
}

/// Selector of every object of `cluster`.
pub fn cluster_selector(cluster: &str) -> String {
    format!("{CLUSTER_LABEL}={cluster}")
}

/// Reads the cluster's pods, PVCs and their PVs, every Node, then etcd.
pub async fn observe(
    client: &Client,
    cluster: &EtcdCluster,
    etcd_settings: ConnectSettings,
) -> Result<Snapshot, ObserveError> {
    let name = cluster.name_any();
    let namespace = cluster
        .namespace()
        .ok_or_else(|| ObserveError::NoNamespace(name.clone()))?;
    let selector = ListParams::default().labels(&cluster_selector(&name));

    let pods_api: Api<Pod> = Api::namespaced(client.clone(), &namespace);
    let pvcs_api: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), &namespace);
    let (pods, pvcs) = futures::try_join!(
        async {
            pods_api
                .list(&selector)
                .await
                .map_err(|source| ObserveError::List {
                    kind: "pods",
                    cluster: name.clone(),
                    source,
                })
        },
        async {
            pvcs_api
                .list(&selector)
                .await
                .map_err(|source| ObserveError::List {
                    kind: "persistentvolumeclaims",
                    cluster: name.clone(),
                    source,
                })
        },
    )?;
    let pods = pods.items;
    let pvcs = pvcs.items;

    let nodes = Api::<Node>::all(client.clone())
        .list(&ListParams::default())
        .await
        .map_err(|source| ObserveError::List {
            kind: "nodes",
            cluster: name.clone(),
            source,
        })?
        .items
        .into_iter()
        .map(|node| (node.name_any(), node))
        .collect();
    let volumes = read_optional::<PersistentVolume>(
        &Api::all(client.clone()),
        pvcs.iter()
            .filter_map(|c| c.spec.as_ref()?.volume_name.clone())
            .filter(|v| !v.is_empty()),
        "persistentvolume",
    )
    .await?;

    let services: Api<Service> = Api::namespaced(client.clone(), &namespace);
    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(client.clone(), &namespace);
    let (peer_service, client_service, pdb) = futures::try_join!(
        exists(&services, peer_service_name(&name), "service"),
        exists(&services, client_service_name(&name), "service"),
        exists(&pdbs, pdb_name(&name), "poddisruptionbudget"),
    )?;
    let children = Children {
        peer_service,
        client_service,
        pdb,
    };

    // Member Pods only (the restore Pod runs no etcd).
    let endpoints = pod_endpoints(
        pods.iter()
            .filter(|p| p.labels().contains_key(ORDINAL_LABEL)),
        "http",
        CLIENT_PORT,
    );
    let etcd = if endpoints.is_empty() {
        ObservedEtcd::nothing_observed()
    } else {
        crate::etcd::observe(endpoints.clone(), etcd_settings).await
    };
    Ok(Snapshot {
        pods,
        pvcs,
        volumes,
        children,
        nodes,
        etcd,
        endpoints,
    })
}

/// Whether the named object exists.
async fn exists<K>(api: &Api<K>, name: String, kind: &'static str) -> Result<bool, ObserveError>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    match api.get_metadata_opt(&name).await {
        Ok(object) => Ok(object.is_some()),
        Err(source) => Err(ObserveError::Get { kind, name, source }),
    }
}

/// Gets each named object; a missing one is `None` (data, e.g. a deleted
/// Node), any other failure stops the observation.
async fn read_optional<K>(
    api: &Api<K>,
    names: impl Iterator<Item = String>,
    kind: &'static str,
) -> Result<BTreeMap<String, Option<K>>, ObserveError>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let names: BTreeSet<String> = names.collect();
    let reads = names.into_iter().map(|name| async move {
        match api.get_opt(&name).await {
            Ok(object) => Ok((name, object)),
            Err(source) => Err(ObserveError::Get { kind, name, source }),
        }
    });
    futures::future::try_join_all(reads)
        .await
        .map(|pairs| pairs.into_iter().collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn selects_the_cluster_by_its_label() {
        assert_eq!(cluster_selector("main"), "durable-etcd.io/cluster=main");
    }
}
