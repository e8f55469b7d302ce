//! Turning TLS on for a running plaintext cluster: the members roll to
//! each stage and each peer URL moves once every member listens on it
//! (the simulator flags a URL moved where a member does not listen, and a
//! membership change without quorum); TLS is the default for a new
//! cluster, a plaintext cluster from before that default stays plaintext,
//! and TLS is never turned off.

use super::rollout::all_on_the_spec;
use super::sim::{Sim, Volumes};
use crate::api::{ConditionType, TlsSpec};
use crate::planner::Action;
use crate::transport::Transport;

fn plaintext() -> TlsSpec {
    TlsSpec {
        disabled: true,
        ..TlsSpec::default()
    }
}

/// A plaintext cluster of `replicas` members, formed.
fn formed_plaintext(replicas: i32) -> Sim {
    let mut sim = Sim::new(replicas, 5, Volumes::Network);
    sim.spec.tls = Some(plaintext());
    sim.run(60);
    assert!(sim.violations.is_empty(), "{:?}", sim.violations);
    assert!(all_on_the_spec(&sim));
    assert_eq!(sim.status.transport, Some(Transport::Plaintext));
    sim
}

fn peer_urls(sim: &Sim) -> Vec<String> {
    sim.members.iter().map(|m| m.peer_url.clone()).collect()
}

fn assert_every_peer_url_is_tls_on_2380(sim: &Sim) {
    let urls = peer_urls(sim);
    assert!(
        urls.iter()
            .all(|u| u.starts_with("https://") && u.ends_with(":2380")),
        "{urls:?}"
    );
}

#[test]
fn a_new_cluster_serves_tls_by_default() {
    let mut sim = Sim::new(3, 5, Volumes::Network);
    assert_eq!(sim.spec.tls, None);
    sim.run(60);
    assert!(sim.violations.is_empty(), "{:?}", sim.violations);
    assert_eq!(sim.status.transport, Some(Transport::Tls));
    assert_every_peer_url_is_tls_on_2380(&sim);
    assert!(sim.pods.values().all(|p| p.transport == Transport::Tls));
}

#[test]
fn turning_tls_on_rolls_the_members_through_each_stage_and_moves_every_peer_url_twice() {
    let mut sim = formed_plaintext(3);
    let ids: Vec<u64> = sim.members.iter().map(|m| m.id).collect();
    assert!(peer_urls(&sim).iter().all(|u| u.starts_with("http://")));
    let start = sim.actions.len();
    sim.spec.tls = Some(TlsSpec::default());
    sim.run(400);
    assert!(sim.violations.is_empty(), "{:?}", sim.violations);
    let sequence: Vec<String> = sim.actions[start..]
        .iter()
        .filter_map(|a| match a {
            Action::UpdatePeerUrl { to, .. } => Some(format!("update {}", &to[..to.find(':')?])),
            Action::RollMember { .. } => Some("roll".to_string()),
            _ => None,
        })
        .collect();
    let n = |what: &str, times| std::iter::repeat_n(what.to_string(), times);
    let expected: Vec<String> = n("roll", 3)
        .chain(n("update https", 3))
        .chain(n("roll", 3))
        .chain(n("update https", 3))
        .chain(n("roll", 3))
        .collect();
    assert_eq!(sequence, expected);
    assert_eq!(sim.status.transport, Some(Transport::Tls));
    assert_every_peer_url_is_tls_on_2380(&sim);
    assert!(sim.pods.values().all(|p| p.transport == Transport::Tls));
    assert!(all_on_the_spec(&sim));
    assert_eq!(
        sim.members.iter().map(|m| m.id).collect::<Vec<_>>(),
        ids,
        "the same members throughout"
    );
}

#[test]
fn a_peer_url_moves_only_while_every_member_is_up() {
    let mut sim = formed_plaintext(3);
    sim.spec.tls = Some(TlsSpec::default());
    // Until every member runs the bridging stage.
    for _ in 0..200 {
        sim.reconcile();
        sim.advance(3);
        if sim
            .pods
            .values()
            .all(|p| p.transport == Transport::BridgingPeers)
        {
            break;
        }
    }
    let node = sim.node_of(2).expect("the node of member 2");
    sim.stop_node(&node);
    let before = sim.actions.len();
    sim.run(30);
    assert!(
        !sim.actions[before..]
            .iter()
            .any(|a| matches!(a, Action::UpdatePeerUrl { .. })),
        "no peer URL moves while a member is down: {:?}",
        &sim.actions[before..]
    );
    sim.start_node(&node);
    sim.run(400);
    assert!(sim.violations.is_empty(), "{:?}", sim.violations);
    assert_eq!(sim.status.transport, Some(Transport::Tls));
    assert!(all_on_the_spec(&sim));
}

#[test]
fn a_cluster_bootstrapped_in_plaintext_before_tls_was_the_default_stays_plaintext() {
    let mut sim = formed_plaintext(3);
    // As an operator before `status.transport` existed left it.
    sim.spec.tls = None;
    sim.status.transport = None;
    let before = sim.actions.len();
    sim.run(30);
    assert!(sim.violations.is_empty(), "{:?}", sim.violations);
    assert_eq!(sim.actions.len(), before, "{:?}", &sim.actions[before..]);
    assert_eq!(sim.status.transport, Some(Transport::Plaintext));
}

#[test]
fn turning_tls_off_is_refused_and_said() {
    let mut sim = Sim::new(3, 5, Volumes::Network);
    sim.run(60);
    assert_eq!(sim.status.transport, Some(Transport::Tls));
    let before = sim.actions.len();
    sim.spec.tls = Some(plaintext());
    sim.run(30);
    assert!(sim.violations.is_empty(), "{:?}", sim.violations);
    assert_eq!(sim.actions.len(), before, "nothing rolls");
    assert_eq!(sim.status.transport, Some(Transport::Tls));
    let progressing = sim
        .status
        .condition(ConditionType::Progressing)
        .expect("Progressing");
    assert_eq!(progressing.reason, "NeedsAttention");
    assert!(
        progressing
            .message
            .contains("turning TLS off is not supported"),
        "{}",
        progressing.message
    );
}

/// A member whose data is lost while TLS is being turned on is replaced,
/// and its replacement joins: its `--initial-cluster` lists every member
/// with the peer URL etcd holds for it (some moved, some not yet), which
/// the stage's pattern would not give. The simulator refuses a join whose
/// `--initial-cluster` differs from the member list, as etcd does.
#[test]
fn a_member_lost_while_tls_is_turned_on_rejoins_and_the_change_finishes() {
    let mut sim = formed_plaintext(3);
    sim.spec.tls = Some(TlsSpec::default());
    for _ in 0..400 {
        sim.reconcile();
        sim.advance(3);
        if sim
            .actions
            .iter()
            .any(|a| matches!(a, Action::UpdatePeerUrl { .. }))
        {
            break;
        }
    }
    let unmoved = sim
        .members
        .iter()
        .find(|m| m.peer_url.starts_with("http://"))
        .map(|m| m.ordinal)
        .expect("a member whose peer URL has not moved yet");
    assert!(
        sim.members
            .iter()
            .any(|m| m.peer_url.starts_with("https://")),
        "{:?}",
        peer_urls(&sim)
    );
    let lost = sim
        .members
        .iter()
        .find(|m| m.ordinal == unmoved)
        .map(|m| m.id);
    sim.wipe(unmoved);
    sim.run(500);
    assert!(sim.violations.is_empty(), "{:?}", sim.violations);
    assert!(
        sim.members.iter().all(|m| Some(m.id) != lost),
        "the lost member was replaced"
    );
    assert_eq!(sim.healthy_voters(), 3, "{:#?}", sim.status);
    assert_eq!(sim.status.transport, Some(Transport::Tls));
    assert_every_peer_url_is_tls_on_2380(&sim);
    assert!(all_on_the_spec(&sim));
}
