//! The decision: which single step to take next, in a fixed order of
//! priority. Each step function returns `Some` when it decides the pass.

use super::action::{Action, Bootstrap};
use super::context::Context;
use super::evidence::{PodTrouble, pod_trouble};
use super::membership::{KnownMember, Source, quorum};
use super::observed::PodPhase;
use super::step::{Step, Waiting};
use super::survivor::{Survivor, SurvivorChoice, approved_survivor, choose_survivor};
use crate::api::identity::MemberIdentity;
use crate::api::{RecoverySource, RetentionPolicy};

/// Decides the single step of this pass.
pub fn decide(cx: &Context<'_>) -> Step {
    if cx.o.spec.paused {
        return Step::Wait(Waiting::Paused);
    }
    [
        unowned_names as fn(&Context<'_>) -> Option<Step>,
        children,
        restore_labels,
        super::restore::restore_in_progress,
        bootstrap,
        release_pods_on_gone_nodes,
        record_identity,
        recreate_pods,
        super::corrupt::corrupt_alarm,
        without_quorum,
        super::maintenance::recover_space,
        super::damage::set_damaged_volumes_aside,
        learner_in_progress,
        replace_lost_members,
        pdb,
        add_missing_members,
        scale_down,
        // Data kept for a person comes first: a rollout waits for it.
        retained_data,
        super::expansion::expand_volumes,
        super::rollout::update_pod_metadata,
        super::rollout::roll_members,
        super::transport::move_peer_urls,
        super::certificates::rotate_ca,
        super::maintenance::defragment,
        super::transport::refused,
        super::expansion::volumes_growing,
    ]
    .iter()
    .find_map(|step| step(cx))
    .unwrap_or(Step::Wait(Waiting::Steady))
}

fn act(action: Action) -> Option<Step> {
    Some(Step::Act(action))
}

fn wait(waiting: Waiting) -> Option<Step> {
    Some(Step::Wait(waiting))
}

/// An object under a name the cluster needs that it does not own is never
/// taken over (a forced apply would): a person renames or removes it.
fn unowned_names(cx: &Context<'_>) -> Option<Step> {
    if cx.o.unowned.is_empty() {
        return None;
    }
    wait(Waiting::NeedsAttention(format!(
        "{} exist(s) but do(es) not belong to this cluster; the operator will not take it over: delete or rename it",
        cx.o.unowned.join(", ")
    )))
}

/// Rule 10: objects of a member that lost their labels were found by name;
/// they are this member's, so their labels go back (never a replacement).
fn restore_labels(cx: &Context<'_>) -> Option<Step> {
    cx.o.ordinals.iter().find_map(|(&ordinal, objects)| {
        let pvc = objects.pvc.as_ref().is_some_and(|p| p.labels_missing);
        let pod = objects.pod.as_ref().is_some_and(|p| p.labels_missing);
        (pvc || pod).then_some(Step::Act(Action::RestoreLabels { ordinal, pvc, pod }))
    })
}

fn children(cx: &Context<'_>) -> Option<Step> {
    if !cx.o.children.peer_service {
        return act(Action::CreatePeerService);
    }
    if !cx.o.children.client_service {
        return act(Action::CreateClientService);
    }
    None
}

/// Rule 6: `new` only before the cluster has ever formed, all members of
/// the first bootstrap with the same `--initial-cluster` and token.
fn bootstrap(cx: &Context<'_>) -> Option<Step> {
    if cx.formed {
        return None;
    }
    if cx
        .o
        .spec
        .bootstrap
        .as_ref()
        .is_some_and(|b| b.from_backup.is_some())
    {
        // Never an empty keyspace when the user asked for a backup: the
        // restore is recorded and carried out by `restore_in_progress`.
        // Once it is complete the cluster has formed.
        return act(Action::RestoreFromBackup {
            ordinal: 0,
            new_token: cx.token.clone(),
        });
    }
    let initial: Vec<u32> = (0..cx.bootstrap_replicas).collect();
    for &ordinal in &initial {
        if cx.o.objects(ordinal).pvc.is_none() {
            return act(Action::CreatePvc {
                ordinal,
                identity: MemberIdentity {
                    cluster_token: cx.token.clone(),
                    ..Default::default()
                },
                size: cx.o.new_claim_size(),
            });
        }
    }
    for &ordinal in &initial {
        let objects = cx.o.objects(ordinal);
        if objects.pod.is_none() && objects.pvc.as_ref().is_some_and(|p| !p.deleting) {
            return act(Action::CreatePod {
                ordinal,
                bootstrap: Bootstrap::New {
                    token: cx.token.clone(),
                    initial_members: initial.clone(),
                },
                identity: cx.identity_of(ordinal),
                release: None,
            });
        }
    }
    wait(Waiting::Bootstrapping)
}

/// Rule 4: a Pod on a node confirmed gone can be released (force-deleted):
/// nothing of it can still run. Done for Pods already terminating, and for
/// Pods whose volume can follow them to another node once the member has
/// been given `memberFailureTimeout`.
fn release_pods_on_gone_nodes(cx: &Context<'_>) -> Option<Step> {
    let timeout = cx.o.spec.member_failure_timeout();
    for ordinal in cx.ordinals() {
        let objects = cx.o.objects(ordinal);
        let (Some(pod), Some(PodTrouble::NodeGone { node })) =
            (&objects.pod, pod_trouble(cx.o, &objects))
        else {
            continue;
        };
        let waited_enough = cx.o.node_deleted(&node)
            || cx
                .o
                .nodes
                .get(&node)
                .and_then(|n| n.not_ready_since)
                .is_none_or(|since| cx.o.now.duration_since(since).unsigned_abs() >= timeout);
        let volume_moves = objects
            .pvc
            .as_ref()
            .is_some_and(|p| p.volume == super::observed::VolumeKind::Network);
        let data_lost = cx.data_gone(ordinal).is_some();
        if pod.deleting || (waited_enough && (volume_moves || data_lost)) {
            return act(Action::DeletePod {
                ordinal,
                force: true,
                reason: format!("node {node} is confirmed gone"),
            });
        }
    }
    None
}

/// Records on each PVC the member its data belongs to, once etcd shows it.
fn record_identity(cx: &Context<'_>) -> Option<Step> {
    if cx.membership.source != Source::Live {
        return None;
    }
    let cluster_id = cx.o.etcd.cluster_id?;
    for member in cx
        .membership
        .members
        .iter()
        .filter(|m| m.started && m.healthy)
    {
        let Some(ordinal) = member.ordinal else {
            continue;
        };
        let Some(pvc) = cx.o.objects(ordinal).pvc else {
            continue;
        };
        if pvc.deleting || pvc.identity.member_id == Some(member.id) {
            continue;
        }
        // A recorded ID that differs from the member serving from this
        // volume is stale metadata (rule 10): the data is this member's, as
        // etcd shows, so the record is corrected while it serves — before a
        // restart would have the guard refuse its own data.
        if pvc.identity.member_id.is_some() && !cx.serves_from_own_data(ordinal) {
            continue;
        }
        // Only record the member that actually runs on this PVC: its Pod is
        // there and etcd reports it started.
        if cx.o.objects(ordinal).pod.is_none() {
            continue;
        }
        return act(Action::AnnotatePvcIdentity {
            ordinal,
            identity: MemberIdentity {
                cluster_token: pvc.identity.cluster_token.clone(),
                cluster_id: Some(cluster_id),
                member_id: Some(member.id),
            },
        });
    }
    None
}

/// Lifecycle rows "pod deleted or evicted" and "majority of pods down": a
/// member whose PVC is intact gets its Pod back — same name, same PVC, same
/// member — with or without quorum.
fn recreate_pods(cx: &Context<'_>) -> Option<Step> {
    let known = !cx.membership.members.is_empty();
    let initial_members = if known {
        cx.membership.ordinals()
    } else {
        (0..cx.bootstrap_replicas).collect()
    };
    for ordinal in cx.ordinals() {
        let objects = cx.o.objects(ordinal);
        if objects.pod.is_some() {
            continue;
        }
        let Some(pvc) = &objects.pvc else { continue };
        if pvc.deleting || cx.data_gone(ordinal).is_some() {
            continue;
        }
        let belongs = match cx.membership.of_ordinal(ordinal) {
            Some(_) => true,
            // Without any membership knowledge, a PVC of this incarnation
            // that records no foreign member is one of ours.
            None => !known && pvc.identity.cluster_token == cx.token,
        };
        if !belongs {
            continue;
        }
        let mut members = initial_members.clone();
        if !members.contains(&ordinal) {
            members.push(ordinal);
            members.sort_unstable();
        }
        let peer_urls = cx
            .membership
            .members
            .iter()
            .filter(|m| !m.peer_urls.is_empty())
            .filter_map(|m| Some((m.ordinal?, m.peer_urls.clone())))
            .filter(|(o, _)| members.contains(o))
            .collect();
        return act(Action::CreatePod {
            ordinal,
            bootstrap: Bootstrap::Existing {
                token: cx.token.clone(),
                initial_members: members,
                peer_urls,
            },
            identity: cx.identity_of(ordinal),
            release: super::rollout::release_for_new_pods(cx),
        });
    }
    None
}

/// Rule 2: without quorum, only wait. Rule 7: a restore only when the data
/// of a majority is known lost and the recovery policy says so.
fn without_quorum(cx: &Context<'_>) -> Option<Step> {
    if cx.membership.source == Source::Live && cx.membership.quorum {
        return None;
    }
    let voters: Vec<&KnownMember> = cx.membership.voters().collect();
    let lost = super::loss::lost_voters(cx);
    if !voters.is_empty() && voters.len() - lost.len() < quorum(voters.len()) {
        let survivor = choose_survivor(cx, &lost);
        let restore = match cx.o.spec.recovery.source {
            RecoverySource::Survivor => approved_survivor(cx, &lost, &survivor)
                .and_then(|chosen| restore_from_survivor(cx, &chosen)),
            // Rules 7 and 11 hold for backups too (`loss`).
            RecoverySource::Backup => {
                let loss = super::loss::Loss::of(cx, &lost);
                super::loss::backup_restore_held(cx, &loss, &survivor)
                    .is_none()
                    .then(|| restore_from_backup_in_place(cx, &survivor))
                    .flatten()
            }
        };
        if let Some(step) = restore {
            return Some(step);
        }
        return wait(Waiting::MajorityDataLost {
            survivor,
            lost: lost
                .iter()
                .map(|(m, why)| {
                    format!(
                        "{} ({why})",
                        m.ordinal.map(|o| cx.name(o)).unwrap_or_default()
                    )
                })
                .collect(),
        });
    }
    let awaited = voters
        .iter()
        .filter(|m| !m.healthy)
        .map(|m| {
            m.ordinal
                .map(|o| cx.name(o))
                .unwrap_or_else(|| format!("{:x}", m.id))
        })
        .collect();
    wait(Waiting::QuorumLost { awaited })
}

fn restore_from_survivor(cx: &Context<'_>, survivor: &Survivor) -> Option<Step> {
    let incarnation = cx.o.status.cluster_token.as_deref().unwrap_or_default();
    Some(Step::Act(Action::RestoreFromSurvivor {
        ordinal: survivor.ordinal,
        id: survivor.id,
        revision: survivor.revision,
        new_token: next_token(&cx.token, incarnation),
    }))
}

/// A restore from the backups of `spec.recovery.backup` into the volume of
/// the newest survivor (its data kept beside the restored one), else of
/// member 0. The backup is restored, so an unreadable survivor does not
/// hold it up; its volume is kept like every other survivor's.
fn restore_from_backup_in_place(cx: &Context<'_>, choice: &SurvivorChoice) -> Option<Step> {
    cx.o.spec.recovery.backup.as_ref()?;
    let preferred = match choice {
        SurvivorChoice::Newest(s) => Some(s.ordinal),
        SurvivorChoice::Unreadable {
            newest_readable, ..
        } => newest_readable.as_ref().map(|s| s.ordinal),
        SurvivorChoice::NoSurvivor => None,
    };
    // A volume that cannot be mounted (its claim Lost, or node-local on a
    // deleted node) would hold the restore Pod Pending for ever.
    let mountable = |ordinal: u32| {
        let objects = cx.o.objects(ordinal);
        objects.pvc.as_ref().is_none_or(|p| {
            p.phase != super::observed::PvcPhase::Lost
                && super::evidence::local_volume_on_deleted_node(cx.o, &objects).is_none()
        })
    };
    // Without a readable survivor to receive it, the backup goes into the
    // volume of a member whose data is lost: a survivor's volume (one that
    // cannot be read now) is kept like every other survivor's.
    let holds_no_survivor =
        |o: u32| cx.membership.of_ordinal(o).is_none() || cx.data_gone(o).is_some();
    let candidates = 0..cx.replicas.max(1);
    let target = preferred
        .filter(|&o| mountable(o))
        .or_else(|| {
            candidates
                .clone()
                .find(|&o| mountable(o) && holds_no_survivor(o))
        })
        .or_else(|| candidates.clone().find(|&o| mountable(o)))
        .unwrap_or(0);
    let incarnation = cx.o.status.cluster_token.as_deref().unwrap_or_default();
    Some(Step::Act(Action::RestoreFromBackup {
        ordinal: target,
        new_token: next_token(&cx.token, incarnation),
    }))
}

/// The token of the incarnation after `token`: `<token>-r<n>`.
fn next_token(token: &str, _previous: &str) -> String {
    match token
        .rsplit_once("-r")
        .and_then(|(base, n)| Some((base, n.parse::<u32>().ok()?)))
    {
        Some((base, n)) => format!("{base}-r{}", n + 1),
        None => format!("{token}-r1"),
    }
}

/// The shortest time between two entries committed for a joining learner.
const RAFT_NUDGE_INTERVAL: k8s_openapi::jiff::SignedDuration =
    k8s_openapi::jiff::SignedDuration::from_secs(5);

/// Rule 3: at most one learner; promote it once it has caught up and served
/// for [`super::membership::LEARNER_SETTLE`].
fn learner_in_progress(cx: &Context<'_>) -> Option<Step> {
    let learner = cx.membership.learners().next()?;
    let beyond_spec = learner.ordinal.is_none_or(|o| o >= cx.replicas);
    let lost = learner.ordinal.and_then(|o| cx.data_gone(o));
    if beyond_spec || lost.is_some() {
        return act(Action::RemoveMember {
            id: learner.id,
            ordinal: learner.ordinal,
            reason: lost.unwrap_or_else(|| "learner no longer wanted by spec.replicas".to_string()),
        });
    }
    let ordinal = learner.ordinal?;
    let pod_running =
        cx.o.objects(ordinal)
            .pod
            .is_some_and(|p| p.phase == PodPhase::Running && !p.deleting);
    // At most one entry per interval: a pass follows each step within a
    // fraction of a second.
    let nudged_lately = cx.o.status.last_operation.as_ref().is_some_and(|op| {
        op.type_ == "AdvanceRaftLog" && cx.o.now.duration_since(op.time.0) < RAFT_NUDGE_INTERVAL
    });
    if !learner.started
        && pod_running
        && !nudged_lately
        && cx.membership.source == Source::Live
        && cx.membership.quorum
    {
        // Harmless while it receives the snapshot; needed once it has
        // applied it on a cluster where nothing else is written.
        return act(Action::AdvanceRaftLog {
            learner: learner.id,
            ordinal,
        });
    }
    if !learner.started || !cx.membership.settled_learner(learner) {
        return wait(Waiting::LearnerCatchingUp);
    }
    let leader_index = cx
        .membership
        .members
        .iter()
        .find(|m| m.leader)
        .and_then(|m| m.raft_index);
    let caught_up = match (learner.raft_index, leader_index) {
        (Some(mine), Some(leader)) => mine.saturating_mul(10) >= leader.saturating_mul(9),
        _ => true,
    };
    if !caught_up {
        return wait(Waiting::LearnerCatchingUp);
    }
    if !cx.membership.change_allowed(&cx.lost_voters()) {
        return wait(Waiting::HealthNotStable);
    }
    act(Action::PromoteLearner {
        id: learner.id,
        ordinal,
    })
}

/// Lifecycle rows "PVC/PV deleted, data dir wiped or foreign" and "node
/// gone, node-local PV": remove the member whose data is gone (remove, then
/// add as a learner), one at a time, only while the others hold quorum and
/// are healthy.
fn replace_lost_members(cx: &Context<'_>) -> Option<Step> {
    let lost = cx.lost_voters();
    for member in cx.membership.voters() {
        let Some(ordinal) = member.ordinal else {
            continue;
        };
        let Some(evidence) = cx.data_gone(ordinal) else {
            continue;
        };
        if !cx.membership.change_allowed(&lost) {
            return wait(Waiting::HealthNotStable);
        }
        if !cx.membership.removal_keeps_quorum(member.id) {
            return wait(Waiting::NeedsAttention(format!(
                "{} lost its data ({evidence}) but removing it would leave no quorum",
                cx.name(ordinal)
            )));
        }
        return act(Action::RemoveMember {
            id: member.id,
            ordinal: Some(ordinal),
            reason: evidence,
        });
    }
    None
}

/// Ordinals wanted by the spec without a member: clear what is left of a
/// removed member, then PVC, learner, Pod. Also scale-up.
fn add_missing_members(cx: &Context<'_>) -> Option<Step> {
    if cx.membership.source != Source::Live || !cx.membership.quorum {
        return None;
    }
    for ordinal in 0..cx.replicas {
        if cx.membership.of_ordinal(ordinal).is_some() {
            continue;
        }
        let objects = cx.o.objects(ordinal);
        if let Some(pvc) = &objects.pvc {
            if pvc.deleting {
                if objects.pod.is_some() {
                    return release_stale_pod(cx, ordinal);
                }
                return wait(Waiting::InProgress(format!(
                    "PVC of {} is being deleted",
                    cx.name(ordinal)
                )));
            }
            if let Some(evidence) = cx.data_gone(ordinal) {
                return act(Action::DeletePvc {
                    ordinal,
                    reason: format!("it holds no usable member data: {evidence}"),
                });
            }
            if cx.retained(ordinal).is_some() {
                continue;
            }
            if let Some(old) = pvc.identity.member_id {
                // etcd never lets a removed member rejoin: the data of a
                // member no longer in the cluster cannot serve this ordinal
                // again. (Scale-down leftovers stay while the ordinal is not
                // wanted; storage.retentionPolicy applies there.)
                return act(Action::DeletePvc {
                    ordinal,
                    reason: format!(
                        "it holds the data of removed member {old:x}, which can never rejoin"
                    ),
                });
            }
        }
        if objects.pod.is_some() {
            return release_stale_pod(cx, ordinal);
        }
        if objects.pvc.is_none() {
            return act(Action::CreatePvc {
                ordinal,
                identity: cx.identity_of(ordinal),
                size: cx.o.new_claim_size(),
            });
        }
        if cx.membership.learners().next().is_some() {
            return wait(Waiting::LearnerCatchingUp);
        }
        if !cx.membership.change_allowed(&[]) {
            return wait(Waiting::HealthNotStable);
        }
        return act(Action::AddLearner { ordinal });
    }
    None
}

/// A Pod of an ordinal without member: delete it (gracefully, or by force
/// when its node is confirmed gone) before anything new starts there.
fn release_stale_pod(cx: &Context<'_>, ordinal: u32) -> Option<Step> {
    let objects = cx.o.objects(ordinal);
    let pod = objects.pod.as_ref()?;
    if pod.deleting {
        return wait(Waiting::InProgress(format!(
            "Pod {} is terminating",
            cx.name(ordinal)
        )));
    }
    act(Action::DeletePod {
        ordinal,
        force: false,
        reason: "its member is no longer in the cluster".to_string(),
    })
}

/// Scale down: one member at a time among the ordinals beyond
/// `spec.replicas`: an unhealthy one first (it serves nobody, and waiting for
/// it to be healthy would block the scale-down forever), else the highest
/// ordinal; leadership moved away first; then its Pod; then its PVC by the
/// retention policy. Never below a quorum of healthy voters (rule 5).
fn scale_down(cx: &Context<'_>) -> Option<Step> {
    if cx.membership.source != Source::Live || !cx.membership.quorum {
        return None;
    }
    let extra = cx
        .membership
        .voters()
        .filter(|m| m.ordinal.is_some_and(|o| o >= cx.replicas))
        .max_by_key(|m| (!m.healthy, m.ordinal));
    if let Some(member) = extra {
        let except: &[u64] = if member.healthy { &[] } else { &[member.id] };
        if !cx.membership.change_allowed(except) {
            return wait(Waiting::HealthNotStable);
        }
        if !cx.membership.removal_keeps_quorum(member.id) {
            return wait(Waiting::HealthNotStable);
        }
        if member.leader {
            let to = cx
                .membership
                .voters()
                .filter(|m| m.ordinal.is_some_and(|o| o < cx.replicas))
                .find(|m| cx.membership.stably_healthy(m))?;
            return act(Action::TransferLeadership {
                from: member.id,
                to: to.id,
            });
        }
        return act(Action::RemoveMember {
            id: member.id,
            ordinal: member.ordinal,
            reason: if member.healthy {
                "scaling down".to_string()
            } else {
                "scaling down (an unhealthy member first)".to_string()
            },
        });
    }
    let leftovers: Vec<u32> =
        cx.o.ordinals
            .keys()
            .copied()
            .filter(|&o| o >= cx.replicas && cx.membership.of_ordinal(o).is_none())
            .collect();
    for ordinal in leftovers.into_iter().rev() {
        let objects = cx.o.objects(ordinal);
        if objects.pod.is_some() {
            return release_stale_pod(cx, ordinal);
        }
        if let Some(pvc) = &objects.pvc
            && !pvc.deleting
            && cx.o.spec.storage.retention_policy == RetentionPolicy::Delete
            && cx.retained(ordinal).is_none()
        {
            return act(Action::DeletePvc {
                ordinal,
                reason: "scaled down; storage.retentionPolicy is Delete".to_string(),
            });
        }
    }
    None
}

/// Rule 5: the PodDisruptionBudget keeps a quorum of the current voters
/// (not of `spec.replicas`: during and after a scale the two differ). Until
/// the voters are known it is created for the spec's size.
fn pdb(cx: &Context<'_>) -> Option<Step> {
    let voters = if cx.membership.source == Source::Live && cx.membership.voter_count() > 0 {
        cx.membership.voter_count()
    } else if cx.o.children.pdb {
        return None;
    } else {
        usize::try_from(cx.replicas).unwrap_or(1).max(1)
    };
    let min_available = u32::try_from(quorum(voters)).unwrap_or(u32::MAX);
    let current =
        cx.o.children
            .pdb_min_available
            .and_then(|m| u32::try_from(m).ok());
    (!cx.o.children.pdb || current != Some(min_available)).then_some(Step::Act(
        Action::ApplyPodDisruptionBudget { min_available },
    ))
}

/// Rule 11: PVCs that hold a survivor's data of a lost incarnation are
/// kept until a person releases them; the cluster says so instead of
/// looking complete.
fn retained_data(cx: &Context<'_>) -> Option<Step> {
    let kept: Vec<String> =
        cx.o.ordinals
            .keys()
            .filter_map(|&o| cx.retained(o))
            .collect();
    if kept.is_empty() {
        return None;
    }
    wait(Waiting::NeedsAttention(format!(
        "{}; annotate a PVC with {}=true to let the operator delete it and replace its member",
        kept.join("; "),
        crate::api::identity::RELEASE_DATA_ANNOTATION
    )))
}
