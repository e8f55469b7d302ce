//! Fills a cluster to a database size with incompressible values, then
//! pushes etcd's raft log past the fill, so that a new member can only catch
//! up from a snapshot of the database, as in a cluster that has run for a
//! while (right after a fill, the leader still holds every fill entry in its
//! log and would replay them instead).

use std::time::Duration;

use etcd_client::{Client, PutOptions};
use futures::future::try_join_all;

use test_kit::TestResult;

/// Size of each fill value.
pub const VALUE_BYTES: usize = 1 << 20;
/// Fill puts in flight at once.
const PARALLEL_PUTS: usize = 4;
/// etcd's `--snapshot-count` (its default, which the bench's clusters keep).
const SNAPSHOT_COUNT: usize = 10_000;
/// Entries etcd keeps in its raft log behind a snapshot for slow followers
/// (`SnapshotCatchUpEntries`).
const CATCH_UP_ENTRIES: usize = 5_000;
/// Small writes after a fill. The last snapshot is at most `SNAPSHOT_COUNT`
/// entries behind the head, and the log is compacted to `CATCH_UP_ENTRIES`
/// behind it, so this many entries past the fill leave none of it in the log.
pub const LOG_ENTRIES: usize = SNAPSHOT_COUNT + CATCH_UP_ENTRIES + 500;
/// Concurrent writers of the small writes.
const LOG_WRITERS: usize = 32;
/// Attempts of one put before the fill gives up (a loaded 2-core machine
/// may time out a 1 MiB put now and then).
const ATTEMPTS: usize = 3;

/// Writes fill keys, continuing where it stopped (a cluster can be grown
/// from one size to the next).
#[derive(Default)]
pub struct Filler {
    next_key: usize,
}

impl Filler {
    /// Puts 1 MiB random values until the database reported by `client`'s
    /// member is at least `target_bytes`; then the small writes. Returns the
    /// database size.
    pub async fn fill_to(&mut self, client: &Client, target_bytes: i64) -> TestResult<i64> {
        loop {
            let db_size = client.clone().status().await?.db_size();
            if db_size >= target_bytes {
                push_log_past_fill(client).await?;
                return Ok(client.clone().status().await?.db_size());
            }
            let first = self.next_key;
            self.next_key += PARALLEL_PUTS;
            try_join_all((first..first + PARALLEL_PUTS).map(|i| {
                let client = client.clone();
                async move { put(client, format!("/bench/fill/{i:07}"), random_value(i)).await }
            }))
            .await?;
        }
    }
}

async fn push_log_past_fill(client: &Client) -> TestResult {
    let per_writer = LOG_ENTRIES.div_ceil(LOG_WRITERS);
    try_join_all((0..LOG_WRITERS).map(|w| {
        let client = client.clone();
        async move {
            for i in 0..per_writer {
                put(
                    client.clone(),
                    format!("/bench/log/{w:02}"),
                    i.to_le_bytes().to_vec(),
                )
                .await?;
            }
            TestResult::Ok(())
        }
    }))
    .await?;
    Ok(())
}

async fn put(mut client: Client, key: String, value: Vec<u8>) -> TestResult {
    let mut attempt = 1;
    loop {
        match client
            .put(key.as_str(), value.as_slice(), None::<PutOptions>)
            .await
        {
            Ok(_) => return Ok(()),
            Err(error) if attempt < ATTEMPTS => {
                eprintln!("put {key}: {error}; again");
                attempt += 1;
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
            Err(error) => return Err(format!("put {key}: {error}").into()),
        }
    }
}

/// `VALUE_BYTES` of xorshift output seeded by `seed`: incompressible, and
/// cheap to make (etcd does not compress values, the disk may).
fn random_value(seed: usize) -> Vec<u8> {
    let mut state = (seed as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut value = Vec::with_capacity(VALUE_BYTES);
    while value.len() < VALUE_BYTES {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        value.extend_from_slice(&state.to_le_bytes());
    }
    value.truncate(VALUE_BYTES);
    value
}
