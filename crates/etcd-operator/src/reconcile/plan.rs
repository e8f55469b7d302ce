//! The seam between the reconciler and the pure planner: turns a
//! [`Snapshot`] into at most one [`Step`], the status to write and the
//! Events to publish.
//!
//! Until the planner module (`crate::planner`) is wired in here, this seam
//! only *reports*: it computes the observed members, quorum and readiness
//! for status and never plans a step, so the operator cannot do harm.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;

use super::act::Step;
use super::observe::Snapshot;
use super::pipeline::carry_state;
use crate::api::{ConditionType, EtcdCluster, EtcdClusterStatus, MemberRole, MemberStatus, Phase};
use crate::etcd::format_id;

/// What one pass will do.
#[derive(Debug, Clone)]
pub struct PassPlan {
    /// The one step to take, if any.
    pub step: Option<Step>,
    /// The status to write (timestamps are settled by `status::finalize`).
    pub status: EtcdClusterStatus,
    /// Events reporting waits and refusals.
    pub events: Vec<PlanEvent>,
    /// The cluster is converging: requeue soon even without a step.
    pub progressing: bool,
}

/// An Event the planner asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlanEvent {
    /// Warning rather than Normal.
    pub warning: bool,
    /// PascalCase reason.
    pub reason: String,
    /// One-line note.
    pub note: String,
    /// PascalCase action.
    pub action: String,
}

/// Plans one pass.
pub fn plan(cluster: &EtcdCluster, snapshot: &Snapshot) -> PassPlan {
    let mut status = report(cluster, snapshot);
    carry_state(cluster.status.as_ref(), &mut status);
    PassPlan {
        step: None,
        status,
        events: Vec::new(),
        progressing: false,
    }
}

/// Status from observation only: members as etcd lists them, joined with
/// their pods by name, and the `Available` condition from the quorum read.
pub fn report(cluster: &EtcdCluster, snapshot: &Snapshot) -> EtcdClusterStatus {
    let etcd = &snapshot.etcd;
    let members: Vec<MemberStatus> = etcd
        .members
        .iter()
        .map(|member| {
            let pod = snapshot
                .pods
                .iter()
                .find(|p| !member.name.is_empty() && p.name_any() == member.name);
            MemberStatus {
                name: member.name.clone(),
                id: Some(format_id(member.id)),
                role: Some(if member.is_learner {
                    MemberRole::Learner
                } else {
                    MemberRole::Voter
                }),
                leader: etcd.leader == Some(member.id),
                healthy: member.health.is_healthy(),
                pod: pod.map(|p| p.name_any()),
                node: pod.and_then(|p| p.spec.as_ref()?.node_name.clone()),
                revision: member.status.as_ref().map(|s| s.revision),
                raft_index: member
                    .status
                    .as_ref()
                    .and_then(|s| i64::try_from(s.raft_index).ok()),
                ..Default::default()
            }
        })
        .collect();
    let ready = members.iter().filter(|m| m.healthy).count();
    let available = etcd.quorum_reachable;
    let (reason, message) = if available {
        ("QuorumHealthy", "a majority of voters serves".to_owned())
    } else {
        (
            "QuorumUnavailable",
            etcd.quorum_error
                .clone()
                .unwrap_or_else(|| "no quorum".to_owned()),
        )
    };
    EtcdClusterStatus {
        cluster_id: etcd.cluster_id.map(format_id),
        phase: Some(if available {
            Phase::Running
        } else if etcd.members.is_empty() {
            Phase::Bootstrapping
        } else {
            Phase::QuorumLost
        }),
        ready_members: i32::try_from(ready).unwrap_or(i32::MAX),
        newest_revision: etcd.max_revision,
        conditions: vec![Condition {
            type_: ConditionType::Available.as_str().to_owned(),
            status: if available { "True" } else { "False" }.to_owned(),
            reason: reason.to_owned(),
            message,
            last_transition_time: Time(Timestamp::now()),
            observed_generation: cluster.metadata.generation,
        }],
        members,
        ..Default::default()
    }
}
