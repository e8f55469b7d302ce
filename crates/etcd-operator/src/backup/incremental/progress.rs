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

/// How many intervals the loss window may reach before `BackupReady`
/// turns false.
pub const STALE_INTERVALS: i32 = 3;

/// How many intervals an answer of etcd that nothing waits stays current:
/// the watcher asks every interval, so a missed answer or two is not yet
/// a doubt.
pub const ANSWER_INTERVALS: i32 = 2;

/// How long etcd's answer that nothing waits stays current for a watcher
/// that asks every `interval`.
pub fn answer_within(interval: std::time::Duration) -> Duration {
    Duration::from_std(interval)
        .ok()
        .and_then(|interval| interval.checked_mul(ANSWER_INTERVALS))
        .unwrap_or(Duration::MAX)
}

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
    /// The recovery point: every write up to this revision is durable (full
    /// backup, segments, or an idle watch confirmed by etcd's progress).
    pub durable_revision: Option<i64>,
    /// When every write the watch had delivered was last durable: a segment
    /// stored, or etcd's answer that nothing was written after
    /// `durable_revision`.
    pub durable_at: Option<DateTime<Utc>>,
    /// When the watch delivered the oldest write not yet durable; `None`
    /// when every write delivered is durable.
    pub pending_since: Option<DateTime<Utc>>,
    /// How long `durable_at` stays current without a new answer: the
    /// watcher sets [`ANSWER_INTERVALS`] intervals. Zero counts only the
    /// moment of the answer.
    pub answer_within: Duration,
    /// Gaps seen (counting those recorded before this watcher started).
    pub gaps: u64,
    /// The last gap and when it was seen.
    pub last_gap: Option<(ChainGap, DateTime<Utc>)>,
    /// The last failure; cleared by the next durable point.
    pub last_error: Option<String>,
    /// The last full backup this watcher took itself (after a gap, or
    /// because none existed), for the schedule's status and retention.
    pub last_full: Option<TakenBackup>,
    /// The chain the watcher extended before `base`, while it restores
    /// further than the current chain does yet: `durable_revision` counts
    /// its end, so retention keeps it ([`Self::chains_in_use`]).
    pub superseded: Option<SupersededChain>,
}

/// A chain the watcher no longer extends that still holds writes the
/// current chain does not hold yet (the watcher moved to a newer full
/// backup, which it extends from that backup's own revision).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SupersededChain {
    /// Base name of the chain's full backup.
    pub base: String,
    /// The last revision the chain restores.
    pub last_revision: i64,
}

/// Why writes could be lost at a moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exposure {
    /// Every write is durable, as etcd answered recently.
    None,
    /// Writes the watch delivered wait to be stored, the oldest since
    /// this long.
    Pending(Duration),
    /// etcd has not answered for this long: writes made since could be
    /// missing.
    Unconfirmed(Duration),
}

impl Exposure {
    /// The loss window: how long ago the oldest write that could be lost
    /// was made; zero when none.
    pub fn window(self) -> Duration {
        match self {
            Self::None => Duration::zero(),
            Self::Pending(window) | Self::Unconfirmed(window) => window,
        }
    }
}

impl IncrementalProgress {
    /// The full backups (base names) whose chains the watcher needs: the
    /// one it extends and, until the current chain reaches its end, the one
    /// it extended before. Retention deletes neither: `durable_revision`
    /// counts on both.
    pub fn chains_in_use(&self) -> Vec<String> {
        self.base
            .iter()
            .cloned()
            .chain(self.superseded.iter().map(|s| s.base.clone()))
            .collect()
    }

    /// Every write up to `revision` is durable in the current chain (a
    /// segment stored, or etcd's answer that nothing came after it). The
    /// superseded chain stops being needed once `revision` reaches its
    /// end; until then the recovery point stays at that end.
    pub fn chain_durable_to(&mut self, revision: i64) {
        if self
            .superseded
            .as_ref()
            .is_some_and(|s| revision >= s.last_revision)
        {
            self.superseded = None;
        }
        let held = self
            .superseded
            .as_ref()
            .map_or(revision, |s| s.last_revision);
        self.durable_revision = Some(revision.max(held));
    }

    /// What could be lost at `now`; `None` before the watcher has a
    /// durable point.
    pub fn exposure(&self, now: DateTime<Utc>) -> Option<Exposure> {
        let durable_at = self.durable_at?;
        if let Some(since) = self.pending_since {
            return Some(Exposure::Pending((now - since).max(Duration::zero())));
        }
        let unanswered = (now - durable_at).max(Duration::zero());
        Some(if unanswered <= self.answer_within {
            Exposure::None
        } else {
            Exposure::Unconfirmed(unanswered)
        })
    }

    /// Writes acknowledged since this long could be lost right now: the
    /// age of the oldest write not yet durable, zero when etcd answered
    /// recently that every write is.
    pub fn loss_window(&self, now: DateTime<Utc>) -> Option<Duration> {
        self.exposure(now).map(Exposure::window)
    }

    /// Every write acknowledged before this time is durable: when the watch
    /// delivered the oldest write that is not, else when etcd last answered
    /// that none waits.
    pub fn recovery_point(&self) -> Option<DateTime<Utc>> {
        self.durable_at?;
        self.pending_since.or(self.durable_at)
    }

    /// Fresh while the loss window is at most [`STALE_INTERVALS`]
    /// intervals.
    pub fn freshness(&self, interval: Duration, now: DateTime<Utc>) -> Freshness {
        let limit = interval * STALE_INTERVALS;
        let why = self
            .last_error
            .as_deref()
            .map(|e| format!(": {e}"))
            .unwrap_or_default();
        let revision = self.durable_revision.unwrap_or_default();
        let Some(exposure) = self.exposure(now) else {
            return Freshness::Stale(format!("incremental backup has not started yet{why}"));
        };
        let window = exposure.window();
        if window <= limit {
            return Freshness::Fresh(format!(
                "incremental backup durable up to revision {revision}, loss window {}s",
                window.num_seconds()
            ));
        }
        let what = match exposure {
            Exposure::Pending(_) => "the oldest write not yet stored is",
            _ => "etcd has not confirmed for",
        };
        Freshness::Stale(format!(
            "incremental backup durable only up to revision {revision}; {what} {}s, more than {STALE_INTERVALS} intervals ({}s){why}",
            window.num_seconds(),
            limit.num_seconds()
        ))
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
            recovery_point: self.recovery_point().map(to_kube),
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

    fn seconds(s: i64) -> Duration {
        Duration::seconds(s)
    }

    /// A watcher with a 20 s interval, everything durable at `at`.
    fn durable(at: DateTime<Utc>) -> IncrementalProgress {
        IncrementalProgress {
            durable_revision: Some(42),
            durable_at: Some(at),
            answer_within: seconds(20) * ANSWER_INTERVALS,
            ..IncrementalProgress::default()
        }
    }

    #[test]
    fn not_started_is_stale_with_the_reason() {
        let progress = IncrementalProgress {
            last_error: Some("store down".into()),
            ..IncrementalProgress::default()
        };
        let now = Utc::now();
        assert_eq!(progress.loss_window(now), None);
        let Freshness::Stale(stale) = progress.freshness(seconds(20), now) else {
            panic!("stale");
        };
        assert!(
            stale.contains("not started") && stale.contains("store down"),
            "{stale}"
        );
    }

    #[test]
    fn a_quiet_cluster_answered_recently_loses_nothing() {
        let t0 = Utc::now();
        let progress = durable(t0);
        for after in [0, 1, 19, 39, 40] {
            let now = t0 + seconds(after);
            assert_eq!(progress.exposure(now), Some(Exposure::None), "{after}s");
            assert_eq!(progress.loss_window(now), Some(Duration::zero()));
            assert!(matches!(
                progress.freshness(seconds(20), now),
                Freshness::Fresh(_)
            ));
        }
        assert_eq!(
            progress.status(t0 + seconds(30)).loss_window_seconds,
            Some(0)
        );
        assert_eq!(progress.status(t0).durable_revision, Some(42));
        assert_eq!(progress.recovery_point(), Some(t0));
    }

    #[test]
    fn a_pending_write_counts_from_when_it_was_delivered() {
        let t0 = Utc::now();
        let progress = IncrementalProgress {
            pending_since: Some(t0 + seconds(15)),
            ..durable(t0)
        };
        let now = t0 + seconds(18);
        assert_eq!(progress.exposure(now), Some(Exposure::Pending(seconds(3))));
        assert_eq!(progress.status(now).loss_window_seconds, Some(3));
        assert_eq!(progress.recovery_point(), Some(t0 + seconds(15)));
        assert!(matches!(
            progress.freshness(seconds(20), t0 + seconds(75)),
            Freshness::Fresh(_)
        ));
        let Freshness::Stale(stale) = progress.freshness(seconds(20), t0 + seconds(76)) else {
            panic!("stale once the write waits more than 3 intervals");
        };
        assert!(
            stale.contains("revision 42") && stale.contains("not yet stored is 61s"),
            "{stale}"
        );
    }

    #[test]
    fn without_an_answer_the_window_counts_from_the_last_one() {
        let t0 = Utc::now();
        let mut progress = durable(t0);
        let now = t0 + seconds(41);
        assert_eq!(
            progress.exposure(now),
            Some(Exposure::Unconfirmed(seconds(41)))
        );
        assert!(matches!(
            progress.freshness(seconds(20), t0 + seconds(60)),
            Freshness::Fresh(_)
        ));
        progress.last_error = Some("the watch has been silent for 61s".into());
        let Freshness::Stale(stale) = progress.freshness(seconds(20), t0 + seconds(61)) else {
            panic!("stale after 3 intervals without an answer");
        };
        assert!(
            stale.contains("not confirmed for 61s") && stale.contains("silent"),
            "{stale}"
        );
        let status = progress.status(t0 + seconds(61));
        assert_eq!(status.loss_window_seconds, Some(61));
        assert_eq!(
            status.last_error.as_deref(),
            Some("the watch has been silent for 61s")
        );
    }

    #[test]
    fn a_superseded_chain_is_in_use_until_the_current_chain_reaches_its_end() {
        let mut progress = IncrementalProgress {
            base: Some("full-b".into()),
            superseded: Some(SupersededChain {
                base: "full-a".into(),
                last_revision: 120,
            }),
            ..IncrementalProgress::default()
        };
        assert_eq!(progress.chains_in_use(), ["full-b", "full-a"]);
        progress.chain_durable_to(110);
        assert_eq!(
            progress.durable_revision,
            Some(120),
            "the superseded chain still restores up to 120"
        );
        assert_eq!(progress.chains_in_use(), ["full-b", "full-a"]);
        progress.chain_durable_to(120);
        assert_eq!(progress.superseded, None);
        assert_eq!(progress.chains_in_use(), ["full-b"]);
        progress.chain_durable_to(125);
        assert_eq!(progress.durable_revision, Some(125));
        assert!(IncrementalProgress::default().chains_in_use().is_empty());
    }

    #[test]
    fn an_answer_stays_current_for_two_intervals() {
        assert_eq!(
            answer_within(std::time::Duration::from_secs(5)),
            seconds(10)
        );
        assert_eq!(answer_within(std::time::Duration::MAX), Duration::MAX);
    }

    #[test]
    fn without_an_answer_window_only_the_answer_itself_counts() {
        let t0 = Utc::now();
        let progress = IncrementalProgress {
            answer_within: Duration::zero(),
            ..durable(t0)
        };
        assert_eq!(progress.loss_window(t0), Some(Duration::zero()));
        assert_eq!(progress.loss_window(t0 + seconds(7)), Some(seconds(7)));
    }
}
