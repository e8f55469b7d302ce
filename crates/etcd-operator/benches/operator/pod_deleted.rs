//! One member Pod deleted (`kubectl delete pod`, default grace): how soon
//! the status says the member is down, how soon the operator has created
//! its new Pod, and how soon that Pod is Ready and the cluster Available
//! with every member ready again. Polled every 100 ms; the Pod's own
//! condition times (whole seconds) split the last part.

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::DeleteParams;
use serde_json::{Value, json};
use test_kit::TestResult;
use test_kit::conditions::condition_true;
use test_kit::e2e::Harness;
use test_kit::figures::{median, summary};

/// Poll interval of this phase.
const POLL: Duration = Duration::from_millis(100);
/// Longest wait for any one step.
const TIMEOUT: Duration = Duration::from_secs(180);

/// Times of one run, in seconds from the delete request.
#[derive(Debug, Default)]
struct Run {
    status_down: Option<f64>,
    old_pod_gone: Option<f64>,
    new_pod_created: Option<f64>,
    new_pod_ready: Option<f64>,
    available: Option<f64>,
}

/// `runs` deletions of a follower's Pod of `cluster` (3 members, Available).
pub async fn pod_deleted(h: &Harness, cluster: &str, runs: usize) -> TestResult<Value> {
    let mut all = Vec::new();
    for run in 0..runs {
        wait_available(h, cluster).await?;
        let status = h.status(cluster).await?;
        let leader = status
            .members
            .iter()
            .find(|m| m.leader)
            .map(|m| m.name.clone())
            .unwrap_or_default();
        // A follower, a different one each run where possible.
        let mut followers: Vec<String> = (0..3)
            .map(|i| format!("{cluster}-{i}"))
            .filter(|p| *p != leader)
            .collect();
        let turn = run % followers.len().max(1);
        followers.rotate_left(turn);
        let victim = followers.first().cloned().ok_or("no follower to delete")?;
        let old_uid = h.pods.get(&victim).await?.uid();
        eprintln!("run {run}: deleting Pod {victim} (leader {leader})");
        let started = Instant::now();
        h.pods.delete(&victim, &DeleteParams::default()).await?;
        let mut times = Run::default();
        while times.available.is_none() {
            if started.elapsed() > TIMEOUT {
                return Err(
                    format!("run {run}: {victim} not back within {TIMEOUT:?}: {times:?}").into(),
                );
            }
            let at = started.elapsed().as_secs_f64();
            let pod = h.pods.get_opt(&victim).await?;
            let status = h.status(cluster).await?;
            let member_down = status
                .members
                .iter()
                .find(|m| m.name == victim)
                .is_none_or(|m| !m.healthy)
                || status.ready_members < 3;
            if times.status_down.is_none() && member_down {
                times.status_down = Some(at);
            }
            let new_pod = pod.as_ref().filter(|p| p.uid() != old_uid);
            if times.old_pod_gone.is_none() && pod.as_ref().is_none_or(|p| p.uid() != old_uid) {
                times.old_pod_gone = Some(at);
            }
            if times.new_pod_created.is_none() && new_pod.is_some() {
                times.new_pod_created = Some(at);
            }
            if times.new_pod_ready.is_none() && new_pod.is_some_and(pod_ready) {
                times.new_pod_ready = Some(at);
            }
            if times.new_pod_ready.is_some()
                && condition_true(&status, "Available")
                && status.ready_members == 3
            {
                times.available = Some(at);
            }
            tokio::time::sleep(POLL).await;
        }
        let pod = h.pods.get(&victim).await?;
        eprintln!("run {run}: {times:?}; new Pod {}", pod_steps(&pod));
        all.push((times, pod_steps(&pod)));
    }
    let column = |f: fn(&Run) -> Option<f64>| {
        let samples: Vec<f64> = all.iter().filter_map(|(r, _)| f(r)).collect();
        summary(&samples)
    };
    let mut value = column(|r| r.available);
    value["status_down"] = column(|r| r.status_down);
    value["old_pod_gone"] = column(|r| r.old_pod_gone);
    value["new_pod_created"] = column(|r| r.new_pod_created);
    value["new_pod_ready"] = column(|r| r.new_pod_ready);
    value["new_pod_steps"] = json!(all.iter().map(|(_, s)| s.clone()).collect::<Vec<_>>());
    let ready: Vec<f64> = all.iter().filter_map(|(r, _)| r.new_pod_ready).collect();
    value["new_pod_ready_median_s"] = json!(median(&ready));
    Ok(value)
}

async fn wait_available(h: &Harness, cluster: &str) -> TestResult {
    let started = Instant::now();
    loop {
        let status = h.status(cluster).await?;
        if condition_true(&status, "Available") && status.ready_members == 3 {
            return Ok(());
        }
        if started.elapsed() > TIMEOUT {
            return Err(format!("{cluster} not Available within {TIMEOUT:?}").into());
        }
        tokio::time::sleep(POLL).await;
    }
}

fn pod_ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// A Pod's own times from its creation (whole seconds, as the API keeps
/// them): `Initialized`, etcd's container started, `Ready`.
fn pod_steps(pod: &Pod) -> Value {
    let created = pod.metadata.creation_timestamp.as_ref().map(|t| t.0);
    let since =
        |at: Option<k8s_openapi::jiff::Timestamp>| Some(at?.duration_since(created?).as_secs_f64());
    let status = pod.status.as_ref();
    let condition = |kind: &str| {
        status
            .and_then(|s| s.conditions.as_ref())
            .and_then(|c| c.iter().find(|c| c.type_ == kind))
            .and_then(|c| c.last_transition_time.as_ref())
            .map(|t| t.0)
    };
    let etcd_started = status
        .and_then(|s| s.container_statuses.as_ref())
        .and_then(|c| c.iter().find(|c| c.name == "etcd"))
        .and_then(|c| c.state.as_ref()?.running.as_ref()?.started_at.as_ref())
        .map(|t| t.0);
    json!({
        "initialized_s": since(condition("Initialized")),
        "etcd_started_s": since(etcd_started),
        "ready_s": since(condition("Ready")),
    })
}
