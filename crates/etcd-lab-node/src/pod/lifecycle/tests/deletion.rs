//! Graceful deletion: SIGTERM, SIGKILL after the grace period, the last
//! status and the tear-down; a pod that is gone stops at once.

use serde_json::json;

use super::*;

fn two_containers() -> Pod {
    pod(json!({
        "containers": [
            { "name": "a", "image": "lab.local/host" },
            { "name": "b", "image": "lab.local/host" },
        ],
    }))
}

fn terminated_by(h: &mut Harness, container: ContainerRef, signal: i32) -> Vec<Effect> {
    let run = h.run_of(container);
    h.step(Input::ContainerExited {
        container,
        run,
        exit_code: 128 + signal,
        signal: Some(signal),
        message: None,
    })
}

fn tear_down(effects: &[Effect]) -> Option<bool> {
    effects.iter().find_map(|e| match e {
        Effect::TearDown { delete_pod } => Some(*delete_pod),
        _ => None,
    })
}

/// Two containers, the first waiting out its crash-loop back-off.
fn first_in_crash_loop() -> Harness {
    let (mut h, _) = Harness::running(&two_containers());
    h.advance(secs(1));
    let effects = h.exit(App(0), 1);
    h.start_all(&effects);
    h.advance(secs(1));
    h.exit(App(0), 1);
    h
}

#[test]
fn sigterm_then_sigkill_after_the_grace_period_then_the_last_status() {
    let (mut h, _) = Harness::running(&two_containers());
    let effects = h.step(Input::DeletionRequested { grace: secs(30) });
    assert_eq!(
        stops(&effects),
        vec![
            (App(0), StopSignal::Terminate),
            (App(1), StopSignal::Terminate)
        ]
    );
    assert!(effects.contains(&Effect::WakeAt(h.now().instant + secs(30))));
    assert!(h.lifecycle.is_stopping());

    h.advance(secs(3));
    let effects = terminated_by(&mut h, App(0), 15);
    assert!(
        starts(&effects).is_empty(),
        "nothing restarts while stopping"
    );
    assert_eq!(tear_down(&effects), None);
    assert!(reported(&effects).is_empty(), "no status while stopping");

    assert!(stops(&h.tick_after(secs(26))).is_empty());
    let effects = h.tick_after(secs(1));
    assert_eq!(stops(&effects), vec![(App(1), StopSignal::Kill)]);

    let effects = terminated_by(&mut h, App(1), 9);
    for c in [App(0), App(1)] {
        assert!(effects.contains(&Effect::ReleaseCgroup { container: c }));
    }
    assert_eq!(tear_down(&effects), Some(true));
    let last = reported(&effects).pop().expect("last status");
    assert!(last.app.iter().all(|c| c.finished && !c.ready));
    assert_eq!(exit_code(&last.app[0].state), Some(143));
    assert_eq!(exit_code(&last.app[1].state), Some(137));
    assert_eq!(h.phase(), "Failed");
    assert!(h.lifecycle.is_done());
    assert!(h.tick_after(secs(60)).is_empty());
}

#[test]
fn containers_that_stop_in_time_are_not_killed() {
    let (mut h, _) = Harness::running(&one_container(json!({}), json!({})));
    h.step(Input::DeletionRequested { grace: secs(30) });
    let effects = terminated_by(&mut h, App(0), 15);
    assert_eq!(tear_down(&effects), Some(true));
    assert!(h.tick_after(secs(30)).is_empty());
}

#[test]
fn a_zero_grace_period_kills_at_once() {
    let (mut h, _) = Harness::running(&two_containers());
    let effects = h.step(Input::DeletionRequested { grace: secs(0) });
    assert_eq!(
        stops(&effects),
        vec![(App(0), StopSignal::Kill), (App(1), StopSignal::Kill)]
    );
}

#[test]
fn waiting_for_killed_containers_ends_after_ten_seconds() {
    let (mut h, _) = Harness::running(&one_container(json!({}), json!({})));
    h.step(Input::DeletionRequested { grace: secs(1) });
    assert_eq!(
        stops(&h.tick_after(secs(1))),
        vec![(App(0), StopSignal::Kill)]
    );
    assert_eq!(tear_down(&h.tick_after(secs(9))), None);
    assert_eq!(tear_down(&h.tick_after(secs(1))), Some(true));
}

#[test]
fn a_pod_gone_from_the_api_is_killed_and_not_reported() {
    let (mut h, _) = Harness::running(&one_container(json!({}), json!({})));
    let effects = h.step(Input::PodGone);
    assert_eq!(stops(&effects), vec![(App(0), StopSignal::Kill)]);
    let effects = terminated_by(&mut h, App(0), 9);
    assert!(reported(&effects).is_empty());
    assert_eq!(tear_down(&effects), Some(false));
}

#[test]
fn a_pod_deleted_before_its_sandbox_is_ready_is_torn_down_at_once() {
    let mut h = Harness::new(&one_container(json!({}), json!({})));
    h.tick();
    h.step(Input::SandboxFailed {
        message: "claim data is not bound".into(),
    });
    let effects = h.step(Input::DeletionRequested { grace: secs(30) });
    assert!(stops(&effects).is_empty());
    assert_eq!(tear_down(&effects), Some(true));
    assert!(!h.tick_after(secs(1)).contains(&Effect::PrepareSandbox));
}

#[test]
fn a_container_waiting_to_restart_shows_its_last_run_in_the_last_status() {
    let mut h = first_in_crash_loop();
    assert_eq!(
        waiting_reason(&h.container(App(0)).state),
        Some("CrashLoopBackOff")
    );

    let effects = h.step(Input::DeletionRequested { grace: secs(30) });
    assert_eq!(stops(&effects), vec![(App(1), StopSignal::Terminate)]);
    let effects = terminated_by(&mut h, App(1), 15);
    let last = reported(&effects).pop().expect("last status");
    assert_eq!(exit_code(&last.app[0].state), Some(1));
    assert!(last.app[0].finished);
}

#[test]
fn probe_results_and_start_timers_are_ignored_while_stopping() {
    let mut h = first_in_crash_loop();
    h.step(Input::DeletionRequested { grace: secs(30) });
    let effects = h.tick_after(secs(10));
    assert!(starts(&effects).is_empty());
    let effects = h.step(Input::Probe {
        container: App(1),
        run: 1,
        event: crate::probe::ProbeEvent::Unhealthy(crate::probe::ProbeKind::Liveness, "x".into()),
    });
    assert!(effects.is_empty());
}
