//! Space and maintenance: NOSPACE recovered in order (compaction, every
//! member defragmented one at a time with the leader last, disarm), never
//! disarmed while the data fills the quota (CORRUPT: `evidence.rs`);
//! defragmentation by fragmentation and by schedule, one member at a time,
//! only on a settled cluster.

use super::sim::{Sim, SimDb, Volumes};
use crate::api::ConditionType;
use crate::planner::Action;

const MI: i64 = 1 << 20;

fn formed(replicas: i32) -> Sim {
    let mut sim = Sim::new(replicas, 5, Volumes::Network);
    sim.run(60);
    assert!(sim.violations.is_empty(), "{:?}", sim.violations);
    sim.quota = 100 * MI;
    sim
}

fn set_db(sim: &mut Sim, size: i64, in_use: i64) {
    let ids: Vec<u64> = sim.voters().map(|m| m.id).collect();
    for id in ids {
        sim.db.insert(id, SimDb { size, in_use });
    }
}

fn maintenance_actions(sim: &Sim, from: usize) -> Vec<Action> {
    sim.actions[from..]
        .iter()
        .filter(|a| {
            matches!(
                a,
                Action::DefragmentMember { .. }
                    | Action::CompactHistory { .. }
                    | Action::DisarmNoSpace { .. }
                    | Action::TransferLeadership { .. }
            )
        })
        .cloned()
        .collect()
}

fn defragmented(actions: &[Action]) -> Vec<u64> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::DefragmentMember { id, .. } => Some(*id),
            _ => None,
        })
        .collect()
}

fn condition(sim: &Sim, type_: ConditionType) -> (bool, String, String) {
    let c = sim.status.condition(type_).expect("condition set");
    (c.status == "True", c.reason.clone(), c.message.clone())
}

#[test]
fn nospace_is_compacted_then_defragmented_member_by_member_leader_last_then_disarmed() {
    let mut sim = formed(3);
    let leader = sim.current_leader().expect("a leader");
    set_db(&mut sim, 100 * MI, 100 * MI);
    sim.history = 70 * MI;
    sim.nospace = sim.voters().map(|m| m.id).collect();
    let written = sim.acknowledged;
    let start = sim.actions.len();
    sim.reconcile();
    let (_, _, degraded) = condition(&sim, ConditionType::Degraded);
    assert!(degraded.contains("NOSPACE"), "{degraded}");
    sim.run(40);
    assert!(sim.violations.is_empty(), "{:?}", sim.violations);
    let actions = maintenance_actions(&sim, start);
    assert!(
        matches!(actions.first(), Some(Action::CompactHistory { .. })),
        "compaction first: {actions:?}"
    );
    let order = defragmented(&actions);
    assert_eq!(order.len(), 3, "each member once: {actions:?}");
    assert_eq!(order.last(), Some(&leader), "the leader last: {actions:?}");
    let moved = actions
        .iter()
        .position(|a| matches!(a, Action::TransferLeadership { from, .. } if *from == leader))
        .expect("leadership moved away from the leader first");
    let leader_defrag = actions
        .iter()
        .position(|a| matches!(a, Action::DefragmentMember { id, .. } if *id == leader))
        .expect("leader defragmented");
    assert!(moved < leader_defrag, "{actions:?}");
    assert!(
        matches!(actions.last(), Some(Action::DisarmNoSpace { .. })),
        "disarmed last: {actions:?}"
    );
    assert!(sim.nospace.is_empty());
    assert!(sim.acknowledged > written, "writes are taken again");
    assert!(
        sim.status
            .maintenance
            .as_ref()
            .is_none_or(|m| m.space_recovery.is_none()),
        "the recovery record goes with the alarm"
    );
}

#[test]
fn nospace_is_never_disarmed_while_the_data_itself_fills_the_quota() {
    let mut sim = formed(3);
    set_db(&mut sim, 100 * MI, 100 * MI);
    sim.history = 2 * MI;
    sim.nospace = sim.voters().map(|m| m.id).collect();
    let start = sim.actions.len();
    sim.run(40);
    assert!(sim.violations.is_empty(), "{:?}", sim.violations);
    let actions = maintenance_actions(&sim, start);
    assert!(
        !actions
            .iter()
            .any(|a| matches!(a, Action::DisarmNoSpace { .. })),
        "{actions:?}"
    );
    assert_eq!(
        defragmented(&actions).len(),
        3,
        "each member once: {actions:?}"
    );
    assert!(!sim.nospace.is_empty());
    let (degraded, _, message) = condition(&sim, ConditionType::Degraded);
    assert!(degraded);
    assert!(message.contains("grow storage.size"), "{message}");
}

#[test]
fn a_fragmented_member_is_defragmented_alone_and_the_leader_only_after_moving_leadership() {
    let mut sim = formed(3);
    let leader = sim.current_leader().expect("a leader");
    let follower = sim
        .voters()
        .map(|m| m.id)
        .find(|id| *id != leader)
        .expect("a follower");
    let calm = sim
        .voters()
        .map(|m| m.id)
        .find(|id| *id != leader && *id != follower)
        .expect("another follower");
    sim.db.insert(
        leader,
        SimDb {
            size: 90 * MI,
            in_use: 10 * MI,
        },
    );
    sim.db.insert(
        follower,
        SimDb {
            size: 90 * MI,
            in_use: 10 * MI,
        },
    );
    sim.db.insert(
        calm,
        SimDb {
            size: 12 * MI,
            in_use: 10 * MI,
        },
    );
    let start = sim.actions.len();
    sim.run(40);
    assert!(sim.violations.is_empty(), "{:?}", sim.violations);
    let actions = maintenance_actions(&sim, start);
    assert_eq!(
        defragmented(&actions),
        vec![follower, leader],
        "{actions:?}"
    );
    assert!(
        matches!(actions[1], Action::TransferLeadership { from, .. } if from == leader),
        "{actions:?}"
    );
    let last = sim
        .status
        .maintenance
        .as_ref()
        .and_then(|m| m.last_defrag.clone())
        .expect("recorded");
    assert!(last.reason.contains("free pages"), "{}", last.reason);
}

#[test]
fn defragmentation_below_the_thresholds_or_turned_off_does_nothing() {
    let mut sim = formed(3);
    // 40 % free: below the default 50 %.
    set_db(&mut sim, 100 * MI, 60 * MI);
    sim.quota = 1000 * MI;
    let start = sim.actions.len();
    sim.run(10);
    assert!(maintenance_actions(&sim, start).is_empty());
    // Fragmented but less than minReclaimable (64Mi) to give back.
    set_db(&mut sim, 60 * MI, 10 * MI);
    sim.run(10);
    assert!(maintenance_actions(&sim, start).is_empty());
    // Turned off.
    set_db(&mut sim, 500 * MI, 10 * MI);
    sim.spec.maintenance.defrag.fragmented_percent = 0;
    sim.run(10);
    assert!(maintenance_actions(&sim, start).is_empty());
}

#[test]
fn a_database_file_near_the_quota_is_reported_and_defragmented_when_it_gives_space_back() {
    let mut sim = formed(3);
    sim.quota = 200 * MI;
    // 85 % of the quota, 35 % free pages: below the fragmentation
    // threshold, above the quota pressure.
    set_db(&mut sim, 170 * MI, 100 * MI);
    let start = sim.actions.len();
    sim.reconcile();
    let (_, _, message) = condition(&sim, ConditionType::Degraded);
    assert!(message.contains("85% of the quota"), "{message}");
    sim.run(40);
    assert!(sim.violations.is_empty(), "{:?}", sim.violations);
    let actions = maintenance_actions(&sim, start);
    assert_eq!(defragmented(&actions).len(), 3, "{actions:?}");
}

#[test]
fn defragmentation_waits_for_every_voter_and_for_the_rollout() {
    let mut sim = formed(3);
    set_db(&mut sim, 200 * MI, 10 * MI);
    // A member down: nothing is defragmented, status says why.
    let down = sim.voters().map(|m| m.ordinal).last().expect("a member");
    let node = sim
        .pods
        .get(&down)
        .and_then(|p| p.node.clone())
        .expect("node");
    sim.stop_node(&node);
    let start = sim.actions.len();
    sim.run(5);
    assert!(defragmented(&maintenance_actions(&sim, start)).is_empty());
    let (progressing, reason, message) = condition(&sim, ConditionType::Progressing);
    assert!(
        progressing && reason == "Maintenance",
        "{reason}: {message}"
    );
    assert!(message.contains("not healthy"), "{message}");
    sim.start_node(&node);
    // A rollout runs first: no member is defragmented before every Pod
    // runs the new template.
    sim.spec.etcd.snapshot_count = 5000;
    let start = sim.actions.len();
    sim.run(80);
    assert!(sim.violations.is_empty(), "{:?}", sim.violations);
    let actions = &sim.actions[start..];
    let last_roll = actions
        .iter()
        .rposition(|a| matches!(a, Action::RollMember { .. }))
        .expect("rolled");
    let first_defrag = actions
        .iter()
        .position(|a| matches!(a, Action::DefragmentMember { .. }))
        .expect("defragmented");
    assert!(last_roll < first_defrag, "{actions:?}");
}

#[test]
fn a_scheduled_round_defragments_every_member_once_when_the_schedule_fires() {
    let mut sim = formed(3);
    // Nothing fragmented: only the schedule makes a round.
    set_db(&mut sim, 20 * MI, 19 * MI);
    // The sim's clock starts at 22:13 UTC; the schedule fires at 23:00.
    sim.spec.maintenance.defrag.schedule = Some("0 23 * * *".to_string());
    let start = sim.actions.len();
    sim.run(5);
    assert!(
        maintenance_actions(&sim, start).is_empty(),
        "no round at creation: the schedule's next time is awaited"
    );
    let leader = sim.current_leader().expect("a leader");
    sim.advance(50 * 60);
    sim.run(40);
    assert!(sim.violations.is_empty(), "{:?}", sim.violations);
    let actions = maintenance_actions(&sim, start);
    let order = defragmented(&actions);
    assert_eq!(order.len(), 3, "each member once: {actions:?}");
    assert_eq!(order.last(), Some(&leader), "{actions:?}");
    let maintenance = sim.status.maintenance.clone().expect("recorded");
    assert!(maintenance.defrag_round.is_none(), "the round is over");
    // Nothing more until the next day.
    let after = sim.actions.len();
    sim.run(40);
    assert!(defragmented(&maintenance_actions(&sim, after)).is_empty());
}
