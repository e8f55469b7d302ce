//! etcd flags a user may tune.

use kube::KubeSchema;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// etcd tuning. Defaults are etcd's own.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = kube::core::Rule::new("self.electionTimeoutMs >= 5 * self.heartbeatIntervalMs").message("etcd.electionTimeoutMs must be at least 5 times etcd.heartbeatIntervalMs"))]
pub struct EtcdTuning {
    /// Backend quota in bytes (`--quota-backend-bytes`); etcd raises the
    /// NOSPACE alarm beyond it. 2 GiB by default, 8 GiB is the suggested
    /// maximum.
    #[serde(default = "default_quota")]
    #[schemars(range(min = 0, max = 17179869184_i64))]
    pub quota_backend_bytes: i64,

    /// How `autoCompactionRetention` is read (`--auto-compaction-mode`).
    #[serde(default)]
    pub auto_compaction_mode: AutoCompactionMode,

    /// Auto-compaction retention (`--auto-compaction-retention`): a duration
    /// such as `1h` in `periodic` mode, a number of revisions in `revision`
    /// mode; `0` disables auto-compaction.
    #[serde(default = "default_retention")]
    #[schemars(pattern(r"^([0-9]+|([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+)$"))]
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
