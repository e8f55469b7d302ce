//! etcd flags a user may tune.

use kube::KubeSchema;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::rules;

/// The smallest `etcd.quotaBackendBytes`: 16 MiB.
pub const MIN_QUOTA: i64 = 16 * 1024 * 1024;
/// The largest `etcd.quotaBackendBytes`: 8 GiB, etcd's suggested maximum.
pub const MAX_QUOTA: i64 = 8 * 1024 * 1024 * 1024;

/// etcd tuning. Defaults are etcd's own, except the quota (derived from
/// the volume) and auto-compaction (on).
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = kube::core::Rule::new("self.electionTimeoutMs >= 5 * self.heartbeatIntervalMs").message("etcd.electionTimeoutMs must be at least 5 times etcd.heartbeatIntervalMs"))]
#[x_kube(validation = rules::rule("self.autoCompactionMode != 'revision' || self.autoCompactionRetention.matches('^[0-9]+$')", "in revision mode etcd.autoCompactionRetention is a number of revisions such as 1000, not a duration"))]
pub struct EtcdTuning {
    /// Backend quota in bytes (`--quota-backend-bytes`); etcd raises the
    /// NOSPACE alarm beyond it and the cluster only serves reads and
    /// deletes until the space is recovered (the operator compacts,
    /// defragments and disarms, member by member).
    ///
    /// `0` (the default): derived from the volumes the members have (the
    /// smallest one's capacity, at most `storage.size`) so that a volume
    /// always has room for the database, a defragmentation's copy of it and
    /// etcd's write-ahead log: (size − 256 MiB) / 2, from 16 MiB to 8 GiB
    /// (384 MiB for 1Gi, 3.9 GiB for 8Gi); it grows once every volume has
    /// grown, never for a size the StorageClass refused.
    ///
    /// Otherwise from 16 MiB to 8 GiB, and at most that share of the volume
    /// (refused otherwise). The floor is a sanity bound, not etcd's: the
    /// database file counts every page, freed ones included, until a
    /// defragmentation, so a quota of a few KiB (`100` is 100 bytes, most
    /// likely a units mistake) makes the first writes raise NOSPACE. The
    /// ceiling: 8 GiB is etcd's documented suggested maximum; snapshots,
    /// backups, restores and member replacement all grow with the database.
    #[serde(default)]
    #[x_kube(validation = rules::rule(format!("self == 0 || (self >= {MIN_QUOTA} && self <= {MAX_QUOTA})"), "etcd.quotaBackendBytes must be 0 (derived from storage.size) or between 16 MiB (16777216) and 8 GiB (8589934592), etcd's suggested maximum"))]
    pub quota_backend_bytes: i64,

    /// How `autoCompactionRetention` is read (`--auto-compaction-mode`).
    #[serde(default)]
    pub auto_compaction_mode: AutoCompactionMode,

    /// Auto-compaction retention (`--auto-compaction-retention`): a duration
    /// such as `1h` in `periodic` mode, a number of revisions in `revision`
    /// mode; `0` disables auto-compaction (history then grows until the
    /// quota is reached). Default `10m`: ten minutes of history, twice
    /// what a Kubernetes API server keeps (it compacts every 5 minutes
    /// itself), enough for a watcher to resume after a short outage.
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

/// The part of a member's volume kept for etcd's write-ahead log and
/// snapshot files (four 64 MiB WAL segments).
pub const WAL_RESERVE: i64 = 256 * 1024 * 1024;

/// The quota a volume of `volume_bytes` holds with headroom: the database,
/// a defragmentation's copy of it and [`WAL_RESERVE`], within
/// [`MIN_QUOTA`]..=[`MAX_QUOTA`].
pub fn quota_for_volume(volume_bytes: u64) -> i64 {
    let volume = i64::try_from(volume_bytes).unwrap_or(i64::MAX);
    (volume.saturating_sub(WAL_RESERVE) / 2).clamp(MIN_QUOTA, MAX_QUOTA)
}

/// Whether a quota fits a volume with that headroom.
pub fn quota_fits_volume(quota: i64, volume_bytes: u64) -> bool {
    let volume = i128::from(volume_bytes);
    i128::from(quota) * 2 + i128::from(WAL_RESERVE) <= volume
}

fn default_retention() -> String {
    "10m".to_string()
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
            quota_backend_bytes: 0,
            auto_compaction_mode: AutoCompactionMode::default(),
            auto_compaction_retention: default_retention(),
            snapshot_count: default_snapshot_count(),
            heartbeat_interval_ms: default_heartbeat(),
            election_timeout_ms: default_election(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_derived_quota_leaves_room_for_a_defragmentation_and_the_wal() {
        const MI: u64 = 1 << 20;
        assert_eq!(quota_for_volume(1024 * MI), 384 << 20);
        assert_eq!(quota_for_volume(8192 * MI), 3968 << 20);
        assert_eq!(quota_for_volume(256 * MI), MIN_QUOTA, "the floor");
        assert_eq!(quota_for_volume(64 * 1024 * MI), MAX_QUOTA, "the ceiling");
        for volume in [512 * MI, 1024 * MI, 10 * 1024 * MI] {
            assert!(quota_fits_volume(quota_for_volume(volume), volume));
        }
        assert!(
            !quota_fits_volume(2 << 30, 1024 * MI),
            "the old 2 GiB default on 1Gi"
        );
    }
}
