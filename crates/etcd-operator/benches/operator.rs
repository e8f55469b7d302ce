//! Benchmark (not a timed test) of the operator on the lab, run outside the
//! cluster as in the end-to-end tests, under the lab test lock:
//!
//! 1. time from creating a 3-member `EtcdCluster` to `Available` (each
//!    cluster created alone, `BENCH_RUNS` times);
//! 2. majority loss: 2 of 3 nodes stopped (quorum lost, checked by a failing
//!    write), then started back to back: time from the last node's start to
//!    the first successful write, beside etcd's own figure measured in the
//!    same run on 3 etcd processes on loopback (2 killed, restarted back to
//!    back, time from the last restart to the first successful write);
//! 3. idle with 10 clusters of 3 members: the operator's RSS and CPU, and the
//!    API requests it makes per minute. Requests are counted by routing the
//!    operator's client through `kubectl proxy -v=6` on loopback: client-go
//!    logs one `Response` line per request it forwards (watches included,
//!    counted when they start), so the count is of the operator's requests
//!    only, whatever else the lab's components do;
//! 4. one member Pod deleted: status down, new Pod created, Ready
//!    (`operator/pod_deleted.rs`);
//! 5. scale: 50 clusters of 1 to 3 members (the earlier phases' clusters
//!    deleted first): the figures of 3., then the operator's reaction to
//!    Pod deletions while it holds them all.
//!
//! Run as root: `cargo bench -p etcd-operator --bench operator` (or
//! `make bench`). Figures go to `target/bench/operator.json` (`BENCH_OUT`
//! sets the directory); a phase that fails records its error there instead
//! of stopping the others.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use etcd_client::PutOptions;
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::ListParams;
use serde_json::{Value, json};
use test_kit::TestResult;
use test_kit::conditions::condition_true;
use test_kit::e2e::operator::OperatorProcess;
use test_kit::e2e::{Harness, cluster_spec, etcd_at, run_bench};
use test_kit::etcd_process::{EtcdProcess, initial_cluster};
use test_kit::figures::{
    env_u64, median, phase, ratio_of_medians, rss_kib, runs, summary, write_figures,
};
use test_kit::loopback::free_port;
use test_kit::poll::wait_for_every;

/// Clusters of the idle figure.
const IDLE_CLUSTERS: usize = 10;
/// Poll interval of every "time to" figure.
const POLL: Duration = Duration::from_millis(200);
/// How long quorum stays lost before the nodes (or processes) come back.
const HOLD_LOST: Duration = Duration::from_secs(5);
/// The cluster token of the etcd processes of the baseline.
const TOKEN: &str = "bench";

#[path = "operator/pod_deleted.rs"]
mod pod_deleted;

/// Whether phase `name` runs (`BENCH_OPERATOR_PHASES`, a comma-separated
/// list of `create`, `majority`, `pod_deleted`, `idle`, `scale`; every one when
/// unset).
fn runs_phase(name: &str) -> bool {
    std::env::var("BENCH_OPERATOR_PHASES")
        .map(|phases| phases.split(',').any(|p| p.trim() == name))
        .unwrap_or(true)
}

fn main() {
    run_bench(env!("CARGO_BIN_EXE_etcd-operator"), |h| Box::pin(bench(h)));
}

fn cluster_name(i: usize) -> String {
    format!("bench-{i:02}")
}

async fn bench(h: &mut Harness) -> TestResult {
    let runs = runs();
    let mut figures = BTreeMap::<String, Value>::new();
    figures.insert("runs".into(), json!(runs));
    let save = |figures: &BTreeMap<String, Value>| -> TestResult {
        write_figures("operator.json", figures).map(|_| ())
    };

    if runs_phase("create") {
        let create = phase(create_to_available(h, runs).await);
        eprintln!("create to Available: {create}");
        figures.insert("create_to_available".into(), create);
        save(&figures)?;
    }

    if runs_phase("pod_deleted") {
        let deleted = phase(
            async {
                ensure_cluster(h, &cluster_name(0)).await?;
                pod_deleted::pod_deleted(h, &cluster_name(0), runs).await
            }
            .await,
        );
        eprintln!("pod deleted: {deleted}");
        figures.insert("pod_deleted".into(), deleted);
        save(&figures)?;
    }

    if runs_phase("majority") {
        let etcd = phase(etcd_restart_to_write(runs).await);
        eprintln!("etcd alone: {etcd}");
        let operator = phase(
            async {
                ensure_cluster(h, &cluster_name(0)).await?;
                majority_loss(h, runs).await
            }
            .await,
        );
        eprintln!("operator: {operator}");
        let ratio = ratio_of_medians(&operator, &etcd);
        figures.insert(
            "majority_loss".into(),
            json!({ "operator": operator, "etcd": etcd, "ratio": ratio }),
        );
        save(&figures)?;
    }

    if runs_phase("idle") {
        let idle = phase(idle(h).await);
        eprintln!("idle: {idle}");
        figures.insert("idle".into(), idle);
        save(&figures)?;
    }

    if runs_phase("scale") {
        let scale = phase(scale(h).await);
        eprintln!("scale: {scale}");
        figures.insert("scale".into(), scale);
    }
    save(&figures)
}

/// Creates cluster `name` unless it exists (a phase run alone).
async fn ensure_cluster(h: &Harness, name: &str) -> TestResult {
    if h.clusters.get_opt(name).await?.is_none() {
        h.create_cluster(name, spec()).await?;
    }
    Ok(())
}

fn spec() -> Value {
    cluster_spec(3, "lab-network")
}

// ---------------------------------------------------------------------------
// 1. Create to Available

async fn create_to_available(h: &Harness, runs: usize) -> TestResult<Value> {
    let mut samples = Vec::new();
    for i in 0..runs {
        let name = cluster_name(i);
        let started = Instant::now();
        h.create_cluster(&name, spec()).await?;
        poll_until(
            &format!("{name} Available"),
            Duration::from_secs(300),
            || available(h, &name),
        )
        .await?;
        let seconds = started.elapsed().as_secs_f64();
        eprintln!("{name}: created to Available in {seconds:.1} s");
        samples.push(seconds);
    }
    Ok(summary(&samples))
}

async fn available(h: &Harness, name: &str) -> TestResult<bool> {
    available_with(h, name, 3).await
}

async fn available_with(h: &Harness, name: &str, members: i32) -> TestResult<bool> {
    let status = h.status(name).await?;
    Ok(condition_true(&status, "Available")
        && status.ready_members == members
        && status.members.len() == usize::try_from(members).unwrap_or(0))
}

/// Polls `check` every [`POLL`] until it says true.
async fn poll_until<F, Fut>(what: &str, timeout: Duration, check: F) -> TestResult
where
    F: FnMut() -> Fut,
    Fut: Future<Output = TestResult<bool>>,
{
    wait_for_every(what, timeout, POLL, check).await
}

// ---------------------------------------------------------------------------
// 2. Majority loss

/// One write through a fresh client on these endpoints, within 2 s.
async fn try_write(endpoints: Vec<String>) -> bool {
    if endpoints.is_empty() {
        return false;
    }
    let attempt = async {
        let mut client = etcd_at(endpoints).await?;
        client
            .put("/bench/probe", "x", None::<PutOptions>)
            .await
            .map_err(|e| Box::new(e) as Box<dyn std::error::Error + Send + Sync>)?;
        TestResult::Ok(())
    };
    matches!(
        tokio::time::timeout(Duration::from_secs(2), attempt).await,
        Ok(Ok(()))
    )
}

/// Client endpoints of every pod of cluster `name` that has an IP (ready or
/// not: readiness lags behind etcd serving).
async fn member_endpoints(h: &Harness, name: &str) -> TestResult<Vec<String>> {
    Ok(member_pods(h, name)
        .await?
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .filter_map(|p| p.status.as_ref()?.pod_ip.clone())
        .map(|ip| format!("http://{ip}:2379"))
        .collect())
}

async fn member_pods(h: &Harness, name: &str) -> TestResult<Vec<Pod>> {
    let prefix = format!("{name}-");
    Ok(h.pods
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter(|p| {
            p.name_any()
                .strip_prefix(&prefix)
                .is_some_and(|rest| rest.parse::<u32>().is_ok())
        })
        .collect())
}

/// Writes until one succeeds; returns the seconds since `from`.
async fn first_write<F, Fut>(from: Instant, timeout: Duration, mut endpoints: F) -> TestResult<f64>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = TestResult<Vec<String>>>,
{
    loop {
        if try_write(endpoints().await.unwrap_or_default()).await {
            return Ok(from.elapsed().as_secs_f64());
        }
        if from.elapsed() > timeout {
            return Err(format!("no successful write within {timeout:?}").into());
        }
        tokio::time::sleep(POLL).await;
    }
}

/// Writes until one fails (quorum lost).
async fn until_write_fails<F, Fut>(timeout: Duration, mut endpoints: F) -> TestResult
where
    F: FnMut() -> Fut,
    Fut: Future<Output = TestResult<Vec<String>>>,
{
    let deadline = Instant::now() + timeout;
    while try_write(endpoints().await?).await {
        if Instant::now() > deadline {
            return Err("writes still succeed: quorum not lost".into());
        }
        tokio::time::sleep(POLL).await;
    }
    Ok(())
}

async fn majority_loss(h: &Harness, runs: usize) -> TestResult<Value> {
    let name = cluster_name(0);
    let mut samples = Vec::new();
    let mut back_to_available = Vec::new();
    for run in 0..runs {
        poll_until(
            &format!("{name} Available"),
            Duration::from_secs(300),
            || available(h, &name),
        )
        .await?;
        let mut nodes: Vec<String> = member_pods(h, &name)
            .await?
            .into_iter()
            .filter_map(|p| p.spec?.node_name)
            .collect();
        nodes.sort();
        nodes.dedup();
        if nodes.len() < 3 {
            return Err(format!("{name} is on {nodes:?}: needs 3 distinct nodes").into());
        }
        // A different pair each run.
        let stopped = [nodes[run % 3].clone(), nodes[(run + 1) % 3].clone()];
        eprintln!("run {run}: stopping {stopped:?}");
        for node in &stopped {
            h.lab.node_stop(node)?;
        }
        let lost = until_write_fails(Duration::from_secs(30), || member_endpoints(h, &name)).await;
        tokio::time::sleep(HOLD_LOST).await;
        h.lab.node_start(&stopped[0])?;
        let last_start = Instant::now();
        h.lab.node_start(&stopped[1])?;
        lost?;
        let seconds = first_write(last_start, Duration::from_secs(300), || {
            member_endpoints(h, &name)
        })
        .await?;
        eprintln!("run {run}: first write {seconds:.1} s after the last node's start");
        samples.push(seconds);
        poll_until(
            &format!("{name} Available"),
            Duration::from_secs(300),
            || available(h, &name),
        )
        .await?;
        back_to_available.push(last_start.elapsed().as_secs_f64());
    }
    let mut value = summary(&samples);
    value["available_again"] = summary(&back_to_available);
    Ok(value)
}

/// 3 etcd processes (the pinned 3.6 set, the version the clusters run) on
/// loopback: 2 killed, quorum lost for the same hold, restarted back to back.
async fn etcd_restart_to_write(runs: usize) -> TestResult<Value> {
    let dir = tempfile::tempdir()?;
    let mut members: Vec<EtcdProcess> = (0..3)
        .map(|i| EtcdProcess::new(dir.path(), &format!("m{i}")))
        .collect();
    let initial = initial_cluster(&members);
    for member in &mut members {
        member.start(&initial, "new", TOKEN)?;
    }
    let endpoints: Vec<String> = members.iter().map(|m| m.client_url.clone()).collect();
    let all = || {
        let endpoints = endpoints.clone();
        async move { TestResult::Ok(endpoints) }
    };
    first_write(Instant::now(), Duration::from_secs(60), all).await?;
    let mut samples = Vec::new();
    for run in 0..runs {
        let victims = [run % 3, (run + 1) % 3];
        for &i in &victims {
            members[i].kill();
        }
        until_write_fails(Duration::from_secs(30), all).await?;
        tokio::time::sleep(HOLD_LOST).await;
        members[victims[0]].start(&initial, "new", TOKEN)?;
        let last_start = Instant::now();
        members[victims[1]].start(&initial, "new", TOKEN)?;
        let seconds = first_write(last_start, Duration::from_secs(60), all).await?;
        eprintln!("etcd run {run}: first write {seconds:.2} s after the last restart");
        samples.push(seconds);
        // Every member back before the next run.
        let every = members.iter().map(|m| vec![m.client_url.clone()]);
        for one in every {
            let one = || {
                let one = one.clone();
                async move { TestResult::Ok(one) }
            };
            first_write(Instant::now(), Duration::from_secs(60), one).await?;
        }
    }
    Ok(summary(&samples))
}

// ---------------------------------------------------------------------------
// 3. Idle with 10 clusters

/// A process killed when dropped.
struct Killed(std::process::Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

async fn idle(h: &mut Harness) -> TestResult<Value> {
    let clusters: Vec<(String, i32)> = (0..IDLE_CLUSTERS).map(|i| (cluster_name(i), 3)).collect();
    let mut value = quiet(h, &clusters, false).await?;
    value["members_per_cluster"] = json!(3);
    Ok(value)
}

/// Scale: `BENCH_SCALE_CLUSTERS` (default 50) clusters, every fifth of 3
/// members and the others of 1, all Available; then the operator's
/// footprint and requests as in [`idle`], and how fast it reacts while it
/// holds them all: a member Pod deleted in one cluster after another
/// (reaction: deletion to the new Pod created) and two of the three
/// member Pods of a 3-member cluster deleted at once (time until its
/// status no longer says Available).
async fn scale(h: &mut Harness) -> TestResult<Value> {
    let count = usize::try_from(env_u64("BENCH_SCALE_CLUSTERS", 50)).unwrap_or(50);
    // The other phases' clusters go first (their Pods with them).
    for i in 0..IDLE_CLUSTERS.max(runs()) {
        let _ = h
            .clusters
            .delete(&cluster_name(i), &kube::api::DeleteParams::default())
            .await;
    }
    let clusters: Vec<(String, i32)> = (0..count)
        .map(|i| (format!("scale-{i:02}"), if i % 5 == 0 { 3 } else { 1 }))
        .collect();
    let mut value = quiet(h, &clusters, true).await?;
    value["members"] = json!(clusters.iter().map(|(_, m)| m).sum::<i32>());
    Ok(value)
}

/// The operator's footprint and API requests over a quiet window with
/// `clusters` (name, members) Available; with `reactions`, then the
/// reaction figures of [`scale`].
async fn quiet(h: &mut Harness, clusters: &[(String, i32)], reactions: bool) -> TestResult<Value> {
    let settle = Duration::from_secs(env_u64("BENCH_IDLE_SETTLE_SECONDS", 60));
    let window = Duration::from_secs(env_u64("BENCH_IDLE_SECONDS", 120));
    for (name, members) in clusters {
        if h.clusters.get_opt(name).await?.is_none() {
            h.create_cluster(name, cluster_spec(*members, "lab-network"))
                .await?;
        }
    }
    let started = Instant::now();
    poll_until(
        &format!("{} clusters Available", clusters.len()),
        Duration::from_secs(1200),
        || async {
            for (name, members) in clusters {
                if !available_with(h, name, *members).await? {
                    return Ok(false);
                }
            }
            Ok(true)
        },
    )
    .await?;
    eprintln!(
        "{} clusters Available after {:.0} s",
        clusters.len(),
        started.elapsed().as_secs_f64()
    );
    // The operator again, its client through a counting proxy, with leader
    // election as deployed.
    h.stop_operator();
    let work = tempfile::tempdir()?;
    let port = free_port();
    let kubectl = etcd_lab::upstream::KUBERNETES.dir().join("kubectl");
    let proxy_log = work.path().join("proxy.log");
    let _proxy = Killed(
        Command::new(&kubectl)
            .args(["proxy", "--address=127.0.0.1", "-v=6"])
            .arg(format!("--port={port}"))
            .env("KUBECONFIG", h.lab.kubeconfig_path())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&proxy_log)?)
            .spawn()?,
    );
    let kubeconfig = work.path().join("kubeconfig");
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: proxy\n  cluster:\n    server: http://127.0.0.1:{port}\n\
             users:\n- name: proxy\n  user: {{}}\ncontexts:\n- name: proxy\n  context:\n    cluster: proxy\n    user: proxy\n    namespace: {}\n\
             current-context: proxy\n",
            h.namespace
        ),
    )?;
    poll_until("kubectl proxy", Duration::from_secs(30), || async {
        Ok(std::net::TcpStream::connect(("127.0.0.1", port)).is_ok())
    })
    .await?;
    let operator = OperatorProcess::start_with(
        h.operator_binary(),
        &[
            "run",
            "--leader-election=true",
            "--identity=bench",
            "--metrics-address=127.0.0.1:0",
            &format!("--lease-namespace={}", h.namespace),
        ],
        &kubeconfig,
        &h.operator_log,
    )?;
    let pid = operator.id();
    tokio::time::sleep(settle).await;

    let requests_before = proxy_requests(&proxy_log)?;
    let cpu_before = cpu_ticks(pid)?;
    let window_start = Instant::now();
    let mut rss = Vec::new();
    while window_start.elapsed() < window {
        rss.push(rss_mib(pid)?);
        tokio::time::sleep(Duration::from_secs(5)).await;
    }
    let elapsed = window_start.elapsed().as_secs_f64();
    let requests_after = proxy_requests(&proxy_log)?;
    let cpu_after = cpu_ticks(pid)?;
    rss.push(rss_mib(pid)?);
    let reacted = if reactions {
        Some(phase(react(h, clusters).await))
    } else {
        None
    };
    drop(operator);
    h.start_operator()?;

    let in_window = &requests_after[requests_before.len()..];
    let mut by_verb = BTreeMap::<String, usize>::new();
    for (verb, _) in in_window {
        *by_verb.entry(verb.clone()).or_default() += 1;
    }
    let watches = in_window
        .iter()
        .filter(|(_, url)| url.contains("watch=true") || url.contains("watch=1"))
        .count();
    let per_minute = in_window.len() as f64 / elapsed * 60.0;
    let ticks_per_second = 100.0;
    let cpu = (cpu_after - cpu_before) as f64 / ticks_per_second / elapsed;
    Ok(json!({
        "clusters": clusters.len(),
        "reactions": reacted,
        "settle_s": settle.as_secs(),
        "window_s": elapsed,
        "requests": in_window.len(),
        "requests_per_minute": per_minute,
        "requests_by_verb": by_verb,
        "watch_requests": watches,
        "rss_mib_median": median(&rss),
        "rss_mib_max": rss.iter().copied().fold(0.0, f64::max),
        "cpu_percent_of_one_core": cpu * 100.0,
        "requests_before_window": requests_before.len(),
    }))
}

/// The reaction figures of [`scale`], with the operator running.
async fn react(h: &Harness, clusters: &[(String, i32)]) -> TestResult<Value> {
    let mut recreated = Vec::new();
    for (name, _) in clusters.iter().filter(|(_, m)| *m == 1).take(10) {
        let pod = format!("{name}-0");
        let old = h.pods.get(&pod).await?.metadata.uid;
        let deleted = Instant::now();
        h.pods
            .delete(&pod, &kube::api::DeleteParams::default())
            .await?;
        poll_every(
            &format!("{pod} recreated"),
            Duration::from_secs(120),
            || async {
                Ok(h.pods
                    .get_opt(&pod)
                    .await?
                    .is_some_and(|p| p.metadata.uid != old))
            },
        )
        .await?;
        recreated.push(deleted.elapsed().as_secs_f64());
    }
    let (name, _) = clusters
        .iter()
        .find(|(_, m)| *m == 3)
        .ok_or("no 3-member cluster")?;
    let deleted = Instant::now();
    for ordinal in [1, 2] {
        h.pods
            .delete(
                &format!("{name}-{ordinal}"),
                &kube::api::DeleteParams::default(),
            )
            .await?;
    }
    poll_every(
        &format!("{name} not Available"),
        Duration::from_secs(120),
        || async { Ok(!condition_true(&h.status(name).await?, "Available")) },
    )
    .await?;
    let noticed = deleted.elapsed().as_secs_f64();
    let mut sorted = recreated.clone();
    sorted.sort_by(f64::total_cmp);
    Ok(json!({
        "pod_deleted_to_recreated": summary(&recreated),
        "pod_deleted_to_recreated_max_s": sorted.last(),
        "majority_deleted_to_not_available_s": noticed,
    }))
}

/// Polls `check` every 100 ms.
async fn poll_every<F, Fut>(what: &str, timeout: Duration, check: F) -> TestResult
where
    F: FnMut() -> Fut,
    Fut: Future<Output = TestResult<bool>>,
{
    wait_for_every(what, timeout, Duration::from_millis(100), check).await
}

/// (verb, url) of every request `kubectl proxy -v=6` logged (client-go's
/// `"Response" verb=... url=...` lines, or `VERB URL STATUS in N
/// milliseconds` in older versions).
fn proxy_requests(log: &Path) -> TestResult<Vec<(String, String)>> {
    let text = std::fs::read_to_string(log)?;
    Ok(text
        .lines()
        .filter_map(|line| {
            if line.contains("\"Response\"") {
                let field = |key: &str| {
                    let start = line.find(&format!("{key}=\""))? + key.len() + 2;
                    let end = line[start..].find('"')? + start;
                    Some(line[start..end].to_owned())
                };
                return Some((field("verb")?, field("url")?));
            }
            if line.contains(" milliseconds") {
                let message = line.split("] ").nth(1)?;
                let mut words = message.split_whitespace();
                let verb = words.next()?.to_owned();
                let url = words.next()?.to_owned();
                if url.starts_with("http") {
                    return Some((verb, url));
                }
            }
            None
        })
        .collect())
}

/// utime + stime of a process, in clock ticks (100 per second on Linux).
fn cpu_ticks(pid: u32) -> TestResult<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    let after_name = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest)
        .ok_or("malformed stat")?;
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    // Fields 14 and 15 of stat; field 3 is the first after the name.
    let utime: u64 = fields.get(11).ok_or("no utime")?.parse()?;
    let stime: u64 = fields.get(12).ok_or("no stime")?.parse()?;
    Ok(utime + stime)
}

fn rss_mib(pid: u32) -> TestResult<f64> {
    Ok(rss_kib(pid).ok_or("no VmRSS")? as f64 / 1024.0)
}
