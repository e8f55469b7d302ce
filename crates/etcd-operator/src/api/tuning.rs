//! etcd flags a user may tune.

use kube::KubeSchema;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::rules;

/// The smallest `etcd.quotaBackendBytes`: 16 MiB.
pub const MIN_QUOTA: i64 = 16 * 1024 * 1024;
/// The largest `etcd.quotaBackendBytes`: 8 GiB, etcd's suggested maximum.
pub const MAX_QUOTA: i64 = 8 * 1024 * 1024 * 1024;

/// etcd tuning. Defaults are etcd's own.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = kube::core::Rule::new("self.electionTimeoutMs >= 5 * self.heartbeatIntervalMs").message("etcd.electionTimeoutMs must be at least 5 times etcd.heartbeatIntervalMs"))]
#[x_kube(validation = rules::rule("self.autoCompactionMode != 'revision' || self.autoCompactionRetention.matches('^[0-9]+$')", "in revision mode etcd.autoCompactionRetention is a number of revisions such as 1000, not a duration"))]
pub struct EtcdTuning {
    /// Backend quota in bytes (`--quota-backend-bytes`); etcd raises the
    /// NOSPACE alarm beyond it and the cluster only serves reads and
    /// deletes until a person compacts, defragments and disarms it.
    /// 2 GiB by default; from 16 MiB to 8 GiB. The floor is a sanity bound,
    /// not etcd's: etcd takes any value, but the database file counts every
    /// page, freed ones included, until a defragmentation, so a quota of a
    /// few KiB (`100` is 100 bytes, most likely a units mistake) makes the
    /// first writes raise NOSPACE and leaves the cluster read-only. (etcd
    /// reads 0 as its 2 GiB default, which this field already is.) The
    /// ceiling: 8 GiB is etcd's documented suggested maximum (etcd warns at
    /// startup beyond it); snapshots, backups, restores and member
    /// replacement all grow with the database.
    #[serde(default = "default_quota")]
    #[x_kube(validation = rules::rule(format!("self >= {MIN_QUOTA} && self <= {MAX_QUOTA}"), "etcd.quotaBackendBytes must be between 16 MiB (16777216) and 8 GiB (8589934592), etcd's suggested maximum"))]
    pub quota_backend_bytes: i64,

    /// How `autoCompactionRetention` is read (`--auto-compaction-mode`).
    #[serde(default)]
    pub auto_compaction_mode: AutoCompactionMode,

    /// Auto-compaction retention (`--auto-compaction-retention`): a duration
    /// such as `1h` in `periodic` mode, a number of revisions in `revision`
    /// mode; `0` disables auto-compaction.
    #[serde(default = "default_retention")]
    #[schemars(length(max = 64))]
    #[x_kube(validation = rules::rule(format!("self.matches('^[0-9]+$') || self.matches('{}')", rules::GO_DURATION), "etcd.autoCompactionRetention must be a number (hours in periodic mode, revisions in revision mode) or a Go duration such as 1h"))]
    pub auto_compaction_retention: String,

    /// Committed transactions between two snapshots of the raft log
    /// (`--snapshot-count`).
    #[serde(default = "default_snapshot_count")]
    #[schemars(range(min = 1))]
    pub snapshot_count: i64,

    /// Heartbeat interval in milliseconds (`--heartbeat-interval`).
    #[serde(default = "default_heartbeat")]
    #[schemars(range(min = 10, max = 10000))]
    pub heartbeat_interval_ms: i32,

    /// Election timeout in milliseconds (`--election-timeout`); at least 5
    /// times the heartbeat interval.
    #[serde(default = "default_election")]
    #[schemars(range(min = 50, max = 50000))]
    pub election_timeout_ms: i32,
}

/// Interpretation of `autoCompactionRetention`.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum AutoCompactionMode {
    /// Keep the history of a time window.
    #[default]
    Periodic,
    /// Keep a number of revisions.
    Revision,
}

impl AutoCompactionMode {
    /// The value of `--auto-compaction-mode`.
    pub fn flag_value(self) -> &'static str {
        match self {
            Self::Periodic => "periodic",
            Self::Revision => "revision",
        }
    }
}

fn default_quota() -> i64 {
    2 * 1024 * 1024 * 1024
}

fn default_retention() -> String {
    "0".to_string()
}

fn default_snapshot_count() -> i64 {
    10_000
}

fn default_heartbeat() -> i32 {
    100
}

fn default_election() -> i32 {
    1000
}

impl Default for EtcdTuning {
    fn default() -> Self {
        Self {
            quota_backend_bytes: default_quota(),
            auto_compaction_mode: AutoCompactionMode::default(),
            auto_compaction_retention: default_retention(),
            snapshot_count: default_snapshot_count(),
            heartbeat_interval_ms: default_heartbeat(),
            election_timeout_ms: default_election(),
        }
    }
}
