//! Random sequences of failures and recoveries never break a durability
//! rule (checked on every action), and once the faults stop a cluster whose
//! majority kept its data returns to full health with the same identity.

use proptest::prelude::*;

use super::sim::{Sim, Volumes};
use crate::planner::Action;

#[derive(Clone, Debug)]
enum Fault {
    DeletePod(u32),
    StopNode(u32),
    StartNode(u32),
    DeleteNode(u32),
    TaintOutOfService(u32),
    DeletePvc(u32),
    Wipe(u32),
    Wait(i64),
    Reconcile,
    /// A person approves a restore of the current incarnation.
    Approve,
    /// A person approves a restore from the backups of the loss the status
    /// shows.
    ApproveLoss,
    /// A person makes the backups the recovery source, restored without a
    /// person (`policy: NewestSurvivor`) when true; the backups reach the
    /// given share (percent) of the newest index written so far.
    RecoverFromBackup(bool, u8),
    /// A person changes the release: 3.7 when true, back to 3.6 when false.
    ChangeVersion(bool),
    /// A person changes a tuning flag (rolls every member).
    Tune(u8),
    /// A person grows `storage.size` by 1 GiB.
    Grow,
    /// The data of a member is damaged (etcd's initial corruption check
    /// refuses it at its next start), while no other member's is.
    Damage(u32),
    /// The data of a running member is damaged and etcd's compaction hash
    /// check raises CORRUPT naming it, while no other member's is.
    DamageWhileRunning(u32),
}

fn fault() -> impl Strategy<Value = Fault> {
    prop_oneof![
        2 => (0u32..5).prop_map(Fault::DeletePod),
        2 => (0u32..5).prop_map(Fault::StopNode),
        3 => (0u32..5).prop_map(Fault::StartNode),
        1 => (0u32..5).prop_map(Fault::DeleteNode),
        1 => (0u32..5).prop_map(Fault::TaintOutOfService),
        1 => (0u32..5).prop_map(Fault::DeletePvc),
        1 => (0u32..5).prop_map(Fault::Wipe),
        2 => prop_oneof![Just(5i64), Just(60), Just(400)].prop_map(Fault::Wait),
        8 => Just(Fault::Reconcile),
        1 => Just(Fault::Approve),
        1 => Just(Fault::ApproveLoss),
        1 => (any::<bool>(), 0u8..=100).prop_map(|(auto, reach)| Fault::RecoverFromBackup(auto, reach)),
        1 => any::<bool>().prop_map(Fault::ChangeVersion),
        1 => (0u8..3).prop_map(Fault::Tune),
        1 => Just(Fault::Grow),
        1 => (0u32..5).prop_map(Fault::Damage),
        1 => (0u32..5).prop_map(Fault::DamageWhileRunning),
    ]
}

fn nth_node(sim: &Sim, n: u32) -> Option<String> {
    let names: Vec<String> = sim.nodes.keys().cloned().collect();
    if names.is_empty() {
        return None;
    }
    names.get(usize::try_from(n).ok()? % names.len()).cloned()
}

fn apply(sim: &mut Sim, fault: &Fault) {
    match fault {
        Fault::DeletePod(o) => sim.delete_pod(*o),
        Fault::StopNode(n) => {
            if let Some(node) = nth_node(sim, *n) {
                sim.stop_node(&node);
            }
        }
        Fault::StartNode(n) => {
            if let Some(node) = nth_node(sim, *n) {
                sim.start_node(&node);
            }
        }
        Fault::DeleteNode(n) => {
            if let Some(node) = nth_node(sim, *n) {
                sim.delete_node(&node);
                sim.add_node();
            }
        }
        Fault::TaintOutOfService(n) => {
            if let Some(node) = nth_node(sim, *n) {
                sim.taint_out_of_service(&node);
            }
        }
        Fault::DeletePvc(o) => sim.delete_pvc(*o),
        Fault::Wipe(o) => sim.wipe(*o),
        Fault::Wait(secs) => sim.advance(*secs),
        Fault::Reconcile => {
            sim.reconcile();
            sim.advance(2);
        }
        Fault::Approve => {
            sim.approve_newest_survivor();
        }
        Fault::ApproveLoss => {
            sim.approve_loss();
        }
        Fault::RecoverFromBackup(auto, reach) => {
            sim.spec.recovery.source = crate::api::RecoverySource::Backup;
            sim.spec.recovery.backup = Some(crate::api::BackupSource::default());
            if *auto {
                sim.spec.recovery.policy = crate::api::RecoveryPolicy::NewestSurvivor;
            }
            let newest = i64::try_from(sim.newest_index()).unwrap_or(i64::MAX);
            sim.backup_reach = Some(newest.saturating_mul(i64::from(*reach)) / 100);
        }
        Fault::ChangeVersion(up) => {
            sim.spec.version = if *up { "3.7.3" } else { "3.6.16" }.to_string();
        }
        Fault::Tune(n) => {
            sim.spec.etcd.snapshot_count = 10_000 + i64::from(*n);
        }
        Fault::Damage(o) => {
            let current_damaged = sim.members.iter().any(|m| sim.damaged.contains(&m.id));
            if !current_damaged {
                sim.damage(*o);
            }
        }
        Fault::DamageWhileRunning(o) => {
            let current_damaged = sim.members.iter().any(|m| sim.damaged.contains(&m.id));
            let runs = sim.pods.get(o).is_some_and(|p| p.running);
            if !current_damaged && sim.corrupt.is_none() && runs {
                sim.damage_while_running(*o);
            }
        }
        Fault::Grow => {
            let grown = sim.spec_bytes() + (1 << 30);
            sim.spec.storage.size = k8s_openapi::apimachinery::pkg::api::resource::Quantity(
                crate::api::quantity::human(grown),
            );
        }
    }
}

fn check(replicas: i32, volumes: Volumes, faults: &[Fault]) -> Result<(), TestCaseError> {
    let mut sim = Sim::new(replicas, 5, volumes);
    sim.run(60);
    prop_assert!(sim.violations.is_empty(), "bootstrap: {:?}", sim.violations);
    let cluster_id = sim.status.cluster_id.clone();
    let mut approved = false;
    for fault in faults {
        apply(&mut sim, fault);
        approved |= matches!(fault, Fault::Approve | Fault::ApproveLoss);
        prop_assert!(
            sim.violations.is_empty(),
            "after {fault:?}: {:?}\n{:#?}",
            sim.violations,
            sim.actions
        );
        let restored = sim
            .actions
            .iter()
            .any(|a| matches!(a, Action::RestoreFromSurvivor { .. }));
        prop_assert!(!restored || approved, "restore without approval");
    }
    // Heal: every node back, then let the operator work.
    let names: Vec<String> = sim.nodes.keys().cloned().collect();
    for node in names {
        sim.start_node(&node);
    }
    sim.run(250);
    prop_assert!(sim.violations.is_empty(), "healing: {:?}", sim.violations);
    // A restore keeps every other survivor's volume until a person lets
    // it go; then its member is replaced like any other.
    if sim.release_retained() > 0 {
        sim.run(150);
        prop_assert!(
            sim.violations.is_empty(),
            "after release: {:?}",
            sim.violations
        );
    }
    let restored = sim
        .actions
        .iter()
        .any(|a| matches!(a, Action::RestoreFromSurvivor { .. }));
    let restore_ended = restored
        && sim
            .status
            .restore
            .as_ref()
            .is_some_and(|r| !r.in_progress());
    if restore_ended && !sim.majority_data_exists() {
        // A later fault destroyed the data of a majority of the new
        // incarnation (e.g. its only voter wiped before the others
        // joined): nothing is left to form from, and status says so.
        prop_assert_eq!(
            sim.status.phase,
            Some(crate::api::Phase::MajorityDataLost),
            "{:#?}",
            sim.status
        );
    } else if restore_ended {
        // A restore ran to its end: a full new incarnation.
        prop_assert!(
            sim.has_quorum(),
            "no quorum after a restore: {:#?}",
            sim.status
        );
        prop_assert_ne!(sim.status.cluster_id.clone(), cluster_id.clone());
        prop_assert_eq!(
            sim.healthy_voters(),
            usize::try_from(replicas).unwrap_or(0),
            "{:#?}",
            sim.status
        );
    }
    if !sim.majority_ever_lost {
        prop_assert!(
            sim.has_quorum(),
            "no quorum after healing: {:#?}",
            sim.status
        );
        prop_assert_eq!(sim.status.cluster_id.clone(), cluster_id);
        prop_assert_eq!(
            sim.voters().count(),
            usize::try_from(replicas).unwrap_or(0),
            "{:#?}",
            sim.status
        );
        prop_assert_eq!(
            sim.healthy_voters(),
            usize::try_from(replicas).unwrap_or(0),
            "{:#?}",
            sim.status
        );
        // Every expansion has reached the filesystems (of the claims that
        // are not being deleted).
        let size = sim.spec_bytes();
        prop_assert!(
            sim.pvcs
                .iter()
                .filter(|(o, p)| **o < u32::try_from(replicas).unwrap_or(0) && !p.deleting)
                .all(|(_, p)| p.capacity == size),
            "volumes below storage.size: {:#?}",
            sim.pvcs
        );
        // Every rollout the faults interrupted has finished.
        let desired = sim.desired_template();
        prop_assert!(
            sim.pods.values().all(|p| p.template == desired),
            "pods left on an older template: {:#?}\n{:#?}",
            sim.pods,
            sim.status
        );
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn network_volumes_keep_every_rule(faults in proptest::collection::vec(fault(), 1..40)) {
        check(3, Volumes::Network, &faults)?;
    }

    #[test]
    fn local_volumes_keep_every_rule(faults in proptest::collection::vec(fault(), 1..40)) {
        check(3, Volumes::Local, &faults)?;
    }

    #[test]
    fn five_members_keep_every_rule(faults in proptest::collection::vec(fault(), 1..40)) {
        check(5, Volumes::Network, &faults)?;
    }
}

/// Found by these properties: a member whose data etcd refused has its
/// volume set aside, then the data of the two others is lost. The kept
/// volume may hold writes the backups lack, so an automatic backup restore
/// waits for a person (rules 11 and 15).
#[test]
fn a_damaged_volume_set_aside_holds_an_automatic_backup_restore() {
    let faults = [
        Fault::Damage(1),
        Fault::DeletePvc(2),
        Fault::Reconcile,
        Fault::RecoverFromBackup(true, 0),
        Fault::DeleteNode(2),
        Fault::Wipe(0),
    ];
    if let Err(failure) = check(3, Volumes::Network, &faults) {
        panic!("{failure}");
    }
}
