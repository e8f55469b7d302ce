//! Filling the cluster to the bench's database size with 1 MiB values:
//! every other value random bytes (which zstd cannot shrink: the worst case
//! for compression, as in clusters storing encrypted or compressed blobs),
//! the others text records shaped like stored Kubernetes objects (which it
//! can). Compression then matters for half of the data, and the stored
//! size shows by how much.

use std::time::{Duration, Instant};

use etcd_client::Client;
use serde_json::{Value, json};

use test_kit::figures::{mib, round3};

use crate::figures::BenchResult;

/// Bytes of each value.
pub const VALUE_BYTES: usize = 1024 * 1024;
/// Puts in flight while filling.
const CONCURRENCY: usize = 4;

/// Writes `size_mib` values of [`VALUE_BYTES`] under `fill/`, then reports
/// the database size the members show.
pub async fn fill(client: &Client, endpoints: &[String], size_mib: u64) -> BenchResult<Value> {
    let started = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for worker in 0..CONCURRENCY as u64 {
        let mut client = client.clone();
        tasks.spawn(async move {
            let mut i = worker;
            while i < size_mib {
                let value = if i % 2 == 0 {
                    random_value()?
                } else {
                    record_value(i)
                };
                client.put(format!("fill/{i:06}"), value, None).await?;
                i += CONCURRENCY as u64;
            }
            BenchResult::Ok(())
        });
    }
    while let Some(done) = tasks.join_next().await {
        done??;
    }
    let fill_s = started.elapsed().as_secs_f64();
    let db_sizes = settled_db_sizes(endpoints).await?;
    Ok(json!({
        "target_mib": size_mib,
        "keys": size_mib,
        "value_bytes": VALUE_BYTES,
        "values": "every other value random bytes, the others text records (compressible)",
        "fill_s": round3(fill_s),
        "db_size_mib_per_member": db_sizes,
    }))
}

/// The members' database sizes (MiB) once every member has applied the
/// fill and its backend has committed: the same revision everywhere and
/// the same sizes twice in a row, half a second apart (at most 60 s).
async fn settled_db_sizes(endpoints: &[String]) -> BenchResult<Vec<f64>> {
    let mut members = Vec::new();
    for endpoint in endpoints {
        members.push(Client::connect([endpoint], None).await?);
    }
    let mut previous = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let mut sizes = Vec::new();
        let mut revisions = Vec::new();
        for member in &mut members {
            let status = member.status().await?;
            sizes.push(round3(mib(status.db_size().max(0) as u64)));
            revisions.push(status.header().map_or(0, |h| h.revision()));
        }
        let applied = revisions.windows(2).all(|w| w[0] == w[1]);
        if (applied && sizes == previous) || Instant::now() > deadline {
            return Ok(sizes);
        }
        previous = sizes;
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

fn random_value() -> BenchResult<Vec<u8>> {
    let mut value = vec![0u8; VALUE_BYTES];
    getrandom::fill(&mut value).map_err(|e| format!("random bytes: {e}"))?;
    Ok(value)
}

/// Text records like stored objects: repeated field names, varying names,
/// versions and a short random-looking token per record.
fn record_value(i: u64) -> Vec<u8> {
    let mut value = Vec::with_capacity(VALUE_BYTES + 256);
    let mut n: u64 = i.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    while value.len() < VALUE_BYTES {
        n = n.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
        let record = format!(
            "{{\"kind\":\"ConfigMap\",\"metadata\":{{\"name\":\"app-{i}-{}\",\"namespace\":\"tenant-{}\",\"resourceVersion\":\"{}\",\"uid\":\"{:016x}\"}},\"data\":{{\"mode\":\"replicated\",\"replicas\":\"{}\"}}}}\n",
            n % 100_000,
            n % 37,
            n >> 40,
            n,
            n % 7
        );
        value.extend_from_slice(record.as_bytes());
    }
    value.truncate(VALUE_BYTES);
    value
}
