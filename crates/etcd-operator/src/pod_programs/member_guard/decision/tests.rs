use super::*;
use crate::pod_contract;
use GuardPass::{Check, StartEtcd};

fn expected(expect_data: bool) -> ExpectedIdentity {
    ExpectedIdentity {
        cluster_token: "prod-a-1".into(),
        member_name: "prod-a-0".into(),
        cluster_id: None,
        member_id: Some(0xabc),
        expect_data,
    }
}

fn marker(has_had_data: bool) -> MemberMarker {
    MemberMarker {
        cluster_token: "prod-a-1".into(),
        member_name: "prod-a-0".into(),
        cluster_id: None,
        member_id: Some(0xabc),
        has_had_data,
    }
}

fn volume(marker: Option<MemberMarker>, data_present: bool) -> VolumeState {
    VolumeState {
        marker,
        data_present,
    }
}

fn refused(decision: &GuardDecision) -> Option<&Refusal> {
    match decision {
        GuardDecision::Refuse(refusal) => Some(refusal),
        GuardDecision::Start { .. } => None,
    }
}

#[test]
fn empty_volume_for_a_new_member_writes_the_marker_and_starts() {
    let decision = decide(&expected(false), &volume(None, false), Check);
    assert_eq!(
        decision,
        GuardDecision::Start {
            write_marker: Some(marker(false))
        }
    );
}

#[test]
fn the_start_of_etcd_is_recorded_in_the_marker_before_etcd_runs() {
    // The pass that execs etcd writes a marker saying etcd ran here,
    // whether the volume had no marker yet or one from the init pass.
    for on_volume in [None, Some(marker(false))] {
        let decision = decide(&expected(false), &volume(on_volume, false), StartEtcd);
        assert_eq!(
            decision,
            GuardDecision::Start {
                write_marker: Some(marker(true))
            }
        );
    }
}

#[test]
fn empty_volume_when_data_is_expected_is_data_loss() {
    for pass in [Check, StartEtcd] {
        let decision = decide(&expected(true), &volume(None, false), pass);
        assert!(matches!(
            refused(&decision),
            Some(Refusal::DataLostNoMarker { .. })
        ));
    }
}

#[test]
fn data_without_marker_is_refused_even_for_a_new_member() {
    for expect_data in [false, true] {
        let decision = decide(&expected(expect_data), &volume(None, true), StartEtcd);
        assert!(matches!(
            refused(&decision),
            Some(Refusal::DataWithoutMarker { .. })
        ));
    }
}

#[test]
fn matching_marker_with_data_starts_and_records_that_data_was_seen() {
    let decision = decide(&expected(true), &volume(Some(marker(false)), true), Check);
    assert_eq!(
        decision,
        GuardDecision::Start {
            write_marker: Some(marker(true))
        }
    );
    let decision = decide(
        &expected(true),
        &volume(Some(marker(true)), true),
        StartEtcd,
    );
    assert_eq!(decision, GuardDecision::Start { write_marker: None });
}

#[test]
fn matching_marker_learns_ids_it_did_not_know() {
    let mut old = marker(true);
    old.member_id = None;
    let mut wanted = expected(true);
    wanted.cluster_id = Some(0x77);
    let decision = decide(&wanted, &volume(Some(old), true), StartEtcd);
    let mut learnt = marker(true);
    learnt.cluster_id = Some(0x77);
    assert_eq!(
        decision,
        GuardDecision::Start {
            write_marker: Some(learnt)
        }
    );
}

#[test]
fn a_checked_volume_on_which_etcd_never_started_may_start_empty() {
    // The init container wrote the marker; etcd has not run yet.
    let decision = decide(&expected(false), &volume(Some(marker(false)), false), Check);
    assert_eq!(decision, GuardDecision::Start { write_marker: None });
    let decision = decide(
        &expected(false),
        &volume(Some(marker(false)), false),
        StartEtcd,
    );
    assert_eq!(
        decision,
        GuardDecision::Start {
            write_marker: Some(marker(true))
        }
    );
}

#[test]
fn marker_without_data_is_data_loss_once_etcd_ran_or_data_is_expected() {
    for pass in [Check, StartEtcd] {
        let decision = decide(&expected(false), &volume(Some(marker(true)), false), pass);
        assert!(matches!(refused(&decision), Some(Refusal::DataLost { .. })));
        let decision = decide(&expected(true), &volume(Some(marker(false)), false), pass);
        assert!(matches!(refused(&decision), Some(Refusal::DataLost { .. })));
    }
}

#[test]
fn disagreeing_marker_is_refused_whatever_the_data() {
    type Change = Box<dyn Fn(&mut MemberMarker)>;
    let cases: Vec<(MarkerField, Change)> = vec![
        (
            MarkerField::ClusterToken,
            Box::new(|m| m.cluster_token = "prod-a-0".into()),
        ),
        (
            MarkerField::MemberName,
            Box::new(|m| m.member_name = "prod-a-2".into()),
        ),
        (
            MarkerField::MemberId,
            Box::new(|m| m.member_id = Some(0xdef)),
        ),
        (
            MarkerField::ClusterId,
            Box::new(|m| m.cluster_id = Some(0x1)),
        ),
    ];
    for (field, change) in cases {
        let mut foreign = marker(true);
        change(&mut foreign);
        let mut wanted = expected(false);
        wanted.cluster_id = Some(0x2);
        for data_present in [false, true] {
            let decision = decide(
                &wanted,
                &volume(Some(foreign.clone()), data_present),
                StartEtcd,
            );
            match decision {
                GuardDecision::Refuse(refusal @ Refusal::MarkerMismatch { field: f, .. }) => {
                    assert_eq!(f, field);
                    let foreign_cluster =
                        matches!(field, MarkerField::ClusterToken | MarkerField::ClusterId);
                    assert_eq!(
                        refusal.kind(),
                        if foreign_cluster {
                            pod_contract::Refusal::ForeignCluster
                        } else {
                            pod_contract::Refusal::ForeignMember
                        }
                    );
                }
                other => panic!("{field}: expected a mismatch, got {other:?}"),
            }
        }
    }
}

#[test]
fn unknown_ids_on_either_side_do_not_conflict() {
    let mut old = marker(true);
    old.member_id = None;
    let mut wanted = expected(true);
    wanted.member_id = None;
    let decision = decide(&wanted, &volume(Some(old), true), StartEtcd);
    assert_eq!(decision, GuardDecision::Start { write_marker: None });
}

#[test]
fn in_a_pod_where_etcd_ran_a_volume_without_its_marker_is_refused() {
    // The Pod-scoped marker says the guard let etcd start in this Pod;
    // the member ID is not recorded yet (a bootstrap member).
    let ran = MemberMarker {
        member_id: None,
        ..marker(true)
    };
    let bootstrap = ExpectedIdentity {
        member_id: None,
        ..expected(false)
    };
    for pass in [Check, StartEtcd] {
        let wiped = decide_in_pod(&bootstrap, Some(&ran), &volume(None, false), pass);
        assert!(matches!(
            refused(&wiped),
            Some(Refusal::VolumeWipedUnderPod { .. })
        ));
        let replaced = decide_in_pod(&bootstrap, Some(&ran), &volume(None, true), pass);
        assert!(matches!(
            refused(&replaced),
            Some(Refusal::DataWithoutMarker { .. })
        ));
        // The data dir alone wiped, the marker kept.
        let emptied = decide_in_pod(
            &bootstrap,
            Some(&ran),
            &volume(Some(ran.clone()), false),
            pass,
        );
        assert!(matches!(refused(&emptied), Some(Refusal::DataLost { .. })));
        // An intact volume restarts.
        let intact = decide_in_pod(
            &bootstrap,
            Some(&ran),
            &volume(Some(ran.clone()), true),
            pass,
        );
        assert!(refused(&intact).is_none(), "{intact:?}");
    }
}

#[test]
fn the_pod_scoped_marker_lends_its_ids_to_the_check() {
    // Seen with a member ID, the volume's marker now names another one.
    let ran = marker(true);
    let bootstrap = ExpectedIdentity {
        member_id: None,
        ..expected(false)
    };
    let other = MemberMarker {
        member_id: Some(0xdef),
        ..marker(true)
    };
    let decision = decide_in_pod(&bootstrap, Some(&ran), &volume(Some(other), true), Check);
    assert!(matches!(
        refused(&decision),
        Some(Refusal::MarkerMismatch {
            field: MarkerField::MemberId,
            ..
        })
    ));
}

#[test]
fn a_pod_scoped_marker_from_before_etcd_started_proves_no_loss() {
    // The init container checked the volume, etcd never started in this
    // Pod, and the volume was recreated in between: nothing ran on it.
    let checked = marker(false);
    let decision = decide_in_pod(
        &expected(false),
        Some(&checked),
        &volume(None, false),
        Check,
    );
    assert_eq!(
        decision,
        GuardDecision::Start {
            write_marker: Some(marker(false))
        }
    );
    // Without a Pod-scoped copy (a new Pod), the plain rule applies.
    assert_eq!(
        decide_in_pod(&expected(false), None, &volume(None, false), StartEtcd),
        decide(&expected(false), &volume(None, false), StartEtcd)
    );
}
