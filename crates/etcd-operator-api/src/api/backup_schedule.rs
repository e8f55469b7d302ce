//! The `EtcdBackupSchedule` kind: full backups of an `EtcdCluster` on a cron
//! schedule, with retention, and optional continuous incremental backup.
//!
//! A resource of its own rather than a field of `EtcdCluster.spec`: a
//! cluster can have several schedules (hourly to a local volume, daily to
//! another region), changing a schedule does not bump the generation the
//! member reconciler acts on, backup status does not churn the cluster's
//! status, and RBAC can grant backup administration without the right to
//! change members.

#![allow(clippy::duplicated_attributes)]

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::{CustomResource, KubeSchema, core::Duration};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{BackupDestination, rules};

/// The shape of a schedule: five whitespace-separated fields of cron
/// characters (digits, letters for month and day names, `* , - / ? L W #`),
/// or a nickname. The fields' ranges are checked by the controller.
pub const CRON_SHAPE: &str = "^(@(yearly|annually|monthly|weekly|daily|hourly)|[0-9A-Za-z*?,/#-]+([ \t]+[0-9A-Za-z*?,/#-]+){4})$";

/// Full backups of an `EtcdCluster` on a cron schedule.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "durable-etcd.io",
    version = "v1alpha1",
    kind = "EtcdBackupSchedule",
    plural = "etcdbackupschedules",
    shortname = "etcdbs",
    namespaced,
    status = "EtcdBackupScheduleStatus",
    derive = "PartialEq",
    doc = "Full backups of an EtcdCluster on a cron schedule, with retention by count and age.",
    printcolumn(
        name = "Cluster",
        type_ = "string",
        json_path = ".spec.clusterName",
        description = "The EtcdCluster backed up"
    ),
    printcolumn(
        name = "Schedule",
        type_ = "string",
        json_path = ".spec.schedule",
        description = "Cron schedule (UTC)"
    ),
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"BackupReady\")].status",
        description = "Whether the newest backup is recent enough"
    ),
    printcolumn(
        name = "Last",
        type_ = "date",
        json_path = ".status.lastSuccessfulTime",
        description = "Time of the last successful backup"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct EtcdBackupScheduleSpec {
    /// Name of the `EtcdCluster` to back up, in the same namespace.
    #[schemars(length(min = 1, max = 63))]
    #[x_kube(validation = rules::cluster_name_length("self", "clusterName"))]
    #[x_kube(validation = rules::cluster_name_shape("self", "clusterName"))]
    pub cluster_name: String,

    /// Cron expression in UTC, five fields (`minute hour day-of-month month
    /// day-of-week`), e.g. `0 * * * *` for hourly, or one of `@hourly`,
    /// `@daily`, `@weekly`, `@monthly`, `@yearly`. No seconds field: a
    /// six-field expression would take a full snapshot every second.
    /// Admission checks the shape; a value out of range (`61 * * * *`) is
    /// reported in status (condition `BackupReady`, reason
    /// `InvalidSchedule`).
    #[schemars(length(min = 1, max = 128))]
    #[x_kube(validation = rules::rule(format!("self.matches('{CRON_SHAPE}')"), "schedule must be a cron expression of five fields (minute hour day-of-month month day-of-week) such as '0 * * * *', or @hourly, @daily, @weekly, @monthly, @yearly; seconds are not supported"))]
    pub schedule: String,

    /// Where the snapshots and their metadata are written.
    pub destination: BackupDestination,

    /// Which backups of this schedule are kept.
    #[serde(default)]
    pub retention: BackupRetention,

    /// Continuous incremental backup between full snapshots.
    #[serde(default)]
    pub incremental: IncrementalBackup,

    /// Stops taking new backups; retention still applies.
    #[serde(default)]
    pub suspend: bool,
}

/// Retention of full backups. A backup is deleted when it is beyond `count`
/// newest or older than `maxAge`; the newest successful backup is never
/// deleted.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct BackupRetention {
    /// How many of the newest backups to keep (default 7, at most 10000).
    #[serde(default = "default_retention_count")]
    #[schemars(range(min = 1, max = 10000))]
    pub count: u32,

    /// Delete backups older than this Go duration (e.g. `168h`); unset keeps
    /// them by count alone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 64))]
    #[x_kube(validation = rules::go_duration("retention.maxAge", "0s", true, "168h"))]
    pub max_age: Option<Duration>,
}

fn default_retention_count() -> u32 {
    7
}

impl Default for BackupRetention {
    fn default() -> Self {
        Self {
            count: default_retention_count(),
            max_age: None,
        }
    }
}

/// Continuous incremental backup: after each full snapshot the operator
/// watches the cluster from the snapshot's revision and writes ordered
/// segments, so a restore loses at most about one interval of writes.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct IncrementalBackup {
    /// Whether to write incremental segments.
    #[serde(default)]
    pub enabled: bool,

    /// Longest time a write waits to be stored, the recovery point
    /// objective (Go duration, default `4s`, at least `1s`): a segment is
    /// closed early enough for its upload to end within it. While writes
    /// go on, each interval costs two object-store requests (the segment
    /// and its metadata): about 43,200 a day at `4s`, 8,640 at `20s`.
    #[serde(default = "default_segment_interval")]
    #[schemars(length(max = 64))]
    #[x_kube(validation = rules::go_duration("incremental.interval", "1s", false, "4s"))]
    pub interval: Duration,

    /// A segment is closed early when it reaches this many bytes (default
    /// 16 MiB; 4 KiB to 256 MiB: the open segment is held in the
    /// operator's memory until it is uploaded).
    #[serde(default = "default_max_segment_bytes")]
    #[schemars(range(min = 4096, max = 268435456))]
    pub max_segment_bytes: i64,
}

fn default_segment_interval() -> Duration {
    std::time::Duration::from_secs(4).into()
}

fn default_max_segment_bytes() -> i64 {
    16 * 1024 * 1024
}

impl Default for IncrementalBackup {
    fn default() -> Self {
        Self {
            enabled: false,
            interval: default_segment_interval(),
            max_segment_bytes: default_max_segment_bytes(),
        }
    }
}

/// Observed state of a backup schedule.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct EtcdBackupScheduleStatus {
    /// The `metadata.generation` this status was computed for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,

    /// When the schedule last started a backup.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_scheduled_time: Option<Time>,

    /// When the next backup is due.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_scheduled_time: Option<Time>,

    /// Completion time of the last successful full backup.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_successful_time: Option<Time>,

    /// Location of the last successful full backup.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_successful_location: Option<String>,

    /// Revision of the last successful full backup.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_successful_revision: Option<i64>,

    /// Compressed size in bytes of the last successful full backup.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_successful_stored_bytes: Option<i64>,

    /// Duration in seconds of the last successful full backup.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_successful_duration_seconds: Option<f64>,

    /// Number of full backups currently kept at the destination.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backups_kept: Option<i32>,

    /// Why the last attempt failed; cleared by the next success.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,

    /// Continuous incremental backup, while `spec.incremental.enabled`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub incremental: Option<IncrementalBackupStatus>,

    /// Condition `BackupReady`: true while the newest successful backup is
    /// no older than twice the schedule's period and, with incremental
    /// backup enabled, everything written is durable up to at most three
    /// intervals ago; its message says how old it is or what fails.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

/// Observed state of continuous incremental backup: the chain of segments
/// after the newest full backup, how much could be lost right now, and the
/// gaps seen.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct IncrementalBackupStatus {
    /// Base name of the full backup the current chain of segments follows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base: Option<String>,

    /// Revision of that full backup.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base_revision: Option<i64>,

    /// When the newest durable segment was closed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_segment_time: Option<Time>,

    /// Last revision held by the newest durable segment.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_segment_revision: Option<i64>,

    /// Segments in the current chain.
    #[serde(default)]
    pub segments: i64,

    /// Revision up to which every write is durable (full backup plus
    /// segments); an idle cluster moves it through watch progress.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub durable_revision: Option<i64>,

    /// Seconds of acknowledged writes a restore would lose right now: the
    /// age of the oldest write the watch delivered and is not yet stored;
    /// 0 when etcd answered within two intervals that every write up to
    /// its revision is stored; else the time since its last answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub loss_window_seconds: Option<i64>,

    /// The recovery point: every write acknowledged before this time is
    /// durable (a restore brings it back).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recovery_point: Option<Time>,

    /// Gaps seen since the schedule was created: a chain that cannot be
    /// continued (history compacted, segment missing or corrupt, cluster
    /// replaced). Each one starts a new full backup at once.
    #[serde(default)]
    pub gaps: i64,

    /// What the last gap was.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_gap: Option<String>,

    /// When the last gap was seen.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_gap_time: Option<Time>,

    /// Why the watcher last failed; cleared by the next durable point
    /// (written as null then, so that a merge patch removes it).
    #[serde(default)]
    pub last_error: Option<String>,
}
