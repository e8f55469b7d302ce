//! What a pass decides: one [`Step`], or a [`Waiting`] that says why not.

use super::action::Action;
use super::survivor::SurvivorChoice;

/// What a pass decided.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// Take this action.
    Act(Action),
    /// Take no action, for this reason.
    Wait(Waiting),
}

/// Why the planner waits.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Waiting {
    /// `spec.paused`.
    Paused,
    /// Bootstrap members are starting.
    Bootstrapping,
    /// Quorum is lost; the named members are awaited.
    QuorumLost {
        /// Member names awaited.
        awaited: Vec<String>,
    },
    /// The data of a majority is known lost; waiting for the recovery policy.
    MajorityDataLost {
        /// Members whose data is lost, with the evidence.
        lost: Vec<String>,
        /// The survivor a restore would start from, as far as known.
        survivor: SurvivorChoice,
    },
    /// A membership change waits for every voter to be healthy for 5 s.
    HealthNotStable,
    /// A learner is catching up.
    LearnerCatchingUp,
    /// Something needs a person; the message says what.
    NeedsAttention(String),
    /// A Pod or volume is on its way (terminating, starting).
    InProgress(String),
    /// A rollout waits before its next member; the message says for what.
    Rollout(String),
    /// A rollout stopped at a member on the new template that does not
    /// come back; the message says which and why.
    RolloutHalted(String),
    /// Maintenance (a defragmentation, a recovery from NOSPACE) waits
    /// before its next member; the message says for what.
    Maintenance(String),
    /// Nothing to do.
    Steady,
}
