//! Rule 15: a member whose data etcd found damaged is rebuilt from its
//! healthy peers on a new volume, learner first, within quorum, and the
//! damaged volume is set aside for a person, never deleted.
//!
//! This step only sets the volume aside (its PersistentVolume reclaimed by
//! `Retain`, annotated with etcd's words); from then on the member's data
//! counts as gone (`Context::data_gone`), and the steps that replace a
//! member whose data is lost remove it, delete its claim (the volume stays,
//! `Released`) and add it again on a new claim.

use super::Action;
use super::context::Context;
use super::step::{Step, Waiting};

/// Sets the volume of the first damaged member aside, when its rebuild can
/// follow within quorum.
pub(super) fn set_damaged_volumes_aside(cx: &Context<'_>) -> Option<Step> {
    for member in &cx.membership.members {
        let Some(ordinal) = member.ordinal else {
            continue;
        };
        let Some(damage) = cx.damage(ordinal) else {
            continue;
        };
        let Some(pvc) = cx.o.objects(ordinal).pvc else {
            continue;
        };
        if pvc.set_aside || pvc.released || pvc.deleting {
            continue;
        }
        let name = cx.name(ordinal);
        let Some(volume) = pvc.volume_name.clone() else {
            return Some(Step::Wait(Waiting::NeedsAttention(format!(
                "etcd found the data of {name} damaged ({damage}) but its PVC is bound to no PersistentVolume the operator can keep; nothing is done to it"
            ))));
        };
        if !member.learner {
            let mut out_of_service = cx.lost_voters();
            out_of_service.push(member.id);
            if !cx.membership.change_allowed(&out_of_service) {
                return Some(Step::Wait(Waiting::HealthNotStable));
            }
            if !cx.membership.removal_keeps_quorum(member.id) {
                return Some(Step::Wait(Waiting::NeedsAttention(format!(
                    "etcd found the data of {name} damaged ({damage}); rebuilding it would leave no quorum, so it is kept as it is until the other members serve"
                ))));
            }
        }
        return Some(Step::Act(Action::SetVolumeAside {
            ordinal,
            volume,
            evidence: damage,
        }));
    }
    None
}
