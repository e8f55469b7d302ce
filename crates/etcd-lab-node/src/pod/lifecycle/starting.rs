//! Starting containers: init containers one at a time and in order, then
//! every app container; start failures and their retries.

use std::time::Duration;

use super::container::{ContainerSlot, Run};
use super::{ContainerRef, Effect, Moment, PodLifecycle, StartFailure};
use crate::pod::status::RunState;

/// An image that is not in the catalog is looked up again after at least this.
pub const IMAGE_PULL_RETRY: Duration = Duration::from_secs(5);
/// A container whose configuration is invalid is tried again after this.
pub const CONFIG_RETRY: Duration = Duration::from_secs(5);
/// A container whose process could not be spawned is tried again after this.
pub const RUN_RETRY: Duration = Duration::from_secs(10);

impl PodLifecycle {
    /// Asks for the start of every container that is due: the first init
    /// container that has not succeeded, or, once all have, each app
    /// container that has not finished for good.
    pub(super) fn start_due(&mut self, now: Moment, effects: &mut Vec<Effect>) {
        if self.init_failed {
            return;
        }
        if let Some(index) = self.init.iter().position(|s| !s.view.state.succeeded()) {
            let slot = &mut self.init[index];
            if slot.due(now.instant) {
                effects.push(ask_start(slot, ContainerRef::Init(index)));
            }
            return;
        }
        for (index, slot) in self.app.iter_mut().enumerate() {
            if !slot.view.finished && slot.due(now.instant) {
                effects.push(ask_start(slot, ContainerRef::App(index)));
            }
        }
    }

    pub(super) fn on_started(
        &mut self,
        container: ContainerRef,
        run: u64,
        image_id: String,
        now: Moment,
        effects: &mut Vec<Effect>,
    ) {
        let uid_short = self.uid_short.clone();
        let Some(slot) = self.slot_mut(container) else {
            return;
        };
        if !slot.starting || run != slot.last_run + 1 {
            return;
        }
        slot.starting = false;
        slot.last_run = run;
        if slot.ran_before {
            slot.view.restart_count += 1;
        }
        slot.ran_before = true;
        let container_id = format!(
            "lab://{uid_short}-{}-{}",
            slot.name, slot.view.restart_count
        );
        slot.view.container_id = Some(container_id.clone());
        slot.view.image_id = Some(image_id);
        slot.view.state = RunState::Running {
            started_at: now.wall,
        };
        slot.view.ready = false;
        slot.view.started = false;
        slot.next_start = None;
        slot.run = Some(Run {
            id: run,
            container_id,
            started: now.instant,
            started_at: now.wall,
            kill_at: None,
        });
        match container {
            ContainerRef::App(_) if slot.has_probes => {
                effects.push(Effect::RunProbes { container, run });
            }
            ContainerRef::App(_) => {
                slot.view.started = true;
                slot.view.ready = true;
            }
            ContainerRef::Init(_) => {}
        }
    }

    pub(super) fn on_start_failed(
        &mut self,
        container: ContainerRef,
        failure: StartFailure,
        now: Moment,
        effects: &mut Vec<Effect>,
    ) {
        let Some(slot) = self.slot_mut(container) else {
            return;
        };
        if !slot.starting {
            return;
        }
        slot.starting = false;
        let (reason, message, delay) = match failure {
            StartFailure::ImagePull(message) => {
                let reason = if slot.view.state
                    == RunState::waiting("ErrImagePull", Some(message.clone()))
                {
                    "ImagePullBackOff"
                } else {
                    "ErrImagePull"
                };
                let delay = slot
                    .backoff
                    .next_delay(Duration::ZERO)
                    .max(IMAGE_PULL_RETRY);
                (reason, message, delay)
            }
            StartFailure::Config(message) => ("CreateContainerConfigError", message, CONFIG_RETRY),
            StartFailure::Run(message) => ("RunContainerError", message, RUN_RETRY),
        };
        slot.view.state = RunState::waiting(reason, Some(message));
        let at = now.instant + delay;
        slot.next_start = Some(at);
        effects.push(Effect::WakeAt(at));
    }
}

fn ask_start(slot: &mut ContainerSlot, container: ContainerRef) -> Effect {
    slot.starting = true;
    Effect::StartContainer {
        container,
        run: slot.last_run + 1,
    }
}
