use std::time::{Duration, Instant};

use super::*;

fn args(list: &[&str]) -> Vec<String> {
    list.iter().map(|arg| (*arg).to_string()).collect()
}

/// The lines of a joining member's page the guard reads, as etcd 3.6
/// writes them, among others it ignores.
fn page(received: Option<u64>, applying: u64, applied: u64, pending: u64, leader: u64) -> String {
    let mut page = String::from(
        "# HELP etcd_server_has_leader Whether or not a leader exists. 1 is existence, 0 is not.\n\
         # TYPE etcd_server_has_leader gauge\n",
    );
    page.push_str(&format!("etcd_server_has_leader {leader}\n"));
    page.push_str("etcd_server_is_learner 1\n");
    if let Some(received) = received {
        page.push_str(&format!(
            "etcd_network_snapshot_receive_inflights_total{{From=\"628170c800dbcee\"}} 0\n\
             etcd_network_snapshot_receive_success{{From=\"628170c800dbcee\"}} {received}\n"
        ));
    }
    page.push_str(&format!(
        "etcd_server_proposals_applied_total {applied}\n\
         etcd_server_proposals_committed_total {applied}\n\
         etcd_server_proposals_pending {pending}\n\
         etcd_server_snapshot_apply_in_progress_total {applying}\n\
         go_gc_duration_seconds{{quantile=\"0.5\"}} 4.2e-05\n"
    ));
    page
}

#[test]
fn a_join_to_an_existing_cluster_is_watched_on_loopback() {
    let etcd = args(&[
        "/usr/local/bin/etcd",
        "--name=demo-1",
        "--listen-metrics-urls=http://0.0.0.0:2381",
        "--initial-cluster-state=existing",
    ]);
    assert_eq!(
        join_metrics_address(&etcd),
        Some("127.0.0.1:2381".parse().expect("address"))
    );
    let spaced = args(&[
        "--initial-cluster-state",
        "existing",
        "--listen-metrics-urls",
        "https://10.0.0.1:2382,http://[::]:2381",
    ]);
    assert_eq!(
        join_metrics_address(&spaced),
        Some("[::1]:2381".parse().expect("address"))
    );
}

#[test]
fn a_bootstrap_or_a_start_without_an_http_metrics_url_is_not_watched() {
    let bootstrap = args(&[
        "--listen-metrics-urls=http://0.0.0.0:2381",
        "--initial-cluster-state=new",
    ]);
    assert_eq!(join_metrics_address(&bootstrap), None);
    let no_state = args(&["--listen-metrics-urls=http://0.0.0.0:2381"]);
    assert_eq!(join_metrics_address(&no_state), None);
    let tls_metrics = args(&[
        "--listen-metrics-urls=https://0.0.0.0:2381",
        "--initial-cluster-state=existing",
    ]);
    assert_eq!(join_metrics_address(&tls_metrics), None);
    let host_name = args(&[
        "--listen-metrics-urls=http://localhost:2381",
        "--initial-cluster-state=existing",
    ]);
    assert_eq!(join_metrics_address(&host_name), None);
}

#[test]
fn the_page_gives_the_figures_of_the_join() {
    let sample = JoinSample::parse(&page(Some(1), 0, 360, 1, 1)).expect("parsed");
    assert_eq!(
        sample,
        JoinSample {
            snapshots_received: 1,
            applying_snapshot: false,
            applied_index: 360,
            proposals_pending: 1,
            has_leader: true,
        }
    );
    let before_any_snapshot = JoinSample::parse(&page(None, 0, 0, 1, 1)).expect("parsed");
    assert_eq!(before_any_snapshot.snapshots_received, 0);
    assert_eq!(JoinSample::parse("go_goroutines 12\n"), None);
    assert_eq!(JoinSample::parse(""), None);
}

fn sample(received: u64, applying: bool, applied: u64, pending: u64) -> JoinSample {
    JoinSample {
        snapshots_received: received,
        applying_snapshot: applying,
        applied_index: applied,
        proposals_pending: pending,
        has_leader: true,
    }
}

#[test]
fn a_publish_pending_200_ms_after_the_snapshot_is_applied_restarts_etcd() {
    let start = Instant::now();
    let at = |ms: u64| start + Duration::from_millis(ms);
    let mut watch = JoinWatch::default();
    // Receiving, then applying: not yet.
    assert_eq!(
        watch.observe(Some(&sample(0, false, 0, 1)), at(0)),
        JoinStep::Watch
    );
    assert_eq!(
        watch.observe(Some(&sample(1, true, 0, 1)), at(100)),
        JoinStep::Watch
    );
    // Applied, request pending: the clock starts.
    assert_eq!(
        watch.observe(Some(&sample(1, false, 360, 1)), at(200)),
        JoinStep::Watch
    );
    assert_eq!(
        watch.observe(Some(&sample(1, false, 360, 1)), at(399)),
        JoinStep::Watch
    );
    assert_eq!(
        watch.observe(Some(&sample(1, false, 361, 1)), at(400)),
        JoinStep::Restart
    );
}

#[test]
fn a_publish_applied_after_the_snapshot_ends_the_watch_without_a_restart() {
    let start = Instant::now();
    let mut watch = JoinWatch::default();
    assert_eq!(
        watch.observe(Some(&sample(1, false, 360, 1)), start),
        JoinStep::Watch
    );
    let published = sample(1, false, 362, 0);
    assert_eq!(
        watch.observe(Some(&published), start + Duration::from_millis(50)),
        JoinStep::Joined
    );
}

#[test]
fn a_join_without_a_snapshot_or_a_read_that_fails_never_restarts() {
    let start = Instant::now();
    let at = |ms: u64| start + Duration::from_millis(ms);
    let mut watch = JoinWatch::default();
    // Catching up from the leader's log: applied grows, publish pending.
    for step in 0..20 {
        assert_eq!(
            watch.observe(Some(&sample(0, false, 100 + step, 1)), at(step * 100)),
            JoinStep::Watch
        );
    }
    // A wait after the snapshot broken by an unreadable page starts again.
    assert_eq!(
        watch.observe(Some(&sample(1, false, 360, 1)), at(3000)),
        JoinStep::Watch
    );
    assert_eq!(watch.observe(None, at(3100)), JoinStep::Watch);
    assert_eq!(
        watch.observe(Some(&sample(1, false, 360, 1)), at(3200)),
        JoinStep::Watch
    );
    assert_eq!(
        watch.observe(Some(&sample(1, false, 360, 1)), at(3399)),
        JoinStep::Watch
    );
    assert_eq!(
        watch.observe(Some(&sample(1, false, 360, 1)), at(3400)),
        JoinStep::Restart
    );
}

#[test]
fn without_a_leader_a_member_has_not_published() {
    let start = Instant::now();
    let mut watch = JoinWatch::default();
    let leaderless = JoinSample {
        has_leader: false,
        ..sample(0, false, 360, 0)
    };
    assert_eq!(watch.observe(Some(&leaderless), start), JoinStep::Watch);
}
