//! Volume expansion: a grown `spec.storage.size` is asked of each member's
//! PVC, one PVC at a time, where the StorageClass allows it. A volume whose
//! filesystem grows only when it is mounted again (Kubernetes' offline
//! expansion, condition `FileSystemResizePending`) has its member's Pod
//! replaced by the rollout, one member at a time like any other change.

use super::context::Context;
use super::observed::{PvcPhase, PvcState};
use super::step::{Step, Waiting};
use crate::api::quantity::{bytes, human};

/// The size the spec asks of each volume, in bytes.
pub fn desired_bytes(cx: &Context<'_>) -> Option<u64> {
    bytes(&cx.o.spec.storage.size)
}

/// Whether the member of `ordinal` must start again for its volume's
/// filesystem to reach the expanded size.
pub fn filesystem_waits_for_restart(cx: &Context<'_>, ordinal: u32) -> bool {
    cx.o.objects(ordinal)
        .pvc
        .is_some_and(|p| p.filesystem_resize_pending && !p.deleting)
}

/// The step of the expansion, if one is due.
pub(super) fn expand_volumes(cx: &Context<'_>) -> Option<Step> {
    let desired = desired_bytes(cx)?;
    let claims: Vec<(u32, PvcState)> = (0..cx.replicas)
        .filter_map(|o| Some((o, cx.o.objects(o).pvc?)))
        .filter(|(_, p)| !p.deleting && p.phase == PvcPhase::Bound)
        .collect();
    let small: Vec<u32> = claims
        .iter()
        .filter(|(_, p)| p.requested.is_some_and(|r| r < desired))
        .map(|(o, _)| *o)
        .collect();
    if let Some(&ordinal) = small.first() {
        match cx.o.volume_expansion_allowed {
            Some(true) => {}
            Some(false) => {
                return wait(Waiting::NeedsAttention(format!(
                    "storage.size asks for {} but the StorageClass of the volumes does not allow expansion (allowVolumeExpansion): the volumes keep their size",
                    human(desired)
                )));
            }
            None => {
                return wait(Waiting::NeedsAttention(format!(
                    "storage.size asks for {} but the StorageClass of the volumes could not be read: the volumes keep their size",
                    human(desired)
                )));
            }
        }
        // One PVC at a time: the next once the storage provider has
        // expanded the previous one's volume.
        if let Some(growing) = provider_working(cx, &claims) {
            return wait(growing);
        }
        return Some(Step::Act(super::Action::ExpandVolume {
            ordinal,
            size: human(desired),
        }));
    }
    provider_working(cx, &claims).map(Step::Wait)
}

/// A volume whose expansion the storage provider has not finished (and
/// that does not wait for its Pod to start again).
fn provider_working(cx: &Context<'_>, claims: &[(u32, PvcState)]) -> Option<Waiting> {
    claims.iter().find_map(|(ordinal, p)| {
        let (requested, capacity) = (p.requested?, p.capacity?);
        (capacity < requested && !p.filesystem_resize_pending).then(|| {
            Waiting::InProgress(format!(
                "the volume of {} grows from {} to {}",
                cx.name(*ordinal),
                human(capacity),
                human(requested)
            ))
        })
    })
}

fn wait(waiting: Waiting) -> Option<Step> {
    Some(Step::Wait(waiting))
}
