//! Startup, readiness and liveness probe results.

use serde_json::json;

use super::*;
use crate::probe::{ProbeEvent, ProbeKind};

fn probed() -> Pod {
    one_container(
        json!({
            "startupProbe": { "tcpSocket": { "port": 80 } },
            "livenessProbe": { "tcpSocket": { "port": 80 } },
            "readinessProbe": { "httpGet": { "port": 80, "path": "/ready" } },
        }),
        json!({ "terminationGracePeriodSeconds": 5 }),
    )
}

fn probe(h: &mut Harness, event: ProbeEvent) -> Vec<Effect> {
    let run = h.run_of(App(0));
    h.step(Input::Probe {
        container: App(0),
        run,
        event,
    })
}

fn ready_condition(h: &Harness) -> String {
    h.status()
        .conditions
        .unwrap_or_default()
        .into_iter()
        .find(|c| c.type_ == "Ready")
        .map(|c| c.status)
        .unwrap_or_default()
}

#[test]
fn a_container_without_probes_is_started_and_ready_when_it_runs() {
    let (h, effects) = Harness::running(&one_container(json!({}), json!({})));
    assert!(
        !effects
            .iter()
            .any(|e| matches!(e, Effect::RunProbes { .. }))
    );
    let c = h.container(App(0));
    assert!(c.started && c.ready);
    assert_eq!(ready_condition(&h), "True");
}

#[test]
fn started_after_the_startup_probe_and_ready_after_the_readiness_probe() {
    let (mut h, effects) = Harness::running(&probed());
    assert!(effects.contains(&Effect::RunProbes {
        container: App(0),
        run: 1
    }));
    let c = h.container(App(0));
    assert!(!c.started && !c.ready);

    probe(&mut h, ProbeEvent::Ready(true));
    assert!(!h.container(App(0)).ready, "not ready before started");

    probe(&mut h, ProbeEvent::Started);
    let c = h.container(App(0));
    assert!(c.started && !c.ready, "a readiness probe decides readiness");
    assert_eq!(ready_condition(&h), "False");

    probe(&mut h, ProbeEvent::Ready(true));
    assert!(h.container(App(0)).ready);
    assert_eq!(ready_condition(&h), "True");

    probe(&mut h, ProbeEvent::Ready(false));
    assert!(!h.container(App(0)).ready);
    assert_eq!(ready_condition(&h), "False");
}

#[test]
fn without_a_readiness_probe_ready_once_started() {
    let p = one_container(
        json!({ "startupProbe": { "tcpSocket": { "port": 80 } } }),
        json!({}),
    );
    let (mut h, _) = Harness::running(&p);
    assert!(!h.container(App(0)).ready);
    probe(&mut h, ProbeEvent::Started);
    assert!(h.container(App(0)).ready);
}

#[test]
fn a_failed_liveness_probe_terminates_then_kills_after_the_grace_period_and_restarts() {
    let (mut h, _) = Harness::running(&probed());
    probe(&mut h, ProbeEvent::Started);
    probe(&mut h, ProbeEvent::Ready(true));

    let effects = probe(
        &mut h,
        ProbeEvent::Unhealthy(ProbeKind::Liveness, "dial tcp: refused".into()),
    );
    assert_eq!(stops(&effects), vec![(App(0), StopSignal::Terminate)]);
    assert!(effects.contains(&Effect::WakeAt(h.now().instant + secs(5))));
    assert!(!h.container(App(0)).ready);

    assert!(stops(&h.tick_after(secs(4))).is_empty());
    assert_eq!(
        stops(&h.tick_after(secs(1))),
        vec![(App(0), StopSignal::Kill)]
    );
    assert!(stops(&h.tick_after(secs(1))).is_empty(), "killed once");

    let effects = h.step(Input::ContainerExited {
        container: App(0),
        run: 1,
        exit_code: 137,
        signal: Some(9),
        message: None,
    });
    assert!(effects.contains(&Effect::StopProbes { container: App(0) }));
    assert_eq!(starts(&effects), vec![(App(0), 2)]);
    let effects = h.start_all(&effects);
    assert!(effects.contains(&Effect::RunProbes {
        container: App(0),
        run: 2
    }));
    let c = h.container(App(0));
    assert_eq!(c.restart_count, 1);
    assert!(matches!(
        c.last_state,
        Some(RunState::Terminated {
            exit_code: 137,
            signal: Some(9),
            ..
        })
    ));
}

#[test]
fn a_container_that_stops_within_the_grace_period_is_not_killed() {
    let (mut h, _) = Harness::running(&probed());
    probe(
        &mut h,
        ProbeEvent::Unhealthy(ProbeKind::Startup, "timeout".into()),
    );
    h.advance(secs(2));
    let effects = h.step(Input::ContainerExited {
        container: App(0),
        run: 1,
        exit_code: 143,
        signal: Some(15),
        message: None,
    });
    h.start_all(&effects);
    assert!(stops(&h.tick_after(secs(10))).is_empty());
}

#[test]
fn results_of_an_earlier_run_are_ignored() {
    let (mut h, _) = Harness::running(&probed());
    let effects = h.exit(App(0), 1);
    h.start_all(&effects);
    let effects = h.step(Input::Probe {
        container: App(0),
        run: 1,
        event: ProbeEvent::Unhealthy(ProbeKind::Liveness, "old".into()),
    });
    assert!(stops(&effects).is_empty());
    h.step(Input::Probe {
        container: App(0),
        run: 1,
        event: ProbeEvent::Started,
    });
    assert!(!h.container(App(0)).started);
}
