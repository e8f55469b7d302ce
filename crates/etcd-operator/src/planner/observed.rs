//! What the planner sees: the spec, the previous status, the cluster's
//! Kubernetes objects and the etcd view, at one moment.

use std::collections::BTreeMap;

use k8s_openapi::jiff::Timestamp;

use crate::api::identity::MemberIdentity;
use crate::api::{EtcdClusterSpec, EtcdClusterStatus};
use crate::etcd::ObservedEtcd;
use crate::pod_contract::Refusal;

/// One observation of a cluster, the only input of [`super::plan`].
#[derive(Clone, Debug)]
pub struct Observed {
    /// Name of the `EtcdCluster`.
    pub name: String,
    /// Its UID: the first incarnation token is derived from it, so the token
    /// is unique to this object and stable across operator restarts.
    pub uid: String,
    /// `metadata.generation`.
    pub generation: Option<i64>,
    /// The spec.
    pub spec: EtcdClusterSpec,
    /// The status as last written (default when none).
    pub status: EtcdClusterStatus,
    /// The time of the observation.
    pub now: Timestamp,
    /// Which of the cluster-wide child objects exist.
    pub children: Children,
    /// The etcd view: what the members said, if anything answered.
    pub etcd: ObservedEtcd,
    /// The PVC and Pod of every ordinal that has either.
    pub ordinals: BTreeMap<u32, OrdinalObjects>,
    /// Every Node of the Kubernetes cluster by name. A Node absent from this
    /// map has been deleted.
    pub nodes: BTreeMap<String, NodeState>,
    /// The Pod that restores a survivor's data into a new incarnation, if
    /// one exists.
    pub restore_pod: Option<RestorePodState>,
    /// Objects under a name this cluster needs that it does not own
    /// (`Kind/name`): never taken over.
    pub unowned: Vec<String>,
    /// Volumes holding members' data that etcd found damaged, set aside
    /// for a person (rule 15), each described in one line.
    pub damaged_volumes_kept: Vec<String>,
    /// Members may share a node although their volumes are (or may be)
    /// node-local: the user chose `memberSpreading: Preferred`.
    pub members_may_share_a_node: bool,
    /// Whether the volumes' StorageClass allows expansion
    /// (`allowVolumeExpansion`); `None` when the class was not read or does
    /// not exist.
    pub volume_expansion_allowed: Option<bool>,
    /// What each member Pod's `volume-usage` sidecar said about its
    /// volume's filesystem, by ordinal (absent when it did not answer).
    pub volume_usage: BTreeMap<u32, VolumeSpace>,
    /// What each member's write-ahead log holds, read from its volume
    /// while quorum is not reachable, by ordinal (rule 11).
    pub log_tails: BTreeMap<u32, LogTail>,
    /// The voters' keyspace hashes at one revision, compared: read only
    /// while etcd's CORRUPT alarm is raised (rule 15).
    pub keyspaces: Option<crate::etcd::agreement::KeyspaceComparison>,
    /// The `EtcdBackupSchedule`s of the namespace that name this cluster,
    /// as their status says.
    pub backup_schedules: Vec<ScheduleSummary>,
    /// The certificates and CAs of a TLS cluster (`None` for a plaintext
    /// cluster).
    pub tls: Option<TlsObservation>,
    /// What the members serve clients and peers on.
    pub transport: TransportObservation,
}

/// The stage of transport the members must run (see [`crate::transport`])
/// and why the spec is not followed, if it is not.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TransportObservation {
    /// The stage every member Pod must run: from the member list's peer
    /// URLs, or the one recorded when the list was not read.
    pub stage: crate::transport::Transport,
    /// Why `spec.tls` is not followed (TLS is never turned off).
    pub refused: Option<String>,
}

impl TransportObservation {
    /// Plain HTTP, as the spec asks.
    pub fn plaintext() -> Self {
        Self {
            stage: crate::transport::Transport::Plaintext,
            refused: None,
        }
    }
}

/// What a pass knows of a TLS cluster's certificates.
#[derive(Clone, Debug, PartialEq)]
pub struct TlsObservation {
    /// What `status.tls` reports.
    pub status: crate::api::TlsStatus,
    /// What the member Pods must have loaded (trust bundle and signing CA,
    /// see `CaSet::revision`): part of the Pod template hash, so each step
    /// of a CA rotation restarts the members one at a time.
    pub revision: String,
    /// The CA rotation step to take once every member runs `revision`, and
    /// the request (annotation value) it carries out.
    pub rotation: Option<(crate::tls::CaRotationStep, String)>,
}

/// What one backup schedule of the cluster reports.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ScheduleSummary {
    /// The schedule's name.
    pub name: String,
    /// Its `BackupReady` condition: `None` before it has one.
    pub ready: Option<bool>,
    /// That condition's message.
    pub message: String,
    /// Its newest successful full backup: where, when it completed, and
    /// its revision.
    pub last_full: Option<(String, Timestamp, Option<i64>)>,
    /// With continuous backup: every write acknowledged before this time
    /// is durable.
    pub recovery_point: Option<Timestamp>,
    /// With continuous backup: every revision up to this one is durable.
    pub durable_revision: Option<i64>,
    /// Where it writes.
    pub destination: Option<crate::api::BackupDestination>,
}

/// A member volume's filesystem as its Pod sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VolumeSpace {
    /// Capacity in bytes.
    pub capacity: i64,
    /// Bytes an unprivileged writer (etcd) can still use.
    pub available: i64,
}

impl VolumeSpace {
    /// The share used, in percent.
    pub fn used_percent(&self) -> i64 {
        if self.capacity <= 0 {
            return 0;
        }
        (self.capacity - self.available).max(0).saturating_mul(100) / self.capacity
    }
}

/// The state of the restore Pod.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RestorePodState {
    /// Scheduled, starting or running.
    Running,
    /// Every step succeeded: the survivor's volume holds the new
    /// incarnation's data.
    Succeeded,
    /// A step failed; the message says which.
    Failed(String),
    /// It cannot run: not schedulable (no node, no room, a volume that
    /// cannot be mounted) or an image that cannot be pulled; the reason,
    /// as Kubernetes gives it.
    CannotRun(String),
    /// Terminating.
    Deleting,
}

/// Cluster-wide child objects that exist.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Children {
    /// The headless peer Service.
    pub peer_service: bool,
    /// The client Service.
    pub client_service: bool,
    /// The PodDisruptionBudget.
    pub pdb: bool,
    /// Its `minAvailable`, when it exists and says a number.
    pub pdb_min_available: Option<i32>,
}

/// The objects of one ordinal.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct OrdinalObjects {
    /// The member's PVC.
    pub pvc: Option<PvcState>,
    /// The member's Pod.
    pub pod: Option<PodState>,
}

/// What a member's write-ahead log holds: the index and term of its last
/// entry, what raft compares to tell the more up-to-date of two logs. An
/// entry there may have been acknowledged to a client although the member
/// had not yet learnt that it was committed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LogTail {
    /// Index of the last entry.
    pub last_index: u64,
    /// Term of the last entry.
    pub last_term: u64,
    /// The commit index the member had persisted (how much of its log it
    /// knew committed).
    pub persisted_commit: u64,
}

/// A member's PersistentVolumeClaim.
#[derive(Clone, Debug, PartialEq)]
pub struct PvcState {
    /// Its phase.
    pub phase: PvcPhase,
    /// It has a deletionTimestamp (kept by `pvc-protection` while a Pod
    /// uses it).
    pub deleting: bool,
    /// The identity annotations.
    pub identity: MemberIdentity,
    /// Where its volume lives.
    pub volume: VolumeKind,
    /// The PersistentVolume it is bound to.
    pub volume_name: Option<String>,
    /// Its PersistentVolume is set aside as damaged data (rule 15): it
    /// carries the damage annotation and the reclaim policy `Retain`, so
    /// deleting this PVC keeps the volume for a person.
    pub set_aside: bool,
    /// Found by its name, not by the cluster's labels: someone removed or
    /// changed them. It is still this member's PVC; the labels go back.
    pub labels_missing: bool,
    /// A person released the data it holds (the PVC carries
    /// `durable-etcd.io/release-retained-data: "true"`): a PVC of a lost
    /// incarnation that a restore kept may now be deleted.
    pub released: bool,
    /// The size it asks for, in bytes (`spec.resources.requests.storage`).
    pub requested: Option<u64>,
    /// The size of its volume's filesystem as Kubernetes reports it, in
    /// bytes (`status.capacity.storage`).
    pub capacity: Option<u64>,
    /// The volume was expanded and its filesystem grows the next time a
    /// Pod mounts it (condition `FileSystemResizePending`).
    pub filesystem_resize_pending: bool,
}

/// Phase of a PVC.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PvcPhase {
    /// Not bound yet (e.g. `WaitForFirstConsumer`).
    Pending,
    /// Bound to a volume.
    Bound,
    /// Its volume is gone.
    Lost,
}

/// Where a member's volume lives.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum VolumeKind {
    /// Attachable from any node: the Pod may move when its node is gone.
    Network,
    /// Bound to one node (node affinity of the PV): lost with that Node.
    Local {
        /// The node holding the data.
        node: String,
    },
    /// Not bound yet, or not known.
    Unknown,
}

/// A member's Pod.
#[derive(Clone, Debug, PartialEq)]
pub struct PodState {
    /// Its phase.
    pub phase: PodPhase,
    /// The Ready condition is true.
    pub ready: bool,
    /// It has a deletionTimestamp (Terminating).
    pub deleting: bool,
    /// The node it is bound to.
    pub node: Option<String>,
    /// The `member-guard` init container refused the data dir.
    pub guard_refusal: Option<GuardRefusal>,
    /// The etcd version of its image.
    pub version: Option<String>,
    /// The hash of the Pod template it was built from
    /// (`durable-etcd.io/pod-template-hash`); `None` for a Pod built by a
    /// release that did not record it.
    pub template_hash: Option<String>,
    /// Found by its name, not by the cluster's labels.
    pub labels_missing: bool,
    /// Its kubelet reports the etcd container not running (waiting to
    /// restart, or terminated): etcd fails to start, as opposed to a Pod
    /// whose node stopped reporting, which keeps its last state.
    pub etcd_not_running: bool,
    /// The labels and annotations of `spec.pod` it carries, by the keys
    /// recorded as applied (`durable-etcd.io/template-metadata`); `None`
    /// when nothing is recorded.
    pub template_metadata: Option<TemplateMetadata>,
    /// etcd refused to serve this member's data because it differs from its
    /// peers' (etcd's initial corruption check), in etcd's words: the data
    /// is damaged but present (rule 15).
    pub damaged_data: Option<String>,
}

/// The labels and annotations of `spec.pod` on a Pod.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TemplateMetadata {
    /// Labels.
    pub labels: std::collections::BTreeMap<String, String>,
    /// Annotations.
    pub annotations: std::collections::BTreeMap<String, String>,
}

/// Phase of a Pod.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PodPhase {
    /// Not running yet (unscheduled, pulling, init containers).
    Pending,
    /// Running.
    Running,
    /// Terminated.
    Finished,
    /// The node stopped reporting.
    Unknown,
}

/// Why the `member-guard` refused to start etcd on a data dir, as its
/// report says. Whatever the kind, the data in the PVC is not (or no
/// longer) this member's.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GuardRefusal {
    /// The kind of refusal; `None` when the guard's report could not be
    /// read (another version, a guard from before reports, no message):
    /// the refusal stands on its exit code, and `detail` says what is known.
    pub kind: Option<Refusal>,
    /// The guard's own words.
    pub detail: String,
}

impl GuardRefusal {
    /// A short explanation for status and events.
    pub fn describe(&self) -> String {
        match self.kind {
            Some(kind @ (Refusal::DataLost | Refusal::DataWithoutMarker)) => {
                kind.summary().to_string()
            }
            Some(kind) => format!("{}: {}", kind.summary(), self.detail),
            None => self.detail.clone(),
        }
    }
}

/// The state of a Node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeState {
    /// The Ready condition is true.
    pub ready: bool,
    /// When the Ready condition last became false or unknown.
    pub not_ready_since: Option<Timestamp>,
    /// It carries the `node.kubernetes.io/out-of-service` taint: a person
    /// confirmed it is shut down.
    pub out_of_service: bool,
}

impl Observed {
    /// The objects of an ordinal (empty when it has none).
    pub fn objects(&self, ordinal: u32) -> OrdinalObjects {
        self.ordinals.get(&ordinal).cloned().unwrap_or_default()
    }

    /// Whether a node is confirmed gone: deleted, or tainted out-of-service.
    pub fn node_confirmed_gone(&self, node: &str) -> bool {
        self.nodes.get(node).is_none_or(|n| n.out_of_service)
    }

    /// Whether a node is deleted.
    pub fn node_deleted(&self, node: &str) -> bool {
        !self.nodes.contains_key(node)
    }
}
