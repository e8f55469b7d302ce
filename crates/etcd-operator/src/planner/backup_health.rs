//! The cluster's backups as its status shows them: the newest full backup
//! and the recovery point of all its schedules, and `BackupReady`.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::context::Context;
use crate::api::ClusterBackupStatus;

/// The backup summary, `None` when no schedule names the cluster.
pub fn summary(cx: &Context<'_>) -> Option<ClusterBackupStatus> {
    let schedules = &cx.o.backup_schedules;
    if schedules.is_empty() {
        return None;
    }
    let newest = schedules
        .iter()
        .filter_map(|s| s.last_full.as_ref())
        .max_by_key(|(_, at, _)| *at);
    let recovery_point = schedules
        .iter()
        .filter_map(|s| {
            s.recovery_point
                .or_else(|| s.last_full.as_ref().map(|f| f.1))
        })
        .max();
    let mut names: Vec<String> = schedules.iter().map(|s| s.name.clone()).collect();
    names.sort();
    Some(ClusterBackupStatus {
        schedules: names,
        newest_full_backup: newest.map(|(location, _, _)| location.clone()),
        newest_full_backup_time: newest.map(|(_, at, _)| Time(*at)),
        newest_full_backup_revision: newest.and_then(|(_, _, revision)| *revision),
        recovery_point: recovery_point.map(Time),
    })
}

/// `BackupReady`: (status, reason, message).
pub fn condition(cx: &Context<'_>) -> (bool, &'static str, String) {
    let schedules = &cx.o.backup_schedules;
    if schedules.is_empty() {
        return (
            false,
            "NoBackupSchedule",
            "no EtcdBackupSchedule names this cluster: after the loss of a majority's data only a survivor can be restored".to_string(),
        );
    }
    let not_ready: Vec<String> = schedules
        .iter()
        .filter(|s| s.ready != Some(true))
        .map(|s| match s.ready {
            None => format!("{}: no backup yet", s.name),
            Some(_) => format!("{}: {}", s.name, s.message),
        })
        .collect();
    if !not_ready.is_empty() {
        return (false, "ScheduleNotReady", not_ready.join("; "));
    }
    // No age in the message: it would change the status on every pass
    // (the recovery point itself is in `status.backup`).
    (
        true,
        "BackupsFresh",
        format!(
            "every schedule is fresh: {}",
            schedules
                .iter()
                .map(|s| s.name.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    )
}

#[cfg(test)]
mod tests {
    use k8s_openapi::jiff::{SignedDuration, Timestamp};

    use super::*;
    use crate::planner::tests::sim::{Sim, Volumes};
    use crate::planner::{Observed, ScheduleSummary};

    fn observed(schedules: Vec<ScheduleSummary>) -> Observed {
        let mut o = Sim::new(3, 3, Volumes::Network).observe();
        o.backup_schedules = schedules;
        o
    }

    fn at(o: &Observed, seconds_ago: i64) -> Timestamp {
        o.now - SignedDuration::from_secs(seconds_ago)
    }

    #[test]
    fn no_schedule_is_not_ready_and_says_what_that_means() {
        let o = observed(Vec::new());
        let cx = Context::new(&o);
        assert_eq!(summary(&cx), None);
        let (ready, reason, message) = condition(&cx);
        assert!(!ready);
        assert_eq!(reason, "NoBackupSchedule");
        assert!(message.contains("only a survivor"), "{message}");
    }

    #[test]
    fn the_newest_backup_and_recovery_point_of_all_schedules_are_shown() {
        let mut o = observed(Vec::new());
        let hourly = ScheduleSummary {
            name: "hourly".into(),
            ready: Some(true),
            message: "fresh".into(),
            last_full: Some(("s3://b/full-1".into(), at(&o, 600), Some(40))),
            recovery_point: None,
            ..ScheduleSummary::default()
        };
        let continuous = ScheduleSummary {
            name: "continuous".into(),
            ready: Some(true),
            message: "fresh".into(),
            last_full: Some(("file:///b/full-0".into(), at(&o, 3000), Some(10))),
            recovery_point: Some(at(&o, 2)),
            ..ScheduleSummary::default()
        };
        o.backup_schedules = vec![hourly, continuous.clone()];
        let cx = Context::new(&o);
        let backup = summary(&cx).expect("summary");
        assert_eq!(backup.schedules, ["continuous", "hourly"]);
        assert_eq!(backup.newest_full_backup.as_deref(), Some("s3://b/full-1"));
        assert_eq!(backup.newest_full_backup_revision, Some(40));
        assert_eq!(backup.recovery_point, Some(Time(at(&o, 2))));
        let (ready, reason, message) = condition(&cx);
        assert!(ready, "{message}");
        assert_eq!(reason, "BackupsFresh");
        assert_eq!(message, "every schedule is fresh: hourly, continuous");

        // One schedule stale: not ready, and it says which and why.
        let mut stale = continuous;
        stale.ready = Some(false);
        stale.message = "incremental backup durable only up to 90s ago".into();
        o.backup_schedules.push(ScheduleSummary {
            name: "new".into(),
            ..ScheduleSummary::default()
        });
        o.backup_schedules[1] = stale;
        let cx = Context::new(&o);
        let (ready, reason, message) = condition(&cx);
        assert!(!ready);
        assert_eq!(reason, "ScheduleNotReady");
        assert!(
            message.contains("continuous: incremental backup durable only up to 90s ago"),
            "{message}"
        );
        assert!(message.contains("new: no backup yet"), "{message}");
    }
}
