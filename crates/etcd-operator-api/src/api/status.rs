//! Observed state of an `EtcdCluster`, written by the operator.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Observed state of the cluster. `observedGeneration` is written last: when
/// it equals `metadata.generation`, the rest of the status reflects the
/// current spec.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct EtcdClusterStatus {
    /// The `metadata.generation` this status was computed for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,

    /// etcd cluster ID (hex), known once the cluster has formed.
    #[serde(default, skip_serializing_if = "Option::is_none", rename = "clusterID")]
    pub cluster_id: Option<String>,

    /// Token of the current cluster incarnation (`--initial-cluster-token`).
    /// Chosen once at the first bootstrap and again only by an explicit
    /// restore, which starts a new incarnation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_token: Option<String>,

    /// Number of voting members the first bootstrap started with (every
    /// member of the first bootstrap gets the same `--initial-cluster`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bootstrap_replicas: Option<i32>,

    /// What the cluster is doing, in one word.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<Phase>,

    /// One entry per member: etcd members and the ordinals the spec wants.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub members: Vec<MemberStatus>,

    /// Number of members that are healthy.
    #[serde(default)]
    pub ready_members: i32,

    /// The etcd releases the members run: `3.6.16`, or `3.6.16→3.7.3`
    /// (what runs → what the spec asks for) while a rollout changes it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,

    /// The hash of the member Pod template the spec asks for; a member whose
    /// Pod carries another (`durable-etcd.io/pod-template-hash`) is replaced
    /// by the rollout.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_template_hash: Option<String>,

    /// Number of members whose Pod runs the current template.
    #[serde(default)]
    pub updated_members: i32,

    /// The minor release of the members' data (etcd's storage version,
    /// e.g. `3.6`): as the members report it, or once every member runs a
    /// newer line, that line (etcd raises its storage version to it
    /// seconds later). No member Pod is created with an older release.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage_version: Option<String>,

    /// The newest revision seen on any member; before a restore, compare it
    /// with the revision the restore would keep.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub newest_revision: Option<i64>,

    /// Conditions `Available`, `Degraded`, `Progressing`, `QuorumLost`,
    /// `MajorityDataLost`, `Paused`. Their messages name the members
    /// concerned.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,

    /// The last action the operator took.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_operation: Option<LastOperation>,

    /// The restore into a new incarnation that is in progress, or the last
    /// one (with `completed`). Recorded before the first step of a restore,
    /// so that it is carried through to the end after an operator restart.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restore: Option<RestoreStatus>,

    /// The loss of a majority's data that a restore waits on or answers:
    /// which members lost their data and since when, what every survivor
    /// last held, how far the backups reach, and the value of
    /// `spec.recovery.approvedLoss` that approves a restore of this very
    /// loss. Cleared once the data of a majority is no longer known lost.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data_loss: Option<DataLossStatus>,

    /// The member whose Pod the rollout replaced last, until it is back:
    /// healthy, Ready and on the current template. Meanwhile it is counted
    /// as a change in progress, not as a degraded member (for
    /// `ROLLOUT_STALL`, 2 minutes; then the rollout is halted and it is
    /// degraded like any other member).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollout: Option<RolloutStatus>,

    /// The backend quota the members run with, in bytes
    /// (`etcd.quotaBackendBytes`, or derived from `storage.size`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quota_backend_bytes: Option<i64>,

    /// Defragmentation and space recovery: what runs, what ran.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub maintenance: Option<MaintenanceStatus>,

    /// The cluster's backups, summarised from every `EtcdBackupSchedule`
    /// that names it (condition `BackupReady` says whether all are fresh).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backup: Option<ClusterBackupStatus>,

    /// The certificates of a TLS cluster (`spec.tls`): who issues them,
    /// when each expires, the last renewal asked for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<TlsStatus>,

    /// The transport stage the members are moved to: `Plaintext`, `Tls`, or
    /// while TLS is turned on for a running plaintext cluster
    /// `BridgingPeers` then `ReturningPeers`. While `updatedMembers` is
    /// below the member count, some members still run the stage before:
    /// TLS works on every member once `BridgingPeers` has rolled out (and
    /// throughout `ReturningPeers`); plain HTTP works until `Tls` has.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transport: Option<crate::transport::Transport>,
}

/// The certificates of a TLS cluster, as their Secrets hold them.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct TlsStatus {
    /// Who issues the certificates: `BuiltIn` (the cluster's own CA in
    /// Secret `<cluster>-ca`).
    pub issuer: String,

    /// When the cluster's CA expires.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_not_after: Option<Time>,

    /// Every certificate the operator keeps for the cluster, by Secret.
    #[serde(default)]
    pub certificates: Vec<CertificateStatus>,

    /// The value of the annotation `durable-etcd.io/renew-certificates`
    /// whose renewal of every certificate is done.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub renewed_for: Option<String>,

    /// The CA rotation in progress (annotation `durable-etcd.io/rotate-ca`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_rotation: Option<CaRotationStatus>,

    /// The value of the annotation `durable-etcd.io/rotate-ca` whose CA
    /// rotation is done: every step taken and every member restarted onto
    /// the new CA alone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_rotated_for: Option<String>,
}

/// A CA rotation in progress.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct CaRotationStatus {
    /// The value of `durable-etcd.io/rotate-ca` it carries out.
    pub requested_for: String,
    /// The step taken once every member runs what the last step asked for
    /// (the members restart one at a time after each step): `TrustNewCa`,
    /// `SignWithNewCa` or `RetireOldCa`; none once the last is taken and
    /// the members restart onto the new CA alone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_step: Option<super::CaRotationStep>,
    /// That step in words.
    pub message: String,
}

/// One certificate the operator keeps.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct CertificateStatus {
    /// The Secret holding it (`tls.crt`, `tls.key`, `ca.crt`).
    pub secret: String,
    /// Its serial number, lowercase hex (`openssl x509 -serial` prints it
    /// in capitals).
    pub serial: String,
    /// Start of its validity (a minute before it was issued, for clocks
    /// that lag).
    pub not_before: Time,
    /// When it expires; the operator renews it in place at two-thirds of
    /// its life.
    pub not_after: Time,
}

/// The backups of a cluster, from its schedules.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ClusterBackupStatus {
    /// The schedules that name this cluster.
    #[serde(default)]
    pub schedules: Vec<String>,

    /// Where the newest successful full backup of any schedule is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub newest_full_backup: Option<String>,

    /// When it completed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub newest_full_backup_time: Option<Time>,

    /// Its revision.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub newest_full_backup_revision: Option<i64>,

    /// The recovery point: every write acknowledged before this time is in
    /// a backup a restore can use (with continuous backup, the newest
    /// durable point of any schedule; else the newest full backup's
    /// completion).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recovery_point: Option<Time>,
}

/// Defragmentation and space recovery.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct MaintenanceStatus {
    /// `maintenance.defrag.schedule` has started every round due up to
    /// this time (the time the cluster first saw the schedule, or the
    /// latest round's start).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub defrag_scheduled_through: Option<Time>,

    /// The defragmentation round in progress: every voter, one at a time,
    /// followers first, the leader last.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub defrag_round: Option<DefragRound>,

    /// The recovery from etcd's NOSPACE alarm in progress: compaction, a
    /// defragmentation of every member, then the alarm disarmed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub space_recovery: Option<SpaceRecovery>,

    /// The last member defragmented and when.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_defrag: Option<LastDefrag>,
}

/// A defragmentation round.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct DefragRound {
    /// Why it runs (the schedule).
    pub reason: String,
    /// When it started.
    pub started: Time,
    /// The members defragmented so far (a member whose defragmentation
    /// failed counts as done; the failure is in an Event and
    /// `lastOperation`).
    #[serde(default)]
    pub defragmented: Vec<String>,
}

/// A recovery from NOSPACE.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct SpaceRecovery {
    /// When the operator first saw the alarm.
    pub started: Time,
    /// The revision the history was compacted to, once it was.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compacted_revision: Option<i64>,
    /// The members defragmented since.
    #[serde(default)]
    pub defragmented: Vec<String>,
}

/// The last defragmentation.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct LastDefrag {
    /// The member.
    pub member: String,
    /// When.
    pub time: Time,
    /// Why.
    pub reason: String,
}

/// The member the rollout is replacing.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct RolloutStatus {
    /// The member, e.g. `durable-1`.
    pub member: String,
    /// When its Pod was deleted to be replaced.
    pub started: Time,
}

/// The loss of a majority's data, as the operator knows it.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct DataLossStatus {
    /// The members whose data is known lost, by name.
    pub lost_members: Vec<String>,
    /// When the operator first saw this loss (these lost members).
    pub since: Time,
    /// The value of `spec.recovery.approvedLoss` (with `approvedIncarnation`)
    /// that approves a restore from a backup of this loss: its lost members
    /// and `since`. An approval written before the loss happened can never
    /// match it.
    pub approval: String,
    /// Every member whose volume survived, with the revision it holds.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub survivors: Vec<SurvivorRevision>,
    /// How far the backups of `spec.recovery.backup` reach, as far as the
    /// operator knows (the newest full backup or continuous segment of a
    /// schedule writing there, or the revision the source names).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backup_revision: Option<i64>,
}

/// A survivor of a majority's loss and the revision it holds.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct SurvivorRevision {
    /// The member's name.
    pub name: String,
    /// Its revision: read from it now when `readable`, else the revision
    /// it last reported (unknown when it never did).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision: Option<i64>,
    /// It answered in the operator's last look; an unreadable survivor may
    /// hold newer data than it last reported.
    pub readable: bool,
}

/// A restore into a new incarnation, from a surviving member or a backup.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct RestoreStatus {
    /// Token of the new incarnation.
    pub incarnation: String,
    /// Token of the incarnation whose majority was lost.
    pub from_incarnation: String,
    /// Cluster ID (hex) of the incarnation whose majority was lost.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        rename = "fromClusterID"
    )]
    pub from_cluster_id: Option<String>,
    /// Where the restored data comes from: the surviving member with the
    /// newest revision, or a backup (`spec.bootstrap.fromBackup`).
    #[serde(default)]
    pub source: super::RecoverySource,
    /// The member whose volume receives the restored data: the survivor, or
    /// the first member of a cluster bootstrapped from a backup.
    pub survivor: String,
    /// The survivor's ordinal.
    pub survivor_ordinal: i32,
    /// The survivor's revision when the restore was approved: the newest
    /// data kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision: Option<i64>,
    /// The members of the lost incarnation whose data was known lost when
    /// the restore started: only their PVCs are deleted by it. Every other
    /// survivor's PVC is kept until a person releases it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub lost_members: Vec<String>,
    /// The step in progress, in words.
    pub step: String,
    /// When the restore started.
    pub started: Time,
    /// When the new incarnation first served (the restore is over).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completed: Option<Time>,
}

impl RestoreStatus {
    /// Whether the restore is still in progress.
    pub fn in_progress(&self) -> bool {
        self.completed.is_none()
    }
}

/// The phase of a cluster.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// Creating the members of the first bootstrap.
    Bootstrapping,
    /// Every member is healthy and the spec is applied.
    Running,
    /// The cluster serves, but a change is in progress (scaling, replacing).
    Progressing,
    /// The cluster serves but a member is missing or unhealthy.
    Degraded,
    /// Quorum is lost; the operator recreates Pods on the existing volumes and
    /// waits for the members to return.
    QuorumLost,
    /// The data of a majority is known lost; a restore waits for the
    /// recovery policy.
    MajorityDataLost,
    /// A restore into a new incarnation is in progress.
    Recovering,
    /// `spec.paused` is set; the operator takes no action.
    Paused,
}

/// The role of a member in etcd.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
pub enum MemberRole {
    /// A voting member.
    Voter,
    /// A non-voting learner catching up before promotion.
    Learner,
}

/// The state of one member.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct MemberStatus {
    /// Member name, equal to its Pod name `<cluster>-<ordinal>`.
    pub name: String,

    /// etcd member ID (hex); unset for an ordinal that has no member yet.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,

    /// Voter or Learner; unset while the member is not in the membership.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<MemberRole>,

    /// Whether this member is the raft leader.
    #[serde(default)]
    pub leader: bool,

    /// Whether the member answers its health check.
    #[serde(default)]
    pub healthy: bool,

    /// Since when `healthy` has had its current value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub healthy_since: Option<Time>,

    /// The member's Pod, if one exists.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod: Option<String>,

    /// The node the Pod is scheduled on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,

    /// The member's PersistentVolumeClaim, if one exists.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pvc: Option<String>,

    /// The newest revision of the member's key-value store.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision: Option<i64>,

    /// The member's raft index.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub raft_index: Option<i64>,

    /// The etcd release the member runs (as it reports it, else its Pod's
    /// image).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,

    /// The size of its volume's filesystem as Kubernetes reports it (the
    /// PVC's `status.capacity`): below `spec.storage.size` while an
    /// expansion is under way.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volume_size: Option<String>,

    /// Whether its Pod was built from the current template
    /// (`status.podTemplateHash`); false while a rollout has not reached it.
    #[serde(default)]
    pub pod_up_to_date: bool,

    /// The size of its database file in bytes, free pages included.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub db_size_bytes: Option<i64>,

    /// The bytes of its database file that hold data; the rest is free
    /// pages a defragmentation gives back.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub db_size_in_use_bytes: Option<i64>,

    /// The share of its database file that is free pages, in percent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fragmented_percent: Option<i32>,

    /// The capacity of its volume's filesystem in bytes, as the Pod sees it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volume_capacity_bytes: Option<i64>,

    /// The bytes left on its volume's filesystem for etcd.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volume_available_bytes: Option<i64>,

    /// The alarms etcd raised about this member (`NOSPACE`, `CORRUPT`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub alarms: Vec<String>,

    /// What is wrong with the member, or what the operator is doing with it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// The last action the operator took.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct LastOperation {
    /// Kind of action, e.g. `CreatePod`, `RemoveMember`, `Wait`.
    #[serde(rename = "type")]
    pub type_: String,
    /// What was done and why.
    pub description: String,
    /// Whether it was issued, succeeded or failed.
    pub state: OperationState,
    /// When it was recorded.
    pub time: Time,
}

/// The outcome of the last operation.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
pub enum OperationState {
    /// Issued; the next observation shows its effect.
    Issued,
    /// Confirmed by observation.
    Succeeded,
    /// Failed; the operator retries with backoff.
    Failed,
}

/// The condition types of an `EtcdCluster`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConditionType {
    /// The cluster has quorum and serves requests.
    Available,
    /// A member is missing or unhealthy.
    Degraded,
    /// The operator is moving the cluster towards its spec.
    Progressing,
    /// Quorum is lost; the message names the members awaited.
    QuorumLost,
    /// The data of a majority of members is known lost.
    MajorityDataLost,
    /// `spec.paused` is set.
    Paused,
    /// Every backup schedule of the cluster is fresh.
    BackupReady,
    /// Volumes holding members' data that etcd found damaged are kept for
    /// a person (their PersistentVolumes, reclaim policy `Retain`).
    DamagedDataKept,
}

impl ConditionType {
    /// The `type` string of the condition.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Available => "Available",
            Self::Degraded => "Degraded",
            Self::Progressing => "Progressing",
            Self::QuorumLost => "QuorumLost",
            Self::MajorityDataLost => "MajorityDataLost",
            Self::Paused => "Paused",
            Self::BackupReady => "BackupReady",
            Self::DamagedDataKept => "DamagedDataKept",
        }
    }
}

impl EtcdClusterStatus {
    /// The condition of a type, if set.
    pub fn condition(&self, type_: ConditionType) -> Option<&Condition> {
        self.conditions.iter().find(|c| c.type_ == type_.as_str())
    }

    /// Whether a condition of a type is `True`.
    pub fn is_true(&self, type_: ConditionType) -> bool {
        self.condition(type_).is_some_and(|c| c.status == "True")
    }
}
