//! The leases a replay writes its puts with: the restored etcd's own
//! (granted before the full backup), or the same lease granted again, with
//! the same ID, before the first put that uses it.
//!
//! The TTL of a lease granted again is the one the chain recorded (see
//! [`super::format`]). When the chain does not know it (the lease was gone
//! when the watcher asked, or the segment predates lease records), the
//! lease gets [`fallback_ttl`]: the longest TTL the replay knows of (the
//! restored etcd's leases and those recorded so far), and at least
//! [`FALLBACK_TTL_MIN`] seconds. Such a lease was revoked or expired on
//! the source, and the chain holds the deletions of its keys; a restore at
//! an earlier revision keeps its keys, which then live as long as any
//! lease the cluster is known to use, and at least a minute: time for a
//! client that still holds the lease to reconnect and keep it alive, or
//! for the keys to expire as they would have.

use std::collections::{HashMap, HashSet};

use etcd_client::{Client, LeaseGrantOptions};

use super::lease_keeper::LeaseKeeper;
use crate::backup::BackupError;
use crate::backup::segment_format::SegmentLease;

/// The shortest TTL (seconds) a lease gets when the chain does not know
/// its own.
pub const FALLBACK_TTL_MIN: i64 = 60;

/// The TTL of a lease whose own is unknown, given the TTLs the replay
/// knows of.
pub fn fallback_ttl(known: impl IntoIterator<Item = i64>) -> i64 {
    known.into_iter().fold(FALLBACK_TTL_MIN, i64::max)
}

/// How a put attached to a lease is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PutLease {
    /// With its lease, which the restored etcd has.
    Held,
    /// With its lease, just granted again; `fallback` when with the
    /// fallback TTL.
    Granted {
        /// The chain does not know the lease's TTL.
        fallback: bool,
    },
    /// Without lease: etcd refused to grant it again.
    Refused,
}

/// The leases of a replay: the restored etcd's, those granted again, and
/// what the chain recorded about them.
pub(crate) struct ReplayLeases {
    keeper: LeaseKeeper,
    /// Lease records of the segments read: the granted TTL, if known.
    recorded: HashMap<i64, Option<i64>>,
    /// Leases etcd refused to grant again.
    refused: HashSet<i64>,
    /// The longest TTL of the restored etcd's leases and of those recorded.
    longest_ttl: i64,
}

impl ReplayLeases {
    /// Keeps the restored etcd's leases alive until [`ReplayLeases::stop`].
    pub(crate) async fn start(client: &mut Client) -> Result<Self, BackupError> {
        let keeper = LeaseKeeper::start(client).await?;
        let longest_ttl = keeper.granted_ttls().max().unwrap_or(0);
        Ok(Self {
            keeper,
            recorded: HashMap::new(),
            refused: HashSet::new(),
            longest_ttl,
        })
    }

    /// Takes in the lease records of a segment read; a known TTL is kept
    /// over an unknown one (the same lease recorded again once gone).
    pub(crate) fn record(&mut self, leases: &[SegmentLease]) {
        for lease in leases {
            let ttl = self.recorded.entry(lease.id).or_insert(None);
            if let Some(granted) = lease.granted_ttl {
                *ttl = Some(granted);
                self.longest_ttl = self.longest_ttl.max(granted);
            }
        }
    }

    /// Makes sure the restored etcd has `lease` before a put of revision
    /// `revision` is written with it, granting it again if need be; says
    /// whether the put has its lease.
    pub(crate) async fn lease_for(
        &mut self,
        client: &mut Client,
        lease: i64,
        revision: i64,
    ) -> Result<PutLease, BackupError> {
        if self.keeper.has(lease) {
            return Ok(PutLease::Held);
        }
        if self.refused.contains(&lease) {
            return Ok(PutLease::Refused);
        }
        let recorded = self.recorded.get(&lease).copied().flatten();
        let ttl = recorded.unwrap_or_else(|| fallback_ttl([self.longest_ttl]));
        let options = LeaseGrantOptions::new().with_id(lease);
        match client.lease_grant(ttl, Some(options)).await {
            Ok(granted) => {
                self.keeper.add(lease, granted.ttl());
                Ok(PutLease::Granted {
                    fallback: recorded.is_none(),
                })
            }
            Err(etcd_client::Error::GRpcStatus(status)) if is_refusal(status.code()) => {
                tracing::warn!(
                    lease,
                    revision,
                    "etcd refused to grant the lease again ({}): its keys are restored without it",
                    status.message()
                );
                self.refused.insert(lease);
                Ok(PutLease::Refused)
            }
            Err(error) => Err(BackupError::Etcd {
                endpoint: "restored etcd".to_string(),
                message: format!(
                    "grant lease {lease:x} ({ttl} s) again for revision {revision}: {error}"
                ),
            }),
        }
    }

    /// Stops the keep-alives.
    pub(crate) fn stop(self) {
        self.keeper.stop();
    }
}

/// Whether etcd answered a grant with a refusal of this lease (rather than
/// failing to answer).
fn is_refusal(code: tonic::Code) -> bool {
    matches!(
        code,
        tonic::Code::InvalidArgument
            | tonic::Code::FailedPrecondition
            | tonic::Code::OutOfRange
            | tonic::Code::AlreadyExists
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unknown_ttl_is_the_longest_known_and_at_least_a_minute() {
        assert_eq!(fallback_ttl([]), FALLBACK_TTL_MIN);
        assert_eq!(fallback_ttl([10, 30]), 60);
        assert_eq!(fallback_ttl([10, 600, 90]), 600);
    }
}
