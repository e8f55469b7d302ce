//! Probe results of app containers: started, ready, or restarted after a
//! failed liveness or startup probe (SIGTERM, SIGKILL after the pod's
//! termination grace period).

use super::{ContainerRef, Effect, Moment, PodLifecycle, Stage, StopSignal};
use crate::probe::ProbeEvent;

impl PodLifecycle {
    pub(super) fn on_probe(
        &mut self,
        container: ContainerRef,
        run: u64,
        event: ProbeEvent,
        now: Moment,
        effects: &mut Vec<Effect>,
    ) {
        if self.stage != Stage::Running {
            return;
        }
        let grace = self.termination_grace;
        let Some(slot) = self.slot_mut(container) else {
            return;
        };
        if !slot.is_running(run) {
            return;
        }
        match event {
            ProbeEvent::Started => {
                slot.view.started = true;
                if !slot.has_readiness_probe {
                    slot.view.ready = true;
                }
            }
            ProbeEvent::Ready(ready) => slot.view.ready = ready && slot.view.started,
            ProbeEvent::Unhealthy(..) => {
                slot.view.ready = false;
                effects.push(Effect::Stop {
                    container,
                    signal: StopSignal::Terminate,
                });
                let at = now.instant + grace;
                if let Some(run) = slot.run.as_mut() {
                    run.kill_at = Some(run.kill_at.map_or(at, |t| t.min(at)));
                }
                effects.push(Effect::WakeAt(at));
            }
        }
    }

    /// SIGKILL to containers still running when the grace period after a
    /// failed probe's SIGTERM is over.
    pub(super) fn fire_probe_kills(&mut self, now: Moment, effects: &mut Vec<Effect>) {
        for (container, slot) in self.slots_mut() {
            if let Some(run) = slot.run.as_mut()
                && run.kill_at.is_some_and(|t| t <= now.instant)
            {
                run.kill_at = None;
                effects.push(Effect::Stop {
                    container,
                    signal: StopSignal::Kill,
                });
            }
        }
    }
}
