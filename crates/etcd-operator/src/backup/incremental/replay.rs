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
//! **Leases.** A replayed put keeps its lease ID. When the restored etcd
//! has that lease (granted before the full backup: the snapshot holds it,
//! as `etcdutl snapshot restore` keeps leases) the put uses it; otherwise
//! (a lease granted after the full backup) the lease is granted again with
//! the same ID before the first put that uses it, with the TTL the chain
//! recorded for it, or a fallback TTL when the chain does not know it (see
//! [`super::replay_leases`]); [`ReplayOutcome::leases_granted`] counts
//! them. Lease grants take no revision, so the revisions stay the source's.
//! Only a lease etcd refuses to grant leaves its keys without a lease
//! ([`ReplayOutcome::puts_without_lease`]). While the replay runs, every
//! lease of the restored etcd, granted again or not, is kept alive, so
//! that no expiry deletes keys between two replayed revisions. Afterwards
//! each lease runs its whole TTL again from the restore, as leases do
//! after an etcd restart or a change of leader. A lease revoked on the
//! source after the full backup stays, without keys (its keys' deletions
//! are replayed), until its TTL runs out.
//!
//! **Transaction size.** A revision holds whatever one transaction of the
//! source changed; a revoked lease deletes all its keys in one revision.
//! The restored etcd must accept transactions that large: run it with
//! `--max-txn-ops` (default 128) and `--max-request-bytes` (default
//! 1.5 MiB) at least as large as the source's, and larger when leases
//! carried many keys. A refusal names the revision and its size.

use etcd_client::{Client, GetOptions, PutOptions, Txn, TxnOp};

use super::chain::SegmentChain;
pub(crate) use super::lease_keeper::LeaseKeeper;
use super::replay_leases::{PutLease, ReplayLeases};
use super::segment::load_segment_contents;
use crate::backup::segment_format::{EventKind, SegmentEvent};
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
    /// Leases the restored etcd lacked (granted after the full backup),
    /// granted again with their ID before the first put that uses them.
    pub leases_granted: u64,
    /// Of those, the leases whose TTL the chain does not know, granted
    /// with the fallback TTL.
    pub leases_with_fallback_ttl: u64,
    /// Puts whose lease etcd refused to grant again, written without it.
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

    let mut leases = ReplayLeases::start(client).await?;
    let result = apply_chain(store, chain, target, client, &mut leases, &mut outcome).await;
    leases.stop();
    result.map(|()| outcome)
}

async fn apply_chain(
    store: &BackupStore,
    chain: &SegmentChain,
    target: i64,
    client: &mut Client,
    leases: &mut ReplayLeases,
    outcome: &mut ReplayOutcome,
) -> Result<(), BackupError> {
    for segment in &chain.segments {
        if segment.last_revision <= outcome.revision {
            continue;
        }
        if segment.first_revision > target {
            break;
        }
        let contents = load_segment_contents(store, segment).await?;
        outcome.segments_read += 1;
        leases.record(&contents.leases);
        for revision in contents.events.chunk_by(|a, b| a.revision == b.revision) {
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
    leases: &mut ReplayLeases,
    outcome: &mut ReplayOutcome,
) -> Result<(), BackupError> {
    let mut operations = Vec::with_capacity(events.len());
    for event in events {
        operations.push(match event.kind {
            EventKind::Put => {
                let with_lease = event.lease != 0
                    && leased(client, leases, event.lease, number, outcome).await?;
                let options = with_lease.then(|| PutOptions::new().with_lease(event.lease));
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

/// Whether a put of revision `number` can be written with `lease` (the
/// restored etcd has it, or granted it again now); counts what it took.
async fn leased(
    client: &mut Client,
    leases: &mut ReplayLeases,
    lease: i64,
    number: i64,
    outcome: &mut ReplayOutcome,
) -> Result<bool, BackupError> {
    Ok(match leases.lease_for(client, lease, number).await? {
        PutLease::Held => true,
        PutLease::Granted { fallback } => {
            outcome.leases_granted += 1;
            outcome.leases_with_fallback_ttl += u64::from(fallback);
            true
        }
        PutLease::Refused => {
            outcome.puts_without_lease += 1;
            false
        }
    })
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
