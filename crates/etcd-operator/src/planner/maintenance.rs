//! Space: etcd's NOSPACE alarm recovered (history compacted, every member
//! defragmented, the alarm disarmed), and defragmentation on a schedule or
//! when a member's database file is fragmented. A defragmentation takes one member out of service while it
//! runs, so it goes one member at a time, followers first, the leader last
//! after leadership moved away, and only while every voter is healthy, its
//! Pod Ready and caught up.

use chrono::{DateTime, Utc};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::Action;
use super::context::Context;
use super::membership::{KnownMember, Source, quorum};
use super::rollout::{Unsettled, first_unsettled};
use super::step::{Step, Waiting};
use crate::api::{DefragRound, LastDefrag, MaintenanceStatus, SpaceRecovery, quantity};
use crate::cron_schedule::CronSchedule;
use crate::etcd::{AlarmKind, MemberId};

/// The share of the quota (percent) at which a database file counts as
/// near full: status says so, and a defragmentation that gives space back
/// is due.
pub const QUOTA_PRESSURE_PERCENT: i64 = 80;

/// NOSPACE is disarmed only once every member's data fits in this share of
/// the quota (percent): otherwise the next writes would raise it again.
const DISARM_BELOW_PERCENT: i64 = 90;

/// A member's volume counts as near full beyond this share used (percent).
pub const VOLUME_PRESSURE_PERCENT: i64 = 80;

fn act(action: Action) -> Option<Step> {
    Some(Step::Act(action))
}

fn wait(waiting: Waiting) -> Option<Step> {
    Some(Step::Wait(waiting))
}

/// The name of a member, or its ID when it has no ordinal.
pub(super) fn name_of(cx: &Context<'_>, id: MemberId) -> String {
    cx.membership
        .members
        .iter()
        .find(|m| m.id == id)
        .and_then(|m| m.ordinal)
        .map(|o| cx.name(o))
        .unwrap_or_else(|| crate::etcd::format_id(id))
}

fn member_name(cx: &Context<'_>, member: &KnownMember) -> String {
    name_of(cx, member.id)
}

/// The members a kind of alarm names.
fn alarmed(cx: &Context<'_>, kind: &AlarmKind) -> Vec<MemberId> {
    cx.alarms
        .iter()
        .filter(|a| &a.kind == kind)
        .map(|a| a.member_id)
        .collect()
}

/// NOSPACE: compact the history to the newest revision, defragment every
/// voter one at a time, then disarm, once the data fits the quota again.
/// When it does not (the keys themselves fill the quota), nothing is
/// disarmed and status says to grow the volume; the steps after this one
/// (a rollout to a larger quota) go on.
pub(super) fn recover_space(cx: &Context<'_>) -> Option<Step> {
    let nospace = alarmed(cx, &AlarmKind::NoSpace);
    if nospace.is_empty()
        || cx.membership.source != Source::Live
        || !cx.membership.quorum
        || cx.restoring.is_some()
    {
        return None;
    }
    let record = space_recovery(cx)?;
    if record.compacted_revision.is_none() {
        let revision = cx.o.etcd.max_revision.or(cx.membership.newest_revision())?;
        return act(Action::CompactHistory { revision });
    }
    let pending: Vec<&KnownMember> = cx
        .membership
        .voters()
        .filter(|m| !record.defragmented.contains(&member_name(cx, m)))
        .collect();
    if !pending.is_empty() {
        return next_defrag(
            cx,
            &pending,
            "NOSPACE is raised: the compacted history's space is given back",
        );
    }
    if !data_exceeds_quota(cx).is_empty() {
        return None;
    }
    act(Action::DisarmNoSpace { members: nospace })
}

/// Voters whose data (after compaction and defragmentation) fills more of
/// the quota than NOSPACE may be disarmed at, with the share in percent.
pub fn data_exceeds_quota(cx: &Context<'_>) -> Vec<(String, i64)> {
    let spec_quota = cx.o.quota_backend_bytes();
    cx.membership
        .voters()
        .filter_map(|m| {
            let db = m.db?;
            let quota = if db.quota > 0 { db.quota } else { spec_quota };
            let percent = db.in_use.saturating_mul(100) / quota.max(1);
            (percent > DISARM_BELOW_PERCENT).then(|| (member_name(cx, m), percent))
        })
        .collect()
}

/// The recovery record of this pass: the previous one while NOSPACE is
/// raised, a new one when it was just raised, none otherwise.
pub fn space_recovery(cx: &Context<'_>) -> Option<SpaceRecovery> {
    if alarmed(cx, &AlarmKind::NoSpace).is_empty() {
        return None;
    }
    Some(
        cx.o.status
            .maintenance
            .as_ref()
            .and_then(|m| m.space_recovery.clone())
            .unwrap_or_else(|| SpaceRecovery {
                started: Time(cx.o.now),
                compacted_revision: None,
                defragmented: Vec::new(),
            }),
    )
}

/// Scheduled and fragmentation-triggered defragmentation, after every
/// lifecycle step and the rollout: only on a cluster at rest.
pub(super) fn defragment(cx: &Context<'_>) -> Option<Step> {
    if cx.membership.source != Source::Live
        || !cx.membership.quorum
        || cx.restoring.is_some()
        || !cx.alarms.is_empty()
    {
        return None;
    }
    let round = defrag_round(cx);
    let (pending, reason): (Vec<&KnownMember>, String) = match &round {
        Some(round) => (
            cx.membership
                .voters()
                .filter(|m| !round.defragmented.contains(&member_name(cx, m)))
                .collect(),
            round.reason.clone(),
        ),
        None => (
            cx.membership
                .voters()
                .filter(|m| fragmented(cx, m))
                .collect(),
            String::new(),
        ),
    };
    if pending.is_empty() {
        return None;
    }
    if cx.membership.learners().next().is_some() || !cx.lost_voters().is_empty() {
        return wait(Waiting::Maintenance(
            "defragmentation waits until no member is being added or replaced".to_string(),
        ));
    }
    let reason = if reason.is_empty() {
        pending
            .iter()
            .find(|m| !m.leader)
            .or(pending.first())
            .and_then(|m| m.db)
            .map(|db| {
                format!(
                    "{}% of its database file is free pages ({} MiB to give back)",
                    db.fragmented_percent(),
                    db.reclaimable() >> 20
                )
            })
            .unwrap_or_else(|| "fragmented".to_string())
    } else {
        reason
    };
    next_defrag(cx, &pending, &reason)
}

/// Whether a member's database file is fragmented enough to defragment by
/// itself (`maintenance.defrag.fragmentedPercent`, `minReclaimable`), or
/// near its quota with space to give back.
fn fragmented(cx: &Context<'_>, member: &KnownMember) -> bool {
    let spec = &cx.o.spec.maintenance.defrag;
    let Some(db) = member.db else {
        return false;
    };
    if spec.fragmented_percent <= 0 {
        return false;
    }
    let min = quantity::bytes(&spec.min_reclaimable)
        .and_then(|b| i64::try_from(b).ok())
        .unwrap_or(i64::MAX);
    let quota = if db.quota > 0 {
        db.quota
    } else {
        cx.o.quota_backend_bytes()
    };
    db.reclaimable() >= min
        && (db.fragmented_percent() >= spec.fragmented_percent
            || db.size.saturating_mul(100) >= QUOTA_PRESSURE_PERCENT.saturating_mul(quota))
}

/// The next step of a one-at-a-time defragmentation of `pending`:
/// followers first; the leader last, once leadership moved to a settled
/// follower; each only while every voter is settled and a quorum stays
/// healthy without the member.
fn next_defrag(cx: &Context<'_>, pending: &[&KnownMember], reason: &str) -> Option<Step> {
    if let Some(unsettled) = first_unsettled(cx) {
        return wait(Waiting::Maintenance(format!(
            "defragmentation ({reason}) waits: {}",
            describe(&unsettled)
        )));
    }
    let next = pending.iter().find(|m| !m.leader).or(pending.first())?;
    let ordinal = next.ordinal?;
    let voters = cx.membership.voter_count();
    if next.leader && voters > 1 {
        let to = cx
            .membership
            .voters()
            .filter(|m| m.id != next.id && cx.membership.stably_healthy(m))
            .max_by_key(|m| m.raft_index)?;
        return act(Action::TransferLeadership {
            from: next.id,
            to: to.id,
        });
    }
    if !cx.membership.quorum_stays_without(next.id) {
        return wait(Waiting::Maintenance(format!(
            "defragmenting {} now would leave fewer than {} healthy voters",
            cx.name(ordinal),
            quorum(voters)
        )));
    }
    act(Action::DefragmentMember {
        ordinal,
        id: next.id,
        reason: reason.to_string(),
    })
}

pub(super) fn describe(unsettled: &Unsettled) -> String {
    match unsettled {
        Unsettled::Unhealthy { name, detail, .. } => format!("{name} is not healthy ({detail})"),
        Unsettled::NotReady(name) => format!("Pod {name} is not Ready"),
        Unsettled::NotStable(name) => format!("{name} has been healthy for less than 5s"),
        Unsettled::Behind { name, mine, leader } => {
            format!("{name} is catching up with the leader (raft index {mine} of {leader})")
        }
    }
}

fn chrono_time(t: &Time) -> Option<DateTime<Utc>> {
    DateTime::from_timestamp(t.0.as_second(), t.0.subsec_nanosecond().unsigned_abs())
}

/// The schedule of `maintenance.defrag`, if one is set and valid.
fn schedule(cx: &Context<'_>) -> Option<CronSchedule> {
    let expression = cx.o.spec.maintenance.defrag.schedule.as_deref()?;
    CronSchedule::parse(expression).ok()
}

/// The scheduled round of this pass: the previous one until every voter
/// was defragmented, a new one once the schedule fired since the last.
pub fn defrag_round(cx: &Context<'_>) -> Option<DefragRound> {
    let previous = cx.o.status.maintenance.as_ref();
    if let Some(round) = previous.and_then(|m| m.defrag_round.clone()) {
        let complete = cx
            .membership
            .voters()
            .all(|m| round.defragmented.contains(&member_name(cx, m)));
        return (!complete).then_some(round);
    }
    let schedule = schedule(cx)?;
    let through = previous
        .and_then(|m| m.defrag_scheduled_through.as_ref())
        .and_then(chrono_time)?;
    let now = chrono_time(&Time(cx.o.now))?;
    let due = schedule.next_after(through).is_some_and(|t| t <= now);
    due.then(|| DefragRound {
        reason: format!(
            "scheduled: maintenance.defrag.schedule {}",
            cx.o.spec
                .maintenance
                .defrag
                .schedule
                .as_deref()
                .unwrap_or("")
        ),
        started: Time(cx.o.now),
        defragmented: Vec::new(),
    })
}

/// The maintenance record of a pass, with what its step does.
pub fn status(cx: &Context<'_>, step: &Step) -> Option<MaintenanceStatus> {
    let previous = cx.o.status.maintenance.clone().unwrap_or_default();
    let mut space_recovery = space_recovery(cx);
    let mut round = defrag_round(cx);
    let started_round = round.is_some()
        && previous
            .defrag_round
            .as_ref()
            .is_none_or(|p| Some(p) != round.as_ref());
    let mut last_defrag = previous.last_defrag.clone();
    match step {
        Step::Act(Action::CompactHistory { revision }) => {
            if let Some(recovery) = &mut space_recovery {
                recovery.compacted_revision = Some(*revision);
            }
        }
        Step::Act(Action::DefragmentMember {
            ordinal, reason, ..
        }) => {
            let name = cx.name(*ordinal);
            if let Some(recovery) = &mut space_recovery {
                recovery.defragmented.push(name.clone());
            } else if let Some(round) = &mut round {
                round.defragmented.push(name.clone());
            }
            last_defrag = Some(LastDefrag {
                member: name,
                time: Time(cx.o.now),
                reason: reason.clone(),
            });
        }
        _ => {}
    }
    let scheduled_through = schedule(cx).map(|_| {
        if started_round {
            Time(cx.o.now)
        } else {
            previous
                .defrag_scheduled_through
                .clone()
                .unwrap_or(Time(cx.o.now))
        }
    });
    let status = MaintenanceStatus {
        defrag_scheduled_through: scheduled_through,
        defrag_round: round,
        space_recovery,
        last_defrag,
    };
    (status != MaintenanceStatus::default()).then_some(status)
}

/// What a person should know about a member's space before it runs out:
/// its alarms, a database file near the quota, a volume near full.
pub fn space_warnings(cx: &Context<'_>, ordinal: u32, member: Option<&KnownMember>) -> Vec<String> {
    let mut warnings = Vec::new();
    if let Some(m) = member {
        for alarm in cx.alarms.iter().filter(|a| a.member_id == m.id) {
            warnings.push(match alarm.kind {
                AlarmKind::NoSpace => {
                    let full = data_exceeds_quota(cx);
                    match full.iter().find(|(name, _)| *name == cx.name(ordinal)) {
                        Some((_, percent)) => format!(
                            "NOSPACE: its data fills {percent}% of the quota even after compaction and defragmentation; writes stay refused until the quota grows: grow storage.size (the quota follows the volume) or raise etcd.quotaBackendBytes, or delete keys"
                        ),
                        None => "NOSPACE: the cluster takes only reads and deletes; the operator compacts, defragments and disarms".to_string(),
                    }
                }
                AlarmKind::Corrupt => "CORRUPT: its data differs from the other members'".to_string(),
                AlarmKind::Other(ref name) => format!("alarm {name}"),
            });
        }
        if let Some(db) = m.db {
            let quota = if db.quota > 0 {
                db.quota
            } else {
                cx.o.quota_backend_bytes()
            };
            let percent = db.size.saturating_mul(100) / quota.max(1);
            if percent >= QUOTA_PRESSURE_PERCENT && cx.alarms.is_empty() {
                warnings.push(format!(
                    "its database file is at {percent}% of the quota ({} of {} MiB, {} MiB in use): NOSPACE at 100%",
                    db.size >> 20,
                    quota >> 20,
                    db.in_use >> 20
                ));
            }
        }
    }
    if let Some(volume) = cx.o.volume_usage.get(&ordinal) {
        let percent = volume.used_percent();
        if percent >= VOLUME_PRESSURE_PERCENT {
            warnings.push(format!(
                "its volume is {percent}% full ({} MiB left of {} MiB): etcd fails when it cannot write its log",
                volume.available >> 20,
                volume.capacity >> 20
            ));
        }
    }
    warnings
}
