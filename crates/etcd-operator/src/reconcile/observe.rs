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
use k8s_openapi::api::storage::v1::{CSIDriver, StorageClass};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::api::ListParams;
use kube::core::Selector;
use kube::{Api, Client, ResourceExt};

use super::error::ObserveError;
use super::watched::{Reads, Watched, label_selector};
use crate::addressing::{
    client_service_name, member_name, ordinal_of_member, pdb_name, peer_service_name, pvc_name,
};
use crate::api::EtcdCluster;
use crate::api::identity::{CLUSTER_LABEL, CLUSTER_TOKEN_ANNOTATION, ORDINAL_LABEL};
use crate::controller_kit::member_endpoints::pod_endpoints;
use crate::controller_kit::ownership::controlled_by;
use crate::etcd::{ConnectSettings, ObservedEtcd};
use crate::planner::Children;

pub use crate::addressing::CLIENT_PORT;

/// One observation of a cluster: its Kubernetes objects and its etcd view.
#[derive(Debug, Clone)]
pub struct Snapshot {
    /// The cluster's pods (by label, and by name for each member the
    /// cluster expects whose Pod the label list lacks), Terminating ones
    /// included.
    pub pods: Vec<Pod>,
    /// The cluster's PVCs (by label, and by name like the pods).
    pub pvcs: Vec<PersistentVolumeClaim>,
    /// Objects that carry a name the cluster needs but that this cluster
    /// does not own (`kind/name`): never taken over, reported instead.
    pub unowned: Vec<String>,
    /// The PersistentVolumes bound to those PVCs; `None` when the PV named
    /// by a PVC does not exist.
    pub volumes: BTreeMap<String, Option<PersistentVolume>>,
    /// What each member's write-ahead log holds, read by its Pod's sidecar
    /// only while quorum is not reachable (survivor ranking), by ordinal.
    pub wal_tails: BTreeMap<u32, crate::pod_contract::WalTailReport>,
    /// The voters' keyspace hashes at one revision, compared: asked only
    /// while etcd's CORRUPT alarm is raised (rule 15).
    pub keyspaces: Option<crate::etcd::agreement::KeyspaceComparison>,
    /// The PersistentVolumes set aside as damaged data of this cluster's
    /// members (rule 15), kept until a person deletes them.
    pub set_aside_volumes: Vec<PersistentVolume>,
    /// Which cluster-wide children (Services, PodDisruptionBudget) exist.
    pub children: Children,
    /// Every Node of the Kubernetes cluster by name. A node absent from
    /// this map has been deleted (the list succeeded, so absence is real).
    pub nodes: BTreeMap<String, Node>,
    /// The StorageClass of the cluster's volumes and the CSIDriver of its
    /// provisioner (where volumes keep their data, for member spreading).
    /// Read only when a member Pod may be created in this pass (an expected
    /// member has none), so a steady cluster costs no extra request.
    pub storage: StorageFacts,
    /// What etcd said, through the pods' client endpoints.
    pub etcd: ObservedEtcd,
    /// The endpoints that were dialled.
    pub endpoints: Vec<String>,
    /// What each member Pod's `volume-usage` sidecar said, by ordinal.
    pub volume_usage: BTreeMap<u32, crate::planner::VolumeSpace>,
    /// The backup schedules that name this cluster.
    pub backup_schedules: Vec<crate::planner::ScheduleSummary>,
    /// The certificates of a TLS cluster (set by the pass, which keeps them
    /// before it observes).
    pub tls: Option<crate::planner::TlsObservation>,
    /// The transport stage the members run and what the spec asks (set by
    /// the pass, which reads it before it connects).
    pub transport: super::transport::TransportFacts,
}

impl Snapshot {
    /// The PersistentVolume a PVC is bound to, if it exists.
    pub fn volume_of(&self, pvc: &PersistentVolumeClaim) -> Option<&PersistentVolume> {
        pvc.spec
            .as_ref()
            .and_then(|s| s.volume_name.as_ref())
            .and_then(|v| self.volumes.get(v))
            .and_then(Option::as_ref)
    }

    /// Names of the nodes the cluster's pods are bound to.
    pub fn pod_node_names(&self) -> BTreeSet<String> {
        self.pods
            .iter()
            .filter_map(|p| p.spec.as_ref()?.node_name.clone())
            .collect()
    }
}

/// The StorageClass the members' PVCs use, and its provisioner's CSIDriver.
#[derive(Debug, Clone, Default)]
pub struct StorageFacts {
    /// `spec.storage.storageClassName`, or the default class.
    pub class: Option<StorageClass>,
    /// The CSIDriver named like the class's provisioner.
    pub driver: Option<CSIDriver>,
}

pub use crate::api::identity::cluster_selector;

/// What a pass learnt from etcd and the members' sidecars, and through
/// which endpoints: kept by a pass that plans again from fresh reads, so
/// that etcd is not asked twice when the member Pods are the same.
#[derive(Debug, Clone)]
pub struct EtcdReading {
    /// The endpoints that were dialled.
    pub endpoints: Vec<String>,
    /// What etcd said.
    pub etcd: ObservedEtcd,
    /// What the `volume-usage` sidecars said.
    pub volume_usage: BTreeMap<u32, crate::planner::VolumeSpace>,
}

impl Snapshot {
    /// The etcd part of this observation.
    pub fn etcd_reading(&self) -> EtcdReading {
        EtcdReading {
            endpoints: self.endpoints.clone(),
            etcd: self.etcd.clone(),
            volume_usage: self.volume_usage.clone(),
        }
    }
}

/// Reads the cluster's pods, PVCs and their PVs, every Node, then etcd
/// (or takes `earlier`, when it dialled the same endpoints).
pub async fn observe(
    reads: Reads<'_>,
    cluster: &EtcdCluster,
    etcd_settings: ConnectSettings,
    earlier: Option<EtcdReading>,
) -> Result<Snapshot, ObserveError> {
    let name = cluster.name_any();
    let namespace = cluster
        .namespace()
        .ok_or_else(|| ObserveError::NoNamespace(name.clone()))?;
    let selector = label_selector(CLUSTER_LABEL, &name);
    let listed = |kind: &'static str| {
        let cluster = name.clone();
        move |source| ObserveError::List {
            kind,
            cluster,
            source,
        }
    };

    let (pods, pvcs) = futures::try_join!(
        async {
            reads
                .list::<Pod>(Some(&namespace), &selector)
                .await
                .map_err(listed("pods"))
        },
        async {
            reads
                .list::<PersistentVolumeClaim>(Some(&namespace), &selector)
                .await
                .map_err(listed("persistentvolumeclaims"))
        },
    )?;
    let mut pods = pods;
    let mut pvcs = pvcs;
    let mut unowned = Vec::new();

    // Rule 10: an object absent from a label-filtered list is not absent.
    // Every member the cluster expects is looked up by name; what lost its
    // labels is found (and re-labelled by the planner), what is truly
    // absent is confirmed by the 404.
    let expected = expected_ordinals(cluster);
    let uid = cluster.uid().unwrap_or_default();
    let missing_pvcs = expected
        .iter()
        .map(|&o| pvc_name(&name, o))
        .filter(|n| !pvcs.iter().any(|p| &p.name_any() == n));
    for (claim_name, claim) in read_optional::<PersistentVolumeClaim>(
        reads,
        Some(&namespace),
        missing_pvcs,
        "persistentvolumeclaim",
    )
    .await?
    {
        let Some(claim) = claim else { continue };
        if pvc_belongs(&claim, &name, &uid) {
            pvcs.push(claim);
        } else {
            unowned.push(format!("PersistentVolumeClaim/{claim_name}"));
        }
    }
    let missing_pods = expected
        .iter()
        .map(|&o| member_name(&name, o))
        .filter(|n| !pods.iter().any(|p| &p.name_any() == n));
    for (pod_name, pod) in
        read_optional::<Pod>(reads, Some(&namespace), missing_pods, "pod").await?
    {
        let Some(pod) = pod else { continue };
        if controlled_by(&pod, &uid) {
            pods.push(pod);
        } else {
            unowned.push(format!("Pod/{pod_name}"));
        }
    }

    let nodes = reads
        .list::<Node>(None, &Selector::default())
        .await
        .map_err(listed("nodes"))?
        .into_iter()
        .map(|node| (node.name_any(), node))
        .collect();
    let volumes = read_optional::<PersistentVolume>(
        reads,
        None,
        pvcs.iter()
            .filter_map(|c| c.spec.as_ref()?.volume_name.clone())
            .filter(|v| !v.is_empty()),
        "persistentvolume",
    )
    .await?;

    let set_aside_volumes = reads
        .list::<PersistentVolume>(None, &label_selector(CLUSTER_LABEL, &name))
        .await
        .map_err(listed("persistentvolumes"))?
        .into_iter()
        .filter(|v| {
            super::facts::set_aside_as_damaged(v)
                && v.spec
                    .as_ref()
                    .and_then(|s| s.claim_ref.as_ref()?.namespace.as_deref())
                    == Some(namespace.as_str())
        })
        .collect();

    let (peer_service, client_service, pdb) = futures::try_join!(
        read_one::<Service>(reads, &namespace, peer_service_name(&name), "service"),
        read_one::<Service>(reads, &namespace, client_service_name(&name), "service"),
        read_one::<PodDisruptionBudget>(reads, &namespace, pdb_name(&name), "poddisruptionbudget"),
    )?;
    let children = Children {
        peer_service: owned_child(peer_service.as_ref(), &uid, "Service", &mut unowned),
        client_service: owned_child(client_service.as_ref(), &uid, "Service", &mut unowned),
        pdb: owned_child(pdb.as_ref(), &uid, "PodDisruptionBudget", &mut unowned),
        pdb_min_available: pdb
            .as_ref()
            .filter(|p| controlled_by(*p, &uid))
            .and_then(|p| p.spec.as_ref()?.min_available.as_ref())
            .and_then(|m| match m {
                IntOrString::Int(n) => Some(*n),
                IntOrString::String(_) => None,
            }),
    };

    let pod_may_be_created = expected
        .iter()
        .any(|&o| !pods.iter().any(|p| p.name_any() == member_name(&name, o)));
    // The class says whether a grown `storage.size` can be applied.
    let desired_size = crate::api::quantity::bytes(&cluster.spec.storage.size);
    let volume_to_grow = pvcs
        .iter()
        .any(|pvc| super::facts::requested_bytes(pvc) < desired_size);
    let storage = if pod_may_be_created || volume_to_grow {
        storage_facts(
            reads.client(),
            cluster.spec.storage.storage_class_name.as_deref(),
        )
        .await?
    } else {
        StorageFacts::default()
    };

    // Member Pods only (the restore Pod runs no etcd).
    let endpoints = pod_endpoints(
        pods.iter()
            .filter(|p| p.labels().contains_key(ORDINAL_LABEL) && etcd_may_answer(p)),
        crate::etcd::scheme(etcd_settings.tls.as_deref()),
        CLIENT_PORT,
    );
    let keyspace_settings = etcd_settings.clone();
    let reading = async {
        match earlier.filter(|e| e.endpoints == endpoints) {
            Some(earlier) => (earlier.etcd, earlier.volume_usage),
            None if endpoints.is_empty() => {
                (ObservedEtcd::nothing_observed(), volume_usage(&pods).await)
            }
            None => futures::join!(
                crate::etcd::observe(endpoints.clone(), etcd_settings),
                volume_usage(&pods)
            ),
        }
    };
    let ((etcd, volume_usage), backup_schedules) = futures::join!(
        reading,
        super::backup_health::schedules_of(reads, &namespace, &name)
    );
    // Rule 11: without quorum, survivors are ranked by what their logs
    // hold; a member whose etcd does not answer is read from its volume.
    // A cluster that has not formed yet (no cluster ID recorded) has no
    // survivors to rank.
    let formed = cluster
        .status
        .as_ref()
        .is_some_and(|s| s.cluster_id.is_some());
    let wal_tails = if etcd.quorum_reachable || !formed {
        BTreeMap::new()
    } else {
        wal_tails(&pods).await
    };
    // Rule 15: a member CORRUPT names is rebuilt only once its hash is seen
    // to differ from its agreeing peers'.
    let keyspaces = if corrupt_raised(&etcd) {
        compare_keyspaces(&endpoints, &etcd, keyspace_settings).await
    } else {
        None
    };
    Ok(Snapshot {
        volume_usage,
        wal_tails,
        keyspaces,
        backup_schedules: backup_schedules?,
        tls: None,
        transport: super::transport::TransportFacts::default(),
        pods,
        pvcs,
        unowned,
        volumes,
        set_aside_volumes,
        storage,
        children,
        nodes,
        etcd,
        endpoints,
    })
}

/// Whether the etcd of a member Pod may answer at the Pod's address: not
/// when the Pod is being deleted and its etcd container no longer runs
/// (a replaced member's Pod, whose guard refused its volume). Such a Pod's
/// address often stops answering before the Pod is gone, and a probe of it
/// waits out its whole connect timeout and holds up the pass. A Pod being
/// deleted whose etcd still runs (a graceful stop) is still asked.
fn etcd_may_answer(pod: &Pod) -> bool {
    if pod.metadata.deletion_timestamp.is_none() {
        return true;
    }
    pod.status
        .as_ref()
        .and_then(|status| status.container_statuses.as_ref())
        .is_some_and(|containers| {
            containers.iter().any(|c| {
                c.name == crate::resources::ETCD_CONTAINER
                    && c.state
                        .as_ref()
                        .is_some_and(|state| state.running.is_some())
            })
        })
}

/// Whether any member that answered reports etcd's CORRUPT alarm.
fn corrupt_raised(etcd: &ObservedEtcd) -> bool {
    etcd.endpoints
        .iter()
        .filter_map(|e| e.status.as_ref())
        .flat_map(|s| crate::etcd::parse_alarms(&s.errors))
        .any(|a| a.kind == crate::etcd::AlarmKind::Corrupt)
}

/// The voters' keyspace hashes at one revision, compared; each comparison
/// is logged (it decides whether a member is rebuilt).
async fn compare_keyspaces(
    endpoints: &[String],
    etcd: &ObservedEtcd,
    settings: ConnectSettings,
) -> Option<crate::etcd::agreement::KeyspaceComparison> {
    let admin = match crate::etcd::EtcdAdmin::new(endpoints.iter().cloned(), settings) {
        Ok(admin) => admin,
        Err(error) => {
            tracing::warn!("the members' keyspace hashes were not compared: {error}");
            return None;
        }
    };
    let compared = admin.compare_keyspaces(etcd).await;
    if let Some(compared) = &compared {
        tracing::info!(
            revision = compared.revision,
            "under CORRUPT, the members' keyspace hashes compare as {:?}",
            compared.members
        );
    }
    compared
}

/// How long a member Pod's `volume-usage` sidecar has to answer.
const VOLUME_USAGE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(1);

/// Asks the `volume-usage` sidecar of every running member Pod that has
/// one ([`volume_usage_asks`]), at once; a sidecar that does not answer is
/// left out (the member's volume is then not reported, nothing else
/// follows from it).
async fn volume_usage(pods: &[Pod]) -> BTreeMap<u32, crate::planner::VolumeSpace> {
    let asks = volume_usage_asks(pods);
    let answers = futures::future::join_all(asks.into_iter().map(|(ordinal, ip)| async move {
        let usage = super::volume_usage::read(&ip, VOLUME_USAGE_TIMEOUT).await;
        if let Err(error) = &usage {
            tracing::debug!(%ip, "volume usage not read: {error}");
        }
        (ordinal, usage.ok())
    }))
    .await;
    answers
        .into_iter()
        .filter_map(|(ordinal, usage)| {
            let usage = usage?;
            Some((
                ordinal,
                crate::planner::VolumeSpace {
                    capacity: i64::try_from(usage.capacity_bytes).unwrap_or(i64::MAX),
                    available: i64::try_from(usage.available_bytes).unwrap_or(i64::MAX),
                },
            ))
        })
        .collect()
}

/// How long a member Pod's sidecar has to read its write-ahead log.
const WAL_TAIL_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// Asks the sidecar of every running member Pod that has one what its
/// write-ahead log holds, at once; one that does not answer is left out
/// (its member's log is then unknown).
async fn wal_tails(pods: &[Pod]) -> BTreeMap<u32, crate::pod_contract::WalTailReport> {
    let asks = volume_usage_asks(pods);
    futures::future::join_all(asks.into_iter().map(|(ordinal, ip)| async move {
        let tail = super::volume_usage::read_wal_tail(&ip, WAL_TAIL_TIMEOUT).await;
        match &tail {
            Ok(t) => tracing::info!(
                %ip,
                "the write-ahead log of member {ordinal} holds entries to index {} of term {} (commit {} persisted{})",
                t.last_index,
                t.last_term,
                t.persisted_commit,
                if t.torn { ", torn at its end" } else { "" }
            ),
            Err(error) => {
                tracing::info!(%ip, "the write-ahead log of member {ordinal} was not read: {error}");
            }
        }
        Some((ordinal, tail.ok()?))
    }))
    .await
    .into_iter()
    .flatten()
    .collect()
}

/// The ordinal and address of each member Pod whose `volume-usage`
/// sidecar is asked: running, with the sidecar and an address. A Pod being
/// deleted is not asked: its volume is on its way out, and its address
/// often stops answering before the Pod is gone (an ask then waits out the
/// whole timeout and holds up the pass: 1 s of a member replacement on the
/// lab's bench).
fn volume_usage_asks(pods: &[Pod]) -> Vec<(u32, String)> {
    pods.iter()
        .filter_map(|pod| {
            if pod.metadata.deletion_timestamp.is_some() {
                return None;
            }
            let ordinal: u32 = pod.labels().get(ORDINAL_LABEL)?.parse().ok()?;
            let has_sidecar = pod
                .spec
                .as_ref()?
                .containers
                .iter()
                .any(|c| c.name == crate::resources::VOLUME_USAGE_CONTAINER);
            let status = pod.status.as_ref()?;
            let ip = status.pod_ip.clone().filter(|ip| !ip.is_empty())?;
            (has_sidecar && status.phase.as_deref() == Some("Running")).then_some((ordinal, ip))
        })
        .collect()
}

/// The StorageClass named `name` (the default class when `None` or
/// empty), and the CSIDriver of its provisioner.
async fn storage_facts(client: &Client, name: Option<&str>) -> Result<StorageFacts, ObserveError> {
    let classes: Api<StorageClass> = Api::all(client.clone());
    let class = match name.filter(|n| !n.is_empty()) {
        Some(name) => read_uncopied(&classes, name.to_owned(), "storageclass").await?,
        None => classes
            .list(&ListParams::default())
            .await
            .map_err(|source| ObserveError::List {
                kind: "storageclasses",
                cluster: String::new(),
                source,
            })?
            .items
            .into_iter()
            .find(|c| {
                c.annotations()
                    .get("storageclass.kubernetes.io/is-default-class")
                    .is_some_and(|v| v == "true")
            }),
    };
    let driver = match &class {
        Some(class) => {
            let drivers: Api<CSIDriver> = Api::all(client.clone());
            read_uncopied(&drivers, class.provisioner.clone(), "csidriver").await?
        }
        None => None,
    };
    Ok(StorageFacts { class, driver })
}

/// The named object of the StorageClass/CSIDriver kinds, if it exists.
async fn read_uncopied<K>(
    api: &Api<K>,
    name: String,
    kind: &'static str,
) -> Result<Option<K>, ObserveError>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    match api.get_opt(&name).await {
        Ok(object) => Ok(object),
        Err(source) => Err(ObserveError::Get { kind, name, source }),
    }
}

/// The named object in `namespace`, if it exists.
async fn read_one<K: Watched>(
    reads: Reads<'_>,
    namespace: &str,
    name: String,
    kind: &'static str,
) -> Result<Option<K>, ObserveError> {
    match reads.get::<K>(Some(namespace), &name).await {
        Ok(object) => Ok(object),
        Err(source) => Err(ObserveError::Get { kind, name, source }),
    }
}

/// The ordinals whose objects the cluster expects: those the spec wants,
/// those of the members recorded in status, and the survivor of a restore.
pub fn expected_ordinals(cluster: &EtcdCluster) -> BTreeSet<u32> {
    let name = cluster.name_any();
    let wanted = 0..u32::try_from(cluster.spec.replicas).unwrap_or(0);
    let status = cluster.status.as_ref();
    let recorded = status
        .into_iter()
        .flat_map(|s| s.members.iter())
        .filter_map(|m| ordinal_of_member(&name, &m.name));
    let survivor = status
        .and_then(|s| s.restore.as_ref())
        .and_then(|r| u32::try_from(r.survivor_ordinal).ok());
    wanted.chain(recorded).chain(survivor).collect()
}

/// Whether a child exists and is this cluster's; one that exists under
/// the child's name but is not is added to `unowned` (`kind/name`).
fn owned_child<K: kube::Resource>(
    object: Option<&K>,
    uid: &str,
    kind: &str,
    unowned: &mut Vec<String>,
) -> bool {
    match object {
        Some(o) if controlled_by(o, uid) => true,
        Some(o) => {
            unowned.push(format!(
                "{kind}/{}",
                o.meta().name.clone().unwrap_or_default()
            ));
            false
        }
        None => false,
    }
}

/// Whether a PVC found by its name holds data of this cluster: PVCs carry
/// no ownerReference (they may outlive the cluster by choice), so the
/// incarnation token it records must be one of this cluster's (every token
/// starts with the first one, derived from the cluster's UID), or the
/// operator's labels must name this cluster.
fn pvc_belongs(pvc: &PersistentVolumeClaim, cluster: &str, uid: &str) -> bool {
    let first_token = crate::planner::first_token_of(cluster, uid);
    let token = pvc
        .annotations()
        .get(CLUSTER_TOKEN_ANNOTATION)
        .cloned()
        .unwrap_or_default();
    token == first_token
        || token.starts_with(&format!("{first_token}-r"))
        || pvc.labels().get(CLUSTER_LABEL).map(String::as_str) == Some(cluster)
}

/// Gets each named object; a missing one is `None` (data, e.g. a deleted
/// Node), any other failure stops the observation.
async fn read_optional<K: Watched>(
    reads: Reads<'_>,
    namespace: Option<&str>,
    names: impl Iterator<Item = String>,
    kind: &'static str,
) -> Result<BTreeMap<String, Option<K>>, ObserveError> {
    let names: BTreeSet<String> = names.collect();
    let reads = names.into_iter().map(|name| async move {
        match reads.get::<K>(namespace, &name).await {
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

    fn member_pod(ordinal: u32, ip: &str, deleting: bool) -> Pod {
        let mut pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": format!("m-{ordinal}"), "labels": {ORDINAL_LABEL: ordinal.to_string()}},
            "spec": {"containers": [
                {"name": "etcd"},
                {"name": crate::resources::VOLUME_USAGE_CONTAINER}
            ]},
            "status": {"phase": "Running", "podIP": ip}
        }))
        .expect("pod");
        if deleting {
            pod.metadata.deletion_timestamp =
                Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                    k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
                ));
        }
        pod
    }

    #[test]
    fn the_volume_of_a_pod_being_deleted_is_not_asked_for() {
        let pods = [
            member_pod(0, "10.0.0.1", false),
            member_pod(1, "10.0.0.2", true),
            member_pod(2, "10.0.0.3", false),
        ];
        assert_eq!(
            volume_usage_asks(&pods),
            vec![(0, "10.0.0.1".to_owned()), (2, "10.0.0.3".to_owned())]
        );
    }

    #[test]
    fn a_pod_being_deleted_is_probed_only_while_its_etcd_runs() {
        let running = serde_json::json!([{"name": "etcd", "ready": false, "restartCount": 0,
            "image": "etcd", "imageID": "", "state": {"running": {}}}]);
        let exited = serde_json::json!([{"name": "etcd", "ready": false, "restartCount": 1,
            "image": "etcd", "imageID": "", "state": {"terminated": {"exitCode": 3}}}]);
        let with = |deleting: bool, containers: &serde_json::Value| {
            let mut pod = member_pod(0, "10.0.0.1", deleting);
            pod.status.as_mut().expect("status").container_statuses =
                Some(serde_json::from_value(containers.clone()).expect("statuses"));
            pod
        };
        assert!(etcd_may_answer(&with(false, &exited)), "not being deleted");
        assert!(etcd_may_answer(&with(true, &running)), "a graceful stop");
        assert!(
            !etcd_may_answer(&with(true, &exited)),
            "etcd gone, Pod going"
        );
        assert!(
            !etcd_may_answer(&member_pod(0, "10.0.0.1", true)),
            "no status of etcd"
        );
    }
}
