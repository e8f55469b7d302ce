//! A fragmented database, made the same way on both sides: values of
//! [`VALUE_BYTES`] written under [`FILL_PREFIX`] until a member's database
//! file reaches the asked size, every other key deleted, and the history
//! compacted, so that
//! about half of each member's database file is free pages a
//! defragmentation gives back. What a previous run left under the prefix
//! is deleted first, so a cluster can be fragmented again.

use etcd_client::{Client, CompactionOptions, DeleteOptions};
use futures::{StreamExt, TryStreamExt};
use serde_json::{Value, json};
use test_kit::TestResult;
use test_kit::e2e::etcd_at;
use test_kit::figures::{mib, round3};
use tokio::time::{Duration, Instant};

use crate::etcd_cluster::status_at;

/// Where the fill goes.
pub const FILL_PREFIX: &str = "/defrag/fill/";
/// The size of one value of the fill.
pub const VALUE_BYTES: usize = 512 * 1024;
/// Puts and deletes of the fill in flight at once.
const IN_FLIGHT: usize = 4;
/// Puts of the fill between two looks at the database's size.
const BATCH: usize = 16;
/// A key written while the members settle after the compaction.
const SETTLE_KEY: &str = "/defrag/settle";
/// How far apart the members' space in use may be once all have compacted.
const IN_USE_SPREAD: f64 = 0.1;
/// How long the members may take to apply the compaction.
const COMPACTION_TIMEOUT: Duration = Duration::from_secs(120);

/// Fills the cluster at `endpoints` until a member's database file holds
/// `db_mib` MiB, deletes half of the values and compacts; returns the
/// members' database sizes after.
pub async fn fragment(endpoints: &[String], db_mib: u64) -> TestResult<Value> {
    let started = Instant::now();
    let mut client = etcd_at(endpoints.to_vec()).await?;
    client
        .delete(FILL_PREFIX, Some(DeleteOptions::new().with_prefix()))
        .await?;
    let target = i64::try_from(db_mib * 1024 * 1024)?;
    let value = vec![b'f'; VALUE_BYTES];
    let mut keys = 0;
    while largest_db(endpoints).await? < target {
        futures::stream::iter(keys..keys + BATCH)
            .map(|i| {
                let (mut client, value) = (client.clone(), value.clone());
                async move { client.put(fill_key(i), value, None).await.map(|_| ()) }
            })
            .buffer_unordered(IN_FLIGHT)
            .try_collect::<Vec<()>>()
            .await?;
        keys += BATCH;
    }
    let filled = started.elapsed();
    futures::stream::iter((0..keys).step_by(2))
        .map(|i| {
            let mut client = client.clone();
            async move { client.delete(fill_key(i), None).await.map(|_| ()) }
        })
        .buffer_unordered(IN_FLIGHT)
        .try_collect::<Vec<()>>()
        .await?;
    compact(client.clone()).await?;
    let sizes = settled_sizes(client, endpoints).await?;
    eprintln!(
        "fragmented: {keys} values of {} KiB written in {:.1} s, half deleted, compacted: {}",
        VALUE_BYTES / 1024,
        filled.as_secs_f64(),
        sizes
    );
    Ok(json!({
        "values_written": keys,
        "fill_s": round3(filled.as_secs_f64()),
        "sizes": sizes,
    }))
}

fn fill_key(i: usize) -> String {
    format!("{FILL_PREFIX}{i:06}")
}

/// Compacts the history up to the newest revision, waiting until the
/// member that answers has applied it.
async fn compact(mut client: Client) -> TestResult {
    let revision = client
        .get(FILL_PREFIX, None)
        .await?
        .header()
        .map(|h| h.revision())
        .ok_or("no revision in the answer")?;
    client
        .compact(revision, Some(CompactionOptions::new().with_physical()))
        .await?;
    Ok(())
}

/// The members' sizes once every member has applied the compaction: the
/// space each has in use within [`IN_USE_SPREAD`] of the least. A member
/// counts the pages a compaction freed only after its next write, so a
/// small key is written between two looks.
async fn settled_sizes(mut client: Client, endpoints: &[String]) -> TestResult<Value> {
    let deadline = Instant::now() + COMPACTION_TIMEOUT;
    loop {
        client.put(SETTLE_KEY, "settle", None).await?;
        tokio::time::sleep(Duration::from_secs(1)).await;
        let sizes = db_sizes(endpoints).await?;
        let in_use: Vec<f64> = sizes["members"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|m| m["in_use_mib"].as_f64())
            .collect();
        let least = in_use.iter().copied().reduce(f64::min).unwrap_or_default();
        let most = in_use.iter().copied().reduce(f64::max).unwrap_or_default();
        if most <= least * (1.0 + IN_USE_SPREAD) || Instant::now() > deadline {
            return Ok(sizes);
        }
    }
}

/// The largest database file of the members, in bytes.
async fn largest_db(endpoints: &[String]) -> TestResult<i64> {
    let mut largest = 0;
    for endpoint in endpoints {
        largest = largest.max(status_at(endpoint).await?.db_size());
    }
    Ok(largest)
}

/// Each member's database file and the part of it in use, and their sums
/// (MiB); the fragmentation is the free part of the sum.
pub async fn db_sizes(endpoints: &[String]) -> TestResult<Value> {
    let mut members = Vec::new();
    let (mut size, mut in_use) = (0i64, 0i64);
    for endpoint in endpoints {
        let status = status_at(endpoint).await?;
        size += status.db_size();
        in_use += status.raft_used_db_size();
        members.push(json!({
            "endpoint": endpoint,
            "db_size_mib": round3(mib(status.db_size())),
            "in_use_mib": round3(mib(status.raft_used_db_size())),
        }));
    }
    let fragmented = if size > 0 {
        Some(round3(100.0 * (size - in_use) as f64 / size as f64))
    } else {
        None
    };
    Ok(json!({
        "db_size_mib": round3(mib(size)),
        "in_use_mib": round3(mib(in_use)),
        "fragmented_percent": fragmented,
        "members": members,
    }))
}
