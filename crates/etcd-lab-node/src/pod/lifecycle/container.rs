//! The lifecycle's record of one container: its reported view, back-off,
//! current run and timers.

use std::time::Instant;

use k8s_openapi::api::core::v1::{Container, ContainerStatus};
use k8s_openapi::jiff::Timestamp;

use super::backoff::Backoff;
use crate::pod::status::{ContainerView, RunState};

/// One run of a container that has not exited yet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Run {
    pub id: u64,
    pub container_id: String,
    pub started: Instant,
    pub started_at: Timestamp,
    /// When the container gets SIGKILL after a failed probe's SIGTERM.
    pub kill_at: Option<Instant>,
}

/// One init or app container.
#[derive(Debug, Clone)]
pub(super) struct ContainerSlot {
    pub name: String,
    pub has_probes: bool,
    pub has_readiness_probe: bool,
    pub view: ContainerView,
    pub backoff: Backoff,
    pub run: Option<Run>,
    /// A start was asked for and its answer is awaited.
    pub starting: bool,
    /// When the next start is due (`None`: not scheduled).
    pub next_start: Option<Instant>,
    /// Id of the last run that started (runs are numbered from 1).
    pub last_run: u64,
    /// Whether the container ran before, on this node or before a node restart.
    pub ran_before: bool,
}

impl ContainerSlot {
    /// A container not started yet, due at `now`. `probes` is false for
    /// init containers, whose probes are not run.
    pub fn new(spec: &Container, reason: &str, probes: bool, now: Instant) -> Self {
        let has_readiness_probe = probes && spec.readiness_probe.is_some();
        Self {
            name: spec.name.clone(),
            has_probes: probes
                && (spec.startup_probe.is_some()
                    || spec.liveness_probe.is_some()
                    || has_readiness_probe),
            has_readiness_probe,
            view: ContainerView::new(&spec.name, spec.image.as_deref().unwrap_or(""), reason),
            backoff: Backoff::default(),
            run: None,
            starting: false,
            next_start: Some(now),
            last_run: 0,
            ran_before: false,
        }
    }

    /// Takes over the restart count of the status reported before the node
    /// restarted; a run that was going on then is reported as terminated
    /// with an unknown result.
    pub fn restore(&mut self, previous: &ContainerStatus, now: Timestamp) {
        self.view.restart_count = previous.restart_count;
        let ran = previous
            .state
            .as_ref()
            .is_some_and(|s| s.running.is_some() || s.terminated.is_some());
        if ran {
            self.ran_before = true;
            self.view.last_state = Some(RunState::Terminated {
                exit_code: 255,
                signal: None,
                reason: "Unknown".into(),
                message: Some("the node restarted".into()),
                started_at: None,
                finished_at: now,
                container_id: previous.container_id.clone(),
            });
        }
    }

    /// Not running and no start awaited.
    pub fn idle(&self) -> bool {
        self.run.is_none() && !self.starting
    }

    /// Idle and its next start is due at `now`.
    pub fn due(&self, now: Instant) -> bool {
        self.idle() && self.next_start.is_some_and(|t| t <= now)
    }

    /// Whether the run `run` is the one going on.
    pub fn is_running(&self, run: u64) -> bool {
        self.run.as_ref().is_some_and(|r| r.id == run)
    }
}
