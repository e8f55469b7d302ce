//! The segment being filled: events appended in watch order, each new
//! lease recorded before the first event that uses it, closed on the
//! interval or once it reaches the size limit. Pure: no I/O, no clock.

use std::collections::HashSet;

use chrono::{DateTime, Utc};

use super::segment::PendingSegment;
use crate::backup::segment_format::{
    EncodeError, HEADER_LEN, SegmentEvent, SegmentLease, encode_event, encode_lease, new_buffer,
};

/// Events received but not yet durable.
#[derive(Debug)]
pub struct SegmentBuffer {
    encoded: Vec<u8>,
    first_revision: Option<i64>,
    last_revision: i64,
    events: u64,
    leases: HashSet<i64>,
    opened_at: Option<DateTime<Utc>>,
}

impl Default for SegmentBuffer {
    fn default() -> Self {
        Self::new()
    }
}

impl SegmentBuffer {
    /// An empty buffer.
    pub fn new() -> Self {
        Self {
            encoded: new_buffer(),
            first_revision: None,
            last_revision: 0,
            events: 0,
            leases: HashSet::new(),
            opened_at: None,
        }
    }

    /// Whether no event waits.
    pub fn is_empty(&self) -> bool {
        self.events == 0
    }

    /// Encoded bytes held (header included).
    pub fn len(&self) -> usize {
        self.encoded.len()
    }

    /// When the first event held arrived, if any.
    pub fn opened_at(&self) -> Option<DateTime<Utc>> {
        self.opened_at
    }

    /// Revision of the newest event held, if any.
    pub fn last_revision(&self) -> Option<i64> {
        (!self.is_empty()).then_some(self.last_revision)
    }

    /// Appends an event received at `now`; an event the encoding cannot
    /// hold is refused and leaves the buffer as it was.
    pub fn push(&mut self, event: &SegmentEvent, now: DateTime<Utc>) -> Result<(), EncodeError> {
        encode_event(&mut self.encoded, event)?;
        self.first_revision.get_or_insert(event.revision);
        self.opened_at.get_or_insert(now);
        self.last_revision = event.revision;
        self.events += 1;
        Ok(())
    }

    /// Records a lease; the events that use it are pushed after it. A
    /// lease record alone does not make the buffer non-empty: it is written
    /// only with an event.
    pub fn push_lease(&mut self, lease: &SegmentLease) {
        if self.leases.insert(lease.id) {
            encode_lease(&mut self.encoded, lease);
        }
    }

    /// Whether `lease` is recorded in this segment.
    pub fn has_lease(&self, lease: i64) -> bool {
        self.leases.contains(&lease)
    }

    /// Whether the segment must be closed now for its size: at least
    /// `max_bytes` encoded. Called only between watch responses, so that a
    /// revision is never split across two segments.
    pub fn is_full(&self, max_bytes: usize) -> bool {
        self.encoded.len() >= max_bytes.max(HEADER_LEN + 1)
    }

    /// Closes the segment at `now`, leaving the buffer empty; `None` when
    /// no event waits.
    pub fn take(&mut self, now: DateTime<Utc>) -> Option<PendingSegment> {
        if self.is_empty() {
            return None;
        }
        let taken = std::mem::take(self);
        Some(PendingSegment {
            encoded: taken.encoded,
            first_revision: taken.first_revision.unwrap_or(taken.last_revision),
            last_revision: taken.last_revision,
            events: taken.events,
            leases: taken.leases.into_iter().collect(),
            opened_at: taken.opened_at.unwrap_or(now),
            closed_at: now,
        })
    }

    /// Drops what is held (the watch resumes from the last durable
    /// revision).
    pub fn clear(&mut self) {
        *self = Self::new();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backup::segment_format::{
        EventKind, LEASE_RECORD_LEN, SegmentContents, decode_events, decode_segment,
    };

    fn put(revision: i64, value_len: usize) -> SegmentEvent {
        SegmentEvent {
            revision,
            kind: EventKind::Put,
            key: format!("k{revision}").into_bytes(),
            value: vec![b'v'; value_len],
            lease: 0,
        }
    }

    #[test]
    fn fills_up_and_closes_with_its_range() {
        let t0 = Utc::now();
        let mut buffer = SegmentBuffer::new();
        assert!(buffer.take(t0).is_none());
        assert!(!buffer.is_full(4096));
        buffer.push(&put(11, 2000), t0).expect("push");
        buffer.push(&put(11, 10), t0).expect("push");
        assert!(!buffer.is_full(4096));
        buffer.push(&put(12, 2100), t0).expect("push");
        assert!(buffer.is_full(4096));
        assert_eq!(buffer.last_revision(), Some(12));
        let later = t0 + chrono::Duration::seconds(3);
        let pending = buffer.take(later).expect("segment");
        assert!(buffer.is_empty());
        assert_eq!(buffer.last_revision(), None);
        assert_eq!(pending.first_revision, 11);
        assert_eq!(pending.last_revision, 12);
        assert_eq!(pending.events, 3);
        assert_eq!(pending.opened_at, t0);
        assert_eq!(pending.closed_at, later);
        let events = decode_events(&pending.encoded).expect("decode");
        assert_eq!(events, vec![put(11, 2000), put(11, 10), put(12, 2100)]);
    }

    #[test]
    fn a_lease_is_recorded_once_before_its_events() {
        let t0 = Utc::now();
        let mut buffer = SegmentBuffer::new();
        let lease = SegmentLease {
            id: 42,
            granted_ttl: Some(600),
        };
        let leased = SegmentEvent {
            lease: 42,
            ..put(11, 3)
        };
        buffer.push_lease(&lease);
        assert!(buffer.is_empty(), "a lease record alone is no event");
        assert!(buffer.take(t0).is_none());
        buffer.push(&leased, t0).expect("push");
        buffer.push_lease(&lease);
        assert!(buffer.has_lease(42) && !buffer.has_lease(43));
        let before = buffer.len();
        buffer.push(&put(12, 3), t0).expect("push");
        assert_eq!(buffer.len(), before + put(12, 3).encoded_len());
        let pending = buffer.take(t0).expect("segment");
        assert!(!buffer.has_lease(42), "a new segment records it again");
        assert_eq!(pending.leases, [42]);
        assert_eq!(pending.events, 2);
        assert_eq!(
            pending.encoded.len(),
            HEADER_LEN + LEASE_RECORD_LEN + leased.encoded_len() + put(12, 3).encoded_len()
        );
        assert_eq!(
            decode_segment(&pending.encoded).expect("decode"),
            SegmentContents {
                events: vec![leased, put(12, 3)],
                leases: vec![lease],
            }
        );
    }
}
