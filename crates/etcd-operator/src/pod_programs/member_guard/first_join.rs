//! What the guard watches while a new member joins: the pure part.
//!
//! A new member joins from the leader's snapshot, and etcd races with
//! itself there. As soon as the new member hears from the leader it
//! proposes its name and client URLs ("publish"); when that proposal is
//! committed and applied on the leader before the leader takes the snapshot
//! it sends, the new member receives its own name inside the snapshot and
//! never applies the entry its request waits for. etcd then waits out its
//! request timeout (5 s plus two election timeouts: 7 s by default) before
//! it proposes again and starts serving. On the lab this happened in about
//! half of the joins, with etcd alone as with the operator.
//!
//! The guard, when etcd starts on an empty data dir to join a cluster that
//! exists (`--initial-cluster-state=existing`), stays etcd's parent and
//! reads etcd's metrics page (`--listen-metrics-urls`, plain HTTP) every
//! [`POLL_INTERVAL`]. When etcd has applied a snapshot it received and its
//! request is still pending [`STUCK_AFTER`] later, the guard restarts etcd
//! on the data it now holds ([`super::supervise`]): etcd proposes again at
//! once, after the snapshot, and serves. A publish that follows its
//! snapshot is applied within milliseconds of it, so a request pending that
//! long after the snapshot is the race. A restart of a member that has never
//! served costs no data: its data is the leader's snapshot, which etcd has
//! written and synced before it applies it, and the guard checks the volume
//! again before the new start.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};

/// How often the guard reads etcd's metrics while a member joins.
pub const POLL_INTERVAL: Duration = Duration::from_millis(100);

/// How long after its snapshot is applied a member's publish request may
/// stay pending before the guard restarts etcd. A publish that follows the
/// snapshot comes in the leader's next append, one round trip after the
/// member reports the snapshot applied: on the lab's bench it was applied
/// 5 ms after the snapshot. A restart that this window makes needlessly
/// costs the member about 0.6 s and no data.
pub const STUCK_AFTER: Duration = Duration::from_millis(200);

/// Restarts per container start; after them etcd's own retry is left.
pub const MAX_RESTARTS: u32 = 2;

/// How long the guard watches a join at most (a large database takes a
/// while to arrive); after it, etcd runs unwatched.
pub const WATCH_LIMIT: Duration = Duration::from_secs(30 * 60);

/// Where etcd's metrics page is, when etcd's command line is a join of a
/// new member to a cluster that exists and names an HTTP metrics URL; `None`
/// otherwise (nothing to watch). An unspecified listen address (`0.0.0.0`,
/// `::`) is read on loopback.
pub fn join_metrics_address(etcd_args: &[String]) -> Option<SocketAddr> {
    if flag_value(etcd_args, "--initial-cluster-state") != Some("existing") {
        return None;
    }
    let urls = flag_value(etcd_args, "--listen-metrics-urls")?;
    urls.split(',').find_map(http_socket_address)
}

/// The value of `--name=value` or `--name value`; the last one wins, as in
/// etcd's own flag parsing.
pub(super) fn flag_value<'a>(args: &'a [String], name: &str) -> Option<&'a str> {
    let mut found = None;
    let mut iter = args.iter().peekable();
    while let Some(arg) = iter.next() {
        if let Some(value) = arg
            .strip_prefix(name)
            .and_then(|rest| rest.strip_prefix('='))
        {
            found = Some(value);
        } else if arg == name {
            found = iter.next().map(String::as_str);
        }
    }
    found
}

fn http_socket_address(url: &str) -> Option<SocketAddr> {
    let authority = url.trim().strip_prefix("http://")?;
    let authority = authority.split('/').next()?;
    let address: SocketAddr = authority.parse().ok()?;
    if address.ip().is_unspecified() {
        let loopback = match address.ip() {
            IpAddr::V4(_) => IpAddr::V4(Ipv4Addr::LOCALHOST),
            IpAddr::V6(_) => IpAddr::V6(std::net::Ipv6Addr::LOCALHOST),
        };
        Some(SocketAddr::new(loopback, address.port()))
    } else {
        Some(address)
    }
}

/// What one read of the metrics page says about the join.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct JoinSample {
    /// Snapshots received whole (`etcd_network_snapshot_receive_success`,
    /// summed over the senders).
    pub snapshots_received: u64,
    /// A snapshot is being applied
    /// (`etcd_server_snapshot_apply_in_progress_total`).
    pub applying_snapshot: bool,
    /// The raft index applied (`etcd_server_proposals_applied_total`).
    pub applied_index: u64,
    /// Requests of this member waiting to be applied
    /// (`etcd_server_proposals_pending`): while it has not started, its
    /// publish request.
    pub proposals_pending: u64,
    /// The member knows a leader (`etcd_server_has_leader`).
    pub has_leader: bool,
}

impl JoinSample {
    /// Reads the figures from a Prometheus text page; `None` when the page
    /// lacks one of them (not etcd's page, or an etcd that has not set
    /// them up yet). The snapshot counter is absent until a first snapshot
    /// arrives, and counts as 0.
    pub fn parse(page: &str) -> Option<JoinSample> {
        let mut sample = JoinSample::default();
        let (mut applying, mut applied, mut pending, mut leader) = (None, None, None, None);
        for line in page.lines().filter(|line| !line.starts_with('#')) {
            let Some((series, value)) = line.rsplit_once(' ') else {
                continue;
            };
            let Ok(value) = value.parse::<f64>() else {
                continue;
            };
            let name = series.split('{').next().unwrap_or(series);
            match name {
                "etcd_network_snapshot_receive_success" => {
                    sample.snapshots_received += as_count(value);
                }
                "etcd_server_snapshot_apply_in_progress_total" => applying = Some(value > 0.0),
                "etcd_server_proposals_applied_total" => applied = Some(as_count(value)),
                "etcd_server_proposals_pending" => pending = Some(as_count(value)),
                "etcd_server_has_leader" => leader = Some(value > 0.0),
                _ => {}
            }
        }
        sample.applying_snapshot = applying?;
        sample.applied_index = applied?;
        sample.proposals_pending = pending?;
        sample.has_leader = leader?;
        Some(sample)
    }

    /// etcd has applied a snapshot it received and still waits for a
    /// request of its own: the publish race, if it lasts.
    fn waits_after_its_snapshot(&self) -> bool {
        self.snapshots_received > 0
            && !self.applying_snapshot
            && self.applied_index > 0
            && self.proposals_pending > 0
    }

    /// etcd has data, a leader, and nothing pending: it has published.
    fn has_published(&self) -> bool {
        self.has_leader && self.applied_index > 0 && self.proposals_pending == 0
    }
}

fn as_count(value: f64) -> u64 {
    if value.is_finite() && value > 0.0 {
        // Counters and gauges of etcd are whole numbers far below 2^53.
        value as u64
    } else {
        0
    }
}

/// What the guard does after a read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JoinStep {
    /// Read again after [`POLL_INTERVAL`].
    Watch,
    /// The race: restart etcd on the data it holds.
    Restart,
    /// The member has published: stop watching.
    Joined,
}

/// The state of one etcd process's join, read after read.
#[derive(Debug, Clone, Default)]
pub struct JoinWatch {
    /// Since when the member has waited after its snapshot.
    waiting_since: Option<Instant>,
}

impl JoinWatch {
    /// One read (`None`: the page could not be read or parsed) at `now`.
    pub fn observe(&mut self, sample: Option<&JoinSample>, now: Instant) -> JoinStep {
        let Some(sample) = sample else {
            self.waiting_since = None;
            return JoinStep::Watch;
        };
        if sample.has_published() {
            return JoinStep::Joined;
        }
        if !sample.waits_after_its_snapshot() {
            self.waiting_since = None;
            return JoinStep::Watch;
        }
        let since = *self.waiting_since.get_or_insert(now);
        if now.duration_since(since) >= STUCK_AFTER {
            JoinStep::Restart
        } else {
            JoinStep::Watch
        }
    }
}

#[cfg(test)]
mod tests;
