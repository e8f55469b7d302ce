//! Checks of one watch stream: revisions in order, and none missed.
//!
//! etcd delivers the events of a watch in revision order, without skipping
//! any revision that changed the watched range, from the start revision on.
//! Several events may share a revision (one transaction changing several keys
//! of the range), so equal consecutive revisions are fine. A stream may end
//! early: by a compaction error (the next revision it needed was compacted
//! away) or by a broken connection. Revisions after its last event are then
//! not required; revisions it skipped between two events still are.

use std::collections::BTreeSet;
use std::fmt;

/// How a watch stream ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "snake_case"))]
pub enum WatchEnd {
    /// The watcher was still receiving when the test ended and had caught
    /// up: every committed revision from the start on must have arrived.
    CaughtUp,
    /// The stream broke (connection lost, server error other than
    /// compaction): revisions after its last event are not required.
    Interrupted,
    /// The stream was cancelled with a compaction error: revisions after its
    /// last event are not required.
    Compacted {
        /// The compaction revision reported by the error.
        compact_revision: u64,
    },
}

/// What one watcher saw.
#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct WatchStream {
    /// The revision the watch was created from. `None`: unknown, in which
    /// case nothing before the first event is required.
    pub start_revision: Option<u64>,
    /// The revision of each event, in delivery order.
    pub revisions: Vec<u64>,
    /// How the stream ended.
    pub end: WatchEnd,
}

/// A problem found in a [`WatchStream`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WatchViolation {
    /// An event's revision is lower than the one delivered before it.
    WentBackwards {
        /// Position of the event in [`WatchStream::revisions`].
        position: usize,
        /// The revision delivered before it.
        previous: u64,
        /// Its revision.
        revision: u64,
    },
    /// An event's revision is below the watch's start revision.
    BeforeStart {
        /// Position of the event in [`WatchStream::revisions`].
        position: usize,
        /// Its revision.
        revision: u64,
    },
    /// A committed revision of the watched range that the stream should have
    /// delivered but did not.
    Missed {
        /// The missing revision.
        revision: u64,
    },
}

impl fmt::Display for WatchViolation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WatchViolation::WentBackwards {
                position,
                previous,
                revision,
            } => write!(
                f,
                "event {position}: revision {revision} after revision {previous} (went backwards)"
            ),
            WatchViolation::BeforeStart { position, revision } => write!(
                f,
                "event {position}: revision {revision} is before the watch's start revision"
            ),
            WatchViolation::Missed { revision } => {
                write!(f, "committed revision {revision} was never delivered")
            }
        }
    }
}

/// Checks `stream` against `committed`: the revisions known to have changed
/// the watched range (any order; it may be incomplete, so revisions the
/// stream saw that are not in it are not reported). Returns ordering
/// problems in stream order, then missed revisions in increasing order.
pub fn check_watch_stream(stream: &WatchStream, committed: &[u64]) -> Vec<WatchViolation> {
    let mut violations = Vec::new();
    for (position, pair) in stream.revisions.windows(2).enumerate() {
        if pair[1] < pair[0] {
            violations.push(WatchViolation::WentBackwards {
                position: position + 1,
                previous: pair[0],
                revision: pair[1],
            });
        }
    }
    if let Some(start) = stream.start_revision {
        for (position, &revision) in stream.revisions.iter().enumerate() {
            if revision < start {
                violations.push(WatchViolation::BeforeStart { position, revision });
            }
        }
    }
    let seen: BTreeSet<u64> = stream.revisions.iter().copied().collect();
    let from = stream
        .start_revision
        .or_else(|| stream.revisions.first().copied());
    let through = match stream.end {
        WatchEnd::CaughtUp => Some(u64::MAX),
        WatchEnd::Interrupted | WatchEnd::Compacted { .. } => seen.last().copied(),
    };
    if let (Some(from), Some(through)) = (from, through) {
        let required: BTreeSet<u64> = committed
            .iter()
            .copied()
            .filter(|r| (from..=through).contains(r))
            .collect();
        violations.extend(
            required
                .difference(&seen)
                .map(|&revision| WatchViolation::Missed { revision }),
        );
    }
    violations
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stream(start: Option<u64>, revisions: &[u64], end: WatchEnd) -> WatchStream {
        WatchStream {
            start_revision: start,
            revisions: revisions.to_vec(),
            end,
        }
    }

    #[test]
    fn complete_stream_passes() {
        let s = stream(Some(3), &[3, 5, 5, 8], WatchEnd::CaughtUp);
        assert_eq!(check_watch_stream(&s, &[1, 2, 3, 5, 8]), vec![]);
    }

    #[test]
    fn reports_going_backwards() {
        let s = stream(None, &[4, 6, 5, 7], WatchEnd::Interrupted);
        assert_eq!(
            check_watch_stream(&s, &[4, 5, 6, 7]),
            vec![WatchViolation::WentBackwards {
                position: 2,
                previous: 6,
                revision: 5
            }]
        );
    }

    #[test]
    fn reports_gaps_between_events_whatever_the_ending() {
        for end in [
            WatchEnd::CaughtUp,
            WatchEnd::Interrupted,
            WatchEnd::Compacted {
                compact_revision: 9,
            },
        ] {
            let s = stream(Some(2), &[2, 4], end);
            let violations = check_watch_stream(&s, &[2, 3, 4]);
            assert_eq!(
                violations,
                vec![WatchViolation::Missed { revision: 3 }],
                "{end:?}"
            );
        }
    }

    #[test]
    fn missing_tail_is_excused_only_when_the_stream_ended_early() {
        let committed = [2, 3, 4, 5];
        let caught_up = stream(Some(2), &[2, 3], WatchEnd::CaughtUp);
        assert_eq!(
            check_watch_stream(&caught_up, &committed),
            vec![
                WatchViolation::Missed { revision: 4 },
                WatchViolation::Missed { revision: 5 }
            ]
        );
        let compacted = stream(
            Some(2),
            &[2, 3],
            WatchEnd::Compacted {
                compact_revision: 5,
            },
        );
        assert_eq!(check_watch_stream(&compacted, &committed), vec![]);
        let interrupted = stream(Some(2), &[2, 3], WatchEnd::Interrupted);
        assert_eq!(check_watch_stream(&interrupted, &committed), vec![]);
    }

    #[test]
    fn missing_head_is_reported_when_the_start_is_known() {
        let s = stream(Some(1), &[3], WatchEnd::Interrupted);
        assert_eq!(
            check_watch_stream(&s, &[1, 2, 3]),
            vec![
                WatchViolation::Missed { revision: 1 },
                WatchViolation::Missed { revision: 2 }
            ]
        );
        let unknown_start = stream(None, &[3], WatchEnd::Interrupted);
        assert_eq!(check_watch_stream(&unknown_start, &[1, 2, 3]), vec![]);
    }

    #[test]
    fn reports_events_before_the_start_and_ignores_unknown_revisions() {
        let s = stream(Some(5), &[4, 5, 6], WatchEnd::CaughtUp);
        assert_eq!(
            check_watch_stream(&s, &[5]),
            vec![WatchViolation::BeforeStart {
                position: 0,
                revision: 4
            }]
        );
        assert_eq!(
            WatchViolation::Missed { revision: 7 }.to_string(),
            "committed revision 7 was never delivered"
        );
    }
}
