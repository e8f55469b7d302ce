//! What a running watcher reports: the chain it writes, how far everything
//! is durable, the gaps seen. Pure; the controller turns it into status and
//! into the `BackupReady` condition.

use chrono::{DateTime, Duration, Utc};

use super::chain::ChainGap;
use super::segment::SegmentMetadata;
use crate::api::IncrementalBackupStatus;
use crate::backup::TakenBackup;
use crate::backup::kube_time::to_kube;
use crate::backup::schedule::Freshness;

/// How many intervals the newest durable point may age before
/// `BackupReady` turns false.
pub const STALE_INTERVALS: i32 = 3;

/// The state of one watcher, updated as it goes.
#[derive(Debug, Clone, Default)]
pub struct IncrementalProgress {
    /// Base name of the full backup the chain follows.
    pub base: Option<String>,
    /// Revision of that full backup.
    pub base_revision: Option<i64>,
    /// Segments in the current chain.
    pub segments: u64,
    /// The newest durable segment of the current chain.
    pub last_segment: Option<SegmentMetadata>,
    /// Every write up to this revision is durable (full backup, segments,
    /// or an idle watch confirmed by etcd's progress).
    pub durable_revision: Option<i64>,
    /// When everything the watch had delivered was last durable.
    pub durable_at: Option<DateTime<Utc>>,
    /// Gaps seen (counting those recorded before this watcher started).
    pub gaps: u64,
    /// The last gap and when it was seen.
    pub last_gap: Option<(ChainGap, DateTime<Utc>)>,
    /// The last failure; cleared by the next durable point.
    pub last_error: Option<String>,
    /// The last full backup this watcher took itself (after a gap, or
    /// because none existed), for the schedule's status and retention.
    pub last_full: Option<TakenBackup>,
}

impl IncrementalProgress {
    /// Writes acknowledged since this long could be lost right now.
    pub fn loss_window(&self, now: DateTime<Utc>) -> Option<Duration> {
        self.durable_at.map(|at| (now - at).max(Duration::zero()))
    }

    /// Fresh while the newest durable point is at most
    /// [`STALE_INTERVALS`] intervals old.
    pub fn freshness(&self, interval: Duration, now: DateTime<Utc>) -> Freshness {
        let limit = interval * STALE_INTERVALS;
        let why = self
            .last_error
            .as_deref()
            .map(|e| format!(": {e}"))
            .unwrap_or_default();
        match self.loss_window(now) {
            None => Freshness::Stale(format!("incremental backup has not started yet{why}")),
            Some(window) if window <= limit => Freshness::Fresh(format!(
                "incremental backup durable up to {}s ago",
                window.num_seconds()
            )),
            Some(window) => Freshness::Stale(format!(
                "incremental backup durable only up to {}s ago, more than {STALE_INTERVALS} intervals ({}s){why}",
                window.num_seconds(),
                limit.num_seconds()
            )),
        }
    }

    /// The status block at `now`.
    pub fn status(&self, now: DateTime<Utc>) -> IncrementalBackupStatus {
        IncrementalBackupStatus {
            base: self.base.clone(),
            base_revision: self.base_revision,
            last_segment_time: self.last_segment.as_ref().map(|s| to_kube(s.closed_at)),
            last_segment_revision: self.last_segment.as_ref().map(|s| s.last_revision),
            segments: i64::try_from(self.segments).unwrap_or(i64::MAX),
            durable_revision: self.durable_revision,
            loss_window_seconds: self.loss_window(now).map(|w| w.num_seconds()),
            recovery_point: self.durable_at.map(to_kube),
            gaps: i64::try_from(self.gaps).unwrap_or(i64::MAX),
            last_gap: self.last_gap.as_ref().map(|(gap, _)| gap.to_string()),
            last_gap_time: self.last_gap.as_ref().map(|(_, at)| to_kube(*at)),
            last_error: self.last_error.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stale_after_three_intervals_without_a_durable_point() {
        let t0 = Utc::now();
        let interval = Duration::seconds(20);
        let mut progress = IncrementalProgress::default();
        assert!(matches!(
            progress.freshness(interval, t0),
            Freshness::Stale(_)
        ));
        progress.durable_at = Some(t0);
        assert_eq!(
            progress.loss_window(t0 + Duration::seconds(7)),
            Some(Duration::seconds(7))
        );
        assert!(matches!(
            progress.freshness(interval, t0 + Duration::seconds(60)),
            Freshness::Fresh(_)
        ));
        progress.last_error = Some("store down".into());
        let Freshness::Stale(stale) = progress.freshness(interval, t0 + Duration::seconds(61))
        else {
            panic!("stale");
        };
        assert!(
            stale.contains("61s ago") && stale.contains("store down"),
            "{stale}"
        );
        let status = progress.status(t0 + Duration::seconds(61));
        assert_eq!(status.loss_window_seconds, Some(61));
        assert_eq!(status.last_error.as_deref(), Some("store down"));
    }
}
