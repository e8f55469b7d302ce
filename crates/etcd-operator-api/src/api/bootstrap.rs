//! Where the first data of a cluster comes from, and the backup a restore
//! reads.

use kube::KubeSchema;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{BackupDestination, rules};

/// How a new cluster is bootstrapped. Read only before the cluster has ever
/// formed; it cannot be added, changed or removed afterwards.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct BootstrapSpec {
    /// Start from a backup instead of an empty keyspace: the full snapshot
    /// is restored into member 0, the incremental segments after it are
    /// replayed (up to `revision`), then member 0 starts alone as a new
    /// cluster and the others join one at a time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "BackupSource")]
    pub from_backup: Option<BackupSource>,
}

/// A backup to restore: a full snapshot and the incremental segments after
/// it, from the folder of one cluster at a destination.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct BackupSource {
    /// Where the backups were written (as in the `EtcdBackup` or
    /// `EtcdBackupSchedule` that wrote them). Its credentials Secret is read
    /// in this cluster's namespace.
    pub destination: BackupDestination,

    /// Name of the cluster the backups were taken of (default: this
    /// cluster's name). Backups live under `<prefix>/<namespace>/<cluster>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 63))]
    #[x_kube(validation = rules::cluster_name_length("self", "fromBackup.clusterName"))]
    #[x_kube(validation = rules::cluster_name_shape("self", "fromBackup.clusterName"))]
    pub cluster_name: Option<String>,

    /// Namespace of the cluster the backups were taken of (default: this
    /// cluster's namespace).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 63))]
    #[x_kube(validation = rules::rule(format!("self.matches('{}')", rules::DNS1123_LABEL), "the namespace of a backup source must be a namespace name: lower-case letters, digits and '-', starting and ending with a letter or digit"))]
    pub namespace: Option<String>,

    /// Name of the full backup to start from (`full-<time>-r<revision>`, as
    /// in `EtcdBackup.status.location` without the suffix); the newest one
    /// when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 253))]
    #[x_kube(validation = rules::rule("self.matches('^full-[0-9A-Za-z.]+-r[0-9]+$')", "backupName must name a full backup as full-<time>-r<revision>, e.g. full-20260301T120000.000Z-r4213 (EtcdBackup.status.location without its suffix)"))]
    pub backup_name: Option<String>,

    /// Replay incremental segments up to this revision (inclusive); every
    /// contiguous segment when unset. A revision beyond the last segment is
    /// refused before any member is touched.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub revision: Option<i64>,
}

impl BackupSource {
    /// The namespace and cluster name of the backups' folder, defaulting to
    /// the restoring cluster's own.
    pub fn folder_of<'a>(&'a self, namespace: &'a str, cluster: &'a str) -> (&'a str, &'a str) {
        (
            self.namespace.as_deref().unwrap_or(namespace),
            self.cluster_name.as_deref().unwrap_or(cluster),
        )
    }
}
