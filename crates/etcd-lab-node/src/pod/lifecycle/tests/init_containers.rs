//! Init containers: one at a time, in order, before the app containers; a
//! failing one is restarted or fails the pod as `restartPolicy` says.

use serde_json::json;

use super::*;

fn with_init(policy: &str) -> Pod {
    pod(json!({
        "restartPolicy": policy,
        "initContainers": [
            { "name": "first", "image": "lab.local/host" },
            { "name": "second", "image": "lab.local/host" },
        ],
        "containers": [{
            "name": "app",
            "image": "lab.local/host",
            "readinessProbe": { "tcpSocket": { "port": 80 } },
        }],
    }))
}

fn condition(h: &Harness, type_: &str) -> String {
    h.status()
        .conditions
        .unwrap_or_default()
        .into_iter()
        .find(|c| c.type_ == type_)
        .map(|c| c.status)
        .unwrap_or_default()
}

#[test]
fn run_one_at_a_time_in_order_then_the_app_containers() {
    let (mut h, effects) = Harness::prepared(&with_init("Always"));
    assert_eq!(starts(&effects), vec![(Init(0), 1)]);
    assert_eq!(
        waiting_reason(&h.container(App(0)).state),
        Some("PodInitializing")
    );
    let effects = h.start_all(&effects);
    assert!(
        !effects
            .iter()
            .any(|e| matches!(e, Effect::RunProbes { .. })),
        "init containers have no probes"
    );
    assert!(!h.container(Init(0)).ready);
    assert!(starts(&h.tick_after(secs(30))).is_empty());
    assert_eq!(h.phase(), "Pending");
    assert_eq!(condition(&h, "Initialized"), "False");

    let effects = h.exit(Init(0), 0);
    assert_eq!(starts(&effects), vec![(Init(1), 1)]);
    h.start_all(&effects);
    let effects = h.exit(Init(1), 0);
    assert_eq!(starts(&effects), vec![(App(0), 1)]);
    h.start_all(&effects);

    assert_eq!(h.phase(), "Running");
    assert_eq!(condition(&h, "Initialized"), "True");
    for i in 0..2 {
        let c = h.container(Init(i));
        assert!(
            matches!(&c.state, RunState::Terminated { exit_code: 0, reason, .. } if reason == "Completed")
        );
        assert_eq!(c.restart_count, 0);
    }
    assert!(starts(&h.tick_after(secs(600))).is_empty());
}

#[test]
fn a_failed_init_container_fails_the_pod_under_never_and_no_app_starts() {
    let (mut h, effects) = Harness::prepared(&with_init("Never"));
    h.start_all(&effects);
    let effects = h.exit(Init(0), 1);
    assert!(starts(&effects).is_empty());
    assert_eq!(h.phase(), "Failed");
    assert!(h.view().init_failed);
    assert!(starts(&h.tick_after(secs(600))).is_empty());
    assert_eq!(
        waiting_reason(&h.container(App(0)).state),
        Some("PodInitializing")
    );
}

#[test]
fn a_failed_init_container_is_restarted_with_back_off_under_always_and_on_failure() {
    for policy in ["Always", "OnFailure"] {
        let (mut h, effects) = Harness::prepared(&with_init(policy));
        h.start_all(&effects);
        let effects = h.exit(Init(0), 1);
        assert_eq!(starts(&effects), vec![(Init(0), 2)], "{policy}");
        h.start_all(&effects);
        h.advance(secs(1));

        let effects = h.exit(Init(0), 1);
        assert!(starts(&effects).is_empty(), "{policy}");
        assert_eq!(
            waiting_reason(&h.container(Init(0)).state),
            Some("CrashLoopBackOff")
        );
        assert_eq!(h.phase(), "Pending");
        let effects = h.tick_after(secs(10));
        assert_eq!(starts(&effects), vec![(Init(0), 3)], "{policy}");
        h.start_all(&effects);
        assert_eq!(h.container(Init(0)).restart_count, 2);

        let effects = h.exit(Init(0), 0);
        assert_eq!(starts(&effects), vec![(Init(1), 1)], "{policy}");
    }
}
