//! Member replacement by the operator on the lab: a 3-member `EtcdCluster`
//! filled to a size; per run, the volume of one follower is wiped (a
//! replaced disk) and its etcd killed, as in `tests/e2e_volume_loss.rs`; the
//! member guard refuses the empty data and the operator replaces the member
//! (remove, fresh PVC, learner, promote). Timed from the wipe until the new
//! member (new ID, same name) is a voter, has applied up to where the leader
//! stood at the wipe and serves clients; meanwhile only a trickle of small
//! writes.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use etcd_operator::addressing::{CLIENT_PORT, METRICS_PORT};
use etcd_operator::api::MemberRole;
use serde_json::{Value, json};

use test_kit::TestResult;
use test_kit::conditions::condition_true;
use test_kit::e2e::{Harness, etcd_at};
use test_kit::figures::{mib, summary};

use crate::etcd_alone::QUOTA_BYTES;
use crate::fill::Filler;
use crate::probe::{self, Target};
use crate::trickle::Trickle;

const POLL: Duration = Duration::from_millis(200);
/// Each run starts after the cluster has been Available this long.
const SETTLE: Duration = Duration::from_secs(10);
const REPLICAS: usize = 3;

/// The bench's cluster on the lab, grown from one size to the next.
pub struct LabCluster {
    name: String,
    filler: Filler,
    created: bool,
}

impl LabCluster {
    pub fn new(name: &str) -> Self {
        Self {
            name: name.to_owned(),
            filler: Filler::default(),
            created: false,
        }
    }

    fn pod(&self, ordinal: usize) -> String {
        format!("{}-{ordinal}", self.name)
    }
}

/// The replacement figures of a `size_mib` database, `runs` times.
pub async fn measure(
    h: &Harness,
    cluster: &mut LabCluster,
    size_mib: u64,
    runs: usize,
) -> TestResult<Value> {
    if !cluster.created {
        let started = Instant::now();
        h.create_cluster(
            &cluster.name,
            json!({
                "replicas": REPLICAS,
                // Twice the quota and 256 MiB, as the CRD requires (a
                // sparse file on lab-network).
                "storage": { "size": "9Gi" },
                "tls": { "disabled": true },
                "etcd": { "quotaBackendBytes": QUOTA_BYTES },
            }),
        )
        .await?;
        cluster.created = true;
        wait_available(h, cluster, Duration::from_secs(300)).await?;
        eprintln!(
            "{}: Available in {:.0} s",
            cluster.name,
            started.elapsed().as_secs_f64()
        );
    }
    wait_available(h, cluster, Duration::from_secs(300)).await?;
    let client = etcd_at(endpoints(h, cluster).await?).await?;
    let filled = Instant::now();
    let db_size = cluster
        .filler
        .fill_to(&client, i64::try_from(size_mib)? << 20)
        .await?;
    eprintln!(
        "{}: filled to {:.0} MiB in {:.0} s",
        cluster.name,
        mib(db_size),
        filled.elapsed().as_secs_f64()
    );

    let timeout = Duration::from_secs(600 + 2 * size_mib);
    let mut done = Runs::default();
    for run in 0..runs {
        if let Err(error) = replace_one(h, cluster, run, timeout, &mut done).await {
            return Ok(done.into_json(db_size, Some(error.to_string())));
        }
    }
    Ok(done.into_json(db_size, None))
}

/// The samples of the runs done so far, each in seconds from the wipe.
#[derive(Default)]
struct Runs {
    total: Vec<f64>,
    old_removed: Vec<f64>,
    learner_added: Vec<f64>,
    applied: Vec<f64>,
    serving: Vec<f64>,
    voter: Vec<f64>,
    snapshots_sent: Vec<u64>,
}

impl Runs {
    fn into_json(self, db_size: i64, error: Option<String>) -> Value {
        let mut value = summary(&self.total);
        value["old_member_removed"] = summary(&self.old_removed);
        value["learner_added"] = summary(&self.learner_added);
        value["applied"] = summary(&self.applied);
        value["serving"] = summary(&self.serving);
        value["voter"] = summary(&self.voter);
        value["snapshots_sent"] = json!(self.snapshots_sent);
        value["db_size_mib"] = json!(mib(db_size));
        if let Some(error) = error {
            value["error"] = json!(error);
        }
        value
    }
}

/// When each step of one replacement was first seen, from the wipe.
#[derive(Default)]
struct Steps {
    old_removed: Option<f64>,
    learner_added: Option<f64>,
    /// Its metrics show the data applied up to the target.
    applied: Option<f64>,
    /// It serves clients, its status at the target.
    serving: Option<f64>,
    voter: Option<f64>,
}

async fn replace_one(
    h: &Harness,
    cluster: &LabCluster,
    run: usize,
    timeout: Duration,
    runs: &mut Runs,
) -> TestResult {
    wait_available(h, cluster, Duration::from_secs(300)).await?;
    tokio::time::sleep(SETTLE).await;

    // Who is who: pod endpoints, member IDs, the leader.
    let mut members = Vec::new();
    for ordinal in 0..REPLICAS {
        let pod = cluster.pod(ordinal);
        let endpoint = pod_endpoint(h, &pod)
            .await?
            .ok_or_else(|| format!("{pod} has no IP"))?;
        let id = probe::member_id(&probe::status_at(&endpoint).await?);
        members.push((pod, endpoint, id));
    }
    let all: Vec<String> = members.iter().map(|(_, e, _)| e.clone()).collect();
    let (leader_id, target) = probe::leader(&all).await?;
    let followers: Vec<&(String, String, u64)> = members
        .iter()
        .filter(|(_, _, id)| *id != leader_id)
        .collect();
    let (victim, _, old_id) = followers[run % followers.len()].clone();
    let old_ids: BTreeSet<u64> = members.iter().map(|(_, _, id)| *id).collect();
    let survivors: Vec<String> = members
        .iter()
        .filter(|(pod, _, _)| *pod != victim)
        .map(|(_, e, _)| e.clone())
        .collect();
    let snapshots_before = probe::snapshots_sent(&survivors).await?;
    let _trickle = Trickle::start(etcd_at(survivors.clone()).await?);

    let claim = format!("data-{victim}");
    h.lab.volume_wipe(&h.namespace, &claim).await?;
    let wiped = Instant::now();
    h.lab.pod_kill(&h.namespace, &victim, Some("etcd")).await?;
    eprintln!("run {run}: wiped the volume of {victim} ({old_id:x}), killed its etcd");

    let mut watch = Watch {
        survivors: &survivors,
        victim: &victim,
        old_ids: &old_ids,
        old_id,
        target,
        new_id: None,
        steps: Steps::default(),
    };
    let mut last_error = String::new();
    loop {
        if let Err(error) = watch.observe(h, wiped).await {
            last_error = error.to_string();
        }
        let steps = &watch.steps;
        if let (Some(applied), Some(serving), Some(voter)) =
            (steps.applied, steps.serving, steps.voter)
        {
            let total = applied.max(serving).max(voter);
            let snapshots = probe::snapshots_sent(&survivors)
                .await?
                .saturating_sub(snapshots_before);
            eprintln!(
                "run {run}: {victim} replaced in {total:.1} s (old removed {}, learner {}, \
                 applied {applied:.1}, serving {serving:.1}, voter {voter:.1}; \
                 {snapshots} snapshot(s) sent; \
                 leader at revision {})",
                seconds(steps.old_removed),
                seconds(steps.learner_added),
                target.revision
            );
            eprint!("{}", pod_timeline(h, &victim).await);
            let leader_pod = members
                .iter()
                .find(|(_, _, id)| *id == leader_id)
                .map(|(pod, _, _)| pod.clone());
            if let Some(leader_pod) = leader_pod {
                eprint!("{}", leader_lines(h, &leader_pod).await);
            }
            runs.total.push(total);
            runs.old_removed.extend(steps.old_removed);
            runs.learner_added.extend(steps.learner_added);
            runs.applied.push(applied);
            runs.serving.push(serving);
            runs.voter.push(voter);
            runs.snapshots_sent.push(snapshots);
            return Ok(());
        }
        if wiped.elapsed() > timeout {
            return Err(format!(
                "run {run}: {victim} not replaced within {timeout:?} ({last_error})"
            )
            .into());
        }
        tokio::time::sleep(POLL).await;
    }
}

/// What one replacement is watched for.
struct Watch<'a> {
    /// Client endpoints of the members that stay.
    survivors: &'a [String],
    /// The pod (and member name) replaced.
    victim: &'a str,
    /// Every member ID before the wipe.
    old_ids: &'a BTreeSet<u64>,
    old_id: u64,
    target: Target,
    new_id: Option<u64>,
    steps: Steps,
}

impl Watch<'_> {
    /// One look at the membership (through the survivors) and at the new
    /// member's metrics and status; records the steps seen for the first
    /// time, each at the moment its answer came (a scrape may stall while
    /// the member applies a snapshot, so the start of a look would be too
    /// early for the later checks of the same look).
    async fn observe(&mut self, h: &Harness, wiped: Instant) -> TestResult {
        let list = etcd_at(self.survivors.to_vec())
            .await?
            .member_list()
            .await?;
        let at = wiped.elapsed().as_secs_f64();
        let members = list.members();
        let steps = &mut self.steps;
        if steps.old_removed.is_none() && members.iter().all(|m| m.id() != self.old_id) {
            steps.old_removed = Some(at);
        }
        // The one member that is not an old one is the replacement (its
        // name stays empty until it has started).
        if let Some(new) = members.iter().find(|m| !self.old_ids.contains(&m.id())) {
            self.new_id = Some(new.id());
            steps.learner_added.get_or_insert(at);
            if !new.is_learner() {
                steps.voter.get_or_insert(at);
            }
        }
        let (Some(id), Some(ip)) = (self.new_id, pod_ip(h, self.victim).await?) else {
            return Ok(());
        };
        if steps.applied.is_none()
            && probe::applied_per_metrics(&format!("http://{ip}:{METRICS_PORT}"), id, self.target)
                .await?
        {
            steps.applied = Some(wiped.elapsed().as_secs_f64());
        }
        if steps.serving.is_none()
            && probe::serving(&format!("http://{ip}:{CLIENT_PORT}"), id, self.target).await?
        {
            steps.serving = Some(wiped.elapsed().as_secs_f64());
        }
        Ok(())
    }
}

fn seconds(value: Option<f64>) -> String {
    value.map_or_else(|| "unseen".to_owned(), |s| format!("{s:.1}"))
}

/// The client endpoint of a live pod.
async fn pod_endpoint(h: &Harness, pod: &str) -> TestResult<Option<String>> {
    Ok(pod_ip(h, pod)
        .await?
        .map(|ip| format!("http://{ip}:{CLIENT_PORT}")))
}

/// The IP of a pod that is not being deleted.
/// Where the new Pod's time went, for the bench's output: when its
/// conditions turned true, when its containers started, and etcd's own
/// lines about joining (snapshot, publish, first ready).
async fn pod_timeline(h: &Harness, name: &str) -> String {
    let mut lines = Vec::new();
    if let Ok(Some(pod)) = h.pods.get_opt(name).await {
        if let Some(created) = &pod.metadata.creation_timestamp {
            lines.push(format!("{} created", created.0));
        }
        let status = pod.status.unwrap_or_default();
        for condition in status.conditions.unwrap_or_default() {
            if let Some(at) = condition.last_transition_time {
                lines.push(format!("{} {} {}", at.0, condition.type_, condition.status));
            }
        }
        let containers = status
            .init_container_statuses
            .unwrap_or_default()
            .into_iter()
            .chain(status.container_statuses.unwrap_or_default());
        for container in containers {
            let state = container.state.unwrap_or_default();
            if let Some(at) = state.running.and_then(|r| r.started_at) {
                lines.push(format!("{} container {} running", at.0, container.name));
            }
            if let Some(t) = state.terminated {
                if let Some(at) = t.started_at {
                    lines.push(format!("{} container {} started", at.0, container.name));
                }
                if let Some(at) = t.finished_at {
                    lines.push(format!("{} container {} finished", at.0, container.name));
                }
            }
        }
    }
    let params = kube::api::LogParams {
        container: Some("etcd".to_string()),
        ..kube::api::LogParams::default()
    };
    const WORTH: [&str; 10] = [
        "resolve",
        "starting an etcd server",
        "snapshot",
        "publish",
        "ready to serve",
        "became active",
        "established TCP streaming",
        "applied incoming",
        "serving client",
        "request timed out",
    ];
    if let Ok(log) = h.pods.logs(name, &params).await {
        for line in log.lines().filter(|l| WORTH.iter().any(|w| l.contains(w))) {
            let ts = line
                .split("\"ts\":\"")
                .nth(1)
                .and_then(|r| r.split('"').next())
                .unwrap_or("?");
            let msg = line
                .split("\"msg\":\"")
                .nth(1)
                .and_then(|r| r.split('"').next())
                .unwrap_or(line);
            lines.push(format!("{ts} etcd: {msg}"));
        }
    }
    lines.sort();
    lines.iter().map(|l| format!("  {l}\n")).collect()
}

/// The leader's last lines about sending snapshots and reaching peers.
async fn leader_lines(h: &Harness, name: &str) -> String {
    let params = kube::api::LogParams {
        container: Some("etcd".to_string()),
        ..kube::api::LogParams::default()
    };
    let Ok(log) = h.pods.logs(name, &params).await else {
        return String::new();
    };
    let worth: Vec<&str> = log
        .lines()
        .filter(|l| {
            [
                "snapshot",
                "lost TCP",
                "established TCP",
                "became active",
                "failed",
            ]
            .iter()
            .any(|w| l.contains(w))
        })
        .collect();
    worth[worth.len().saturating_sub(12)..]
        .iter()
        .map(|l| format!("  leader {name}: {}\n", &l[..l.len().min(300)]))
        .collect()
}

async fn pod_ip(h: &Harness, pod: &str) -> TestResult<Option<String>> {
    let Some(pod) = h.pods.get_opt(pod).await? else {
        return Ok(None);
    };
    if pod.metadata.deletion_timestamp.is_some() {
        return Ok(None);
    }
    Ok(pod.status.and_then(|s| s.pod_ip))
}

async fn endpoints(h: &Harness, cluster: &LabCluster) -> TestResult<Vec<String>> {
    let mut endpoints = Vec::new();
    for ordinal in 0..REPLICAS {
        endpoints.extend(pod_endpoint(h, &cluster.pod(ordinal)).await?);
    }
    Ok(endpoints)
}

/// Available with every member a healthy voter.
async fn wait_available(h: &Harness, cluster: &LabCluster, timeout: Duration) -> TestResult {
    let deadline = Instant::now() + timeout;
    loop {
        let status = h.status(&cluster.name).await?;
        let voters = status
            .members
            .iter()
            .filter(|m| m.role == Some(MemberRole::Voter) && m.healthy)
            .count();
        if condition_true(&status, "Available") && voters == REPLICAS {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(format!("{} not Available within {timeout:?}", cluster.name).into());
        }
        tokio::time::sleep(POLL).await;
    }
}
