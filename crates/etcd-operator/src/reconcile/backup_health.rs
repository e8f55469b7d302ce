//! The backup schedules of a cluster, as their status reports them: what
//! the cluster's own status summarises (newest full backup, recovery
//! point, `BackupReady`).

use k8s_openapi::jiff::Timestamp;
use kube::api::ListParams;
use kube::{Api, Client, ResourceExt};

use super::error::ObserveError;
use crate::api::EtcdBackupSchedule;
use crate::planner::ScheduleSummary;

/// The schedules of `namespace` whose `clusterName` is `cluster`.
pub async fn schedules_of(
    client: &Client,
    namespace: &str,
    cluster: &str,
) -> Result<Vec<ScheduleSummary>, ObserveError> {
    let api: Api<EtcdBackupSchedule> = Api::namespaced(client.clone(), namespace);
    let list = api
        .list(&ListParams::default())
        .await
        .map_err(|source| ObserveError::List {
            kind: "etcdbackupschedules",
            cluster: cluster.to_owned(),
            source,
        })?;
    Ok(list
        .items
        .iter()
        .filter(|s| s.spec.cluster_name == cluster)
        .map(summary)
        .collect())
}

/// One schedule's summary.
pub fn summary(schedule: &EtcdBackupSchedule) -> ScheduleSummary {
    let status = schedule.status.clone().unwrap_or_default();
    let ready = status.conditions.iter().find(|c| c.type_ == "BackupReady");
    let last_full = status
        .last_successful_time
        .as_ref()
        .map(|t| t.0)
        .zip(status.last_successful_location.clone())
        .map(|(at, location): (Timestamp, String)| (location, at, status.last_successful_revision));
    ScheduleSummary {
        name: schedule.name_any(),
        ready: ready.map(|c| c.status == "True"),
        message: ready.map(|c| c.message.clone()).unwrap_or_default(),
        last_full,
        recovery_point: status
            .incremental
            .as_ref()
            .and_then(|i| i.recovery_point.as_ref())
            .map(|t| t.0),
    }
}
