//! Status conditions as every controller of this operator writes them
//! (pure): `True`/`False` with a reason and a message, and a
//! `lastTransitionTime` that only moves when the status does (Kubernetes
//! API conventions), whatever the reason or message.
//!
//! Each resource kind builds its conditions in one place with [`condition`]
//! and [`set`]; the status writer ([`super::status_writer`]) keeps the
//! transition times of the status it replaces with
//! [`keep_transition_times`].

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

/// A status that carries conditions.
pub trait WithConditions {
    /// The conditions.
    fn conditions(&self) -> &[Condition];
    /// The conditions, to complete before a write.
    fn conditions_mut(&mut self) -> &mut Vec<Condition>;
}

/// A condition stated at `at`.
pub fn condition(
    type_: &str,
    status: bool,
    reason: &str,
    message: impl Into<String>,
    observed_generation: Option<i64>,
    at: Time,
) -> Condition {
    Condition {
        type_: type_.to_owned(),
        status: status_text(status).to_owned(),
        reason: reason.to_owned(),
        message: message.into(),
        last_transition_time: at,
        observed_generation,
    }
}

/// Sets `condition` in `conditions`, in place of the one of its type; it
/// keeps that one's transition time while the status is the same.
pub fn set(conditions: &mut Vec<Condition>, condition: Condition) {
    let condition = keep_transition_time(conditions, condition);
    conditions.retain(|c| c.type_ != condition.type_);
    conditions.push(condition);
}

/// `desired` with the transition times of `current` wherever a condition's
/// status did not change.
pub fn keep_transition_times(current: &[Condition], desired: Vec<Condition>) -> Vec<Condition> {
    desired
        .into_iter()
        .map(|condition| keep_transition_time(current, condition))
        .collect()
}

/// The condition of a type, if set.
pub fn find<'a>(conditions: &'a [Condition], type_: &str) -> Option<&'a Condition> {
    conditions.iter().find(|c| c.type_ == type_)
}

/// Whether the condition of a type is `True`.
pub fn is_true(conditions: &[Condition], type_: &str) -> bool {
    find(conditions, type_).is_some_and(|c| c.status == status_text(true))
}

/// `condition` with the transition time of the one of its type in
/// `current`, if that one has the same status.
pub fn keep_transition_time(current: &[Condition], mut condition: Condition) -> Condition {
    if let Some(old) = find(current, &condition.type_)
        && old.status == condition.status
    {
        condition.last_transition_time = old.last_transition_time.clone();
    }
    condition
}

fn status_text(status: bool) -> &'static str {
    if status { "True" } else { "False" }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::jiff::Timestamp;

    fn at(seconds: i64) -> Time {
        Time(Timestamp::from_second(seconds).expect("valid timestamp"))
    }

    #[test]
    fn a_condition_keeps_its_transition_time_while_its_status_holds() {
        let mut conditions = Vec::new();
        set(
            &mut conditions,
            condition("Ready", true, "Fresh", "a", None, at(100)),
        );
        set(
            &mut conditions,
            condition("Ready", true, "FreshWithErrors", "b", None, at(160)),
        );
        assert_eq!(conditions.len(), 1);
        assert_eq!(conditions[0].last_transition_time, at(100));
        assert_eq!(conditions[0].reason, "FreshWithErrors");
        assert_eq!(conditions[0].message, "b");
        assert!(is_true(&conditions, "Ready"));

        set(
            &mut conditions,
            condition("Ready", false, "Stale", "c", Some(2), at(190)),
        );
        assert_eq!(conditions[0].last_transition_time, at(190));
        assert_eq!(conditions[0].observed_generation, Some(2));
        assert!(!is_true(&conditions, "Ready"));
    }

    #[test]
    fn only_unchanged_conditions_keep_their_transition_time() {
        let current = vec![
            condition("Available", true, "QuorumHealthy", "", None, at(100)),
            condition("Degraded", false, "AllMembersHealthy", "", None, at(100)),
        ];
        let desired = vec![
            condition("Available", true, "QuorumHealthy", "", None, at(200)),
            condition("Degraded", true, "MemberUnhealthy", "", None, at(200)),
            condition("Paused", false, "AsExpected", "", None, at(200)),
        ];
        let out = keep_transition_times(&current, desired);
        assert_eq!(out[0].last_transition_time, at(100));
        assert_eq!(out[1].last_transition_time, at(200));
        assert_eq!(out[2].last_transition_time, at(200));
    }
}
