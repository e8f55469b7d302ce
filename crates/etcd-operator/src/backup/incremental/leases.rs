//! The watcher's side of leases: the watch reports the lease ID a key was
//! written with, not the lease's grant. The first put of a chain that uses
//! a lease makes the watcher ask etcd for the TTL the lease was granted
//! with (`LeaseTimeToLive`), and the segment records it before the put
//! (see [`super::format`]), so that a replay can grant the lease again.
//!
//! A chain's leases are remembered while the watcher follows it, up to
//! [`KNOWN_LEASES_MAX`]; past that, and after a restart, a lease is asked
//! for and recorded again, which a replay takes as the same lease.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use etcd_client::Client;
use futures::{StreamExt, TryStreamExt};

use crate::backup::segment_format::{EventKind, SegmentEvent, SegmentLease};

/// Longest wait for etcd's answers about the leases of one watch response.
pub const LEASE_QUERY_TIMEOUT: Duration = Duration::from_secs(10);
/// Leases of one chain remembered as recorded, at most; beyond, the set is
/// emptied (bounded memory; a lease recorded again costs one request and
/// 17 bytes).
pub const KNOWN_LEASES_MAX: usize = 100_000;
/// Questions about leases in flight at once.
const CONCURRENT_QUERIES: usize = 16;

/// The leases recorded in a chain's durable segments.
#[derive(Debug, Clone, Default)]
pub struct KnownLeases {
    ids: HashSet<i64>,
}

impl KnownLeases {
    /// Whether `lease` is recorded in the chain.
    pub fn contains(&self, lease: i64) -> bool {
        self.ids.contains(&lease)
    }

    /// Remembers the leases a durable segment recorded.
    pub fn extend(&mut self, recorded: impl IntoIterator<Item = i64>) {
        self.ids.extend(recorded);
        if self.ids.len() > KNOWN_LEASES_MAX {
            self.ids.clear();
        }
    }
}

/// The leases that puts among `events` use and that `known` says are not
/// recorded yet, each once, in order of first use.
pub fn new_leases(events: &[SegmentEvent], known: impl Fn(i64) -> bool) -> Vec<i64> {
    let mut seen = HashSet::new();
    events
        .iter()
        .filter(|e| e.kind == EventKind::Put && e.lease != 0)
        .map(|e| e.lease)
        .filter(|&lease| !known(lease) && seen.insert(lease))
        .collect()
}

/// Asks etcd for the TTL each of `leases` was granted with (a few
/// questions at once); a lease etcd no longer has gets no TTL.
pub async fn granted_ttls(
    client: &Client,
    leases: Vec<i64>,
) -> Result<HashMap<i64, SegmentLease>, String> {
    if leases.is_empty() {
        return Ok(HashMap::new());
    }
    let count = leases.len();
    let asked = futures::stream::iter(leases)
        .map(|id| granted_ttl(client.clone(), id))
        .buffer_unordered(CONCURRENT_QUERIES)
        .try_collect::<Vec<_>>();
    match tokio::time::timeout(LEASE_QUERY_TIMEOUT, asked).await {
        Ok(Ok(learned)) => Ok(learned.into_iter().map(|l| (l.id, l)).collect()),
        Ok(Err(error)) => Err(error),
        Err(_) => Err(format!(
            "etcd did not say within {LEASE_QUERY_TIMEOUT:?} how long {count} leases were granted for"
        )),
    }
}

async fn granted_ttl(mut client: Client, id: i64) -> Result<SegmentLease, String> {
    let granted_ttl = match client.lease_time_to_live(id, None).await {
        // etcd answers TTL -1 for a lease it does not have.
        Ok(answer) => {
            (answer.ttl() >= 0 && answer.granted_ttl() > 0).then_some(answer.granted_ttl())
        }
        Err(etcd_client::Error::GRpcStatus(status)) if status.code() == tonic::Code::NotFound => {
            None
        }
        Err(error) => return Err(format!("read the TTL of lease {id:x}: {error}")),
    };
    Ok(SegmentLease { id, granted_ttl })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(kind: EventKind, lease: i64) -> SegmentEvent {
        SegmentEvent {
            revision: 1,
            kind,
            key: b"k".to_vec(),
            value: Vec::new(),
            lease,
        }
    }

    #[test]
    fn only_puts_with_unrecorded_leases_ask_once_each() {
        let events = [
            event(EventKind::Put, 0),
            event(EventKind::Put, 7),
            event(EventKind::Put, 9),
            event(EventKind::Put, 7),
            event(EventKind::Delete, 11),
            event(EventKind::Put, 8),
        ];
        assert_eq!(new_leases(&events, |lease| lease == 9), [7, 8]);
    }

    #[test]
    fn known_leases_are_bounded() {
        let mut known = KnownLeases::default();
        known.extend([1, 2]);
        assert!(known.contains(1) && !known.contains(3));
        known.extend(3..=(KNOWN_LEASES_MAX as i64));
        assert!(known.contains(1), "{KNOWN_LEASES_MAX} are kept");
        known.extend([-1]);
        assert!(!known.contains(1) && !known.contains(-1), "then forgotten");
    }
}
