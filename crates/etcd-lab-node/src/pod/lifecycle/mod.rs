//! The lifecycle of one pod on its node, as a pure state machine: what the
//! kubelet decides, without processes, namespaces or an API server.
//!
//! Each [`Input`] (a container exited with a code, a probe result, the pod
//! was deleted with a grace period, a timer fired, ...) moves the pod to its
//! next state and yields the [`Effect`]s to run, in order: prepare the
//! sandbox, start a container, signal it, run its probes, report the status,
//! wake up later, tear the pod down. The worker (`pod::worker`) runs the
//! effects and feeds their results back as inputs.
//!
//! The stages of a pod:
//! - a pod that already reached `Succeeded` or `Failed` is not run again and
//!   waits for its deletion;
//! - *preparing*: the sandbox and volumes are prepared, again every 500 ms
//!   while they are not ready (the containers wait in `ContainerCreating`);
//! - *running*: init containers run one at a time, in order; then every app
//!   container runs, restarted after an exit as `restartPolicy` says with the
//!   kubelet's crash-loop back-off;
//! - *stopping* (deletion): SIGTERM to every running container, SIGKILL to
//!   those left after the grace period, then up to 10 s more to see them go;
//! - *done*: the last status is reported and the pod torn down.

mod backoff;
mod container;
mod effect;
mod exits;
mod input;
mod moment;
mod policy;
mod probes;
mod starting;
mod stopping;
#[cfg(test)]
mod tests;

use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;

pub use backoff::Backoff;
pub use effect::{ContainerRef, Effect, StopSignal};
pub use input::{Input, StartFailure};
pub use moment::Moment;
pub use policy::{RestartPolicy, deletion_grace, termination_grace};

use crate::pod::status::{PodView, RunState};
use container::ContainerSlot;

/// Retry period while the sandbox or volumes are not ready (unbound claim,
/// volume not yet attached): the kubelet's volume manager checks every
/// 300 ms; each check here reads the VolumeAttachment from the API server.
pub const PREPARE_RETRY: Duration = Duration::from_millis(500);
/// How long a stopping pod waits for its containers after SIGKILL.
pub const KILL_WAIT: Duration = Duration::from_secs(10);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    /// Already `Succeeded` or `Failed`: nothing runs again.
    Terminal,
    /// Sandbox and volumes: prepared again at `retry_at` (`None` while a
    /// preparation is under way).
    Preparing {
        retry_at: Option<Instant>,
    },
    Running,
    /// Deleted: containers were signalled; at `deadline` the next step
    /// (SIGKILL, or giving up once `killed`).
    Stopping {
        deadline: Instant,
        killed: bool,
    },
    Done,
}

/// The state of one pod on its node.
#[derive(Debug, Clone)]
pub struct PodLifecycle {
    /// `namespace/name`, for messages.
    key: String,
    /// First 8 characters of the pod's uid, in container ids.
    uid_short: String,
    policy: RestartPolicy,
    termination_grace: Duration,
    init: Vec<ContainerSlot>,
    app: Vec<ContainerSlot>,
    /// An init container failed and will not run again: the pod failed.
    init_failed: bool,
    pod_ip: Option<Ipv4Addr>,
    host_ip: Ipv4Addr,
    start_time: Timestamp,
    stage: Stage,
    /// The pod object is gone: nothing is reported any more.
    gone: bool,
    /// The view last handed out with `SetStatus`.
    reported: Option<PodView>,
}

impl PodLifecycle {
    /// The lifecycle of `pod` on the node with address `host_ip`, created
    /// at `now`. After a node restart the status the pod already has is
    /// taken over: restart counts, earlier runs as last states, start time.
    /// The first input is a `Tick`.
    pub fn new(pod: &Pod, host_ip: Ipv4Addr, now: Moment) -> Self {
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        let key = format!(
            "{}/{}",
            pod.metadata.namespace.as_deref().unwrap_or("default"),
            pod.metadata.name.as_deref().unwrap_or("")
        );
        let spec = pod.spec.as_ref();
        let mut init: Vec<ContainerSlot> = spec
            .and_then(|s| s.init_containers.as_ref())
            .into_iter()
            .flatten()
            .map(|c| ContainerSlot::new(c, "PodInitializing", false, now.instant))
            .collect();
        let app_reason = if init.is_empty() {
            "ContainerCreating"
        } else {
            "PodInitializing"
        };
        let mut app: Vec<ContainerSlot> = spec
            .map(|s| s.containers.as_slice())
            .unwrap_or_default()
            .iter()
            .map(|c| ContainerSlot::new(c, app_reason, true, now.instant))
            .collect();
        let previous = pod.status.as_ref();
        for (slots, statuses) in [
            (
                &mut init,
                previous.and_then(|s| s.init_container_statuses.as_ref()),
            ),
            (
                &mut app,
                previous.and_then(|s| s.container_statuses.as_ref()),
            ),
        ] {
            for slot in slots.iter_mut() {
                if let Some(old) = statuses.into_iter().flatten().find(|s| s.name == slot.name) {
                    slot.restore(old, now.wall);
                }
            }
        }
        let start_time = previous
            .and_then(|s| s.start_time.as_ref())
            .map(|t| t.0)
            .unwrap_or(now.wall);
        let stage = if policy::previously_terminal(pod) {
            Stage::Terminal
        } else {
            Stage::Preparing {
                retry_at: Some(now.instant),
            }
        };
        Self {
            key,
            uid_short: uid.chars().take(8).collect(),
            policy: RestartPolicy::of(pod),
            termination_grace: termination_grace(pod),
            init,
            app,
            init_failed: false,
            pod_ip: None,
            host_ip,
            start_time,
            stage,
            gone: false,
            reported: None,
        }
    }

    /// Moves the pod on by one input that happened at `now`; returns the
    /// effects to run, in order.
    pub fn handle(&mut self, input: Input, now: Moment) -> Vec<Effect> {
        let mut effects = Vec::new();
        if self.stage == Stage::Done {
            return effects;
        }
        match input {
            Input::Tick => self.on_tick(now, &mut effects),
            Input::SandboxReady { pod_ip } => {
                if matches!(self.stage, Stage::Preparing { .. }) {
                    self.pod_ip = Some(pod_ip);
                    self.stage = Stage::Running;
                }
            }
            Input::SandboxFailed { message } => self.on_sandbox_failed(message, now, &mut effects),
            Input::ContainerStarted {
                container,
                run,
                image_id,
            } => self.on_started(container, run, image_id, now, &mut effects),
            Input::StartFailed { container, failure } => {
                self.on_start_failed(container, failure, now, &mut effects)
            }
            Input::ContainerExited {
                container,
                run,
                exit_code,
                signal,
                message,
            } => self.on_exited(
                container,
                run,
                (exit_code, signal, message),
                now,
                &mut effects,
            ),
            Input::Probe {
                container,
                run,
                event,
            } => self.on_probe(container, run, event, now, &mut effects),
            Input::DeletionRequested { grace } => self.stop(grace, now, &mut effects),
            Input::PodGone => {
                self.gone = true;
                self.stop(Duration::ZERO, now, &mut effects);
            }
        }
        match self.stage {
            Stage::Running => {
                self.start_due(now, &mut effects);
                self.report(&mut effects);
            }
            Stage::Stopping { .. } if self.all_stopped() => self.finish(&mut effects),
            _ => {}
        }
        effects
    }

    /// What the status reports now.
    pub fn view(&self) -> PodView {
        PodView {
            init: self.init.iter().map(|s| s.view.clone()).collect(),
            app: self.app.iter().map(|s| s.view.clone()).collect(),
            pod_ip: self.pod_ip,
            host_ip: self.host_ip,
            start_time: self.start_time,
            sandbox_ready: self.pod_ip.is_some(),
            init_failed: self.init_failed,
            message: None,
        }
    }

    /// Whether the pod was torn down: no input changes anything any more.
    pub fn is_done(&self) -> bool {
        self.stage == Stage::Done
    }

    /// Whether the pod is being stopped or was torn down.
    pub fn is_stopping(&self) -> bool {
        matches!(self.stage, Stage::Stopping { .. } | Stage::Done)
    }

    fn on_tick(&mut self, now: Moment, effects: &mut Vec<Effect>) {
        match self.stage {
            Stage::Preparing { retry_at: Some(at) } if at <= now.instant => {
                self.stage = Stage::Preparing { retry_at: None };
                effects.push(Effect::PrepareSandbox);
            }
            Stage::Running => self.fire_probe_kills(now, effects),
            Stage::Stopping { .. } => self.on_stopping_tick(now, effects),
            _ => {}
        }
    }

    fn on_sandbox_failed(&mut self, message: String, now: Moment, effects: &mut Vec<Effect>) {
        if !matches!(self.stage, Stage::Preparing { .. }) {
            return;
        }
        for slot in self.init.iter_mut().chain(self.app.iter_mut()) {
            slot.view.state = RunState::waiting("ContainerCreating", Some(message.clone()));
        }
        let retry_at = now.instant + PREPARE_RETRY;
        self.stage = Stage::Preparing {
            retry_at: Some(retry_at),
        };
        self.report(effects);
        effects.push(Effect::WakeAt(retry_at));
    }

    /// Hands out the view with `SetStatus` when it changed (never once the
    /// pod is gone).
    fn report(&mut self, effects: &mut Vec<Effect>) {
        if self.gone {
            return;
        }
        let view = self.view();
        if self.reported.as_ref() != Some(&view) {
            self.reported = Some(view.clone());
            effects.push(Effect::SetStatus(view));
        }
    }

    fn slot_mut(&mut self, container: ContainerRef) -> Option<&mut ContainerSlot> {
        match container {
            ContainerRef::Init(i) => self.init.get_mut(i),
            ContainerRef::App(i) => self.app.get_mut(i),
        }
    }

    /// Every container with its reference, init containers first.
    fn slots_mut(&mut self) -> impl Iterator<Item = (ContainerRef, &mut ContainerSlot)> {
        let init = self
            .init
            .iter_mut()
            .enumerate()
            .map(|(i, s)| (ContainerRef::Init(i), s));
        let app = self
            .app
            .iter_mut()
            .enumerate()
            .map(|(i, s)| (ContainerRef::App(i), s));
        init.chain(app)
    }

    fn all_stopped(&self) -> bool {
        self.init
            .iter()
            .chain(self.app.iter())
            .all(|s| s.run.is_none())
    }
}
