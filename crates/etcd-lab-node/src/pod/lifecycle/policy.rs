//! What the pod spec says about restarts and stopping.

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;

/// The pod's `restartPolicy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RestartPolicy {
    Always,
    OnFailure,
    Never,
}

impl RestartPolicy {
    /// The policy of `pod` (`Always` when unset or unknown).
    pub fn of(pod: &Pod) -> Self {
        match pod.spec.as_ref().and_then(|s| s.restart_policy.as_deref()) {
            Some("Never") => Self::Never,
            Some("OnFailure") => Self::OnFailure,
            _ => Self::Always,
        }
    }

    /// Whether a container that exited with `exit_code` runs again. An init
    /// container that succeeded is done under every policy.
    pub fn restarts(self, init: bool, exit_code: i32) -> bool {
        match self {
            Self::Never => false,
            Self::OnFailure => exit_code != 0,
            Self::Always => !(init && exit_code == 0),
        }
    }
}

/// Seconds from the API, negative read as zero.
fn seconds(value: i64) -> Duration {
    Duration::from_secs(u64::try_from(value.max(0)).unwrap_or(0))
}

/// `terminationGracePeriodSeconds` (30 s when unset): how long a container
/// that failed its liveness or startup probe has after SIGTERM.
pub fn termination_grace(pod: &Pod) -> Duration {
    seconds(
        pod.spec
            .as_ref()
            .and_then(|s| s.termination_grace_period_seconds)
            .unwrap_or(30),
    )
}

/// How long the containers of a deleted pod have after SIGTERM: the
/// deletion's `deletionGracePeriodSeconds`, else the pod's
/// `terminationGracePeriodSeconds`, else 30 s.
pub fn deletion_grace(pod: &Pod) -> Duration {
    match pod.metadata.deletion_grace_period_seconds {
        Some(v) => seconds(v),
        None => termination_grace(pod),
    }
}

/// Whether the pod already reached `Succeeded` or `Failed`: it is not run
/// again (after a node restart, for example).
pub fn previously_terminal(pod: &Pod) -> bool {
    matches!(
        pod.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Succeeded" | "Failed")
    )
}
