//! Routine care of a running cluster: defragmentation.

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::KubeSchema;
use serde::{Deserialize, Serialize};

use super::backup_schedule::CRON_SHAPE;
use super::rules;

/// Maintenance the operator carries out on a running cluster.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct MaintenanceSpec {
    /// Defragmentation: giving back to the filesystem the space etcd's
    /// database file keeps after compactions.
    #[serde(default)]
    pub defrag: DefragSpec,
}

/// When members are defragmented. Always one member at a time, followers
/// first, the leader last after leadership moved away, and only while
/// every voter is healthy and no rollout or replacement runs. A member
/// that does not come back healthy stops the sequence.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct DefragSpec {
    /// Defragment every member on this cron schedule (UTC, five fields
    /// such as `0 3 * * *`, or `@daily`), whatever its fragmentation.
    /// Unset: no scheduled defragmentation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 128))]
    #[x_kube(validation = rules::rule(format!("self.matches('{CRON_SHAPE}')"), "maintenance.defrag.schedule must be a cron expression of five fields (minute hour day-of-month month day-of-week) such as '0 3 * * *', or @hourly, @daily, @weekly, @monthly, @yearly"))]
    pub schedule: Option<String>,

    /// Defragment a member by itself once this share of its database file
    /// is free pages (and at least `minReclaimable`), or once its file
    /// reaches 80 % of the quota with at least `minReclaimable` free.
    /// Percent, 1 to 100; 0 turns defragmentation by fragmentation off.
    #[serde(default = "default_fragmented_percent")]
    #[schemars(range(min = 0, max = 100))]
    pub fragmented_percent: i32,

    /// The least space a defragmentation by fragmentation must give back
    /// (a quantity such as `64Mi`).
    #[serde(default = "default_min_reclaimable")]
    #[schemars(extend("nullable" = false))]
    #[x_kube(validation = rules::rule("isQuantity(string(self)) && quantity(string(self)).isGreaterThan(quantity('0'))", "maintenance.defrag.minReclaimable must be a positive quantity such as 64Mi"))]
    pub min_reclaimable: Quantity,
}

fn default_fragmented_percent() -> i32 {
    50
}

fn default_min_reclaimable() -> Quantity {
    Quantity("64Mi".to_string())
}

impl Default for DefragSpec {
    fn default() -> Self {
        Self {
            schedule: None,
            fragmented_percent: default_fragmented_percent(),
            min_reclaimable: default_min_reclaimable(),
        }
    }
}
