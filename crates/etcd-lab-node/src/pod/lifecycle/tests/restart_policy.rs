//! `restartPolicy` Always, OnFailure and Never for app containers.

use serde_json::json;

use super::*;

#[test]
fn always_restarts_a_container_that_exited_zero_at_once() {
    let (mut h, _) = Harness::running(&one_container(json!({}), json!({})));
    assert_eq!(h.phase(), "Running");

    let effects = h.exit(App(0), 0);
    assert!(effects.contains(&Effect::ReleaseCgroup { container: App(0) }));
    assert_eq!(starts(&effects), vec![(App(0), 2)]);
    h.start_all(&effects);

    let c = h.container(App(0));
    assert_eq!(c.restart_count, 1);
    assert!(matches!(c.state, RunState::Running { .. }));
    assert_eq!(c.last_state.as_ref().and_then(exit_code), Some(0));
    assert_eq!(c.container_id.as_deref(), Some("lab://01234567-app-1"));
    assert_eq!(h.phase(), "Running");
}

#[test]
fn on_failure_restarts_a_failed_container_and_finishes_a_succeeded_one() {
    let p = one_container(json!({}), json!({ "restartPolicy": "OnFailure" }));
    let (mut h, _) = Harness::running(&p);

    let effects = h.exit(App(0), 3);
    assert_eq!(starts(&effects), vec![(App(0), 2)]);
    h.start_all(&effects);
    h.advance(secs(1));

    let effects = h.exit(App(0), 0);
    assert!(starts(&effects).is_empty());
    let c = h.container(App(0));
    assert!(c.finished);
    assert_eq!(c.restart_count, 1);
    assert_eq!(exit_code(&c.state), Some(0));
    assert_eq!(h.phase(), "Succeeded");
    assert!(starts(&h.tick_after(secs(600))).is_empty());
}

#[test]
fn never_leaves_a_failed_container_terminated_and_fails_the_pod() {
    let p = one_container(json!({}), json!({ "restartPolicy": "Never" }));
    let (mut h, _) = Harness::running(&p);

    let effects = h.exit(App(0), 2);
    assert!(starts(&effects).is_empty());
    let c = h.container(App(0));
    assert!(c.finished);
    assert!(!c.ready);
    assert_eq!(c.restart_count, 0);
    assert!(matches!(
        &c.state,
        RunState::Terminated { exit_code: 2, reason, .. } if reason == "Error"
    ));
    assert_eq!(h.phase(), "Failed");
    let ready = h
        .status()
        .conditions
        .unwrap_or_default()
        .into_iter()
        .find(|c| c.type_ == "Ready")
        .expect("Ready condition");
    assert_eq!(ready.reason.as_deref(), Some("PodCompleted"));
    assert!(starts(&h.tick_after(secs(600))).is_empty());
}

#[test]
fn never_runs_until_every_container_finished_and_succeeds_only_when_all_did() {
    let p = pod(json!({
        "restartPolicy": "Never",
        "containers": [
            { "name": "a", "image": "lab.local/host" },
            { "name": "b", "image": "lab.local/host" },
        ],
    }));
    let (mut h, effects) = Harness::prepared(&p);
    assert_eq!(starts(&effects), vec![(App(0), 1), (App(1), 1)]);
    h.start_all(&effects);

    h.exit(App(0), 0);
    assert_eq!(h.phase(), "Running");
    h.exit(App(1), 1);
    assert_eq!(h.phase(), "Failed");
}

#[test]
fn never_with_every_container_succeeded_is_succeeded() {
    let p = one_container(json!({}), json!({ "restartPolicy": "Never" }));
    let (mut h, _) = Harness::running(&p);
    let effects = h.exit(App(0), 0);
    assert_eq!(h.phase(), "Succeeded");
    assert_eq!(
        reported(&effects).last().map(|v| v.app[0].finished),
        Some(true)
    );
}
