//! Stopping a deleted pod: SIGTERM, SIGKILL after the grace period, the
//! last status and the tear-down.

use std::time::Duration;

use super::{Effect, KILL_WAIT, Moment, PodLifecycle, Stage, StopSignal};
use crate::pod::status::RunState;

impl PodLifecycle {
    /// Signals every running container: SIGTERM with a grace period,
    /// SIGKILL without one. A pod already stopping keeps its deadline.
    pub(super) fn stop(&mut self, grace: Duration, now: Moment, effects: &mut Vec<Effect>) {
        if matches!(self.stage, Stage::Stopping { .. } | Stage::Done) {
            return;
        }
        let signal = if grace.is_zero() {
            StopSignal::Kill
        } else {
            StopSignal::Terminate
        };
        for (container, slot) in self.slots_mut() {
            if slot.run.is_some() {
                effects.push(Effect::Stop { container, signal });
            }
        }
        let deadline = now.instant + if grace.is_zero() { KILL_WAIT } else { grace };
        self.stage = Stage::Stopping {
            deadline,
            killed: grace.is_zero(),
        };
        if !self.all_stopped() {
            effects.push(Effect::WakeAt(deadline));
        }
    }

    /// At the deadline: SIGKILL to what still runs, or, when that was done
    /// already, the end of waiting.
    pub(super) fn on_stopping_tick(&mut self, now: Moment, effects: &mut Vec<Effect>) {
        let Stage::Stopping { deadline, killed } = self.stage else {
            return;
        };
        if now.instant < deadline {
            return;
        }
        if killed {
            self.finish(effects);
            return;
        }
        for (container, slot) in self.slots_mut() {
            if slot.run.is_some() {
                effects.push(Effect::Stop {
                    container,
                    signal: StopSignal::Kill,
                });
            }
        }
        let deadline = now.instant + KILL_WAIT;
        self.stage = Stage::Stopping {
            deadline,
            killed: true,
        };
        effects.push(Effect::WakeAt(deadline));
    }

    /// Releases every cgroup, marks the app containers finished (one waiting
    /// for a restart shows its last run again), reports the last status
    /// unless the pod is gone and tears the pod down.
    pub(super) fn finish(&mut self, effects: &mut Vec<Effect>) {
        for (container, _) in self.slots_mut() {
            effects.push(Effect::ReleaseCgroup { container });
        }
        for slot in self.app.iter_mut() {
            slot.view.finished = true;
            slot.view.ready = false;
            if let RunState::Waiting { .. } = slot.view.state
                && let Some(last) = slot.view.last_state.clone()
            {
                slot.view.state = last;
            }
        }
        self.stage = Stage::Done;
        self.report(effects);
        effects.push(Effect::TearDown {
            delete_pod: !self.gone,
        });
    }
}
