//! The status a pass reports: members, conditions that name what is wrong,
//! phase, and the bookkeeping the next pass relies on.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

use super::context::Context;
use super::evidence::pod_trouble;
use super::membership::{KnownMember, Source};
use super::step::{Step, Waiting};
use super::survivor::SurvivorChoice;
use crate::addressing::{member_name, pvc_name};
use crate::api::identity::format_id;
use crate::api::{
    ConditionType, EtcdClusterStatus, LastOperation, MemberRole, MemberStatus, OperationState,
    Phase, RestoreStatus, version,
};
use crate::controller_kit::conditions;

/// Computes the status of a pass.
pub fn build(cx: &Context<'_>, step: &Step) -> EtcdClusterStatus {
    let o = cx.o;
    let previous = &o.status;
    let members = members(cx);
    let ready = members
        .iter()
        .filter(|m| m.healthy && m.role.is_some())
        .count();
    let quorum = cx.membership.source == Source::Live && cx.membership.quorum;
    let starting_restore = matches!(
        step,
        Step::Act(
            crate::planner::Action::RestoreFromSurvivor { .. }
                | crate::planner::Action::RestoreFromBackup { .. }
        )
    );
    let from_backup = matches!(
        step,
        Step::Act(crate::planner::Action::RestoreFromBackup { .. })
    ) || cx
        .restoring
        .as_ref()
        .is_some_and(|r| r.source == crate::api::RecoverySource::Backup);
    // A restore in progress until the new incarnation serves.
    let restoring = cx.restoring.is_some() && cx.cluster_id.is_none();
    let mut conditions = Vec::new();
    let mut set = |type_: ConditionType, status: bool, reason: &str, message: String| {
        conditions.push(condition(cx, type_, status, reason, message));
    };

    let warnings = spec_warnings(cx);
    set(
        ConditionType::Available,
        quorum,
        if quorum {
            "QuorumReachable"
        } else if cx.formed {
            "QuorumLost"
        } else {
            "Bootstrapping"
        },
        if quorum {
            format!("{ready} of {} members healthy{warnings}", cx.replicas)
        } else {
            format!("the cluster has no working quorum{warnings}")
        },
    );
    // Quorum is lost whenever a formed cluster has none, also in a pass that
    // acts (e.g. recreates a Pod): the condition must not flap with the step.
    let data_lost_step = matches!(step, Step::Wait(Waiting::MajorityDataLost { .. }));
    let quorum_lost = cx.formed && !quorum && !data_lost_step;
    let quorum_message = if quorum_lost {
        let awaited: Vec<String> = match step {
            Step::Wait(Waiting::QuorumLost { awaited }) => awaited.clone(),
            _ => cx
                .membership
                .voters()
                .filter(|m| !m.healthy)
                .map(|m| {
                    m.ordinal
                        .map(|ordinal| member_name(&o.name, ordinal))
                        .unwrap_or_else(|| format_id(m.id))
                })
                .collect(),
        };
        format!(
            "waiting for {}; their volumes are intact, so no member is removed and nothing is restored",
            if awaited.is_empty() {
                "the members".to_string()
            } else {
                awaited.join(", ")
            }
        )
    } else {
        "quorum is reachable or the cluster has not formed yet".to_string()
    };
    set(
        ConditionType::QuorumLost,
        quorum_lost,
        if quorum_lost {
            "MembersAwaited"
        } else {
            "AsExpected"
        },
        quorum_message,
    );
    let (data_lost, data_message) = match step {
        Step::Wait(Waiting::MajorityDataLost { lost, survivor }) => (
            true,
            format!(
                "data of a majority is known lost: {}; {}; {}",
                lost.join(", "),
                survivor.describe(),
                how_to_approve(cx, survivor),
            ),
        ),
        Step::Act(crate::planner::Action::RestoreFromSurvivor {
            ordinal, revision, ..
        }) => (
            true,
            format!(
                "restoring from survivor {} at revision {}",
                cx.name(*ordinal),
                revision.map_or("unknown".to_string(), |r| r.to_string())
            ),
        ),
        Step::Act(crate::planner::Action::RestoreFromBackup { .. }) if cx.formed => (
            true,
            format!(
                "restoring from the backups of spec.recovery.backup; the newest revision a survivor held: {}",
                survivor_revision(cx)
            ),
        ),
        _ if restoring && (!from_backup || restore_in_place(cx)) => (
            true,
            format!(
                "restoring into a new incarnation: {}",
                restore_step(cx, step)
            ),
        ),
        _ => (false, "no loss of data of a majority is known".to_string()),
    };
    set(
        ConditionType::MajorityDataLost,
        data_lost,
        if data_lost {
            "MajorityDataLost"
        } else {
            "AsExpected"
        },
        data_message,
    );
    // The PVC of a scaled-down member kept by storage.retentionPolicy is
    // listed, but nothing is wrong with the cluster.
    let kept_after_scale_down = |m: &MemberStatus| {
        m.role.is_none()
            && m.pod.is_none()
            && crate::addressing::ordinal_of_member(&o.name, &m.name)
                .is_some_and(|ordinal| ordinal >= cx.replicas)
    };
    let rollout = rollout_status(cx, step);
    let being_replaced = |m: &MemberStatus| {
        rollout.as_ref().is_some_and(|r| {
            r.member == m.name
                && cx.o.now.duration_since(r.started.0) < super::rollout::ROLLOUT_STALL
        })
    };
    let degraded: Vec<String> = members
        .iter()
        .filter(|m| !kept_after_scale_down(m) && !being_replaced(m))
        .filter(|m| !(m.healthy && m.role.is_some()) || m.message.is_some())
        .map(|m| {
            format!(
                "{}: {}",
                m.name,
                m.message.clone().unwrap_or_else(|| "unhealthy".to_string())
            )
        })
        .collect();
    let certificates =
        super::certificates::expiry_warnings(&o.name, o.tls.as_ref().map(|t| &t.status), o.now);
    let degraded_reason = if !degraded.is_empty() {
        "MembersUnhealthy"
    } else if !certificates.is_empty() {
        super::certificates::EXPIRING_REASON
    } else {
        "AsExpected"
    };
    let degraded: Vec<String> = degraded.into_iter().chain(certificates).collect();
    set(
        ConditionType::Degraded,
        !degraded.is_empty(),
        degraded_reason,
        if degraded.is_empty() {
            "every member is healthy".to_string()
        } else {
            degraded.join("; ")
        },
    );
    let (backup_ready, backup_reason, backup_message) = super::backup_health::condition(cx);
    set(
        ConditionType::BackupReady,
        backup_ready,
        backup_reason,
        backup_message,
    );
    set(
        ConditionType::DamagedDataKept,
        !o.damaged_volumes_kept.is_empty(),
        if o.damaged_volumes_kept.is_empty() {
            "AsExpected"
        } else {
            "DamagedVolumesSetAside"
        },
        if o.damaged_volumes_kept.is_empty() {
            "no damaged data is kept".to_string()
        } else {
            format!(
                "kept for a person, the members were rebuilt: {}; delete a PersistentVolume once its data is no longer wanted",
                o.damaged_volumes_kept.join("; ")
            )
        },
    );
    let (progressing, reason, message) = progress(cx, step);
    set(ConditionType::Progressing, progressing, reason, message);
    set(
        ConditionType::Paused,
        o.spec.paused,
        if o.spec.paused {
            "Paused"
        } else {
            "AsExpected"
        },
        if o.spec.paused {
            "spec.paused is set: the operator takes no action".to_string()
        } else {
            "not paused".to_string()
        },
    );

    let phase = if o.spec.paused {
        Phase::Paused
    } else if starting_restore || restoring {
        Phase::Recovering
    } else if data_lost {
        Phase::MajorityDataLost
    } else if !cx.formed {
        Phase::Bootstrapping
    } else if !quorum {
        Phase::QuorumLost
    } else if !degraded.is_empty() {
        Phase::Degraded
    } else if progressing {
        Phase::Progressing
    } else {
        Phase::Running
    };

    let last_operation = match step {
        Step::Act(action) => Some(LastOperation {
            type_: action.kind().to_string(),
            description: action.describe(&o.name),
            state: OperationState::Issued,
            time: Time(o.now),
        }),
        Step::Wait(_) => previous.last_operation.clone(),
    };
    let restore = restore_status(cx, step);
    let data_loss = match step {
        Step::Wait(Waiting::MajorityDataLost { .. })
        | Step::Act(
            crate::planner::Action::RestoreFromSurvivor { .. }
            | crate::planner::Action::RestoreFromBackup { .. },
        ) if cx.formed => Some(super::loss::status(cx, &super::loss::lost_voters(cx))),
        _ if restoring => previous.data_loss.clone(),
        _ => None,
    };
    // The new incarnation starts with the survivor alone.
    let bootstrap_replicas = if starting_restore || restoring {
        Some(1)
    } else {
        previous.bootstrap_replicas
    };
    let bootstrap_replicas = bootstrap_replicas.or_else(|| {
        matches!(step, Step::Act(crate::planner::Action::CreatePod { bootstrap, .. }) if bootstrap.is_new())
            .then(|| i32::try_from(cx.bootstrap_replicas).unwrap_or(i32::MAX))
    });
    let newest_revision = [previous.newest_revision, o.etcd.max_revision]
        .into_iter()
        .flatten()
        .max();

    let (cluster_id, cluster_token) = match step {
        Step::Act(
            crate::planner::Action::RestoreFromSurvivor { new_token, .. }
            | crate::planner::Action::RestoreFromBackup { new_token, .. },
        ) => (None, new_token.clone()),
        _ => (cx.cluster_id.map(format_id), cx.token.clone()),
    };
    EtcdClusterStatus {
        observed_generation: o.generation,
        cluster_id,
        cluster_token: Some(cluster_token),
        bootstrap_replicas,
        phase: Some(phase),
        members,
        ready_members: i32::try_from(ready).unwrap_or(i32::MAX),
        version: running_versions(cx),
        pod_template_hash: Some(cx.desired_template.clone()),
        updated_members: i32::try_from(super::rollout::progress(cx).updated).unwrap_or(i32::MAX),
        storage_version: super::rollout::storage_to_record(cx, step).map(|r| r.line()),
        newest_revision,
        conditions,
        last_operation,
        restore,
        data_loss,
        rollout,
        quota_backend_bytes: Some(o.quota_backend_bytes()),
        maintenance: super::maintenance::status(cx, step),
        backup: super::backup_health::summary(cx),
        tls: o.tls.as_ref().map(|t| super::certificates::status(cx, t)),
        transport: Some(o.transport.stage),
    }
}

/// The member the rollout replaces: recorded by the pass that deletes its
/// Pod, kept until it is back (healthy, Ready, on the current template).
fn rollout_status(cx: &Context<'_>, step: &Step) -> Option<crate::api::RolloutStatus> {
    if let Step::Act(crate::planner::Action::RollMember { ordinal, .. }) = step {
        return Some(crate::api::RolloutStatus {
            member: member_name(&cx.o.name, *ordinal),
            started: Time(cx.o.now),
        });
    }
    let previous = cx.o.status.rollout.clone()?;
    let ordinal = crate::addressing::ordinal_of_member(&cx.o.name, &previous.member)?;
    let back = super::rollout::up_to_date(cx, ordinal)
        && cx
            .o
            .objects(ordinal)
            .pod
            .is_some_and(|p| p.ready && !p.deleting)
        && cx.membership.of_ordinal(ordinal).is_some_and(|m| m.healthy);
    (!back).then_some(previous)
}

/// The releases the members run, and the spec's when a member runs
/// another: `3.6.16` or `3.6.16→3.7.3` (`3.6.16,3.7.3→3.7.3` midway).
fn running_versions(cx: &Context<'_>) -> Option<String> {
    let mut running: Vec<super::Release> = (0..cx.replicas)
        .filter_map(|o| super::rollout::running_release(cx, o))
        .collect();
    running.sort_unstable();
    running.dedup();
    let desired = &cx.o.spec.version;
    match running.as_slice() {
        [] => None,
        [only] if only.to_string() == *desired => Some(desired.clone()),
        several => Some(format!(
            "{}→{desired}",
            several
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(",")
        )),
    }
}

/// The restore record: created by the pass that starts a restore, its step
/// updated on every pass, completed once the new incarnation serves.
fn restore_status(cx: &Context<'_>, step: &Step) -> Option<RestoreStatus> {
    if let Step::Act(crate::planner::Action::RestoreFromSurvivor {
        ordinal,
        revision,
        new_token,
        ..
    }) = step
    {
        return Some(RestoreStatus {
            incarnation: new_token.clone(),
            from_incarnation: cx.token.clone(),
            from_cluster_id: cx.cluster_id.map(format_id),
            source: crate::api::RecoverySource::Survivor,
            survivor: member_name(&cx.o.name, *ordinal),
            survivor_ordinal: i32::try_from(*ordinal).unwrap_or(i32::MAX),
            revision: *revision,
            lost_members: lost_member_names(cx),
            step: "approved; stopping the members of the lost incarnation".to_string(),
            started: Time(cx.o.now),
            completed: None,
        });
    }
    if let Step::Act(crate::planner::Action::RestoreFromBackup { ordinal, new_token }) = step {
        // A cluster that formed restores in place (`spec.recovery.backup`);
        // a new one bootstraps (`spec.bootstrap.fromBackup`).
        let (from_incarnation, field) = if cx.formed {
            (cx.token.clone(), "spec.recovery.backup")
        } else {
            (String::new(), "spec.bootstrap.fromBackup")
        };
        return Some(RestoreStatus {
            incarnation: new_token.clone(),
            from_incarnation,
            from_cluster_id: cx.cluster_id.map(format_id),
            source: crate::api::RecoverySource::Backup,
            survivor: member_name(&cx.o.name, *ordinal),
            survivor_ordinal: i32::try_from(*ordinal).unwrap_or(i32::MAX),
            revision: None,
            lost_members: lost_member_names(cx),
            step: format!(
                "restoring the backup of {field} into {}",
                member_name(&cx.o.name, *ordinal)
            ),
            started: Time(cx.o.now),
            completed: None,
        });
    }
    let mut restore = cx.o.status.restore.clone()?;
    if restore.in_progress() {
        match cx.cluster_id {
            Some(id) => {
                restore.completed = Some(Time(cx.o.now));
                restore.step = format!(
                    "done: incarnation {} serves as cluster {}",
                    restore.incarnation,
                    format_id(id)
                );
            }
            None => restore.step = restore_step(cx, step),
        }
    }
    Some(restore)
}

/// The names of the voters whose data is known lost.
fn lost_member_names(cx: &Context<'_>) -> Vec<String> {
    cx.membership
        .voters()
        .filter_map(|m| m.ordinal)
        .filter(|&o| cx.data_gone(o).is_some())
        .map(|o| cx.name(o))
        .collect()
}

fn restore_step(cx: &Context<'_>, step: &Step) -> String {
    match step {
        Step::Act(action) => action.describe(&cx.o.name),
        Step::Wait(Waiting::InProgress(what) | Waiting::NeedsAttention(what)) => what.clone(),
        Step::Wait(other) => format!("{other:?}"),
    }
}

/// What a person sets to approve the restore that would happen now.
fn how_to_approve(cx: &Context<'_>, survivor: &SurvivorChoice) -> String {
    use crate::api::{RecoveryPolicy, RecoverySource};
    let recovery = &cx.o.spec.recovery;
    match (recovery.source, recovery.backup.is_some()) {
        (RecoverySource::Backup, true) => {
            let lost = super::loss::lost_voters(cx);
            let loss = super::loss::Loss::of(cx, &lost);
            let reach = super::loss::backup_reach(cx)
                .map_or("an unknown revision".to_string(), |r| {
                    format!("revision {r}")
                });
            match super::loss::backup_restore_held(cx, &loss, survivor) {
                Some(held) => format!("the backups reach {reach}; {held}"),
                None => format!(
                    "restoring from the backups of spec.recovery.backup (they reach {reach})"
                ),
            }
        }
        (RecoverySource::Backup, false) => "source Backup needs spec.recovery.backup".to_string(),
        (RecoverySource::Survivor, _) => match (recovery.policy, survivor) {
            (RecoveryPolicy::NewestSurvivor, SurvivorChoice::Newest(_)) => {
                "restoring from it (policy NewestSurvivor)".to_string()
            }
            (RecoveryPolicy::NewestSurvivor, _) => {
                "policy NewestSurvivor restores only once every survivor has answered".to_string()
            }
            (RecoveryPolicy::Manual, SurvivorChoice::Newest(s)) => format!(
                "to restore from it set spec.recovery: {{approvedIncarnation: {}, approvedSurvivor: {}, approvedRevision: {}}}",
                cx.token,
                s.name,
                s.revision.map_or("unknown".to_string(), |r| r.to_string())
            ),
            (RecoveryPolicy::Manual, SurvivorChoice::Unreadable { .. }) => format!(
                "a person may choose a survivor explicitly, one that answered at its revision or one that cannot be read at the revision it last reported, with spec.recovery: {{approvedIncarnation: {}, approvedSurvivor: <member>, approvedRevision: <revision>}}; the other survivors' volumes are kept",
                cx.token
            ),
            (RecoveryPolicy::Manual, SurvivorChoice::NoSurvivor) => {
                "no survivor to restore from: use a backup (spec.recovery.source: Backup)"
                    .to_string()
            }
        },
    }
}

fn survivor_revision(cx: &Context<'_>) -> String {
    cx.membership
        .newest_revision()
        .map_or_else(|| "unknown".to_string(), |r| r.to_string())
}

fn spec_warnings(cx: &Context<'_>) -> String {
    let mut warnings = Vec::new();
    if cx.replicas.is_multiple_of(2) {
        warnings.push(format!(
            "{} members tolerate no more failures than {}",
            cx.replicas,
            cx.replicas - 1
        ));
    }
    if cx.o.members_may_share_a_node {
        warnings.push(
            "spec.pod.memberSpreading is Preferred while the volumes are (or may be) node-local: two members on one node put a majority's data on one machine".to_string(),
        );
    }
    if !version::is_supported(&cx.o.spec.version) {
        warnings.push(format!(
            "version {} is not supported by this operator (supported: {})",
            cx.o.spec.version,
            version::SUPPORTED.join(", ")
        ));
    }
    let quota = cx.o.spec.etcd.quota_backend_bytes;
    if let Some(volume) = crate::api::quantity::bytes(&cx.o.spec.storage.size)
        && quota != 0
        && !crate::api::tuning::quota_fits_volume(quota, volume)
    {
        warnings.push(format!(
            "etcd.quotaBackendBytes ({} MiB) leaves the {} volume no room for a defragmentation's copy and the write-ahead log: the disk can fill before NOSPACE protects it; set it to 0 to derive it from the volume ({} MiB), or grow storage.size",
            quota >> 20,
            cx.o.spec.storage.size.0,
            crate::api::tuning::quota_for_volume(volume) >> 20
        ));
    }
    warnings.extend(super::expansion::expansion_warning(cx));
    if cx
        .o
        .spec
        .etcd
        .auto_compaction_retention
        .trim_start_matches('0')
        .is_empty()
    {
        warnings.push("etcd.autoCompactionRetention is 0: the history is never compacted and grows until NOSPACE (the operator then compacts everything but the newest revision)".to_string());
    }
    if warnings.is_empty() {
        String::new()
    } else {
        format!("; warning: {}", warnings.join("; "))
    }
}

/// A rollout's state in words: how far it is, and what it waits for.
fn rollout_message(cx: &Context<'_>, what: &str) -> String {
    let progress = super::rollout::progress(cx);
    format!(
        "{} of {} members updated to Pod template {}; {what}",
        progress.updated, progress.of, cx.desired_template
    )
}

fn progress(cx: &Context<'_>, step: &Step) -> (bool, &'static str, String) {
    match step {
        Step::Act(action @ crate::planner::Action::RollMember { .. }) => {
            (true, "RollingOut", action.describe(&cx.o.name))
        }
        Step::Act(
            action @ (crate::planner::Action::DefragmentMember { .. }
            | crate::planner::Action::CompactHistory { .. }
            | crate::planner::Action::DisarmNoSpace { .. }
            | crate::planner::Action::DisarmCorrupt { .. }),
        ) => (true, "Maintenance", action.describe(&cx.o.name)),
        Step::Act(action @ crate::planner::Action::RotateCa { .. }) => {
            (true, "RotatingCa", action.describe(&cx.o.name))
        }
        Step::Act(action @ crate::planner::Action::UpdatePeerUrl { .. }) => {
            (true, "TurningTlsOn", action.describe(&cx.o.name))
        }
        Step::Act(action) => (true, "ActionIssued", action.describe(&cx.o.name)),
        Step::Wait(Waiting::Bootstrapping) => (
            true,
            "Bootstrapping",
            "waiting for the first members to form the cluster".to_string(),
        ),
        Step::Wait(Waiting::LearnerCatchingUp) => {
            (true, "LearnerCatchingUp", learner_progress_message(cx))
        }
        Step::Wait(Waiting::HealthNotStable) => (
            true,
            "WaitingForHealthyVoters",
            "a membership change waits until every voter has been healthy for 5s".to_string(),
        ),
        Step::Wait(Waiting::InProgress(what)) => (true, "InProgress", what.clone()),
        Step::Wait(Waiting::NeedsAttention(what)) => (false, "NeedsAttention", what.clone()),
        Step::Wait(Waiting::Paused) => (false, "Paused", "spec.paused is set".to_string()),
        Step::Wait(Waiting::QuorumLost { .. }) => (
            false,
            "QuorumLost",
            "waiting for members to return".to_string(),
        ),
        Step::Wait(Waiting::MajorityDataLost { .. }) => (
            false,
            "MajorityDataLost",
            "waiting for the recovery policy".to_string(),
        ),
        Step::Wait(Waiting::Rollout(what)) => (true, "RollingOut", rollout_message(cx, what)),
        Step::Wait(Waiting::RolloutHalted(what)) => {
            (false, "RolloutHalted", rollout_message(cx, what))
        }
        Step::Wait(Waiting::Maintenance(what)) => (true, "Maintenance", what.clone()),
        Step::Wait(Waiting::Steady) => (
            false,
            "UpToDate",
            "the cluster matches its spec".to_string(),
        ),
    }
}

/// One condition of the cluster, keeping the transition time of the
/// previous status while its status holds.
fn condition(
    cx: &Context<'_>,
    type_: ConditionType,
    status: bool,
    reason: &str,
    message: String,
) -> Condition {
    let stated = conditions::condition(
        type_.as_str(),
        status,
        reason,
        message,
        cx.o.generation,
        Time(cx.o.now),
    );
    conditions::keep_transition_time(&cx.o.status.conditions, stated)
}

fn members(cx: &Context<'_>) -> Vec<MemberStatus> {
    let o = cx.o;
    let mut out: Vec<MemberStatus> = cx
        .ordinals()
        .into_iter()
        .map(|ordinal| {
            let objects = o.objects(ordinal);
            let member = cx.membership.of_ordinal(ordinal);
            let message = member_message(cx, ordinal, member);
            let name = member_name(&o.name, ordinal);
            // A member that does not answer keeps the revision it last
            // reported: what a person choosing a survivor goes by.
            let last_revision = o
                .status
                .members
                .iter()
                .find(|m| m.name == name)
                .and_then(|m| m.revision);
            let mut status = MemberStatus {
                version: super::rollout::running_release(cx, ordinal).map(|r| r.to_string()),
                pod_up_to_date: super::rollout::up_to_date(cx, ordinal),
                volume_size: objects
                    .pvc
                    .as_ref()
                    .and_then(|p| p.capacity)
                    .map(crate::api::quantity::human),
                name: name.clone(),
                pod: objects.pod.as_ref().map(|_| name.clone()),
                node: objects.pod.as_ref().and_then(|p| p.node.clone()),
                pvc: objects.pvc.as_ref().map(|_| pvc_name(&o.name, ordinal)),
                message,
                revision: last_revision,
                ..MemberStatus::default()
            };
            if let Some(m) = member {
                fill(&mut status, m);
                status.alarms = cx
                    .alarms
                    .iter()
                    .filter(|a| a.member_id == m.id)
                    .map(|a| a.kind.name().to_string())
                    .collect();
            }
            if let Some(volume) = o.volume_usage.get(&ordinal) {
                status.volume_capacity_bytes = Some(volume.capacity);
                status.volume_available_bytes = Some(volume.available);
            }
            status
        })
        .collect();
    for m in cx.membership.members.iter().filter(|m| m.ordinal.is_none()) {
        let mut status = MemberStatus {
            name: format_id(m.id),
            message: Some("member not managed by this EtcdCluster (unknown name)".to_string()),
            ..MemberStatus::default()
        };
        fill(&mut status, m);
        out.push(status);
    }
    out
}

fn fill(status: &mut MemberStatus, m: &KnownMember) {
    status.id = Some(format_id(m.id));
    status.role = Some(if m.learner {
        MemberRole::Learner
    } else {
        MemberRole::Voter
    });
    status.leader = m.leader;
    status.healthy = m.healthy;
    status.healthy_since = Some(Time(m.healthy_since));
    status.revision = m.revision.or(status.revision);
    status.raft_index = m.raft_index.and_then(|i| i64::try_from(i).ok());
    if let Some(db) = m.db {
        status.db_size_bytes = Some(db.size);
        status.db_size_in_use_bytes = Some(db.in_use);
        status.fragmented_percent = Some(db.fragmented_percent());
    }
}

fn member_message(cx: &Context<'_>, ordinal: u32, member: Option<&KnownMember>) -> Option<String> {
    if let Some(evidence) = cx.data_gone(ordinal) {
        return Some(format!("data lost: {evidence}"));
    }
    let objects = cx.o.objects(ordinal);
    let mut parts = Vec::new();
    match member {
        None if ordinal < cx.replicas && cx.formed => parts.push("not a member yet".to_string()),
        None if ordinal >= cx.replicas && objects.pod.is_none() => {
            parts.push("beyond spec.replicas: PVC kept by storage.retentionPolicy".to_string())
        }
        None if ordinal >= cx.replicas => parts.push("beyond spec.replicas".to_string()),
        Some(m) if m.learner => parts.push("learner catching up".to_string()),
        Some(m) if m.ordinal.is_some_and(|o| o >= cx.replicas) => {
            parts.push("to be removed (beyond spec.replicas)".to_string())
        }
        _ => {}
    }
    if let Some(trouble) = pod_trouble(cx.o, &objects) {
        let mut text = trouble.describe();
        if let super::evidence::PodTrouble::NodeNotReady { for_, .. } = &trouble
            && for_.unsigned_abs() >= cx.o.spec.member_failure_timeout()
        {
            text.push_str(
                ", past memberFailureTimeout: waiting until the node returns or is confirmed gone (Node deleted or tainted node.kubernetes.io/out-of-service)",
            );
        }
        parts.push(text);
    } else if let Some(detail) = member
        .filter(|m| !m.healthy)
        .and_then(|m| m.health_detail.clone())
    {
        parts.push(detail);
    }
    parts.extend(super::maintenance::space_warnings(cx, ordinal, member));
    (!parts.is_empty()).then(|| parts.join(", "))
}

/// Whether the restore in progress replaces a lost incarnation (rather than
/// bootstrapping a new cluster from a backup).
fn restore_in_place(cx: &Context<'_>) -> bool {
    cx.restoring
        .as_ref()
        .is_some_and(|r| !r.from_incarnation.is_empty())
}

/// What a wait for a learner says: how far the learner has come, as far
/// as it is known.
fn learner_progress_message(cx: &Context<'_>) -> String {
    const BASE: &str = "a learner is catching up before promotion";
    let Some(learner) = cx.membership.learners().next() else {
        return BASE.to_string();
    };
    let name = learner
        .ordinal
        .map_or_else(|| format_id(learner.id), |o| cx.name(o));
    let leader = cx
        .membership
        .members
        .iter()
        .find(|m| m.leader)
        .and_then(|m| m.raft_index);
    let applied = learner.raft_index;
    let progress = match (applied, leader) {
        (Some(applied), Some(leader)) => {
            format!(", raft index {applied} of the leader's {leader}")
        }
        _ => String::new(),
    };
    let state = if learner.healthy {
        "serves"
    } else if learner.started {
        "has published its name but does not serve yet"
    } else {
        "has not started yet"
    };
    format!("{BASE}: {name} {state}{progress}")
}
