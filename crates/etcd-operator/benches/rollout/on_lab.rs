//! The operator's side: per run, an `EtcdCluster` of `members` members
//! (`lab-network` volumes) created on the old release and Available, the
//! load started, then `spec.version` patched to the new release; time until
//! every member runs it and the cluster is Available again, with the load's
//! figures and a timeline of what was seen (the operator's last operation,
//! Pods deleted and Ready again, the leader) to tell where the time went.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use etcd_operator::api::identity::cluster_selector;
use etcd_operator::api::pod_revision::TEMPLATE_HASH_ANNOTATION;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::ListParams;
use kube::{Api, ResourceExt};
use serde_json::{Value, json};
use test_kit::TestResult;
use test_kit::conditions::{condition_true, pod_ready};
use test_kit::e2e::{Harness, cluster_spec_with};
use test_kit::figures::{load_average, round3, summary};
use test_kit::poll::wait_for_every;
use tokio::task::JoinHandle;

use crate::lab_cluster::{delete_cluster, ready_endpoints};
use crate::load::{self, PacedWriter, follow_endpoints};
use crate::{FROM_VERSION, HOLD, TO_VERSION, WARM_UP};

/// Poll interval of the rollout's progress and of the Pods.
const POLL: Duration = Duration::from_millis(200);
/// How often the load's client learns the Ready member Pods.
const FOLLOW: Duration = Duration::from_millis(250);
/// How long after the rollout the bench waits for the last new Pod's Ready.
const LAST_POD_READY: Duration = Duration::from_secs(30);
/// A rollout that takes longer failed.
const ROLLOUT_TIMEOUT: Duration = Duration::from_secs(900);

/// The operator's figures for `members` members, `runs` times.
pub async fn measure(h: &Harness, members: i32, runs: usize) -> TestResult<Value> {
    let mut done = Runs::default();
    for run in 0..runs {
        let name = format!("roll{members}-{run}");
        match one_run(h, &name, members).await {
            Ok(figures) => done.push(figures),
            Err(error) => return Ok(done.into_json(Some(format!("{name}: {error}")))),
        }
        if let Err(error) = delete_cluster(h, &name).await {
            eprintln!("{name}: not cleaned up: {error}");
        }
    }
    Ok(done.into_json(None))
}

/// The figures of the runs done so far.
#[derive(Default)]
struct Runs {
    gaps: Vec<f64>,
    rollouts: Vec<f64>,
    restarts: Vec<f64>,
    /// A member's steps over every run, by span.
    steps: BTreeMap<String, Vec<f64>>,
    details: Vec<Value>,
}

impl Runs {
    fn push(&mut self, figures: Value) {
        self.gaps.extend(figures["longest_gap_s"].as_f64());
        self.rollouts.extend(figures["rollout_s"].as_f64());
        if let Some(restarts) = figures["member_down_s"].as_array() {
            self.restarts
                .extend(restarts.iter().filter_map(Value::as_f64));
        }
        if let Some(spans) = figures["member_steps_s"].as_object() {
            for (span, samples) in spans {
                let samples = samples.as_array().into_iter().flatten();
                self.steps
                    .entry(span.clone())
                    .or_default()
                    .extend(samples.filter_map(Value::as_f64));
            }
        }
        self.details.push(figures);
    }

    fn into_json(self, error: Option<String>) -> Value {
        let column =
            |key: &str| -> Vec<Value> { self.details.iter().map(|d| d[key].clone()).collect() };
        let mut value = json!({
            "longest_gap": summary(&self.gaps),
            "longest_gap_max_s": self.gaps.iter().copied().reduce(f64::max),
            "rollout": summary(&self.rollouts),
            "member_down": summary(&self.restarts),
            "member_steps": self
                .steps
                .iter()
                .map(|(span, samples)| (span.clone(), summary(samples)))
                .collect::<BTreeMap<_, _>>(),
            "failed": column("failed"),
            "attempted": column("attempted"),
            "acknowledged": column("acknowledged"),
            "lost": column("lost"),
            "runs": self.details,
        });
        if let Some(error) = error {
            value["error"] = json!(error);
        }
        value
    }
}

async fn one_run(h: &Harness, name: &str, members: i32) -> TestResult<Value> {
    let spec = cluster_spec_with(members, "lab-network", json!({ "version": FROM_VERSION }));
    h.create_available(name, spec, Duration::from_secs(300))
        .await?;
    let pods: Api<Pod> = h.pods.clone();
    let selector = cluster_selector(name);
    let before = templates(&pods, &selector).await?;

    // The load, through the Ready member Pods as they come and go (status
    // may say Available before the Pods report Ready).
    let wanted = usize::try_from(members)?;
    wait_for_every(
        "every member Pod Ready",
        Duration::from_secs(120),
        POLL,
        || async { Ok(ready_endpoints(&pods, &selector).await?.len() == wanted) },
    )
    .await?;
    let mut current = ready_endpoints(&pods, &selector).await?;
    let endpoints: Vec<String> = current.iter().cloned().collect();
    let client = load::client(&endpoints).await?;
    let follower = {
        let (client, pods, selector) = (client.clone(), pods.clone(), selector.clone());
        Aborted(tokio::spawn(async move {
            loop {
                tokio::time::sleep(FOLLOW).await;
                if let Ok(wanted) = ready_endpoints(&pods, &selector).await
                    && !wanted.is_empty()
                {
                    let _ = follow_endpoints(&client, &mut current, &wanted).await;
                }
            }
        }))
    };
    let writer = PacedWriter::start(client, &format!("/rollout/{name}/"));
    tokio::time::sleep(WARM_UP).await;

    let load_before = load_average();
    let patched = Instant::now();
    h.patch_spec(name, json!({ "version": TO_VERSION })).await?;
    let mut timeline = Timeline::new(patched, before);
    let rolled = loop {
        let status = h.status(name).await?;
        let pods_now = pods.list(&ListParams::default().labels(&selector)).await?;
        timeline.observe(&status, &pods_now.items);
        if status.version.as_deref() == Some(TO_VERSION)
            && status.updated_members == members
            && status.ready_members == members
            && condition_true(&status, "Available")
        {
            break patched.elapsed().as_secs_f64();
        }
        if patched.elapsed() > ROLLOUT_TIMEOUT {
            return Err(format!(
                "not rolled to {TO_VERSION} within {ROLLOUT_TIMEOUT:?}: status {status:?}"
            )
            .into());
        }
        tokio::time::sleep(POLL).await;
    };
    // The load's last seconds; meanwhile the last new Pod's times are read
    // (status may count a member ready before its Pod reports Ready).
    let held = Instant::now();
    while held.elapsed() < HOLD
        || (timeline.ready.len() < timeline.before.len() && held.elapsed() < LAST_POD_READY)
    {
        let status = h.status(name).await?;
        let pods_now = pods.list(&ListParams::default().labels(&selector)).await?;
        timeline.observe(&status, &pods_now.items);
        tokio::time::sleep(POLL).await;
    }
    let record = writer.stop().await?;
    drop(follower);
    let load_after = load_average();

    let endpoints: Vec<String> = ready_endpoints(&pods, &selector)
        .await?
        .into_iter()
        .collect();
    let lost = record.lost(endpoints).await?;
    let mut figures = record.figures(patched, lost);
    figures["rollout_s"] = json!(round3(rolled));
    figures["member_down_s"] = json!(timeline.member_down());
    figures["member_steps_s"] = timeline.member_steps();
    figures["load_average"] = json!([load_before, load_after]);
    let gap_window = (
        figures["longest_gap_from_s"].as_f64().unwrap_or_default(),
        figures["longest_gap_to_s"].as_f64().unwrap_or_default(),
    );
    figures["during_longest_gap"] = json!(timeline.around(gap_window.0, gap_window.1));
    figures["timeline"] = json!(timeline.events);
    eprintln!(
        "{name}: rolled to {TO_VERSION} in {rolled:.1} s; longest gap {} s ({}-{} s after the \
         patch), {} of {} requests failed {}, {lost} acknowledged writes lost",
        figures["longest_gap_s"],
        gap_window.0,
        gap_window.1,
        figures["failed"],
        figures["attempted"],
        figures["failed_by_kind"],
    );
    eprintln!(
        "{name}: during the longest gap: {}",
        figures["during_longest_gap"]
    );
    Ok(figures)
}

/// A task aborted when dropped.
struct Aborted(JoinHandle<()>);

impl Drop for Aborted {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Pod name → template hash of the member Pods.
async fn templates(pods: &Api<Pod>, selector: &str) -> TestResult<BTreeMap<String, String>> {
    Ok(pods
        .list(&ListParams::default().labels(selector))
        .await?
        .items
        .iter()
        .filter_map(|p| {
            Some((
                p.name_any(),
                p.annotations().get(TEMPLATE_HASH_ANNOTATION)?.clone(),
            ))
        })
        .collect())
}

/// What was seen during a rollout, in seconds from the patch.
struct Timeline {
    patched: Instant,
    /// The patch in Unix milliseconds, for the times Pods carry.
    patched_unix_ms: i64,
    /// Template hashes before the patch.
    before: BTreeMap<String, String>,
    events: Vec<(f64, String)>,
    last_operation: Option<String>,
    leader: Option<String>,
    /// When each member's old Pod was first seen going.
    going: BTreeMap<String, f64>,
    /// When each member's new Pod was first seen Ready.
    ready: BTreeMap<String, f64>,
    /// Each new Pod's steps as it reports them (whole seconds).
    steps: BTreeMap<String, PodSteps>,
}

/// A new Pod's steps, from its own times: created, started by its node
/// (the `member-guard` init container first), etcd's container started,
/// Ready.
#[derive(Debug, Default, Clone, Copy)]
struct PodSteps {
    created: Option<f64>,
    initialized: Option<f64>,
    etcd_started: Option<f64>,
    ready: Option<f64>,
}

impl Timeline {
    fn new(patched: Instant, before: BTreeMap<String, String>) -> Self {
        let unix_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| i64::try_from(d.as_millis()).unwrap_or_default())
            .unwrap_or_default()
            - i64::try_from(patched.elapsed().as_millis()).unwrap_or_default();
        Self {
            patched,
            patched_unix_ms: unix_ms,
            before,
            events: Vec::new(),
            last_operation: None,
            leader: None,
            going: BTreeMap::new(),
            ready: BTreeMap::new(),
            steps: BTreeMap::new(),
        }
    }

    fn note(&mut self, event: String) {
        let at = round3(self.patched.elapsed().as_secs_f64());
        eprintln!("  {at:>7.1} s  {event}");
        self.events.push((at, event));
    }

    fn observe(&mut self, status: &etcd_operator::api::EtcdClusterStatus, pods: &[Pod]) {
        if let Some(operation) = &status.last_operation {
            let text = format!(
                "operator: {} ({:?})",
                operation.description, operation.state
            );
            if self.last_operation.as_ref() != Some(&text) {
                self.last_operation = Some(text.clone());
                self.note(text);
            }
        }
        let leader = status
            .members
            .iter()
            .find(|m| m.leader)
            .map(|m| m.name.clone());
        if leader.is_some() && leader != self.leader {
            self.leader.clone_from(&leader);
            self.note(format!("status: leader {}", leader.unwrap_or_default()));
        }
        let at = self.patched.elapsed().as_secs_f64();
        for (name, old) in self.before.clone() {
            let pod = pods.iter().find(|p| p.name_any() == name);
            let hash = pod.and_then(|p| p.annotations().get(TEMPLATE_HASH_ANNOTATION));
            let old_going = match pod {
                None => true,
                Some(p) => hash == Some(&old) && p.metadata.deletion_timestamp.is_some(),
            };
            if old_going && !self.going.contains_key(&name) {
                self.going.insert(name.clone(), at);
                self.note(format!("{name}: old Pod going"));
            }
            let new_ready = pod.is_some_and(|p| hash.is_some_and(|h| *h != old) && pod_ready(p));
            if new_ready && !self.ready.contains_key(&name) {
                self.ready.insert(name.clone(), at);
                self.note(format!("{name}: new Pod Ready"));
                if let Some(pod) = pod {
                    let steps = self.pod_steps(pod);
                    eprintln!("           {name}: its own times {steps:?}");
                    self.steps.insert(name.clone(), steps);
                }
            }
        }
    }

    /// Per member, from its old Pod going to its new Pod Ready.
    fn member_down(&self) -> Vec<f64> {
        self.going
            .iter()
            .filter_map(|(name, going)| Some(round3(self.ready.get(name)? - going)))
            .collect()
    }

    /// Seconds from the patch to a time a Pod carries.
    fn since_patch(&self, time: &Time) -> f64 {
        round3((time.0.as_millisecond() - self.patched_unix_ms) as f64 / 1000.0)
    }

    fn pod_steps(&self, pod: &Pod) -> PodSteps {
        let status = pod.status.as_ref();
        let condition = |type_: &str| {
            status
                .and_then(|s| s.conditions.as_ref())
                .and_then(|c| c.iter().find(|c| c.type_ == type_ && c.status == "True"))
                .and_then(|c| c.last_transition_time.as_ref())
                .map(|t| self.since_patch(t))
        };
        let etcd_started = status
            .and_then(|s| s.container_statuses.as_ref())
            .and_then(|c| c.iter().find(|c| c.name == "etcd"))
            .and_then(|c| c.state.as_ref()?.running.as_ref()?.started_at.as_ref())
            .map(|t| self.since_patch(t));
        PodSteps {
            created: pod
                .metadata
                .creation_timestamp
                .as_ref()
                .map(|t| self.since_patch(t)),
            initialized: condition("Initialized"),
            etcd_started,
            ready: condition("Ready"),
        }
    }

    /// Per member, the spans between its steps: old Pod going → new Pod
    /// created → initialized → etcd started → Ready (each a list over the
    /// members).
    fn member_steps(&self) -> Value {
        let mut spans: BTreeMap<&str, Vec<f64>> = BTreeMap::new();
        for (name, steps) in &self.steps {
            let points = [
                ("recreated", self.going.get(name).copied(), steps.created),
                ("initialized", steps.created, steps.initialized),
                ("etcd_started", steps.initialized, steps.etcd_started),
                ("ready", steps.etcd_started, steps.ready),
            ];
            for (span, from, to) in points {
                if let (Some(from), Some(to)) = (from, to) {
                    spans.entry(span).or_default().push(round3(to - from));
                }
            }
        }
        json!(spans)
    }

    /// The events from a second before `from` to `to`.
    fn around(&self, from: f64, to: f64) -> Vec<(f64, String)> {
        self.events
            .iter()
            .filter(|(at, _)| *at >= from - 1.0 && *at <= to)
            .cloned()
            .collect()
    }
}
