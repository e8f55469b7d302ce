//! The client load of the rollout and defragmentation benches: one small
//! put every [`INTERVAL`], each in its own task and given [`TIMEOUT`],
//! whatever became of the earlier ones (an open loop: a stall shows as
//! failed requests and as a gap between acknowledgements, not as fewer
//! requests). Every request's outcome is recorded with the times it was sent
//! and came back; key N gets `value-N` once, so reading the keys back
//! afterwards tells whether an acknowledged write was lost.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use etcd_client::{Client, ConnectOptions, GetOptions, PutOptions};
use serde_json::{Value, json};
use test_kit::TestResult;
use test_kit::e2e::{etcd_at, key, value};
use test_kit::figures::{percentile, round3};
use tokio::task::{JoinHandle, JoinSet};
use tokio::time::MissedTickBehavior;

/// One put every this long.
pub const INTERVAL: Duration = Duration::from_millis(10);
/// How long one request may take (the client's timeout and ours).
pub const TIMEOUT: Duration = Duration::from_secs(1);

/// A client of the load on `endpoints`: it balances over them and a
/// request fails after [`TIMEOUT`].
pub async fn client(endpoints: &[String]) -> TestResult<Client> {
    let options = ConnectOptions::new()
        .with_connect_timeout(TIMEOUT)
        .with_timeout(TIMEOUT);
    Ok(Client::connect(endpoints, Some(options)).await?)
}

/// Adds and removes endpoints of `client` so that it has `wanted`;
/// `current` is what it has.
pub async fn follow_endpoints(
    client: &Client,
    current: &mut BTreeSet<String>,
    wanted: &BTreeSet<String>,
) -> TestResult {
    for gone in current.difference(wanted) {
        client.remove_endpoint(gone).await?;
    }
    for new in wanted.difference(current) {
        client.add_endpoint(new).await?;
    }
    current.clone_from(wanted);
    Ok(())
}

/// The writer, running until [`PacedWriter::stop`].
pub struct PacedWriter {
    prefix: String,
    started: Instant,
    stop: Arc<AtomicBool>,
    task: JoinHandle<Vec<Outcome>>,
}

/// One request: when it was sent and answered, and its error if any.
#[derive(Debug, Clone)]
struct Outcome {
    n: usize,
    sent: Instant,
    done: Instant,
    error: Option<String>,
}

impl PacedWriter {
    /// Starts writing `<prefix>key-N` through `client`.
    pub fn start(client: Client, prefix: &str) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let task = tokio::spawn(write(client, prefix.to_owned(), stop.clone()));
        Self {
            prefix: prefix.to_owned(),
            started: Instant::now(),
            stop,
            task,
        }
    }

    /// Stops sending, waits for the requests in flight, and returns what
    /// became of every request.
    pub async fn stop(self) -> TestResult<Record> {
        self.stop.store(true, Ordering::SeqCst);
        let mut outcomes = self.task.await?;
        outcomes.sort_by_key(|o| o.n);
        Ok(Record {
            prefix: self.prefix,
            started: self.started,
            outcomes,
        })
    }
}

async fn write(client: Client, prefix: String, stop: Arc<AtomicBool>) -> Vec<Outcome> {
    let mut ticks = tokio::time::interval(INTERVAL);
    ticks.set_missed_tick_behavior(MissedTickBehavior::Skip);
    let mut requests = JoinSet::new();
    let mut outcomes = Vec::new();
    for n in 0.. {
        ticks.tick().await;
        if stop.load(Ordering::SeqCst) {
            break;
        }
        while let Some(done) = requests.try_join_next() {
            outcomes.extend(done.ok());
        }
        let mut client = client.clone();
        let (key, value) = (key(&prefix, n), value(n));
        requests.spawn(async move {
            let sent = Instant::now();
            let put = client.put(key, value, None::<PutOptions>);
            let error = match tokio::time::timeout(TIMEOUT, put).await {
                Ok(Ok(_)) => None,
                Ok(Err(error)) => Some(error_kind(&error)),
                Err(_) => Some("timeout (ours)".to_owned()),
            };
            Outcome {
                n,
                sent,
                done: Instant::now(),
                error,
            }
        });
    }
    while let Some(done) = requests.join_next().await {
        outcomes.extend(done.ok());
    }
    outcomes
}

/// A short name of what went wrong, to count failures by kind.
fn error_kind(error: &etcd_client::Error) -> String {
    let text = match error {
        etcd_client::Error::GRpcStatus(status) => {
            format!("{:?}: {}", status.code(), status.message())
        }
        other => other.to_string(),
    };
    text.chars().take(80).collect()
}

/// The longest time between two acknowledgements in a row.
#[derive(Debug, Clone, Copy)]
pub struct Gap {
    pub seconds: f64,
    /// The acknowledgement before the gap.
    pub from: Instant,
    /// The first one after it.
    pub to: Instant,
}

/// What a stopped writer's requests became.
pub struct Record {
    prefix: String,
    started: Instant,
    outcomes: Vec<Outcome>,
}

impl Record {
    pub fn attempted(&self) -> usize {
        self.outcomes.len()
    }

    pub fn failed(&self) -> usize {
        self.outcomes.iter().filter(|o| o.error.is_some()).count()
    }

    /// The N of every acknowledged write.
    pub fn acknowledged(&self) -> Vec<usize> {
        self.outcomes
            .iter()
            .filter(|o| o.error.is_none())
            .map(|o| o.n)
            .collect()
    }

    /// Failed requests by kind of error.
    pub fn errors_by_kind(&self) -> BTreeMap<String, usize> {
        let mut kinds = BTreeMap::new();
        for error in self.outcomes.iter().filter_map(|o| o.error.as_ref()) {
            *kinds.entry(error.clone()).or_default() += 1;
        }
        kinds
    }

    /// Acknowledgement times, in order.
    fn acks(&self) -> Vec<Instant> {
        let mut acks: Vec<Instant> = self
            .outcomes
            .iter()
            .filter(|o| o.error.is_none())
            .map(|o| o.done)
            .collect();
        acks.sort();
        acks
    }

    /// The longest time between two acknowledged writes in a row, over the
    /// whole run of the writer (its start counts as the first).
    pub fn longest_gap(&self) -> Option<Gap> {
        let acks = self.acks();
        std::iter::once(self.started)
            .chain(acks.iter().copied())
            .zip(acks.iter().copied())
            .map(|(from, to)| Gap {
                seconds: to.duration_since(from).as_secs_f64(),
                from,
                to,
            })
            .max_by(|a, b| a.seconds.total_cmp(&b.seconds))
    }

    /// The first acknowledgement after `moment`.
    pub fn first_ack_after(&self, moment: Instant) -> Option<Instant> {
        self.acks().into_iter().find(|&t| t > moment)
    }

    /// How many acknowledged writes are not there with their value, read
    /// back (linearizable) through `endpoints`.
    pub async fn lost(&self, endpoints: Vec<String>) -> TestResult<usize> {
        let mut client = etcd_at(endpoints).await?;
        let found = client
            .get(self.prefix.as_str(), Some(GetOptions::new().with_prefix()))
            .await?;
        let values: BTreeMap<&str, &str> = found
            .kvs()
            .iter()
            .filter_map(|kv| Some((kv.key_str().ok()?, kv.value_str().ok()?)))
            .collect();
        Ok(self
            .acknowledged()
            .into_iter()
            .filter(|&n| values.get(key(&self.prefix, n).as_str()) != Some(&value(n).as_str()))
            .count())
    }

    /// The figures of one run: the longest gap (and where it lay, from
    /// `origin`), requests, failures by kind, and `lost`.
    pub fn figures(&self, origin: Instant, lost: usize) -> Value {
        let since = |t: Instant| round3(signed_seconds(origin, t));
        let gap = self.longest_gap();
        json!({
            "longest_gap_s": gap.map(|g| round3(g.seconds)),
            "longest_gap_from_s": gap.map(|g| since(g.from)),
            "longest_gap_to_s": gap.map(|g| since(g.to)),
            "attempted": self.attempted(),
            "acknowledged": self.acknowledged().len(),
            "failed": self.failed(),
            "failed_by_kind": self.errors_by_kind(),
            "lost": lost,
        })
    }
}

impl Record {
    /// The figures of the window `[from, to]`: the longest gap between two
    /// acknowledgements in a row that overlaps it, and the requests sent
    /// within it: how many, how many failed (by kind), and their latency (a
    /// failed request counts with the time it took to fail).
    pub fn window_figures(&self, from: Instant, to: Instant) -> Value {
        let acks = self.acks();
        let gap = std::iter::once(self.started)
            .chain(acks.iter().copied())
            .zip(acks.iter().copied())
            .filter(|&(before, after)| after > from && before < to)
            .map(|(before, after)| after.duration_since(before).as_secs_f64())
            .reduce(f64::max);
        let sent: Vec<&Outcome> = self
            .outcomes
            .iter()
            .filter(|o| o.sent >= from && o.sent <= to)
            .collect();
        let mut latencies_ms: Vec<f64> = sent
            .iter()
            .map(|o| o.done.duration_since(o.sent).as_secs_f64() * 1000.0)
            .collect();
        latencies_ms.sort_by(f64::total_cmp);
        let mut failed_by_kind: BTreeMap<&str, usize> = BTreeMap::new();
        for error in sent.iter().filter_map(|o| o.error.as_deref()) {
            *failed_by_kind.entry(error).or_default() += 1;
        }
        json!({
            "longest_gap_s": gap.map(round3),
            "attempted": sent.len(),
            "failed": sent.iter().filter(|o| o.error.is_some()).count(),
            "failed_by_kind": failed_by_kind,
            "latency_p50_ms": (!latencies_ms.is_empty()).then(|| round3(percentile(&latencies_ms, 50.0))),
            "latency_p99_ms": (!latencies_ms.is_empty()).then(|| round3(percentile(&latencies_ms, 99.0))),
            "latency_max_ms": latencies_ms.last().copied().map(round3),
        })
    }
}

/// `t - origin` in seconds, negative when `t` came first.
pub fn signed_seconds(origin: Instant, t: Instant) -> f64 {
    match t.checked_duration_since(origin) {
        Some(after) => after.as_secs_f64(),
        None => -origin.duration_since(t).as_secs_f64(),
    }
}
