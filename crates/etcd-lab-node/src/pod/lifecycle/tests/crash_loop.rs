//! Crash-loop back-off: the first restart at once, then 10 s doubling up
//! to 5 min, reset after 10 min of running.

use serde_json::json;

use super::*;

/// Lets the container crash right after each start; returns the delay the
/// lifecycle waited before each restart.
fn crash_repeatedly(h: &mut Harness, times: usize) -> Vec<u64> {
    let mut delays = Vec::new();
    for _ in 0..times {
        h.advance(secs(1));
        let exited_at = h.seconds();
        let mut effects = h.exit(App(0), 1);
        while starts(&effects).is_empty() {
            effects = h.tick_after(secs(1));
        }
        delays.push(h.seconds() - exited_at);
        h.start_all(&effects);
    }
    delays
}

#[test]
fn restarts_at_once_then_after_ten_seconds_doubling_up_to_five_minutes() {
    let (mut h, _) = Harness::running(&one_container(json!({}), json!({})));
    let delays = crash_repeatedly(&mut h, 8);
    assert_eq!(delays, vec![0, 10, 20, 40, 80, 160, 300, 300]);
    assert_eq!(h.container(App(0)).restart_count, 8);
}

#[test]
fn waits_in_crash_loop_back_off_showing_the_last_run() {
    let (mut h, _) = Harness::running(&one_container(json!({}), json!({})));
    crash_repeatedly(&mut h, 1);
    h.advance(secs(2));

    let effects = h.step(Input::ContainerExited {
        container: App(0),
        run: 2,
        exit_code: 1,
        signal: None,
        message: Some("boom".into()),
    });
    assert!(starts(&effects).is_empty());
    let wake = h.now().instant + secs(10);
    assert!(effects.contains(&Effect::WakeAt(wake)));

    let c = h.container(App(0));
    assert_eq!(
        c.state,
        RunState::waiting(
            "CrashLoopBackOff",
            Some("back-off 10s restarting failed container=app pod=default/web".into())
        )
    );
    assert!(matches!(
        &c.last_state,
        Some(RunState::Terminated { exit_code: 1, message: Some(m), .. }) if m == "boom"
    ));
    assert_eq!(h.phase(), "Running");
    assert!(
        !h.status()
            .conditions
            .unwrap_or_default()
            .iter()
            .any(|c| c.type_ == "Ready" && c.status == "True")
    );

    assert!(starts(&h.tick_after(secs(9))).is_empty());
    assert_eq!(starts(&h.tick_after(secs(1))), vec![(App(0), 3)]);
}

#[test]
fn a_run_of_ten_minutes_resets_the_back_off() {
    let (mut h, _) = Harness::running(&one_container(json!({}), json!({})));
    assert_eq!(crash_repeatedly(&mut h, 3), vec![0, 10, 20]);

    h.advance(secs(600));
    let effects = h.exit(App(0), 1);
    assert_eq!(starts(&effects), vec![(App(0), 5)]);
    h.start_all(&effects);
    assert_eq!(crash_repeatedly(&mut h, 1), vec![10]);
}
