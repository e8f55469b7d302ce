//! A pod that already has a status when its worker starts (the node
//! restarted): restart counts, last states and a terminal phase are kept.

use serde_json::json;

use super::*;

fn reported_before(phase: &str, state: serde_json::Value) -> Pod {
    let mut p = one_container(json!({}), json!({}));
    p.status = Some(
        serde_json::from_value(json!({
            "phase": phase,
            "startTime": "2024-01-01T00:00:00Z",
            "containerStatuses": [{
                "name": "app", "image": "lab.local/host", "imageID": "",
                "ready": true, "restartCount": 3,
                "containerID": "lab://01234567-app-3",
                "state": state,
            }],
        }))
        .expect("status"),
    );
    p
}

#[test]
fn keeps_the_restart_count_and_reports_the_earlier_run_as_unknown() {
    let p = reported_before(
        "Running",
        json!({ "running": { "startedAt": "2024-01-01T00:00:01Z" } }),
    );
    let (h, _) = Harness::running(&p);
    let c = h.container(App(0));
    assert_eq!(c.restart_count, 4);
    assert_eq!(c.container_id.as_deref(), Some("lab://01234567-app-4"));
    assert!(matches!(
        &c.last_state,
        Some(RunState::Terminated { exit_code: 255, reason, message: Some(m), container_id: Some(id), .. })
            if reason == "Unknown" && m == "the node restarted" && id == "lab://01234567-app-3"
    ));
    assert_eq!(
        h.view().start_time,
        "2024-01-01T00:00:00Z".parse::<Timestamp>().expect("ts")
    );
}

#[test]
fn a_container_that_never_ran_keeps_its_count_without_a_last_state() {
    let p = reported_before(
        "Pending",
        json!({ "waiting": { "reason": "ContainerCreating" } }),
    );
    let (h, _) = Harness::running(&p);
    let c = h.container(App(0));
    assert_eq!(c.restart_count, 3);
    assert_eq!(c.last_state, None);
}

#[test]
fn a_finished_pod_is_not_run_again_and_is_reported_and_deleted_on_deletion() {
    let p = reported_before(
        "Succeeded",
        json!({ "terminated": { "exitCode": 0, "reason": "Completed" } }),
    );
    let mut h = Harness::new(&p);
    assert!(h.tick().is_empty());
    assert!(h.tick_after(secs(3600)).is_empty());

    let effects = h.step(Input::DeletionRequested { grace: secs(30) });
    assert!(stops(&effects).is_empty());
    assert_eq!(effects.last(), Some(&Effect::TearDown { delete_pod: true }));
    let last = reported(&effects).pop().expect("last status");
    assert!(last.app[0].finished);
}
