//! A container exited: its terminated state, and whether and when it runs
//! again.

use super::{ContainerRef, Effect, Moment, PodLifecycle, Stage};
use crate::pod::status::RunState;

impl PodLifecycle {
    /// Records the exit of run `run`: `Completed` for code 0, else `Error`.
    /// A container that restarts keeps this run as its last state and waits
    /// out its back-off in `CrashLoopBackOff`; one that does not is finished
    /// for good (an init container that does not restart fails the pod).
    pub(super) fn on_exited(
        &mut self,
        container: ContainerRef,
        run: u64,
        (exit_code, signal, message): (i32, Option<i32>, Option<String>),
        now: Moment,
        effects: &mut Vec<Effect>,
    ) {
        let policy = self.policy;
        let key = self.key.clone();
        let running = self.stage == Stage::Running;
        let init = matches!(container, ContainerRef::Init(_));
        let Some(slot) = self.slot_mut(container) else {
            return;
        };
        if !slot.is_running(run) {
            return;
        }
        let Some(ended) = slot.run.take() else {
            return;
        };
        if slot.has_probes {
            effects.push(Effect::StopProbes { container });
        }
        let terminated = RunState::Terminated {
            exit_code,
            signal,
            reason: if exit_code == 0 { "Completed" } else { "Error" }.into(),
            message,
            started_at: Some(ended.started_at),
            finished_at: now.wall,
            container_id: Some(ended.container_id),
        };
        slot.view.ready = false;
        slot.view.state = terminated.clone();
        let mut init_failed = false;
        if init && exit_code == 0 {
            // Done: the next init container (or the apps) start now.
        } else if policy.restarts(init, exit_code) {
            let delay = slot
                .backoff
                .next_delay(now.instant.saturating_duration_since(ended.started));
            slot.view.last_state = Some(terminated);
            if !delay.is_zero() {
                slot.view.state = RunState::waiting(
                    "CrashLoopBackOff",
                    Some(format!(
                        "back-off {}s restarting failed container={} pod={key}",
                        delay.as_secs(),
                        slot.name
                    )),
                );
            }
            let at = now.instant + delay;
            slot.next_start = Some(at);
            if running && !delay.is_zero() {
                effects.push(Effect::WakeAt(at));
            }
        } else {
            slot.view.finished = true;
            init_failed = init;
        }
        effects.push(Effect::ReleaseCgroup { container });
        if init_failed {
            self.init_failed = true;
        }
    }
}
