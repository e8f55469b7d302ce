//! A restore into a new incarnation from the surviving member with the
//! newest data (rule 7), once a person (or `spec.recovery.policy`) allowed
//! it. The restore is recorded in `status.restore` before its first step;
//! every later pass derives the next step from that record and what it
//! observes, so an operator restart carries it on, and nothing is ever
//! half-applied silently (`status.restore.step` names the step):
//!
//! 1. every Pod of the lost incarnation is deleted (the survivor's too: its
//!    data must not change while it is copied);
//! 2. the restore Pod runs on the survivor's volume: a copy of its
//!    `member/snap/db` is restored with `etcdutl snapshot restore` into the
//!    new incarnation (same member name, new token, new cluster ID); the old
//!    data dir is kept beside the new one;
//! 3. the survivor's PVC records the new incarnation; the restore Pod goes;
//! 4. the PVCs of the members whose data was lost are deleted; every other
//!    survivor's PVC is kept until a person releases it (rule 11);
//! 5. the survivor starts alone as the only member of the new incarnation;
//!    once it serves, the restore is complete and the other members join as
//!    learners, one at a time, like any scale-up.

use super::action::{Action, Bootstrap};
use super::context::Context;
use super::observed::RestorePodState;
use super::step::{Step, Waiting};
use crate::addressing::member_name;
use crate::api::RecoverySource;
use crate::api::identity::MemberIdentity;

/// The next step of a restore in progress, `None` when there is none.
pub fn restore_in_progress(cx: &Context<'_>) -> Option<Step> {
    let restore = cx.restoring.as_ref()?;
    if cx.cluster_id.is_some() {
        // The new incarnation serves: the restore is complete.
        return None;
    }
    let survivor = u32::try_from(restore.survivor_ordinal).ok()?;
    let token = restore.incarnation.clone();
    let from_backup = restore.source == RecoverySource::Backup;
    let survivor_name = member_name(&cx.o.name, survivor);
    let survivor_pvc = cx.o.objects(survivor).pvc;
    let adopted = survivor_pvc
        .as_ref()
        .is_some_and(|p| p.identity.cluster_token == token);

    // 1. No member of the lost incarnation may run.
    for ordinal in cx.ordinals() {
        let objects = cx.o.objects(ordinal);
        let Some(pod) = &objects.pod else { continue };
        if ordinal == survivor && adopted {
            continue;
        }
        let node_gone = pod
            .node
            .as_ref()
            .is_some_and(|n| cx.o.node_confirmed_gone(n));
        if pod.deleting && !node_gone {
            return Some(Step::Wait(Waiting::InProgress(format!(
                "restore: Pod {} of the lost incarnation is terminating",
                member_name(&cx.o.name, ordinal)
            ))));
        }
        return Some(Step::Act(Action::DeletePod {
            ordinal,
            force: node_gone,
            reason: format!(
                "restoring into incarnation {token}: no member of the lost incarnation may run"
            ),
        }));
    }

    // 2. and 3. The survivor's volume.
    let Some(pvc) = survivor_pvc else {
        if from_backup {
            // A fresh volume for the backup: it holds no incarnation until
            // the restored data is adopted.
            return Some(Step::Act(Action::CreatePvc {
                ordinal: survivor,
                identity: MemberIdentity::default(),
                size: cx.o.new_claim_size(),
            }));
        }
        return Some(Step::Wait(Waiting::NeedsAttention(format!(
            "restore: the PVC of survivor {survivor_name} is gone; nothing can be restored from it"
        ))));
    };
    if !adopted {
        if !from_backup && let Some(evidence) = cx.data_gone(survivor) {
            return Some(Step::Wait(Waiting::NeedsAttention(format!(
                "restore: the data of survivor {survivor_name} is gone too ({evidence}); restore from a backup"
            ))));
        }
        if pvc.deleting {
            return Some(Step::Wait(Waiting::NeedsAttention(format!(
                "restore: the PVC of survivor {survivor_name} is being deleted"
            ))));
        }
        // A backup needs a volume it can be restored into: a claim whose
        // volume is lost (or node-local on a deleted node) holds nothing a
        // Pod can mount, so it is replaced by a fresh one first.
        let objects = cx.o.objects(survivor);
        if from_backup
            && (pvc.phase == super::observed::PvcPhase::Lost
                || super::evidence::local_volume_on_deleted_node(cx.o, &objects).is_some())
        {
            return Some(Step::Act(Action::DeletePvc {
                ordinal: survivor,
                reason: format!(
                    "restoring the backups into incarnation {token}: its volume cannot be mounted, so a fresh claim receives them"
                ),
            }));
        }
        return Some(match &cx.o.restore_pod {
            None => Step::Act(Action::RunRestore {
                ordinal: survivor,
                token,
                from_backup,
            }),
            Some(RestorePodState::CannotRun(why)) => Step::Wait(Waiting::NeedsAttention(format!(
                "restore: the restore Pod {} cannot run: {why}; nothing of the lost incarnation has changed yet; fix the cause (the image, room on the nodes, the volume of {survivor_name}) or delete the restore Pod to run it again",
                crate::addressing::restore_pod_name(&cx.o.name)
            ))),
            Some(RestorePodState::Running | RestorePodState::Deleting) => {
                Step::Wait(Waiting::InProgress(format!(
                    "restore: restoring the data of {survivor_name} into incarnation {token}"
                )))
            }
            Some(RestorePodState::Succeeded) => Step::Act(Action::AdoptRestoredVolume {
                ordinal: survivor,
                token,
            }),
            Some(RestorePodState::Failed(message)) if from_backup => {
                Step::Wait(Waiting::NeedsAttention(format!(
                    "restore: the restore Pod failed ({message}); nothing was started from the backup; fix the cause (Secret, destination, backup) and delete the restore Pod {} to run it again",
                    crate::addressing::restore_pod_name(&cx.o.name)
                )))
            }
            Some(RestorePodState::Failed(message)) => Step::Wait(Waiting::NeedsAttention(format!(
                "restore: the restore Pod failed ({message}); the survivor's data is kept; delete the restore Pod to run it again"
            ))),
        });
    }
    match &cx.o.restore_pod {
        Some(RestorePodState::Deleting) => {
            return Some(Step::Wait(Waiting::InProgress(
                "restore: the restore Pod is terminating".to_string(),
            )));
        }
        Some(_) => {
            return Some(Step::Act(Action::DeleteRestorePod {
                reason: format!("the data of {survivor_name} is restored"),
            }));
        }
        None => {}
    }

    // 4. The volumes of the members whose data was lost hold nothing worth
    // keeping; every other survivor's volume is kept (rule 11) until a
    // person releases it.
    for (&ordinal, objects) in &cx.o.ordinals {
        let Some(pvc) = &objects.pvc else { continue };
        if ordinal == survivor || pvc.identity.cluster_token == token {
            continue;
        }
        if cx.retained(ordinal).is_some() {
            continue;
        }
        if pvc.deleting {
            return Some(Step::Wait(Waiting::InProgress(format!(
                "restore: the PVC of {} is being deleted",
                member_name(&cx.o.name, ordinal)
            ))));
        }
        return Some(Step::Act(Action::DeletePvc {
            ordinal,
            reason: format!(
                "superseded by the restore into incarnation {token}: it holds a member of the lost incarnation"
            ),
        }));
    }

    // 5. The survivor starts the new incarnation alone. Its data dir
    // already holds the new incarnation (etcdutl wrote its WAL), so etcd
    // ignores --initial-cluster-state; `existing` makes sure that nothing
    // could ever bootstrap an empty cluster under this token (and the guard
    // refuses an emptied volume).
    if cx.o.objects(survivor).pod.is_none() {
        return Some(Step::Act(Action::CreatePod {
            ordinal: survivor,
            bootstrap: Bootstrap::Existing {
                token: token.clone(),
                initial_members: vec![survivor],
                peer_urls: Default::default(),
            },
            identity: MemberIdentity {
                cluster_token: token,
                cluster_id: None,
                member_id: None,
            },
            release: None,
        }));
    }
    Some(Step::Wait(Waiting::InProgress(format!(
        "restore: waiting for {survivor_name} to serve incarnation {token}"
    ))))
}
