//! The planner: pure, no I/O, no async. One observation in, at most one
//! action plus the status out (`docs/architecture.md`, `shared/design.md`).
//!
//! The order of [`decide::decide`]'s steps encodes the member lifecycle:
//! child Services; the first bootstrap (the only `--initial-cluster-state=new`);
//! releasing Pods whose node is confirmed gone; recording member identities
//! on PVCs; recreating Pods on intact PVCs (also without quorum); waiting
//! without quorum (restore only by the recovery policy when a majority's data
//! is known lost); then membership changes one at a time under quorum and
//! stable health: promote a learner, remove a member whose data is gone, add
//! missing members as learners, scale down; finally the PodDisruptionBudget.

mod action;
mod backup_health;
mod certificates;
mod context;
mod corrupt;
mod damage;
mod decide;
mod evidence;
mod expansion;
mod loss;
mod maintenance;
mod membership;
mod observed;
mod release;
mod restore;
mod rollout;
mod status;
mod step;
mod survivor;
mod transport;
mod volume_size;

#[cfg(test)]
pub(crate) mod tests;

use std::time::Duration;

pub use action::{Action, ActionEvent, ActionKind, ActionRow, Bootstrap};
pub use context::first_token_of;
pub use membership::{HEALTH_STABILITY, quorum};
pub use observed::{
    Children, GuardRefusal, LogTail, NodeState, Observed, OrdinalObjects, PodPhase, PodState,
    PvcPhase, PvcState, RestorePodState, ScheduleSummary, TemplateMetadata, TlsObservation,
    TransportObservation, VolumeKind, VolumeSpace,
};
pub use release::{Release, ReleaseStep};
pub use rollout::{Progress, ROLLOUT_STALL};
pub use step::{Step, Waiting};
pub use survivor::{Survivor, SurvivorChoice};

use crate::api::ConditionType;

/// The outcome of one pass.
#[derive(Clone, Debug, PartialEq)]
pub struct Plan {
    /// The single action to take, if any.
    pub action: Option<Action>,
    /// Why no action is taken, when none is.
    pub waiting: Option<Waiting>,
    /// The status to write (`observedGeneration` last).
    pub status: crate::api::EtcdClusterStatus,
    /// Kubernetes Events to publish.
    pub events: Vec<PlannedEvent>,
    /// When to observe again at the latest.
    pub requeue_after: Duration,
}

/// An Event to publish on the `EtcdCluster`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlannedEvent {
    /// `Normal` or `Warning`.
    pub type_: EventType,
    /// CamelCase reason.
    pub reason: String,
    /// What happened.
    pub message: String,
}

/// The type of an Event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventType {
    /// Routine.
    Normal,
    /// Needs attention.
    Warning,
}

/// Plans one pass: at most one action, and the status.
pub fn plan(observed: &Observed) -> Plan {
    let cx = context::Context::new(observed);
    let step = decide::decide(&cx);
    let status = status::build(&cx, &step);
    let events = events(observed, &step, &status);
    let (action, waiting, requeue_after) = match step {
        Step::Act(action) => (Some(action), None, Duration::from_secs(1)),
        Step::Wait(waiting) => {
            let after = match waiting {
                Waiting::HealthNotStable => until_stable(&cx),
                Waiting::LearnerCatchingUp => until_learner_settled(&cx),
                Waiting::InProgress(_) | Waiting::Rollout(_) | Waiting::Maintenance(_) => {
                    Duration::from_secs(5)
                }
                Waiting::Bootstrapping | Waiting::QuorumLost { .. } => Duration::from_secs(10),
                _ => Duration::from_secs(30),
            };
            (None, Some(waiting), after)
        }
    };
    Plan {
        action,
        waiting,
        status,
        events,
        requeue_after,
    }
}

/// The next pass after a wait for the voters' health window: when the
/// window of the voters healthy now ends, or in 5 s while one is not healthy.
fn until_stable(cx: &context::Context<'_>) -> Duration {
    const MARGIN: Duration = Duration::from_millis(100);
    const AT_MOST: Duration = Duration::from_secs(5);
    cx.membership
        .until_voters_stable(&cx.lost_voters())
        .and_then(|left| Duration::try_from(left).ok())
        .map_or(AT_MOST, |left| (left + MARGIN).min(AT_MOST))
}

/// How often the operator looks at a learner that does not serve yet.
const LEARNER_LOOK_INTERVAL: Duration = Duration::from_millis(200);

/// The next pass while a learner catches up: when the learner that serves
/// has served for its settling second, else after
/// [`LEARNER_LOOK_INTERVAL`] (the learner's first answer starts that
/// second, so it is looked for often; a look is one read of each member's
/// status, for the seconds a replacement takes).
fn until_learner_settled(cx: &context::Context<'_>) -> Duration {
    const MARGIN: Duration = Duration::from_millis(100);
    cx.membership
        .learners()
        .next()
        .and_then(|learner| cx.membership.until_settled(learner))
        .and_then(|left| Duration::try_from(left).ok())
        .filter(|left| !left.is_zero())
        .map_or(LEARNER_LOOK_INTERVAL, |left| left + MARGIN)
}

fn events(
    observed: &Observed,
    step: &Step,
    status: &crate::api::EtcdClusterStatus,
) -> Vec<PlannedEvent> {
    let mut events = Vec::new();
    if let Step::Act(action) = step {
        let type_ = match action.kind().event() {
            ActionEvent::Normal => Some(EventType::Normal),
            ActionEvent::Warning => Some(EventType::Warning),
            ActionEvent::Quiet => None,
        };
        if let Some(type_) = type_ {
            events.push(PlannedEvent {
                type_,
                reason: action.kind().reason().to_string(),
                message: action.describe(&observed.name),
            });
        }
    }
    for (type_, warning_when_true) in [
        (ConditionType::QuorumLost, true),
        (ConditionType::MajorityDataLost, true),
        (ConditionType::Available, false),
    ] {
        let now = status.is_true(type_);
        let before = observed.status.is_true(type_);
        if now != before && (now || observed.status.condition(type_).is_some()) {
            let message = status
                .condition(type_)
                .map(|c| c.message.clone())
                .unwrap_or_default();
            let warning = now == warning_when_true;
            events.push(PlannedEvent {
                type_: if warning {
                    EventType::Warning
                } else {
                    EventType::Normal
                },
                reason: format!("{}{}", type_.as_str(), if now { "" } else { "Cleared" }),
                message,
            });
        }
    }
    // A certificate close to expiry (its renewal keeps failing), once when
    // `Degraded` first says so.
    let expiring = |s: &crate::api::EtcdClusterStatus| {
        s.condition(ConditionType::Degraded)
            .filter(|c| c.reason == certificates::EXPIRING_REASON)
            .map(|c| c.message.clone())
    };
    if let Some(message) = expiring(status)
        && expiring(&observed.status).is_none()
    {
        events.push(PlannedEvent {
            type_: EventType::Warning,
            reason: certificates::EXPIRING_REASON.to_string(),
            message,
        });
    }
    events
}
