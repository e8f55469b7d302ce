//! The recovery point under load: a writer issues small puts at a paced
//! rate while the continuous incremental backup writes segments to the S3
//! server. For every acknowledged write, the time from its acknowledgement
//! until the watcher reports its revision durable (the segment holding it
//! has its metadata written, or etcd confirmed that nothing followed a
//! durable revision). The largest such lag is what a restore at the worst
//! moment of the run would have lost. The object-store writes a day at
//! that pace follow from the segments written (two writes each).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use etcd_client::Client;
use etcd_operator::backup::incremental::{IncrementalOptions, fixed_endpoints, spawn};
use etcd_operator::backup::{BackupStore, newest_backup, segment_chain};
use serde_json::{Value, json};
use tokio::sync::Semaphore;

use test_kit::figures::{mib, percentile, round3};

use crate::figures::{BenchResult, median};

/// Bytes of each value written.
const VALUE_BYTES: usize = 100;
/// Puts in flight at most; beyond it the writer waits (and falls behind).
const MAX_IN_FLIGHT: usize = 512;
/// How often the writer issues the puts that are due.
const PACE: Duration = Duration::from_millis(10);
/// Longest wait for the watcher's first durable point (it may first take
/// a full backup of the whole database).
const READY_TIMEOUT: Duration = Duration::from_secs(900);

/// What one run is asked to do.
pub struct Load {
    /// Segment interval of the watcher.
    pub interval: Duration,
    /// How long the writer writes.
    pub duration: Duration,
    /// Puts per second asked of the writer.
    pub writes_per_s: u64,
}

/// Runs the watcher on `store` under the writer's load and reports the
/// durable lag of every write.
pub async fn measure(
    client: &Client,
    endpoints: &[String],
    store: &BackupStore,
    load: &Load,
) -> BenchResult<Value> {
    let mut options = IncrementalOptions::new(crate::snapshot::NAMESPACE, "rpo");
    options.interval = load.interval;
    let started = Instant::now();
    let handle = spawn(store.clone(), fixed_endpoints(endpoints.to_vec()), options);
    let mut progress = handle.subscribe();
    let start_revision = tokio::time::timeout(READY_TIMEOUT, async {
        loop {
            if let Some(revision) = progress.borrow_and_update().durable_revision {
                return Ok(revision);
            }
            if progress.changed().await.is_err() {
                return Err("the watcher ended before following a full backup".to_string());
            }
        }
    })
    .await
    .map_err(|_| format!("the watcher was not following within {READY_TIMEOUT:?}"))??;
    let ready_s = started.elapsed().as_secs_f64();

    // Every rise of the durable revision, with the time it was seen.
    let tracker = tokio::spawn(async move {
        let mut points: Vec<(Instant, i64)> = Vec::new();
        let mut last = start_revision;
        while progress.changed().await.is_ok() {
            let durable = progress.borrow_and_update().durable_revision.unwrap_or(0);
            if durable > last {
                points.push((Instant::now(), durable));
                last = durable;
            }
        }
        points
    });

    let writes = write_paced(client, load).await;
    let (acks, errors, writing_s) = match writes {
        Ok(writes) => writes,
        Err(error) => {
            handle.stop(Duration::from_secs(30)).await;
            return Err(error);
        }
    };
    let last_acked = acks
        .iter()
        .map(|(revision, _)| *revision)
        .max()
        .unwrap_or(0);
    // The last writes become durable with the next segment.
    let deadline = Instant::now() + load.interval * 3 + Duration::from_secs(30);
    while handle.progress().durable_revision.unwrap_or(0) < last_acked && Instant::now() < deadline
    {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let final_progress = handle.progress();
    handle.stop(Duration::from_secs(30)).await;
    let points = tracker.await?;

    let mut lags: Vec<f64> = Vec::with_capacity(acks.len());
    let mut not_durable = 0u64;
    for (revision, acked) in &acks {
        let first = points.partition_point(|(_, durable)| durable < revision);
        match points.get(first) {
            Some((at, _)) => lags.push(at.saturating_duration_since(*acked).as_secs_f64()),
            None => not_durable += 1,
        }
    }
    lags.sort_by(f64::total_cmp);

    let base = newest_backup(store).await?;
    let chain = segment_chain(store, &base).await?;
    let segments: Vec<_> = chain
        .segments
        .iter()
        .filter(|s| s.last_revision > start_revision)
        .collect();
    let stored: u64 = segments.iter().map(|s| s.stored_bytes).sum();
    let encoded: u64 = segments.iter().map(|s| s.encoded_bytes).sum();
    let default_interval = IncrementalOptions::new("", "").interval;
    // Each segment is two object-store writes (the object, then its
    // metadata); an interval without writes makes none.
    let puts_per_day = (2 * segments.len()) as f64 * 86_400.0 / writing_s.max(1e-9);
    Ok(json!({
        "interval_s": load.interval.as_secs_f64(),
        "default_interval": load.interval == default_interval,
        "puts_per_day": puts_per_day.round(),
        "writing_s": round3(writing_s),
        "target_writes_per_s": load.writes_per_s,
        "value_bytes": VALUE_BYTES,
        "writes_acked": acks.len(),
        "write_errors": errors,
        "achieved_writes_per_s": round3(acks.len() as f64 / writing_s.max(1e-9)),
        "watcher_ready_s": round3(ready_s),
        "durable_lag_s": {
            "median": round3(median(&lags)),
            "p99": round3(percentile(&lags, 99.0)),
            "max": round3(lags.last().copied().unwrap_or(0.0)),
        },
        "rpo_s": round3(lags.last().copied().unwrap_or(0.0)),
        "writes_not_durable_at_stop": not_durable,
        "segments": segments.len(),
        "segment_events": segments.iter().map(|s| s.events).sum::<u64>(),
        "segments_stored_mib": round3(mib(stored)),
        "segments_encoded_mib": round3(mib(encoded)),
        "chain_segments": chain.segments.len(),
        "chain_gap": chain.gap.as_ref().map(|g| g.message.clone()),
        "gaps": final_progress.gaps,
        "last_error": final_progress.last_error,
    }))
}

/// Issues `load.writes_per_s` puts per second for `load.duration`, each in
/// its own task (at most [`MAX_IN_FLIGHT`] at once). Returns the revision
/// and acknowledgement time of each acknowledged put, the failed puts and
/// the seconds from the first put to the last acknowledgement.
async fn write_paced(client: &Client, load: &Load) -> BenchResult<(Vec<(i64, Instant)>, u64, f64)> {
    let acks = Arc::new(Mutex::new(Vec::new()));
    let errors = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let in_flight = Arc::new(Semaphore::new(MAX_IN_FLIGHT));
    let value = vec![b'v'; VALUE_BYTES];
    let mut tasks = tokio::task::JoinSet::new();
    let mut ticker = tokio::time::interval(PACE);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let started = Instant::now();
    let mut issued: u64 = 0;
    while started.elapsed() < load.duration {
        ticker.tick().await;
        let due = (started.elapsed().as_secs_f64() * load.writes_per_s as f64) as u64;
        while issued < due {
            let permit = in_flight.clone().acquire_owned().await?;
            let (mut client, value) = (client.clone(), value.clone());
            let (acks, errors) = (acks.clone(), errors.clone());
            tasks.spawn(async move {
                match client.put(format!("rpo/{issued:09}"), value, None).await {
                    Ok(response) => {
                        let revision = response.header().map_or(0, |h| h.revision());
                        if let Ok(mut acks) = acks.lock() {
                            acks.push((revision, Instant::now()));
                        }
                    }
                    Err(_) => {
                        errors.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    }
                }
                drop(permit);
            });
            issued += 1;
        }
        while tasks.try_join_next().is_some() {}
    }
    while tasks.join_next().await.is_some() {}
    let writing_s = started.elapsed().as_secs_f64();
    let acks = std::mem::take(&mut *acks.lock().map_err(|_| "the writer's log is poisoned")?);
    Ok((
        acks,
        errors.load(std::sync::atomic::Ordering::Relaxed),
        writing_s,
    ))
}
