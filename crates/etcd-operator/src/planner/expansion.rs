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
        // A class that refuses to grow its volumes (or cannot be read)
        // blocks nothing: status says so (`expansion_warning`), the quota
        // stays sized for the volumes as they are, and every other change
        // goes on.
        if cx.o.volume_expansion_allowed != Some(true) {
            return None;
        }
        // One PVC at a time: the next once the storage provider has
        // expanded the previous one's volume. Meanwhile other work goes on
        // (the quota follows the volumes only once all have grown), and
        // a provider that never finishes holds up nothing else.
        if provider_working(cx, &claims).is_some() {
            return None;
        }
        return Some(Step::Act(super::Action::ExpandVolume {
            ordinal,
            size: human(desired),
        }));
    }
    None
}

/// The wait of a pass with nothing else to do while the storage provider
/// grows a volume: last in the plan, so that it holds up no other work.
pub(super) fn volumes_growing(cx: &Context<'_>) -> Option<Step> {
    let claims: Vec<(u32, PvcState)> = (0..cx.replicas)
        .filter_map(|o| Some((o, cx.o.objects(o).pvc?)))
        .filter(|(_, p)| !p.deleting && p.phase == PvcPhase::Bound)
        .collect();
    provider_working(cx, &claims).map(Step::Wait)
}

/// What status says of a `storage.size` the volumes do not have and will
/// not get: a class that does not allow expansion (or could not be read),
/// and volumes larger than the spec (they never shrink). `None` when the
/// volumes have, or are growing to, what the spec asks.
pub fn expansion_warning(cx: &Context<'_>) -> Option<String> {
    let desired = desired_bytes(cx)?;
    let have = cx.o.quota_volume_bytes();
    let above = cx.o.volumes_above_spec();
    if let Some(largest) = above.iter().map(|(_, bytes)| *bytes).max() {
        return Some(format!(
            "storage.size is {} but volumes of {} members are {}: volumes never shrink, so they keep their size and new volumes get {}",
            human(desired),
            above.len(),
            human(largest),
            human(largest)
        ));
    }
    let small = (0..cx.replicas)
        .filter_map(|o| cx.o.objects(o).pvc)
        .filter(|p| !p.deleting && p.phase == PvcPhase::Bound)
        .any(|p| p.requested.is_some_and(|r| r < desired));
    if !small {
        return None;
    }
    let why = match cx.o.volume_expansion_allowed {
        Some(true) => return None,
        Some(false) => {
            "the StorageClass of the volumes does not allow expansion (allowVolumeExpansion)"
        }
        None => "the StorageClass of the volumes could not be read",
    };
    Some(format!(
        "storage.size asks for {} but {why}: the volumes keep {}, etcd's quota stays sized for them, and other changes go on; set storage.size back to {} to clear this",
        human(desired),
        human(have),
        human(have)
    ))
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
