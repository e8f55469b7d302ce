//! The backup schedules of a cluster, as their status reports them: what
//! the cluster's own status summarises (newest full backup, recovery
//! point, `BackupReady`).
//!
//! Listed untyped and decoded one by one: a schedule this operator cannot
//! decode (a newer CRD version's field) is reported as such, and never
//! stops the cluster's pass (durability rule 8).

use k8s_openapi::jiff::Timestamp;
use kube::api::{ApiResource, DynamicObject, ListParams};
use kube::{Api, ResourceExt};

use super::error::ObserveError;
use super::watched::Reads;
use crate::api::EtcdBackupSchedule;
use crate::controller_kit::unreadable;
use crate::planner::ScheduleSummary;

/// The schedules of `namespace` whose `clusterName` is `cluster`.
pub async fn schedules_of(
    reads: Reads<'_>,
    namespace: &str,
    cluster: &str,
) -> Result<Vec<ScheduleSummary>, ObserveError> {
    let objects: Vec<DynamicObject> = match reads {
        Reads::Fresh(client) => {
            let api: Api<DynamicObject> = Api::namespaced_with(
                client.clone(),
                namespace,
                &ApiResource::erase::<EtcdBackupSchedule>(&()),
            );
            api.list(&ListParams::default())
                .await
                .map_err(|source| ObserveError::List {
                    kind: "etcdbackupschedules",
                    cluster: cluster.to_owned(),
                    source,
                })?
                .items
        }
        Reads::Watched(_, copies) => copies
            .schedules
            .state_filter(|o| o.namespace().as_deref() == Some(namespace))
            .into_iter()
            .map(std::sync::Arc::unwrap_or_clone)
            .collect(),
    };
    Ok(objects
        .iter()
        .filter(|o| o.data["spec"]["clusterName"].as_str() == Some(cluster))
        .map(summary_of_object)
        .collect())
}

/// The summary of a listed schedule, or what keeps it from being read.
fn summary_of_object(object: &DynamicObject) -> ScheduleSummary {
    match unreadable::decode::<EtcdBackupSchedule>(object) {
        Ok(schedule) => summary(&schedule),
        Err(unreadable) => ScheduleSummary {
            name: object.name_any(),
            ready: Some(false),
            message: format!(
                "this operator cannot read it (at {}: {})",
                unreadable.path, unreadable.message
            ),
            ..ScheduleSummary::default()
        },
    }
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
        durable_revision: status.incremental.as_ref().and_then(|i| i.durable_revision),
        destination: Some(schedule.spec.destination.clone()),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn object(spec: serde_json::Value, status: serde_json::Value) -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": "durable-etcd.io/v1alpha1",
            "kind": "EtcdBackupSchedule",
            "metadata": { "name": "nightly", "namespace": "prod" },
            "spec": spec,
            "status": status,
        }))
        .expect("an object")
    }

    #[test]
    fn a_schedule_this_operator_cannot_read_is_reported_not_fatal() {
        let unreadable = object(
            json!({ "clusterName": "main", "schedule": "@daily", "destination": { "local": { "path": "/b" } }, "retention": { "count": "many" } }),
            json!({}),
        );
        let summary = summary_of_object(&unreadable);
        assert_eq!(summary.name, "nightly");
        assert_eq!(summary.ready, Some(false));
        assert!(
            summary.message.contains("cannot read"),
            "{}",
            summary.message
        );
    }

    #[test]
    fn a_readable_schedule_gives_its_newest_backup_and_condition() {
        let readable = object(
            json!({ "clusterName": "main", "schedule": "@daily", "destination": { "local": { "path": "/b" } } }),
            json!({
                "lastSuccessfulTime": "2026-12-01T10:00:00Z",
                "lastSuccessfulLocation": "file:///b/full-1",
                "lastSuccessfulRevision": 42,
                "conditions": [{ "type": "BackupReady", "status": "True", "reason": "Fresh", "message": "fresh", "lastTransitionTime": "2026-12-01T10:00:00Z" }],
            }),
        );
        let summary = summary_of_object(&readable);
        assert_eq!(summary.ready, Some(true));
        let (location, _, revision) = summary.last_full.expect("a full backup");
        assert_eq!(location, "file:///b/full-1");
        assert_eq!(revision, Some(42));
    }
}
