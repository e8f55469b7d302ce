//! Disaster recovery: what happens when the data of a majority is known lost.

use kube::KubeSchema;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::BackupSource;

/// Disaster recovery. It only ever applies when the data of a majority of
/// members is known lost (volumes deleted, node-local volumes of deleted
/// nodes, wiped or foreign data dirs), never because members are merely
/// unreachable.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = kube::core::Rule::new("!has(self.source) || self.source != 'Backup' || has(self.backup)").message("recovery.source Backup needs recovery.backup: the backups to restore from"))]
#[x_kube(validation = kube::core::Rule::new("has(self.approvedSurvivor) == has(self.approvedRevision)").message("recovery.approvedSurvivor and recovery.approvedRevision go together: the survivor and its revision as the MajorityDataLost condition names them"))]
#[x_kube(validation = kube::core::Rule::new("!has(self.approvedLoss) || has(self.approvedIncarnation)").message("recovery.approvedLoss needs recovery.approvedIncarnation: the status.clusterToken of the incarnation whose majority was lost"))]
#[x_kube(validation = kube::core::Rule::new("!has(self.approvedSurvivor) || has(self.approvedIncarnation)").message("recovery.approvedSurvivor needs recovery.approvedIncarnation: the status.clusterToken of the incarnation whose majority was lost"))]
pub struct RecoverySpec {
    /// `Manual` (default): wait until a person approves the restore by
    /// setting `approvedIncarnation` (and, from a survivor,
    /// `approvedSurvivor` and `approvedRevision`). `NewestSurvivor`: restore from the
    /// surviving member with the newest revision without waiting.
    #[serde(default)]
    pub policy: RecoveryPolicy,

    /// Where the data of a restore comes from.
    #[serde(default)]
    pub source: RecoverySource,

    /// The backups a restore with `source: Backup` reads (newest full backup
    /// and its incremental segments unless `backupName`/`revision` say
    /// otherwise). The restore goes into the volume of the survivor with
    /// the newest revision (its own data kept beside, as
    /// `data.before-<token>`), else of member 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "BackupSource")]
    pub backup: Option<BackupSource>,

    /// One-shot approval of a restore: set it to the `status.clusterToken`
    /// of the incarnation whose majority was lost. Because every restore
    /// starts a new incarnation with a new token, an approval never applies
    /// twice.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub approved_incarnation: Option<String>,

    /// With `source: Survivor`, the approval also names the survivor the
    /// restore starts from (a member name such as `main-2`) and its
    /// revision, both as the `MajorityDataLost` condition shows them: an
    /// approval prepared for one loss never approves a different one, and a
    /// person may choose a survivor while another cannot be read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 63))]
    pub approved_survivor: Option<String>,

    /// With `source: Backup`, the loss the approval answers, exactly as
    /// `status.dataLoss.approval` shows it (its lost members and when the
    /// operator first saw the loss): a backup restore approved this way
    /// runs even while a survivor cannot be read. Without it, a backup
    /// restore waits until every survivor has been read and the backups
    /// reach the newest survivor's revision, and then runs only by
    /// `policy: NewestSurvivor`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 1024))]
    pub approved_loss: Option<String>,

    /// The revision of `approvedSurvivor` that the approval accepts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub approved_revision: Option<i64>,
}

/// Who decides that a restore happens.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum RecoveryPolicy {
    /// A person approves each restore through `approvedIncarnation`.
    #[default]
    Manual,
    /// Restore from the surviving member with the newest revision as soon as
    /// the loss of a majority's data is known.
    NewestSurvivor,
}

/// Where the data of a restore comes from.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum RecoverySource {
    /// The surviving member with the newest revision.
    #[default]
    Survivor,
    /// The backup named by `backup`: choose it when the backup is newer
    /// than every survivor (compare `status.newestRevision` with the
    /// schedule's `status.incremental.durableRevision`).
    Backup,
}
