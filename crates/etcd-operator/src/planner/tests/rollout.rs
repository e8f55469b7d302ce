//! Rolling changes: order, one member at a time, waiting for health,
//! durability work first, halting on a member that does not come back,
//! etcd's release rules.

use super::sim::{Sim, Volumes, release_line};
use crate::api::ConditionType;
use crate::planner::{Action, Waiting};

fn formed(replicas: i32) -> Sim {
    let mut sim = Sim::new(replicas, 5, Volumes::Network);
    sim.run(60);
    assert!(sim.violations.is_empty(), "{:?}", sim.violations);
    assert_eq!(sim.healthy_voters(), usize::try_from(replicas).unwrap_or(0));
    sim
}

fn formed_at(replicas: i32, version: &str) -> Sim {
    let mut sim = Sim::new(replicas, 5, Volumes::Network);
    sim.spec.version = version.to_string();
    sim.storage = release_line(version);
    sim.run(60);
    assert!(sim.violations.is_empty(), "{:?}", sim.violations);
    sim
}

/// The actions of the rollout, from `from` on.
fn rollout_actions(sim: &Sim, from: usize) -> Vec<Action> {
    sim.actions[from..]
        .iter()
        .filter(|a| {
            matches!(
                a,
                Action::RollMember { .. }
                    | Action::TransferLeadership { .. }
                    | Action::EnableDowngrade { .. }
                    | Action::CancelDowngrade { .. }
            )
        })
        .cloned()
        .collect()
}

fn rolled(actions: &[Action]) -> Vec<u32> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::RollMember { ordinal, .. } => Some(*ordinal),
            _ => None,
        })
        .collect()
}

/// Reconciles second by second until the rollout has replaced its first
/// member; returns its ordinal.
fn until_first_rolled(sim: &mut Sim, start: usize) -> u32 {
    for _ in 0..120 {
        if let Some(first) = rolled(&rollout_actions(sim, start)).first() {
            return *first;
        }
        sim.reconcile();
        sim.advance(1);
    }
    panic!("no member rolled: {:?}", &sim.actions[start..]);
}

pub(super) fn all_on_the_spec(sim: &Sim) -> bool {
    let desired = sim.desired_template();
    sim.pods.len() == usize::try_from(sim.spec.replicas).unwrap_or(0)
        && sim
            .pods
            .values()
            .all(|p| p.template == desired && p.version == sim.spec.version && p.running)
}

fn condition(sim: &Sim, type_: ConditionType) -> (bool, String, String) {
    let c = sim
        .status
        .condition(type_)
        .unwrap_or_else(|| panic!("{type_:?} is set"));
    (c.status == "True", c.reason.clone(), c.message.clone())
}

#[test]
fn an_upgrade_rolls_followers_first_then_the_leader_after_moving_leadership() {
    let mut sim = formed(3);
    let leader = sim.current_leader().expect("a leader");
    let leader_ordinal = sim
        .members
        .iter()
        .find(|m| m.id == leader)
        .map(|m| m.ordinal)
        .expect("leader ordinal");
    let cluster_id = sim.status.cluster_id.clone();
    let ids: Vec<u64> = sim.members.iter().map(|m| m.id).collect();
    let start = sim.actions.len();
    sim.spec.version = "3.7.3".to_string();
    sim.run(120);
    assert!(sim.violations.is_empty(), "{:?}", sim.violations);
    let actions = rollout_actions(&sim, start);
    let order = rolled(&actions);
    assert_eq!(order.len(), 3, "each member once: {actions:?}");
    assert_eq!(
        order.last(),
        Some(&leader_ordinal),
        "the leader last: {actions:?}"
    );
    let transfer = actions
        .iter()
        .position(|a| matches!(a, Action::TransferLeadership { from, .. } if *from == leader))
        .expect("leadership moved away first");
    let leader_rolled = actions
        .iter()
        .position(|a| matches!(a, Action::RollMember { ordinal, .. } if *ordinal == leader_ordinal))
        .expect("leader rolled");
    assert!(transfer < leader_rolled, "{actions:?}");
    // Same cluster, same members, everything on the new release.
    assert!(all_on_the_spec(&sim), "{:#?}", sim.pods);
    assert_eq!(sim.status.cluster_id, cluster_id);
    let mut after: Vec<u64> = sim.members.iter().map(|m| m.id).collect();
    after.sort_unstable();
    let mut before = ids;
    before.sort_unstable();
    assert_eq!(after, before);
    assert_eq!(
        sim.storage,
        release_line("3.7.3"),
        "cluster version follows"
    );
    assert_eq!(sim.status.version.as_deref(), Some("3.7.3"));
    assert_eq!(sim.status.updated_members, 3);
    assert!(sim.status.members.iter().all(|m| m.pod_up_to_date));
    let (progressing, reason, _) = condition(&sim, ConditionType::Progressing);
    assert!(!progressing, "{reason}");
}

#[test]
fn status_tells_how_far_a_rollout_is_and_what_runs() {
    let mut sim = formed(3);
    sim.spec.version = "3.7.3".to_string();
    // Up to the first member replaced and back.
    for _ in 0..40 {
        sim.reconcile();
        sim.advance(1);
        if sim.pods.values().filter(|p| p.version == "3.7.3").count() == 1
            && sim.pods.values().all(|p| p.running)
        {
            break;
        }
    }
    sim.reconcile();
    assert_eq!(
        sim.status.version.as_deref(),
        Some("3.6.16,3.7.3→3.7.3"),
        "{:#?}",
        sim.status
    );
    assert_eq!(sim.status.updated_members, 1);
    let (progressing, reason, message) = condition(&sim, ConditionType::Progressing);
    assert!(progressing, "{reason}: {message}");
    assert!(message.contains("1 of 3 members updated"), "{message}");
    assert!(sim.status.is_true(ConditionType::Available));
    let updated: Vec<bool> = sim
        .status
        .members
        .iter()
        .map(|m| m.pod_up_to_date)
        .collect();
    assert_eq!(updated.iter().filter(|u| **u).count(), 1, "{updated:?}");
}

#[test]
fn a_member_replaced_by_the_rollout_is_progress_not_degradation() {
    let mut sim = formed(3);
    let start = sim.actions.len();
    sim.spec.version = "3.7.3".to_string();
    let mut saw_replacing = false;
    for _ in 0..60 {
        sim.reconcile();
        sim.advance(1);
        if sim.status.rollout.is_some() {
            saw_replacing = true;
            let (degraded, _, message) = condition(&sim, ConditionType::Degraded);
            assert!(!degraded, "a planned replacement pages nobody: {message}");
            assert_eq!(sim.status.phase, Some(crate::api::Phase::Progressing));
        }
    }
    assert!(saw_replacing);
    assert_eq!(rolled(&rollout_actions(&sim, start)).len(), 3);
    assert_eq!(
        sim.status.rollout, None,
        "cleared once every member is back"
    );
}

#[test]
fn one_member_at_a_time_and_none_while_another_is_down() {
    let mut sim = formed(5);
    let start = sim.actions.len();
    sim.spec.etcd.snapshot_count = 5000;
    // Roll until the first member is replaced, then stop another's node.
    let first = until_first_rolled(&mut sim, start);
    let other = (0..5).find(|o| *o != first).expect("another member");
    let node = sim.node_of(other).expect("node");
    sim.stop_node(&node);
    sim.run(40);
    assert!(sim.violations.is_empty(), "{:?}", sim.violations);
    assert_eq!(
        rolled(&rollout_actions(&sim, start)),
        vec![first],
        "no second member while one is down"
    );
    let (progressing, reason, message) = condition(&sim, ConditionType::Progressing);
    assert!(progressing && reason == "RollingOut", "{reason}: {message}");
    assert!(message.contains(&format!("demo-{other}")), "{message}");
    sim.start_node(&node);
    sim.run(120);
    assert!(sim.violations.is_empty(), "{:?}", sim.violations);
    assert!(all_on_the_spec(&sim), "{:#?}", sim.pods);
    assert_eq!(rolled(&rollout_actions(&sim, start)).len(), 5);
}

#[test]
fn a_member_whose_node_just_stopped_is_not_taken_for_one_that_fails_to_start() {
    let mut sim = formed(3);
    let start = sim.actions.len();
    sim.spec.etcd.snapshot_count = 5000;
    let first = until_first_rolled(&mut sim, start);
    let other = (0..3).find(|o| *o != first).expect("another member");
    let node = sim.node_of(other).expect("node");
    sim.stop_node(&node);
    // The Node object still says Ready for a while.
    sim.stale_node_status.insert(node.clone());
    sim.run(20);
    assert!(sim.violations.is_empty(), "{:?}", sim.violations);
    assert_eq!(
        rolled(&rollout_actions(&sim, start)),
        vec![first],
        "the member on the stopped node was replaced"
    );
}

#[test]
fn a_member_that_does_not_come_back_halts_the_rollout_and_a_revert_repairs_it() {
    let mut sim = formed(3);
    sim.broken_releases = vec!["3.7.3".to_string()];
    let start = sim.actions.len();
    sim.spec.version = "3.7.3".to_string();
    sim.run(80);
    assert!(sim.violations.is_empty(), "{:?}", sim.violations);
    let order = rolled(&rollout_actions(&sim, start));
    assert_eq!(order.len(), 1, "stopped at the first: {order:?}");
    let (progressing, reason, message) = condition(&sim, ConditionType::Progressing);
    assert!(!progressing, "{reason}");
    assert_eq!(reason, "RolloutHalted", "{message}");
    assert!(message.contains(&format!("demo-{}", order[0])), "{message}");
    let (degraded, _, _) = condition(&sim, ConditionType::Degraded);
    assert!(degraded, "a member that does not come back is degraded");
    assert!(sim.status.is_true(ConditionType::Available));
    // The previous template is not put back by itself...
    assert!(sim.pods.values().any(|p| p.version == "3.7.3"));
    // ...but a person's revert rolls the stuck member back first.
    sim.spec.version = "3.6.16".to_string();
    sim.run(60);
    assert!(sim.violations.is_empty(), "{:?}", sim.violations);
    assert!(all_on_the_spec(&sim), "{:#?}", sim.pods);
    assert_eq!(sim.healthy_voters(), 3);
}

#[test]
fn a_minor_downgrade_goes_through_etcds_downgrade_before_any_member_runs_it() {
    let mut sim = formed_at(3, "3.7.3");
    assert_eq!(sim.storage, release_line("3.7.3"));
    let start = sim.actions.len();
    sim.spec.version = "3.6.16".to_string();
    sim.run(120);
    assert!(sim.violations.is_empty(), "{:?}", sim.violations);
    let actions = rollout_actions(&sim, start);
    assert!(
        matches!(actions.first(), Some(Action::EnableDowngrade { target }) if target == "3.6"),
        "{actions:?}"
    );
    assert_eq!(rolled(&actions).len(), 3, "{actions:?}");
    assert!(all_on_the_spec(&sim), "{:#?}", sim.pods);
    assert_eq!(sim.downgrade, None, "etcd ends the downgrade");
    assert_eq!(sim.storage, release_line("3.6.16"));
    assert_eq!(sim.healthy_voters(), 3);
}

#[test]
fn a_downgrade_taken_back_midway_is_cancelled_and_rolls_forward_again() {
    let mut sim = formed_at(3, "3.7.3");
    let start = sim.actions.len();
    sim.spec.version = "3.6.16".to_string();
    until_first_rolled(&mut sim, start);
    sim.spec.version = "3.7.3".to_string();
    sim.run(120);
    assert!(sim.violations.is_empty(), "{:?}", sim.violations);
    let actions = rollout_actions(&sim, start);
    assert!(
        actions
            .iter()
            .any(|a| matches!(a, Action::CancelDowngrade { .. })),
        "{actions:?}"
    );
    assert!(all_on_the_spec(&sim), "{:#?}", sim.pods);
    assert_eq!(sim.storage, release_line("3.7.3"));
}

#[test]
fn an_upgrade_from_below_etcds_patch_floor_is_refused_with_the_way_forward() {
    let mut sim = formed_at(3, "3.6.5");
    let start = sim.actions.len();
    sim.spec.version = "3.7.3".to_string();
    sim.run(10);
    assert!(rolled(&rollout_actions(&sim, start)).is_empty());
    let waiting = sim.last_plan.as_ref().and_then(|p| p.waiting.clone());
    assert!(
        matches!(&waiting, Some(Waiting::NeedsAttention(m)) if m.contains("3.6.11") && m.contains("newest 3.6 release")),
        "{waiting:?}"
    );
}

#[test]
fn a_change_that_reaches_no_pod_rolls_nothing() {
    let mut sim = formed(3);
    let start = sim.actions.len();
    sim.spec.member_failure_timeout = std::time::Duration::from_secs(60).into();
    sim.spec.storage.retention_policy = crate::api::RetentionPolicy::Delete;
    sim.run(20);
    assert!(rollout_actions(&sim, start).is_empty());
    let (progressing, reason, _) = condition(&sim, ConditionType::Progressing);
    assert!(!progressing && reason == "UpToDate", "{reason}");
}

#[test]
fn labels_and_annotations_change_in_place_without_a_restart() {
    let mut sim = formed(3);
    let start = sim.actions.len();
    sim.spec.pod.labels.insert("team".into(), "storage".into());
    sim.spec
        .pod
        .annotations
        .insert("owner".into(), "on-call".into());
    sim.run(10);
    assert!(sim.violations.is_empty(), "{:?}", sim.violations);
    assert!(rolled(&rollout_actions(&sim, start)).is_empty());
    let patched: Vec<&Action> = sim.actions[start..]
        .iter()
        .filter(|a| matches!(a, Action::UpdatePodMetadata { .. }))
        .collect();
    assert_eq!(patched.len(), 3, "{patched:?}");
    assert!(
        sim.pods
            .values()
            .all(|p| p.metadata.labels.get("team").map(String::as_str) == Some("storage"))
    );
    // Steady afterwards: no patch repeats.
    let settled = sim.actions.len();
    sim.run(5);
    assert_eq!(sim.actions.len(), settled, "{:?}", &sim.actions[settled..]);
}

#[test]
fn paused_stops_a_rollout_between_members() {
    let mut sim = formed(3);
    let start = sim.actions.len();
    sim.spec.etcd.heartbeat_interval_ms = 150;
    until_first_rolled(&mut sim, start);
    sim.spec.paused = true;
    sim.run(40);
    assert_eq!(rolled(&rollout_actions(&sim, start)).len(), 1);
    sim.spec.paused = false;
    sim.run(120);
    assert!(sim.violations.is_empty(), "{:?}", sim.violations);
    assert!(all_on_the_spec(&sim), "{:#?}", sim.pods);
}

#[test]
fn no_rollout_while_a_member_whose_data_is_lost_is_replaced() {
    let mut sim = formed(3);
    let start = sim.actions.len();
    sim.wipe(1);
    sim.spec.version = "3.7.3".to_string();
    // Until the wiped member is a voter again, nothing rolls.
    loop {
        sim.reconcile();
        sim.advance(1);
        let replaced = sim
            .actions
            .iter()
            .skip(start)
            .any(|a| matches!(a, Action::PromoteLearner { .. }));
        if replaced {
            break;
        }
        assert!(
            rolled(&rollout_actions(&sim, start)).is_empty(),
            "a rollout during a replacement: {:?}",
            &sim.actions[start..]
        );
        assert!(sim.actions.len() < start + 400, "never replaced");
    }
    sim.run(150);
    assert!(sim.violations.is_empty(), "{:?}", sim.violations);
    assert!(all_on_the_spec(&sim), "{:#?}", sim.pods);
}

#[test]
fn no_rollout_without_quorum() {
    let mut sim = formed(3);
    let start = sim.actions.len();
    for ordinal in [0, 1] {
        let node = sim.node_of(ordinal).expect("node");
        sim.stop_node(&node);
    }
    sim.spec.version = "3.7.3".to_string();
    sim.run(30);
    assert!(rollout_actions(&sim, start).is_empty());
}

#[test]
fn a_single_member_rolls_in_place() {
    let mut sim = formed(1);
    let start = sim.actions.len();
    sim.spec.version = "3.7.3".to_string();
    sim.run(40);
    assert!(sim.violations.is_empty(), "{:?}", sim.violations);
    assert_eq!(rolled(&rollout_actions(&sim, start)), vec![0]);
    assert!(all_on_the_spec(&sim));
}

#[test]
fn a_grown_storage_size_expands_every_volume_and_restarts_members_one_at_a_time() {
    let mut sim = formed(3);
    let start = sim.actions.len();
    sim.spec.storage.size =
        k8s_openapi::apimachinery::pkg::api::resource::Quantity("2Gi".to_string());
    sim.run(120);
    assert!(sim.violations.is_empty(), "{:?}", sim.violations);
    let expanded = sim.actions[start..]
        .iter()
        .filter(|a| matches!(a, Action::ExpandVolume { size, .. } if size == "2Gi"))
        .count();
    assert_eq!(expanded, 3);
    // The filesystems grew at their Pods' next start: one restart each.
    assert_eq!(rolled(&rollout_actions(&sim, start)).len(), 3);
    assert!(
        sim.pvcs.values().all(|p| p.capacity == 2 << 30
            && p.requested == 2 << 30
            && !p.filesystem_resize_pending)
    );
    assert!(
        sim.status
            .members
            .iter()
            .all(|m| m.volume_size.as_deref() == Some("2Gi")),
        "{:#?}",
        sim.status.members
    );
    assert_eq!(sim.healthy_voters(), 3);
    let (progressing, reason, _) = condition(&sim, ConditionType::Progressing);
    assert!(!progressing, "{reason}");
}

#[test]
fn a_class_without_expansion_keeps_the_size_says_so_and_blocks_nothing() {
    let mut sim = formed(3);
    sim.expansion_allowed = false;
    let start = sim.actions.len();
    sim.spec.storage.size =
        k8s_openapi::apimachinery::pkg::api::resource::Quantity("2Gi".to_string());
    // A change asked at the same time still rolls out.
    sim.spec.version = "3.7.3".to_string();
    sim.run(150);
    assert!(sim.violations.is_empty(), "{:?}", sim.violations);
    assert!(
        !sim.actions[start..]
            .iter()
            .any(|a| matches!(a, Action::ExpandVolume { .. }))
    );
    assert_eq!(
        rolled(&rollout_actions(&sim, start)).len(),
        3,
        "the version rolled out: {:?}",
        sim.last_plan
    );
    assert!(all_on_the_spec(&sim), "{:#?}", sim.pods);
    // The members run with the quota of the volumes they have (1Gi), not
    // of the size the class refused.
    let one_gib = crate::api::tuning::quota_for_volume(1 << 30);
    assert_eq!(
        sim.desired_template(),
        crate::api::pod_revision::template_hash(
            &sim.spec,
            one_gib,
            sim.transport().stage,
            sim.tls_revision()
        )
    );
    assert_eq!(sim.status.quota_backend_bytes, Some(one_gib));
    let (available, _, message) = condition(&sim, ConditionType::Available);
    assert!(available);
    assert!(
        message.contains("does not allow expansion")
            && message.contains("set storage.size back to 1Gi"),
        "{message}"
    );
    // The size goes back to what the volumes have: the warning is gone and
    // nothing rolls.
    let before = sim.actions.len();
    sim.spec.storage.size =
        k8s_openapi::apimachinery::pkg::api::resource::Quantity("1Gi".to_string());
    sim.run(30);
    assert!(rolled(&rollout_actions(&sim, before)).is_empty());
    let (_, _, message) = condition(&sim, ConditionType::Available);
    assert!(!message.contains("storage.size"), "{message}");
}

#[test]
fn a_new_volume_is_never_smaller_than_the_members_volumes() {
    let mut sim = formed(3);
    sim.spec.storage.size =
        k8s_openapi::apimachinery::pkg::api::resource::Quantity("2Gi".to_string());
    sim.run(120);
    assert!(sim.pvcs.values().all(|p| p.requested == 2 << 30));
    // The spec goes below the volumes: nothing shrinks, status says so.
    sim.spec.storage.size =
        k8s_openapi::apimachinery::pkg::api::resource::Quantity("1Gi".to_string());
    sim.run(10);
    let (_, _, message) = condition(&sim, ConditionType::Available);
    assert!(message.contains("volumes never shrink"), "{message}");
    assert!(sim.pvcs.values().all(|p| p.requested == 2 << 30));
    // A member whose data is lost gets a volume as large as its peers'.
    sim.wipe(1);
    sim.run(150);
    assert!(sim.violations.is_empty(), "{:?}", sim.violations);
    assert_eq!(sim.healthy_voters(), 3);
    assert!(
        sim.pvcs.values().all(|p| p.requested == 2 << 30),
        "{:?}",
        sim.pvcs.values().map(|p| p.requested).collect::<Vec<_>>()
    );
    assert_eq!(
        sim.status.quota_backend_bytes,
        Some(crate::api::tuning::quota_for_volume(2 << 30))
    );
}
