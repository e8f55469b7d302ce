//! Starting containers, start failures and what a run reports: container
//! id, image id, exit code, signal and termination message.

use serde_json::json;

use super::super::StartFailure;
use super::*;

#[test]
fn a_started_container_reports_its_run() {
    let (mut h, effects) = Harness::prepared(&one_container(json!({}), json!({})));
    assert_eq!(starts(&effects), vec![(App(0), 1)]);
    assert_eq!(
        waiting_reason(&h.container(App(0)).state),
        Some("ContainerCreating")
    );
    assert!(starts(&h.tick()).is_empty(), "a start is asked for once");

    h.advance(secs(2));
    let effects = h.start_all(&effects);
    let view = reported(&effects).pop().expect("status");
    let c = &view.app[0];
    assert_eq!(c.container_id.as_deref(), Some("lab://01234567-app-0"));
    assert_eq!(c.image_id.as_deref(), Some("sha256:lab"));
    assert_eq!(
        c.state,
        RunState::Running {
            started_at: h.now().wall
        }
    );
    assert_eq!(h.phase(), "Running");
}

#[test]
fn the_exit_reports_code_signal_and_termination_message() {
    let p = one_container(json!({}), json!({ "restartPolicy": "Never" }));
    let (mut h, _) = Harness::running(&p);
    let started_at = h.now().wall;
    h.advance(secs(7));
    h.step(Input::ContainerExited {
        container: App(0),
        run: 1,
        exit_code: 137,
        signal: Some(9),
        message: Some("out of memory".into()),
    });
    let status = h.status();
    let terminated = status.container_statuses.as_ref().expect("statuses")[0]
        .state
        .as_ref()
        .and_then(|s| s.terminated.clone())
        .expect("terminated");
    assert_eq!(terminated.exit_code, 137);
    assert_eq!(terminated.signal, Some(9));
    assert_eq!(terminated.reason.as_deref(), Some("Error"));
    assert_eq!(terminated.message.as_deref(), Some("out of memory"));
    assert_eq!(terminated.started_at.map(|t| t.0), Some(started_at));
    assert_eq!(terminated.finished_at.map(|t| t.0), Some(h.now().wall));
    assert_eq!(
        terminated.container_id.as_deref(),
        Some("lab://01234567-app-0")
    );
}

#[test]
fn an_exit_of_an_earlier_run_is_ignored() {
    let (mut h, _) = Harness::running(&one_container(json!({}), json!({})));
    let effects = h.exit(App(0), 1);
    h.start_all(&effects);
    let effects = h.step(Input::ContainerExited {
        container: App(0),
        run: 1,
        exit_code: 1,
        signal: None,
        message: None,
    });
    assert!(effects.is_empty());
    assert!(matches!(
        h.container(App(0)).state,
        RunState::Running { .. }
    ));
}

fn fail_start(h: &mut Harness, failure: StartFailure) -> Vec<Effect> {
    h.step(Input::StartFailed {
        container: App(0),
        failure,
    })
}

#[test]
fn an_image_missing_from_the_catalog_alternates_err_image_pull_and_back_off() {
    let (mut h, _) = Harness::prepared(&one_container(json!({}), json!({})));
    let missing = || StartFailure::ImagePull("no image nginx:1 in the lab catalog".into());

    let effects = fail_start(&mut h, missing());
    assert!(effects.contains(&Effect::WakeAt(h.now().instant + secs(5))));
    assert_eq!(
        waiting_reason(&h.container(App(0)).state),
        Some("ErrImagePull")
    );
    assert!(starts(&h.tick_after(secs(4))).is_empty());
    assert_eq!(starts(&h.tick_after(secs(1))), vec![(App(0), 1)]);

    let effects = fail_start(&mut h, missing());
    assert!(effects.contains(&Effect::WakeAt(h.now().instant + secs(10))));
    assert_eq!(
        waiting_reason(&h.container(App(0)).state),
        Some("ImagePullBackOff")
    );
    assert_eq!(h.phase(), "Pending");
}

#[test]
fn invalid_configuration_and_spawn_failures_are_retried() {
    let (mut h, _) = Harness::prepared(&one_container(json!({}), json!({})));
    let effects = fail_start(
        &mut h,
        StartFailure::Config("volume \"data\" is not defined in the pod".into()),
    );
    assert!(effects.contains(&Effect::WakeAt(h.now().instant + secs(5))));
    assert_eq!(
        h.container(App(0)).state,
        RunState::waiting(
            "CreateContainerConfigError",
            Some("volume \"data\" is not defined in the pod".into())
        )
    );
    let effects = h.tick_after(secs(5));
    assert_eq!(starts(&effects), vec![(App(0), 1)]);

    let effects = fail_start(&mut h, StartFailure::Run("spawn: no such file".into()));
    assert!(effects.contains(&Effect::WakeAt(h.now().instant + secs(10))));
    assert_eq!(
        waiting_reason(&h.container(App(0)).state),
        Some("RunContainerError")
    );
    assert_eq!(starts(&h.tick_after(secs(10))), vec![(App(0), 1)]);
    assert_eq!(h.container(App(0)).restart_count, 0);
}
