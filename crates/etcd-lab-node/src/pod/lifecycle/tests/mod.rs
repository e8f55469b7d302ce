//! The pod lifecycle driven input by input, without processes or an API
//! server: pods are written as JSON, effects and the reported status are
//! checked after every step.

mod crash_loop;
mod deletion;
mod init_containers;
mod node_restart;
mod preparing;
mod probes;
mod restart_policy;
mod starting;

use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Pod, PodStatus};
use k8s_openapi::jiff::Timestamp;

use super::{ContainerRef, Effect, Input, Moment, PodLifecycle, StopSignal};
use crate::pod::status::{ContainerView, PodView, RunState, build_status};

pub(super) use ContainerRef::{App, Init};

const HOST_IP: Ipv4Addr = Ipv4Addr::new(10, 244, 1, 2);
const POD_IP: Ipv4Addr = Ipv4Addr::new(10, 244, 1, 10);
const EPOCH_MS: i64 = 1_700_000_000_000;

/// A pod named `web` in `default` with uid `0123456789ab`; `spec` is its
/// spec as JSON.
pub(super) fn pod(spec: serde_json::Value) -> Pod {
    serde_json::from_value(serde_json::json!({
        "metadata": { "name": "web", "namespace": "default", "uid": "0123456789ab" },
        "spec": spec,
    }))
    .expect("pod")
}

/// One app container `app` with `fields` merged in, and `pod_fields` on
/// the pod spec.
pub(super) fn one_container(fields: serde_json::Value, pod_fields: serde_json::Value) -> Pod {
    let mut container = serde_json::json!({ "name": "app", "image": "lab.local/host" });
    merge(&mut container, fields);
    let mut spec = serde_json::json!({ "containers": [container] });
    merge(&mut spec, pod_fields);
    pod(spec)
}

fn merge(target: &mut serde_json::Value, extra: serde_json::Value) {
    if let (Some(t), serde_json::Value::Object(e)) = (target.as_object_mut(), extra) {
        t.extend(e);
    }
}

/// A lifecycle under test with its own clock.
pub(super) struct Harness {
    pub lifecycle: PodLifecycle,
    start: Instant,
    elapsed: Duration,
}

impl Harness {
    /// The lifecycle of `pod`, created at time zero.
    pub fn new(pod: &Pod) -> Self {
        let start = Instant::now();
        let lifecycle = PodLifecycle::new(pod, HOST_IP, moment(start, Duration::ZERO));
        Self {
            lifecycle,
            start,
            elapsed: Duration::ZERO,
        }
    }

    /// The lifecycle of `pod` with its sandbox ready; returns the effects
    /// of that step (the first starts).
    pub fn prepared(pod: &Pod) -> (Self, Vec<Effect>) {
        let mut h = Self::new(pod);
        assert_eq!(h.tick(), vec![Effect::PrepareSandbox]);
        let effects = h.step(Input::SandboxReady { pod_ip: POD_IP });
        (h, effects)
    }

    /// The lifecycle of `pod` with every container asked for at the start
    /// running; returns the effects of the last step.
    pub fn running(pod: &Pod) -> (Self, Vec<Effect>) {
        let (mut h, effects) = Self::prepared(pod);
        let effects = h.start_all(&effects);
        (h, effects)
    }

    pub fn now(&self) -> Moment {
        moment(self.start, self.elapsed)
    }

    /// Seconds since the lifecycle was created.
    pub fn seconds(&self) -> u64 {
        self.elapsed.as_secs()
    }

    pub fn advance(&mut self, by: Duration) {
        self.elapsed += by;
    }

    pub fn step(&mut self, input: Input) -> Vec<Effect> {
        let now = self.now();
        self.lifecycle.handle(input, now)
    }

    pub fn tick(&mut self) -> Vec<Effect> {
        self.step(Input::Tick)
    }

    /// Advances the clock and ticks.
    pub fn tick_after(&mut self, by: Duration) -> Vec<Effect> {
        self.advance(by);
        self.tick()
    }

    /// Answers every `StartContainer` in `effects` with a started run;
    /// returns the effects of the last answer (`effects` when none).
    pub fn start_all(&mut self, effects: &[Effect]) -> Vec<Effect> {
        let mut last = effects.to_vec();
        for (container, run) in starts(effects) {
            last = self.step(Input::ContainerStarted {
                container,
                run,
                image_id: "sha256:lab".into(),
            });
        }
        last
    }

    /// The run going on in `container` (the last one started).
    pub fn run_of(&self, container: ContainerRef) -> u64 {
        let slot = match container {
            Init(i) => &self.lifecycle.init[i],
            App(i) => &self.lifecycle.app[i],
        };
        slot.last_run
    }

    /// The current run of `container` exits with `code`.
    pub fn exit(&mut self, container: ContainerRef, code: i32) -> Vec<Effect> {
        let run = self.run_of(container);
        self.step(Input::ContainerExited {
            container,
            run,
            exit_code: code,
            signal: None,
            message: None,
        })
    }

    pub fn view(&self) -> PodView {
        self.lifecycle.view()
    }

    pub fn container(&self, container: ContainerRef) -> ContainerView {
        let view = self.view();
        match container {
            Init(i) => view.init[i].clone(),
            App(i) => view.app[i].clone(),
        }
    }

    /// The `PodStatus` the worker would write now.
    pub fn status(&self) -> PodStatus {
        build_status(&self.view(), None, self.now().wall)
    }

    pub fn phase(&self) -> String {
        self.status().phase.unwrap_or_default()
    }
}

fn moment(start: Instant, elapsed: Duration) -> Moment {
    let ms = i64::try_from(elapsed.as_millis()).expect("ms");
    Moment {
        instant: start + elapsed,
        wall: Timestamp::from_millisecond(EPOCH_MS + ms).expect("timestamp"),
    }
}

/// The `StartContainer` effects, as (container, run).
pub(super) fn starts(effects: &[Effect]) -> Vec<(ContainerRef, u64)> {
    effects
        .iter()
        .filter_map(|e| match e {
            Effect::StartContainer { container, run } => Some((*container, *run)),
            _ => None,
        })
        .collect()
}

/// The `Stop` effects, as (container, signal).
pub(super) fn stops(effects: &[Effect]) -> Vec<(ContainerRef, StopSignal)> {
    effects
        .iter()
        .filter_map(|e| match e {
            Effect::Stop { container, signal } => Some((*container, *signal)),
            _ => None,
        })
        .collect()
}

/// The reported views among `effects`.
pub(super) fn reported(effects: &[Effect]) -> Vec<PodView> {
    effects
        .iter()
        .filter_map(|e| match e {
            Effect::SetStatus(view) => Some(view.clone()),
            _ => None,
        })
        .collect()
}

/// The reason of a waiting state (`None` when not waiting).
pub(super) fn waiting_reason(state: &RunState) -> Option<&str> {
    match state {
        RunState::Waiting { reason, .. } => Some(reason),
        _ => None,
    }
}

/// The exit code of a terminated state (`None` when not terminated).
pub(super) fn exit_code(state: &RunState) -> Option<i32> {
    match state {
        RunState::Terminated { exit_code, .. } => Some(*exit_code),
        _ => None,
    }
}

pub(super) fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}
