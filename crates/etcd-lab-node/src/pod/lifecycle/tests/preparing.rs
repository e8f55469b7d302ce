//! Preparing the sandbox and volumes, again every 500 ms until they are ready.

use serde_json::json;

use super::*;

#[test]
fn containers_wait_in_container_creating_with_the_reason_until_the_sandbox_is_ready() {
    let mut h = Harness::new(&one_container(json!({}), json!({})));
    assert_eq!(h.tick(), vec![Effect::PrepareSandbox]);
    assert!(h.tick().is_empty(), "one preparation at a time");

    let effects = h.step(Input::SandboxFailed {
        message: "volume data is not attached yet".into(),
    });
    let view = reported(&effects).pop().expect("status");
    assert_eq!(
        view.app[0].state,
        RunState::waiting(
            "ContainerCreating",
            Some("volume data is not attached yet".into())
        )
    );
    assert!(!view.sandbox_ready);
    assert!(effects.contains(&Effect::WakeAt(h.now().instant + secs_ms(500))));
    assert_eq!(h.phase(), "Pending");

    h.advance(secs_ms(400));
    assert!(h.tick().is_empty());
    h.advance(secs_ms(100));
    assert_eq!(h.tick(), vec![Effect::PrepareSandbox]);
    let effects = h.step(Input::SandboxFailed {
        message: "volume data is not attached yet".into(),
    });
    assert!(
        reported(&effects).is_empty(),
        "an unchanged status is not reported again"
    );

    h.advance(secs_ms(500));
    h.tick();
    let effects = h.step(Input::SandboxReady { pod_ip: POD_IP });
    assert_eq!(starts(&effects), vec![(App(0), 1)]);
    let view = reported(&effects).pop().expect("status");
    assert!(view.sandbox_ready);
    assert_eq!(view.pod_ip, Some(POD_IP));
}

fn secs_ms(ms: u64) -> Duration {
    Duration::from_millis(ms)
}
