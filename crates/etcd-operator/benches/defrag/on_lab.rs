//! The operator's side: one 3-member `EtcdCluster` on the lab with a volume
//! large enough for the backend quota (`lab-network` volumes are sparse
//! files, so a large one costs only what is written) and defragmentation by
//! fragmentation off, so that nothing starts by itself. Per run: the cluster
//! fragmented, the load started on every member's endpoint, then a round
//! asked for with `schedule: "* * * * *"`; the window runs from the round's
//! start (the first sight of `status.maintenance.defragRound` or its
//! `started`, whichever is earlier) until it is gone and `lastDefrag` names
//! the round's last member; then the schedule is removed.

use std::time::{Duration, Instant};

use etcd_operator::api::identity::cluster_selector;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde_json::{Value, json};
use test_kit::TestResult;
use test_kit::e2e::{Harness, cluster_spec_with};
use test_kit::figures::round3;
use test_kit::poll::wait_for_every;

use crate::fragment::{db_sizes, fragment};
use crate::lab_cluster::{delete_cluster, ready_endpoints};
use crate::load::{self, PacedWriter};
use crate::runs::{Runs, run_figures, summary_line};
use crate::{HOLD, MEMBERS, QUOTA_BACKEND_BYTES, STORAGE_SIZE, WARM_UP};

/// The cluster's name.
const NAME: &str = "defrag";
/// How often status is read during a round.
const POLL: Duration = Duration::from_millis(100);
/// A round not seen starting and ending within this failed (the schedule
/// fires at the next minute).
const ROUND_TIMEOUT: Duration = Duration::from_secs(600);

/// `runs` runs on a database of `db_mib` MiB.
pub async fn measure(h: &Harness, runs: usize, db_mib: u64) -> TestResult<Value> {
    let spec = cluster_spec_with(
        i32::try_from(MEMBERS)?,
        "lab-network",
        json!({
            "storage": { "storageClassName": "lab-network", "size": STORAGE_SIZE },
            "etcd": { "quotaBackendBytes": QUOTA_BACKEND_BYTES },
            "maintenance": { "defrag": { "fragmentedPercent": 0 } },
        }),
    );
    h.create_available(NAME, spec, Duration::from_secs(300))
        .await?;
    let mut done = Runs::default();
    let mut error = None;
    for run in 0..runs {
        match one_run(h, run, db_mib).await {
            Ok(figures) => done.push(figures),
            Err(e) => {
                error = Some(format!("operator, run {run}: {e}"));
                break;
            }
        }
    }
    if let Err(e) = delete_cluster(h, NAME).await {
        eprintln!("{NAME}: not cleaned up: {e}");
    }
    Ok(done.into_json(error))
}

async fn one_run(h: &Harness, run: usize, db_mib: u64) -> TestResult<Value> {
    let selector = cluster_selector(NAME);
    // Status may say Available before every member Pod reports Ready.
    wait_for_every(
        "every member Pod Ready",
        Duration::from_secs(120),
        Duration::from_millis(200),
        || async { Ok(ready_endpoints(&h.pods, &selector).await?.len() == MEMBERS) },
    )
    .await?;
    let endpoints: Vec<String> = ready_endpoints(&h.pods, &selector)
        .await?
        .into_iter()
        .collect();
    let fragmented = fragment(&endpoints, db_mib).await?;

    let client = load::client(&endpoints).await?;
    let writer = PacedWriter::start(client, &format!("/defrag/load/{run}/"));
    tokio::time::sleep(WARM_UP).await;
    let before = db_sizes(&endpoints).await?;
    let last_before = last_defrag(h).await?;
    h.patch_spec(
        NAME,
        json!({ "maintenance": { "defrag": { "schedule": "* * * * *" } } }),
    )
    .await?;
    let patched = Instant::now();
    let round = watch_round(h, patched, last_before).await;
    h.patch_spec(
        NAME,
        json!({ "maintenance": { "defrag": { "schedule": null } } }),
    )
    .await?;
    let round = round?;
    tokio::time::sleep(HOLD).await;
    let record = writer.stop().await?;
    let lost = record.lost(endpoints.clone()).await?;
    let after = db_sizes(&endpoints).await?;
    // The round may have started up to one poll before it was seen.
    let from = round
        .seen_started
        .checked_sub(POLL)
        .unwrap_or(round.seen_started);
    let seconds = round
        .seen_ended
        .duration_since(round.seen_started)
        .as_secs_f64();
    let mut figures = run_figures(
        record.window_figures(from, round.seen_ended),
        seconds,
        &before,
        &after,
        lost,
    );
    figures["fragmented"] = fragmented;
    figures["waited_for_schedule_s"] = json!(round3(
        round.seen_started.duration_since(patched).as_secs_f64()
    ));
    figures["order"] = json!(round.order);
    eprintln!(
        "{}",
        summary_line(
            &format!(
                "operator, run {run}: round of {seconds:.1} s ({:?})",
                round.order
            ),
            &figures
        )
    );
    Ok(figures)
}

/// A round as the bench saw it.
struct Round {
    seen_started: Instant,
    seen_ended: Instant,
    /// Each member, with the seconds from the round's start at which it
    /// was first seen done.
    order: Vec<(String, f64)>,
}

/// Polls status from `patched` until a round has started and ended.
async fn watch_round(
    h: &Harness,
    patched: Instant,
    last_before: Option<etcd_operator::api::LastDefrag>,
) -> TestResult<Round> {
    let mut started: Option<Instant> = None;
    let mut order: Vec<(String, f64)> = Vec::new();
    loop {
        let maintenance = h.status(NAME).await?.maintenance.unwrap_or_default();
        let now = Instant::now();
        let since = |start: Option<Instant>| {
            start.map_or(0.0, |s| round3(now.duration_since(s).as_secs_f64()))
        };
        if let Some(round) = &maintenance.defrag_round {
            let start = *started.get_or_insert_with(|| earliest(now, &round.started));
            for member in &round.defragmented {
                if !order.iter().any(|(m, _)| m == member) {
                    order.push((member.clone(), since(Some(start))));
                }
            }
        } else if let Some(start) = started
            && let Some(last) = &maintenance.last_defrag
            && Some(last) != last_before.as_ref()
        {
            if !order.iter().any(|(m, _)| *m == last.member) {
                order.push((last.member.clone(), since(Some(start))));
            }
            return Ok(Round {
                seen_started: start,
                seen_ended: now,
                order,
            });
        }
        if patched.elapsed() > ROUND_TIMEOUT {
            return Err(format!(
                "no round started and ended within {ROUND_TIMEOUT:?} of the schedule \
                 (seen done: {order:?}; maintenance status {maintenance:?})"
            )
            .into());
        }
        tokio::time::sleep(POLL).await;
    }
}

/// The earlier of `seen` and the round's start as status gives it (whole
/// seconds, rounded down), as an `Instant`: a round's first member may be
/// done before its status is first read.
fn earliest(seen: Instant, started: &Time) -> Instant {
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or_default())
        .unwrap_or_default();
    let ago_ms = u64::try_from(now_ms - started.0.as_millisecond()).unwrap_or_default();
    let from_status = Instant::now()
        .checked_sub(Duration::from_millis(ago_ms))
        .unwrap_or(seen);
    seen.min(from_status)
}

async fn last_defrag(h: &Harness) -> TestResult<Option<etcd_operator::api::LastDefrag>> {
    Ok(h.status(NAME)
        .await?
        .maintenance
        .and_then(|m| m.last_defrag))
}
