//! Replaying a chain of segments on a freshly restored etcd, so that it
//! ends with the same keys, values and revision numbers as the source had.
//!
//! The restored etcd (a single member started on the data dir that
//! `etcdutl snapshot restore` wrote from the chain's full backup) holds
//! revision `R'`, at or a little after the full backup's revision. Every
//! later revision of the chain is applied as **one** transaction holding
//! that revision's puts and deletes, so it gets the same revision number
//! as in the source; after each transaction the server's revision must be
//! exactly the event's, else something else writes to this etcd (or it
//! does not hold the base's data) and the replay stops with that error.
//!
//! **Leases.** The watch reports the lease a key was written with but not
//! the lease grants themselves. A replayed put keeps its lease when the
//! restored etcd has that lease (granted before the full backup: the
//! snapshot holds it, as `etcdutl snapshot restore` keeps leases), so that
//! such keys expire as they would have; otherwise the key is restored
//! without a lease ([`ReplayOutcome::puts_without_lease`] counts them).
//! While the replay runs, every lease of the restored etcd is kept alive,
//! so that no expiry deletes keys between two replayed revisions.
//!
//! **Transaction size.** A revision holds whatever one transaction of the
//! source changed; a revoked lease deletes all its keys in one revision.
//! The restored etcd must accept transactions that large: run it with
//! `--max-txn-ops` (default 128) and `--max-request-bytes` (default
//! 1.5 MiB) at least as large as the source's, and larger when leases
//! carried many keys. A refusal names the revision and its size.

use std::collections::HashMap;
use std::time::Duration;

use etcd_client::{Client, GetOptions, PutOptions, Txn, TxnOp};

use super::chain::SegmentChain;
use super::format::{EventKind, SegmentEvent};
use super::segment::load_segment;
use crate::backup::{BackupError, BackupStore};

/// What a replay did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReplayOutcome {
    /// The restored etcd's revision before the replay.
    pub start_revision: i64,
    /// Its revision afterwards: the last revision applied, or the start
    /// revision when there was nothing to apply.
    pub revision: i64,
    /// Revisions applied (one transaction each).
    pub revisions_applied: u64,
    /// Events applied (puts and deletes).
    pub events_applied: u64,
    /// Segments downloaded and verified.
    pub segments_read: usize,
    /// Puts whose lease the restored etcd does not have, written without.
    pub puts_without_lease: u64,
}

/// Applies the chain's revisions after the restored etcd's current one, up
/// to `up_to_revision` (inclusive; the chain's end when `None`). Each
/// segment is downloaded and checked (stored SHA-256, encoding, revisions)
/// before any of its events is applied.
///
/// Errors: [`BackupError::Replay`] when the wanted revision is out of
/// reach (before the restored one, beyond the chain's end or its gap),
/// when revisions are missing between the restored etcd and the chain, or
/// when a transaction does not land on the event's revision;
/// [`BackupError::Corrupt`] when a segment fails its checks (nothing of it
/// was applied); [`BackupError::Etcd`] when etcd fails a request.
pub async fn replay_segments(
    store: &BackupStore,
    chain: &SegmentChain,
    up_to_revision: Option<i64>,
    client: &mut Client,
) -> Result<ReplayOutcome, BackupError> {
    let start = current_revision(client).await?;
    let mut outcome = ReplayOutcome {
        start_revision: start,
        revision: start,
        ..ReplayOutcome::default()
    };
    let target = up_to_revision.unwrap_or(chain.last_revision);
    let refuse = |reason: String| BackupError::Replay {
        revision: start,
        reason,
    };
    if start < chain.base_revision {
        return Err(refuse(format!(
            "the restored etcd is older than the full backup {} (revision {}): was it restored from it?",
            chain.base, chain.base_revision
        )));
    }
    if target > chain.last_revision {
        let why = match &chain.gap {
            Some(gap) => format!("; {gap}"),
            None => String::new(),
        };
        return Err(refuse(format!(
            "revision {target} is beyond what the chain after {} holds (up to revision {}{why})",
            chain.base, chain.last_revision
        )));
    }
    if target < start {
        return Err(refuse(format!(
            "the restored etcd already holds revision {start}, after the wanted revision {target}"
        )));
    }
    if target == start {
        return Ok(outcome);
    }

    let leases = LeaseKeeper::start(client).await?;
    let result = apply_chain(store, chain, target, client, &leases, &mut outcome).await;
    leases.stop();
    result.map(|()| outcome)
}

async fn apply_chain(
    store: &BackupStore,
    chain: &SegmentChain,
    target: i64,
    client: &mut Client,
    leases: &LeaseKeeper,
    outcome: &mut ReplayOutcome,
) -> Result<(), BackupError> {
    for segment in &chain.segments {
        if segment.last_revision <= outcome.revision {
            continue;
        }
        if segment.first_revision > target {
            break;
        }
        let events = load_segment(store, segment).await?;
        outcome.segments_read += 1;
        for revision in events.chunk_by(|a, b| a.revision == b.revision) {
            let number = revision[0].revision;
            if number <= outcome.revision {
                continue;
            }
            if number > target {
                return Ok(());
            }
            if number != outcome.revision + 1 {
                return Err(BackupError::Replay {
                    revision: outcome.revision,
                    reason: format!(
                        "the chain's next revision is {number}: revisions {}..={} are missing",
                        outcome.revision + 1,
                        number - 1
                    ),
                });
            }
            apply_revision(client, number, revision, leases, outcome).await?;
        }
    }
    Ok(())
}

/// Applies one revision's events as one transaction and checks that it
/// landed on `number`.
async fn apply_revision(
    client: &mut Client,
    number: i64,
    events: &[SegmentEvent],
    leases: &LeaseKeeper,
    outcome: &mut ReplayOutcome,
) -> Result<(), BackupError> {
    let mut operations = Vec::with_capacity(events.len());
    for event in events {
        operations.push(match event.kind {
            EventKind::Put => {
                let options = if event.lease != 0 && leases.has(event.lease) {
                    Some(PutOptions::new().with_lease(event.lease))
                } else {
                    if event.lease != 0 {
                        outcome.puts_without_lease += 1;
                    }
                    None
                };
                TxnOp::put(event.key.clone(), event.value.clone(), options)
            }
            EventKind::Delete => TxnOp::delete(event.key.clone(), None),
        });
    }
    let response = client
        .txn(Txn::new().and_then(operations))
        .await
        .map_err(|e| BackupError::Replay {
            revision: outcome.revision,
            reason: format!(
                "etcd refused revision {number} ({} events in one transaction): {e}",
                events.len()
            ),
        })?;
    let landed = response.header().map_or(0, |h| h.revision());
    if landed != number {
        return Err(BackupError::Replay {
            revision: landed,
            reason: format!(
                "applying revision {number} left the restored etcd at revision {landed}: another client writes to it, or it does not hold the full backup's data (the replay needs it to itself)"
            ),
        });
    }
    outcome.revision = number;
    outcome.revisions_applied += 1;
    outcome.events_applied += events.len() as u64;
    Ok(())
}

/// The server's current revision, from a linearizable count-only read.
async fn current_revision(client: &mut Client) -> Result<i64, BackupError> {
    let response = client
        .get(vec![0u8], Some(GetOptions::new().with_count_only()))
        .await
        .map_err(|e| BackupError::Etcd {
            endpoint: "restored etcd".to_string(),
            message: format!("read the current revision: {e}"),
        })?;
    response
        .header()
        .map(|h| h.revision())
        .ok_or_else(|| BackupError::Etcd {
            endpoint: "restored etcd".to_string(),
            message: "a read answered without header".to_string(),
        })
}

/// Keeps every lease of a restored etcd alive while a restore step works
/// on it (nobody else can reach it to keep them alive, and an expiry would
/// delete keys that belong to the restore).
pub(crate) struct LeaseKeeper {
    ids: HashMap<i64, i64>,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl LeaseKeeper {
    /// Lists the leases and keeps each alive until [`LeaseKeeper::stop`].
    pub(crate) async fn start(client: &mut Client) -> Result<Self, BackupError> {
        let etcd = |what: &str, e: etcd_client::Error| BackupError::Etcd {
            endpoint: "restored etcd".to_string(),
            message: format!("{what}: {e}"),
        };
        let listed = client
            .leases()
            .await
            .map_err(|e| etcd("list the leases", e))?;
        let mut ids = HashMap::new();
        for lease in listed.leases() {
            let ttl = client
                .lease_time_to_live(lease.id(), None)
                .await
                .map_err(|e| etcd("read a lease", e))?;
            if ttl.ttl() > 0 {
                ids.insert(lease.id(), ttl.granted_ttl());
            }
        }
        let task = (!ids.is_empty()).then(|| {
            let client = client.clone();
            let leases: Vec<i64> = ids.keys().copied().collect();
            let shortest = ids.values().copied().min().unwrap_or(3).max(1);
            let every = Duration::from_millis(u64::try_from(shortest * 1000 / 3).unwrap_or(1000))
                .max(Duration::from_millis(300));
            tokio::spawn(keep_alive(client, leases, every))
        });
        Ok(Self { ids, task })
    }

    fn has(&self, lease: i64) -> bool {
        self.ids.contains_key(&lease)
    }

    /// Stops the keep-alives.
    pub(crate) fn stop(mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

impl Drop for LeaseKeeper {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

async fn keep_alive(mut client: Client, leases: Vec<i64>, every: Duration) {
    let mut keepers = Vec::with_capacity(leases.len());
    for id in leases {
        match client.lease_keep_alive(id).await {
            Ok(keeper) => keepers.push(keeper),
            Err(error) => tracing::warn!(lease = id, "cannot keep a lease alive: {error}"),
        }
    }
    loop {
        for (keeper, stream) in &mut keepers {
            if keeper.keep_alive().await.is_ok() {
                let _ = stream.message().await;
            }
        }
        tokio::time::sleep(every).await;
    }
}
