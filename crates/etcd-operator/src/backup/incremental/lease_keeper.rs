//! Keeping the leases of a restored etcd alive while a restore step works
//! on it: nobody else can reach it to keep them alive, and an expiry would
//! delete keys that belong to the restore. Leases granted during the step
//! (a replay granting a lease again) are kept alive from then on too.

use std::collections::HashMap;
use std::time::Duration;

use etcd_client::{Client, LeaseKeepAliveStream, LeaseKeeper as EtcdLeaseKeeper};
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::backup::BackupError;

/// Shortest time between two rounds of keep-alives.
const MIN_REFRESH: Duration = Duration::from_millis(300);
/// Longest time between two rounds of keep-alives.
const MAX_REFRESH: Duration = Duration::from_secs(60);

/// Keeps leases of a restored etcd alive until stopped or dropped.
pub(crate) struct LeaseKeeper {
    /// Each lease kept alive, with the TTL it was granted with.
    ids: HashMap<i64, i64>,
    added: mpsc::UnboundedSender<(i64, i64)>,
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
        let (added, receiver) = mpsc::unbounded_channel();
        let initial = ids.iter().map(|(&id, &ttl)| (id, ttl)).collect();
        let task = tokio::spawn(keep_alive(client.clone(), initial, receiver));
        Ok(Self {
            ids,
            added,
            task: Some(task),
        })
    }

    /// Whether `lease` is kept alive (the etcd has it).
    pub(crate) fn has(&self, lease: i64) -> bool {
        self.ids.contains_key(&lease)
    }

    /// The TTLs the kept leases were granted with.
    pub(crate) fn granted_ttls(&self) -> impl Iterator<Item = i64> + '_ {
        self.ids.values().copied()
    }

    /// Keeps `lease`, just granted with `granted_ttl` seconds, alive too.
    pub(crate) fn add(&mut self, lease: i64, granted_ttl: i64) {
        if self.ids.insert(lease, granted_ttl).is_none()
            && self.added.send((lease, granted_ttl)).is_err()
        {
            tracing::warn!(
                lease,
                "cannot keep a lease alive: the keep-alive task ended"
            );
        }
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

/// Sends a keep-alive for every lease about a third of the shortest TTL
/// apart; a lease added is first kept alive within a third of its own TTL.
async fn keep_alive(
    mut client: Client,
    initial: Vec<(i64, i64)>,
    mut added: mpsc::UnboundedReceiver<(i64, i64)>,
) {
    let mut kept = Vec::with_capacity(initial.len());
    let mut shortest = i64::MAX;
    for (id, ttl) in initial {
        keep(&mut client, &mut kept, id).await;
        shortest = shortest.min(ttl);
    }
    let mut next = Instant::now() + refresh_every(shortest);
    loop {
        tokio::select! {
            () = tokio::time::sleep_until(next) => {
                for (keeper, stream) in &mut kept {
                    if keeper.keep_alive().await.is_ok() {
                        let _ = stream.message().await;
                    }
                }
                next = Instant::now() + refresh_every(shortest);
            }
            lease = added.recv() => {
                let Some((id, ttl)) = lease else {
                    return;
                };
                keep(&mut client, &mut kept, id).await;
                shortest = shortest.min(ttl);
                next = next.min(Instant::now() + refresh_every(ttl));
            }
        }
    }
}

async fn keep(
    client: &mut Client,
    kept: &mut Vec<(EtcdLeaseKeeper, LeaseKeepAliveStream)>,
    id: i64,
) {
    match client.lease_keep_alive(id).await {
        Ok(keeper) => kept.push(keeper),
        Err(error) => tracing::warn!(lease = id, "cannot keep a lease alive: {error}"),
    }
}

/// A third of `ttl` seconds, within [`MIN_REFRESH`] and [`MAX_REFRESH`].
fn refresh_every(ttl: i64) -> Duration {
    let millis = u64::try_from(ttl.saturating_mul(1000) / 3).unwrap_or(0);
    Duration::from_millis(millis).clamp(MIN_REFRESH, MAX_REFRESH)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keep_alives_come_a_third_of_the_shortest_ttl_apart() {
        assert_eq!(refresh_every(6), Duration::from_secs(2));
        assert_eq!(refresh_every(0), MIN_REFRESH);
        assert_eq!(refresh_every(-1), MIN_REFRESH);
        assert_eq!(refresh_every(600), MAX_REFRESH);
        assert_eq!(refresh_every(i64::MAX), MAX_REFRESH, "no lease yet");
    }
}
