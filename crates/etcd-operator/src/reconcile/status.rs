//! The status write of an `EtcdCluster`: one server-side apply of the whole
//! status on the status subresource, skipped when nothing but timestamps
//! would change ([`crate::controller_kit::status_writer`], shared with the
//! backup controllers). The conditions come from the planner
//! ([`crate::planner::status`]); here they only keep their transition times.
//!
//! `observedGeneration` is set last: only once the pass that planned for a
//! generation has finished its step without error. A failed step leaves the
//! previous value, so clients never read "done" for a spec the operator has
//! not acted on.
//!
//! The write is conditional on the resourceVersion the pass planned from, so
//! a status planned from an older object never replaces a newer one.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::{Api, ResourceExt};

use super::FIELD_MANAGER;
use crate::api::{EtcdCluster, EtcdClusterStatus};
use crate::controller_kit::conditions::{WithConditions, keep_transition_times};
use crate::controller_kit::status_writer::{Replaces, StatusError, StatusWriter};

/// The writer of `EtcdCluster` statuses.
const WRITER: StatusWriter = StatusWriter::new(FIELD_MANAGER);

impl WithConditions for EtcdClusterStatus {
    fn conditions(&self) -> &[Condition] {
        &self.conditions
    }

    fn conditions_mut(&mut self) -> &mut Vec<Condition> {
        &mut self.conditions
    }
}

/// Completes the planned status: timestamps of unchanged conditions and of
/// an unchanged last operation are kept from `current`, and
/// `observedGeneration` advances only if `step_succeeded`.
pub fn finalize(
    current: Option<&EtcdClusterStatus>,
    mut desired: EtcdClusterStatus,
    generation: Option<i64>,
    step_succeeded: bool,
) -> EtcdClusterStatus {
    if let Some(current) = current {
        // The last operation keeps the time it was taken: a pass that waits
        // carries it over unchanged, a pass that acts records its own (the
        // planner's throttles, such as one raft entry per 5 s for a joining
        // learner, count from it).
        desired.conditions = keep_transition_times(&current.conditions, desired.conditions);
        for member in &mut desired.members {
            if let Some(old) = current.members.iter().find(|m| m.name == member.name)
                && old.healthy == member.healthy
                && old.healthy_since.is_some()
                && member.healthy_since.is_some()
            {
                member.healthy_since = old.healthy_since.clone();
            }
        }
    }
    if !step_succeeded {
        // Maintenance bookkeeping (a compaction done, a member
        // defragmented) advances only with the step that did it.
        desired.maintenance = current.and_then(|c| c.maintenance.clone());
    }
    desired.observed_generation = if step_succeeded {
        generation.or(current.and_then(|c| c.observed_generation))
    } else {
        current.and_then(|c| c.observed_generation)
    };
    desired
}

/// Writes `desired` unless it equals the status of `cluster`, the object
/// the pass planned from. Returns whether a write happened.
///
/// The write carries `cluster`'s resourceVersion as a precondition: if the
/// object changed since it was read (a status another writer or an earlier
/// pass wrote, a spec edit), the API server refuses it with 409 and the
/// status, which holds the planner's memory (cluster token, restore record,
/// `healthySince`, last operation), is not overwritten by one planned from
/// older facts ([`StatusError::Stale`]).
pub async fn write(
    api: &Api<EtcdCluster>,
    cluster: &EtcdCluster,
    desired: &EtcdClusterStatus,
) -> Result<bool, StatusError> {
    let version = cluster.resource_version();
    let replaces = version.as_deref().map_or(Replaces::Any, Replaces::ReadAt);
    WRITER
        .write(
            api,
            &cluster.name_any(),
            cluster.status.as_ref(),
            desired.clone(),
            replaces,
        )
        .await
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{LastOperation, MemberStatus, OperationState};
    use crate::controller_kit::status_writer::{self, needs_write};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use k8s_openapi::jiff::Timestamp;

    fn time(seconds: i64) -> Time {
        Time(Timestamp::from_second(seconds).expect("valid timestamp"))
    }

    fn condition(type_: &str, status: &str, reason: &str, at: i64) -> Condition {
        Condition {
            type_: type_.into(),
            status: status.into(),
            reason: reason.into(),
            message: String::new(),
            last_transition_time: time(at),
            observed_generation: None,
        }
    }

    fn status(conditions: Vec<Condition>) -> EtcdClusterStatus {
        EtcdClusterStatus {
            conditions,
            ..Default::default()
        }
    }

    #[test]
    fn unchanged_conditions_keep_their_transition_time() {
        let current = status(vec![
            condition("Available", "True", "QuorumHealthy", 100),
            condition("Degraded", "False", "AllMembersHealthy", 100),
        ]);
        let desired = status(vec![
            condition("Available", "True", "QuorumHealthy", 200),
            condition("Degraded", "True", "MemberUnhealthy", 200),
        ]);
        let out = finalize(Some(&current), desired, Some(1), true);
        assert_eq!(out.conditions[0].last_transition_time, time(100));
        assert_eq!(out.conditions[1].last_transition_time, time(200));
    }

    #[test]
    fn a_pass_that_changes_nothing_writes_nothing() {
        let current = EtcdClusterStatus {
            observed_generation: Some(3),
            conditions: vec![condition("Available", "True", "QuorumHealthy", 100)],
            last_operation: Some(LastOperation {
                type_: "CreatePod".into(),
                description: "created pod main-0".into(),
                state: OperationState::Succeeded,
                time: time(100),
            }),
            members: vec![MemberStatus {
                name: "main-0".into(),
                healthy: true,
                healthy_since: Some(time(50)),
                ..Default::default()
            }],
            ..Default::default()
        };
        let mut desired = current.clone();
        desired.observed_generation = None;
        desired.conditions[0].last_transition_time = time(300);
        desired.members[0].healthy_since = Some(time(300));
        let out = finalize(Some(&current), desired, Some(3), true);
        assert!(!needs_write(Some(&current), &out), "{out:?}");
    }

    #[test]
    fn an_operation_taken_again_records_its_own_time() {
        // The planner throttles some steps by the time of the last one
        // (one raft entry per 5 s for a joining learner): a repeat of the
        // same step must not inherit the time of the first.
        let op = |at| LastOperation {
            type_: "AdvanceRaftLog".into(),
            description: "committing a raft entry for learner main-2".into(),
            state: OperationState::Succeeded,
            time: time(at),
        };
        let current = EtcdClusterStatus {
            last_operation: Some(op(100)),
            ..Default::default()
        };
        let desired = EtcdClusterStatus {
            last_operation: Some(op(107)),
            ..Default::default()
        };
        let out = finalize(Some(&current), desired, Some(1), true);
        assert_eq!(out.last_operation.map(|o| o.time), Some(time(107)));
    }

    #[test]
    fn observed_generation_advances_only_after_a_successful_step() {
        let current = EtcdClusterStatus {
            observed_generation: Some(3),
            ..Default::default()
        };
        let out = finalize(Some(&current), EtcdClusterStatus::default(), Some(4), false);
        assert_eq!(out.observed_generation, Some(3));
        let out = finalize(Some(&current), EtcdClusterStatus::default(), Some(4), true);
        assert_eq!(out.observed_generation, Some(4));
        let out = finalize(None, EtcdClusterStatus::default(), Some(1), false);
        assert_eq!(out.observed_generation, None);
    }

    #[test]
    fn a_status_write_is_conditional_on_the_object_it_was_planned_from() {
        let desired = EtcdClusterStatus {
            cluster_token: Some("main-abc".into()),
            ..Default::default()
        };
        let body =
            status_writer::apply_body::<EtcdCluster>("main", &desired, Replaces::ReadAt("41"))
                .expect("a body");
        assert_eq!(body["metadata"]["resourceVersion"], "41");
        assert_eq!(body["metadata"]["name"], "main");
        assert_eq!(body["status"]["clusterToken"], "main-abc");
        assert_eq!(body["kind"], "EtcdCluster");
    }

    #[test]
    fn a_first_status_is_always_written() {
        assert!(needs_write(None, &EtcdClusterStatus::default()));
    }
}
