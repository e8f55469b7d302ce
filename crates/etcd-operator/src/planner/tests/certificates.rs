//! TLS clusters: the steps of a CA rotation, each once every member
//! restarted onto the last, and the warning of a certificate close to
//! expiry.

use super::rollout::all_on_the_spec;
use super::sim::{Sim, Volumes};
use crate::api::{CertificateStatus, ConditionType};
use crate::planner::{Action, EventType};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

/// A TLS cluster of `replicas` members, formed, with no rotation pending.
fn formed_tls(replicas: i32) -> Sim {
    let mut sim = Sim::new(replicas, 5, Volumes::Network);
    sim.spec.tls = Some(crate::api::TlsSpec::default());
    sim.tls = Some(crate::planner::TlsObservation {
        status: crate::api::TlsStatus {
            issuer: "BuiltIn".into(),
            ..crate::api::TlsStatus::default()
        },
        revision: "r0".into(),
        rotation: None,
    });
    sim.run(60);
    assert!(sim.violations.is_empty(), "{:?}", sim.violations);
    assert!(all_on_the_spec(&sim));
    sim
}

#[test]
fn a_ca_rotation_takes_each_step_once_every_member_restarted_onto_the_last() {
    use crate::tls::CaRotationStep::{RetireOldCa, SignWithNewCa, TrustNewCa};
    let mut sim = formed_tls(3);
    let ids: Vec<u64> = sim.members.iter().map(|m| m.id).collect();
    let start = sim.actions.len();
    if let Some(tls) = &mut sim.tls {
        tls.rotation = Some((TrustNewCa, "2026-12".into()));
    }
    sim.run(300);
    assert!(sim.violations.is_empty(), "{:?}", sim.violations);
    let steps: Vec<_> = sim.ca_steps.iter().map(|(step, _)| *step).collect();
    assert_eq!(steps, [TrustNewCa, SignWithNewCa, RetireOldCa]);
    assert!(sim.ca_steps.iter().all(|(_, all_on_it)| *all_on_it));
    // Three steps, each followed by a restart of every member.
    let sequence: Vec<String> = sim.actions[start..]
        .iter()
        .filter_map(|a| match a {
            Action::RotateCa { step, .. } => Some(step.to_string()),
            Action::RollMember { .. } => Some("roll".to_string()),
            _ => None,
        })
        .collect();
    let rolls = |n| std::iter::repeat_n("roll".to_string(), n);
    let expected: Vec<String> = std::iter::once("TrustNewCa".to_string())
        .chain(rolls(3))
        .chain(std::iter::once("SignWithNewCa".to_string()))
        .chain(rolls(3))
        .chain(std::iter::once("RetireOldCa".to_string()))
        .chain(rolls(3))
        .collect();
    assert_eq!(sequence, expected);
    assert!(
        all_on_the_spec(&sim),
        "every member runs the new CA's revision"
    );
    let tls = sim.tls.as_ref().expect("tls");
    assert_eq!(tls.rotation, None);
    assert_eq!(tls.status.ca_rotated_for.as_deref(), Some("2026-12"));
    let reported = sim.status.tls.as_ref().expect("status.tls");
    assert_eq!(
        reported.ca_rotated_for.as_deref(),
        Some("2026-12"),
        "done once every member restarted onto the new CA alone"
    );
    assert_eq!(reported.ca_rotation, None);
    assert_eq!(
        sim.members.iter().map(|m| m.id).collect::<Vec<_>>(),
        ids,
        "the same members throughout"
    );
}

#[test]
fn a_ca_rotation_waits_while_a_member_is_down() {
    use crate::tls::CaRotationStep::TrustNewCa;
    let mut sim = formed_tls(3);
    let node = sim.node_of(1).expect("the node of member 1");
    sim.stop_node(&node);
    if let Some(tls) = &mut sim.tls {
        tls.rotation = Some((TrustNewCa, "now".into()));
    }
    sim.run(30);
    assert!(sim.ca_steps.is_empty(), "no step while a member is down");
    sim.start_node(&node);
    sim.run(300);
    assert!(sim.violations.is_empty(), "{:?}", sim.violations);
    assert_eq!(
        sim.ca_steps.len(),
        3,
        "the rotation resumed: {:?}",
        sim.ca_steps
    );
    assert!(all_on_the_spec(&sim));
}

#[test]
fn a_certificate_close_to_expiry_degrades_the_cluster_with_one_warning_event() {
    let mut sim = formed_tls(3);
    let expires = sim
        .now
        .checked_add(k8s_openapi::jiff::SignedDuration::from_hours(48))
        .expect("time");
    if let Some(tls) = &mut sim.tls {
        tls.status.certificates = vec![CertificateStatus {
            secret: "c-server-tls".into(),
            serial: "01".into(),
            not_before: Time(sim.now),
            not_after: Time(expires),
        }];
    }
    let mut warnings = 0;
    for _ in 0..3 {
        sim.reconcile();
        let plan = sim.last_plan.as_ref().expect("a plan");
        warnings += plan
            .events
            .iter()
            .filter(|e| e.reason == "CertificatesExpiring" && e.type_ == EventType::Warning)
            .count();
        sim.advance(1);
    }
    assert_eq!(warnings, 1, "one Warning Event, when it starts");
    let degraded = sim
        .status
        .condition(ConditionType::Degraded)
        .expect("Degraded");
    assert_eq!(degraded.status, "True");
    assert_eq!(degraded.reason, "CertificatesExpiring");
    assert!(
        degraded.message.contains("c-server-tls"),
        "{}",
        degraded.message
    );
}
