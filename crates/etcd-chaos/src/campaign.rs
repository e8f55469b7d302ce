//! A campaign from start to end on a [`Harness`]: the cluster created and
//! Available, the clients, the watcher and the process monitor started,
//! each step injected, healed and recovered from, then the checks, and the
//! report.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use etcd_client::GetOptions;
use serde_json::json;
use test_kit::TestResult;
use test_kit::e2e::{Harness, cluster_spec_with};

use crate::clock::Clock;
use crate::endpoints::Endpoints;
use crate::inject::run_step;
use crate::operations::{self, BACKUP_CLAIM};
use crate::oracle::{check_hashkv, check_history, check_identity, check_watch};
use crate::processes::ProcessMonitor;
use crate::recovery::wait_recovered;
use crate::report::{
    ClusterShape, Finding, OperationRecord, OperationsSummary, Report, StepRecord,
};
use crate::schedule::{Operation, plan};
use crate::watcher::Watcher;
use crate::workload::{PREFIX, Workload, WorkloadOptions};

/// The cluster's name in the campaign's namespace.
pub const CLUSTER: &str = "chaos";

/// What a campaign runs.
#[derive(Clone, Debug)]
pub struct CampaignOptions {
    /// Names the schedule and the clients' choices.
    pub seed: u64,
    /// Steps (each one fault, some with a second overlapping it).
    pub steps: usize,
    /// Members of the cluster.
    pub members: usize,
    /// Storage class of its volumes.
    pub storage_class: String,
    /// The clients.
    pub workload: WorkloadOptions,
    /// How long a step may take to recover before the campaign stops.
    pub recovery_budget: Duration,
    /// Pause after a step has recovered, before the next one.
    pub settle: Duration,
    /// No step starts after this long (the checks still run at the end).
    pub time_limit: Option<Duration>,
    /// How long a rollout or backup a fault hit may take to end after the
    /// step recovered.
    pub operation_budget: Duration,
}

impl CampaignOptions {
    /// `steps` steps from `seed` on 3 members on network volumes.
    pub fn new(seed: u64, steps: usize) -> Self {
        Self {
            seed,
            steps,
            members: 3,
            storage_class: "lab-network".into(),
            workload: WorkloadOptions::default(),
            recovery_budget: Duration::from_secs(300),
            settle: Duration::from_secs(2),
            time_limit: None,
            operation_budget: Duration::from_secs(300),
        }
    }
}

/// Runs the campaign on `h`; every step is printed as it ends.
pub async fn run(h: &mut Harness, options: &CampaignOptions) -> TestResult<Report> {
    let started = Instant::now();
    let started_at = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    let load_at_start = load_average();
    let members = i32::try_from(options.members)?;
    h.create_available(
        CLUSTER,
        cluster_spec_with(members, &options.storage_class, json!({})),
        Duration::from_secs(300),
    )
    .await?;
    let mut identity = h.identity().await?;
    let etcd_version = h.status(CLUSTER).await?.version.unwrap_or_default();
    let start_revision = {
        let mut etcd = h.etcd().await?;
        let header = etcd.get(PREFIX, None).await?;
        u64::try_from(header.header().map_or(0, |h| h.revision()))? + 1
    };

    let clock = Clock::start();
    let endpoints = Endpoints::new(h.pods.clone());
    let workload = Workload::start(endpoints.clone(), clock, options.seed, options.workload);
    let watcher = Watcher::start(endpoints.clone(), start_revision);
    let monitor = ProcessMonitor::start(CLUSTER, &h.namespace);
    tokio::time::sleep(Duration::from_secs(3)).await;

    let mut findings = Vec::new();
    let mut records = Vec::new();
    let schedule = plan(options.seed, options.steps, options.members);
    let mut stopped_by_time_limit = false;
    let mut backup_claim = false;
    for step in &schedule {
        if options
            .time_limit
            .is_some_and(|limit| started.elapsed() > limit)
        {
            stopped_by_time_limit = true;
            break;
        }
        workload.set_epoch(u64::try_from(step.number)?);
        if step.during == Some(Operation::Backup) && !backup_claim {
            h.create_claim(BACKUP_CLAIM).await?;
            backup_claim = true;
        }
        let started_work = match step.during {
            Some(operation) => Some(
                operations::start(h, CLUSTER, step.number, operation)
                    .await
                    .map_err(|e| (operation, e.to_string())),
            ),
            None => None,
        };
        let injected = run_step(h, CLUSTER, step).await;
        let recovery = wait_recovered(h, CLUSTER, options.members, options.recovery_budget).await;
        let operation = match (started_work, recovery) {
            (Some(Ok(started)), Some(_)) => {
                let outcome = operations::finish(
                    h,
                    CLUSTER,
                    options.members,
                    step.number,
                    &started,
                    options.operation_budget,
                )
                .await;
                findings.extend(outcome.finding);
                step.during.map(|kind| OperationRecord {
                    kind: kind.kind().into(),
                    result: outcome.result.into(),
                    note: outcome.note,
                })
            }
            (Some(Err((kind, error))), _) => Some(OperationRecord {
                kind: kind.kind().into(),
                result: "not-started".into(),
                note: error,
            }),
            _ => None,
        };
        let mut notes = injected.notes;
        notes.extend(operation.as_ref().map(|o| format!("under it: {}", o.note)));
        let record = StepRecord {
            step: step.clone(),
            notes,
            injected: injected.injected,
            recovery_ms: recovery.map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
            operation,
        };
        eprintln!(
            "step {}/{}: {} -> recovered {}",
            step.number,
            schedule.len(),
            record.notes.join("; "),
            recovery.map_or_else(
                || "NOT within the budget".to_owned(),
                |d| format!("in {d:.1?}")
            )
        );
        records.push(record);
        if recovery.is_none() {
            findings.push(Finding {
                check: "not-recovered".into(),
                step: step.number,
                detail: format!(
                    "not serving from every member {} s after the last heal; status: {:?}",
                    options.recovery_budget.as_secs(),
                    h.status(CLUSTER).await.ok()
                ),
            });
            break;
        }
        let wiped: BTreeSet<String> = step
            .faults()
            .filter_map(|f| f.wipes())
            .map(|n| format!("{CLUSTER}-{n}"))
            .collect();
        let now = h.identity().await?;
        findings.extend(check_identity(&identity, &now, &wiped, step.number));
        identity = now;
        tokio::time::sleep(options.settle).await;
    }

    // The end: clients stopped, a last write for the watcher to reach, the
    // final reads.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let mut log = workload.stop().await;
    let mut etcd = h.etcd().await?;
    let last = etcd.put(format!("{PREFIX}end"), "end", None).await?;
    let last_revision = u64::try_from(last.header().map_or(0, |h| h.revision()))?;
    log.committed.push(last_revision);
    let (streams, caught_up) = watcher.finish(last_revision, Duration::from_secs(60)).await;
    let read_from = clock.now();
    let finals: BTreeMap<String, String> = etcd
        .get(PREFIX, Some(GetOptions::new().with_prefix()))
        .await?
        .kvs()
        .iter()
        .map(|kv| {
            (
                String::from_utf8_lossy(kv.key()).into_owned(),
                String::from_utf8_lossy(kv.value()).into_owned(),
            )
        })
        .collect();
    let read_to = clock.now();

    let acknowledged_writes = log
        .operations
        .iter()
        .filter(|o| !o.is_indeterminate() && !matches!(o.call, linearizability::Call::Get { .. }))
        .count();
    let acknowledged_reads = log
        .operations
        .iter()
        .filter(|o| !o.is_indeterminate() && matches!(o.call, linearizability::Call::Get { .. }))
        .count();
    let keys = log
        .operations
        .iter()
        .map(|o| o.key())
        .collect::<BTreeSet<_>>()
        .len();
    let history = check_history(log.operations, &finals, read_from, read_to);
    findings.extend(history.findings);
    findings.extend(check_watch(&streams, &log.committed, caught_up));
    findings.extend(check_hashkv(h, last_revision, 0).await);
    let sampled = monitor.stop().await;
    for twice in sampled.twice {
        findings.push(Finding {
            check: "member-twice".into(),
            step: 0,
            detail: twice,
        });
    }
    if sampled.seen.len() < options.members {
        findings.push(Finding {
            check: "member-twice".into(),
            step: 0,
            detail: format!(
                "the process monitor saw only {:?} of {} members running: it cannot vouch for the rest",
                sampled.seen, options.members
            ),
        });
    }

    Ok(Report {
        seed: options.seed,
        started_at,
        took_seconds: started.elapsed().as_secs(),
        cluster: ClusterShape {
            members: options.members,
            storage_class: options.storage_class.clone(),
            etcd_version,
        },
        planned_steps: schedule.len(),
        stopped_by_time_limit,
        steps: records,
        operations: OperationsSummary {
            checked: history.checked,
            acknowledged_writes,
            acknowledged_reads,
            indeterminate_writes: log.indeterminate_writes,
            failed_reads: log.failed_reads,
            keys,
            watch_events: streams.iter().map(|s| s.revisions.len()).sum(),
            watch_streams: streams.len(),
            check_ms: u64::try_from(history.took.as_millis()).unwrap_or(u64::MAX),
        },
        findings,
        load_average: (load_at_start, load_average()),
    })
}

/// The 1-minute load average now.
fn load_average() -> f64 {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(0.0)
}
