//! The encoding of the events inside a segment (before compression).
//!
//! ```text
//! header   "ETCDSEG" | version (1 byte, = 2)
//! record   kind (1 byte: 0 put, 1 delete, 2 lease)
//! put or   revision (i64 LE: the event's mod_revision)
//! delete   lease (i64 LE: the lease ID the key was attached to, 0 for none)
//!          key length (u32 LE) | key bytes
//!          value length (u32 LE) | value bytes (empty for a delete)
//! lease    lease ID (i64 LE)
//!          granted TTL (i64 LE: seconds, -1 when unknown)
//! record   ...
//! ```
//!
//! Events follow each other in watch order: revisions never decrease, and
//! the events of one revision (one etcd transaction) are adjacent.
//!
//! **Lease records (version 2).** The watch reports the lease a key was
//! written with, not the lease's grant. The first time the watcher sees a
//! lease on a put in its chain, it asks etcd for the TTL the lease was
//! granted with and writes a lease record before that put: a replay can
//! then grant the lease again with the same ID and TTL. The TTL is -1 when
//! etcd no longer had the lease when asked (revoked or expired: the
//! deletions of its keys follow in the chain). A lease record is no event:
//! it has no revision and is not counted in the segment's events.
//!
//! **Version 1** (written before lease records existed) is the same
//! encoding without lease records; it is still read, and its leases have
//! no recorded TTL.
//!
//! **Why this and not JSON lines or protobuf:** keys and values are
//! arbitrary bytes, so JSON would need base64 (a third bigger before
//! compression, and slower to write and read on the hot path of a busy
//! cluster); etcd's own `mvccpb.Event` protobuf would tie the format to
//! generated code that the client crate does not expose. Fixed-width
//! little-endian fields and length prefixes are a few lines to read in any
//! language; zstd squeezes the zero bytes of small revisions and leases.
//! The version byte lets a later format be told apart.

/// The first bytes of every segment, before the version byte.
pub const MAGIC: &[u8; 7] = b"ETCDSEG";
/// The version of the encoding written by this operator.
pub const VERSION: u8 = 2;
/// The oldest version of the encoding this operator reads.
pub const OLDEST_VERSION: u8 = 1;
/// Bytes of the header.
pub const HEADER_LEN: usize = MAGIC.len() + 1;
/// Bytes of an event besides its key and value.
pub const EVENT_OVERHEAD: usize = 1 + 8 + 8 + 4 + 4;
/// Bytes of a lease record.
pub const LEASE_RECORD_LEN: usize = 1 + 8 + 8;
/// The granted TTL written for a lease etcd no longer had when asked.
pub const UNKNOWN_TTL: i64 = -1;

const PUT: u8 = 0;
const DELETE: u8 = 1;
const LEASE: u8 = 2;

/// Why an event cannot be encoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EncodeError {
    /// The key is longer than a length prefix can say.
    #[error("key of {len} bytes is too long")]
    KeyTooLong {
        /// Bytes of the key.
        len: usize,
    },
    /// The value is longer than a length prefix can say.
    #[error("value of {len} bytes is too long")]
    ValueTooLong {
        /// Bytes of the value.
        len: usize,
    },
}

/// Why encoded events cannot be read back. Byte offsets count from the
/// start of the encoding (header included).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// The bytes do not start with [`MAGIC`].
    #[error("not a segment: the magic bytes are missing")]
    MissingMagic,
    /// The bytes end right after [`MAGIC`].
    #[error("not a segment: no version byte")]
    MissingVersion,
    /// A version of the encoding this operator does not read.
    #[error(
        "segment format version {version} is not known (this operator reads versions {OLDEST_VERSION} to {VERSION})"
    )]
    UnknownVersion {
        /// The version byte found.
        version: u8,
    },
    /// A record kind other than put, delete or (from version 2) lease.
    #[error("unknown event kind {kind} at byte {at}")]
    UnknownKind {
        /// The kind byte found.
        kind: u8,
        /// Where the record starts.
        at: usize,
    },
    /// A record ends before its fields do.
    #[error("event at byte {at} is truncated: {needed} bytes needed, {left} left")]
    Truncated {
        /// Where the record starts.
        at: usize,
        /// Bytes the next field needs.
        needed: usize,
        /// Bytes left in the encoding.
        left: usize,
    },
    /// An event's revision is lower than the one before it.
    #[error("revision {revision} at byte {at} comes after revision {previous}")]
    RevisionBackwards {
        /// The event's revision.
        revision: i64,
        /// Where the event starts.
        at: usize,
        /// The revision of the event before it.
        previous: i64,
    },
}

/// What an event did to its key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventKind {
    /// The key was written (created or updated).
    Put,
    /// The key was deleted.
    Delete,
}

/// One change of one key, as etcd's watch reported it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SegmentEvent {
    /// The revision of the change (`mod_revision`; for a delete, the
    /// revision of the deletion).
    pub revision: i64,
    /// Put or delete.
    pub kind: EventKind,
    /// The key.
    pub key: Vec<u8>,
    /// The new value (empty for a delete).
    pub value: Vec<u8>,
    /// The lease the key was attached to (0 for none).
    pub lease: i64,
}

impl SegmentEvent {
    /// Bytes this event takes in a segment.
    pub fn encoded_len(&self) -> usize {
        EVENT_OVERHEAD + self.key.len() + self.value.len()
    }
}

/// A lease that puts of the segment use, as etcd granted it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SegmentLease {
    /// The lease ID.
    pub id: i64,
    /// The TTL (seconds) the lease was granted with; `None` when etcd no
    /// longer had the lease when asked.
    pub granted_ttl: Option<i64>,
}

/// What a segment holds: its events, and the leases recorded in it (in the
/// order they were recorded).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SegmentContents {
    /// The events, in watch order.
    pub events: Vec<SegmentEvent>,
    /// The lease records.
    pub leases: Vec<SegmentLease>,
}

/// A new encoding buffer holding only the header.
pub fn new_buffer() -> Vec<u8> {
    let mut buffer = Vec::with_capacity(4096);
    buffer.extend_from_slice(MAGIC);
    buffer.push(VERSION);
    buffer
}

/// Appends `event` to `buffer` (which starts with the header).
///
/// Keys and values longer than `u32::MAX` cannot exist in etcd (requests
/// are limited to a few MiB); they are refused rather than truncated.
pub fn encode_event(buffer: &mut Vec<u8>, event: &SegmentEvent) -> Result<(), EncodeError> {
    let (key_len, value_len) = length_prefixes(event.key.len(), event.value.len())?;
    buffer.reserve(event.encoded_len());
    buffer.push(match event.kind {
        EventKind::Put => PUT,
        EventKind::Delete => DELETE,
    });
    buffer.extend_from_slice(&event.revision.to_le_bytes());
    buffer.extend_from_slice(&event.lease.to_le_bytes());
    buffer.extend_from_slice(&key_len.to_le_bytes());
    buffer.extend_from_slice(&event.key);
    buffer.extend_from_slice(&value_len.to_le_bytes());
    buffer.extend_from_slice(&event.value);
    Ok(())
}

/// Appends a lease record to `buffer` (which starts with the header).
pub fn encode_lease(buffer: &mut Vec<u8>, lease: &SegmentLease) {
    buffer.reserve(LEASE_RECORD_LEN);
    buffer.push(LEASE);
    buffer.extend_from_slice(&lease.id.to_le_bytes());
    let ttl = lease.granted_ttl.unwrap_or(UNKNOWN_TTL);
    buffer.extend_from_slice(&ttl.to_le_bytes());
}

/// The length prefixes of a key and a value of these lengths.
fn length_prefixes(key: usize, value: usize) -> Result<(u32, u32), EncodeError> {
    let key = u32::try_from(key).map_err(|_| EncodeError::KeyTooLong { len: key })?;
    let value = u32::try_from(value).map_err(|_| EncodeError::ValueTooLong { len: value })?;
    Ok((key, value))
}

/// Reads every event of an encoded segment (lease records skipped); see
/// [`decode_segment`].
pub fn decode_events(bytes: &[u8]) -> Result<Vec<SegmentEvent>, DecodeError> {
    Ok(decode_segment(bytes)?.events)
}

/// Reads the events and lease records of an encoded segment, of any
/// version from [`OLDEST_VERSION`] to [`VERSION`]. Refuses another magic,
/// an unknown version or kind (a lease record in version 1), a truncated
/// record, and revisions that go backwards.
pub fn decode_segment(bytes: &[u8]) -> Result<SegmentContents, DecodeError> {
    let Some(rest) = bytes.strip_prefix(MAGIC.as_slice()) else {
        return Err(DecodeError::MissingMagic);
    };
    let Some((&version, mut rest)) = rest.split_first() else {
        return Err(DecodeError::MissingVersion);
    };
    if !(OLDEST_VERSION..=VERSION).contains(&version) {
        return Err(DecodeError::UnknownVersion { version });
    }
    let mut contents = SegmentContents::default();
    let mut previous = i64::MIN;
    while !rest.is_empty() {
        let at = bytes.len() - rest.len();
        let mut reader = Reader { rest, at };
        let kind = match reader.take(1)?[0] {
            PUT => EventKind::Put,
            DELETE => EventKind::Delete,
            LEASE if version >= 2 => {
                let id = reader.i64()?;
                let ttl = reader.i64()?;
                contents.leases.push(SegmentLease {
                    id,
                    granted_ttl: (ttl >= 0).then_some(ttl),
                });
                rest = reader.rest;
                continue;
            }
            kind => return Err(DecodeError::UnknownKind { kind, at }),
        };
        let revision = reader.i64()?;
        let lease = reader.i64()?;
        let key_len = reader.u32()? as usize;
        let key = reader.take(key_len)?.to_vec();
        let value_len = reader.u32()? as usize;
        let value = reader.take(value_len)?.to_vec();
        if revision < previous {
            return Err(DecodeError::RevisionBackwards {
                revision,
                at,
                previous,
            });
        }
        previous = revision;
        contents.events.push(SegmentEvent {
            revision,
            kind,
            key,
            value,
            lease,
        });
        rest = reader.rest;
    }
    Ok(contents)
}

struct Reader<'a> {
    rest: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        if self.rest.len() < n {
            return Err(DecodeError::Truncated {
                at: self.at,
                needed: n,
                left: self.rest.len(),
            });
        }
        let (head, tail) = self.rest.split_at(n);
        self.rest = tail;
        Ok(head)
    }

    fn i64(&mut self) -> Result<i64, DecodeError> {
        let bytes = self.take(8)?;
        let mut array = [0u8; 8];
        array.copy_from_slice(bytes);
        Ok(i64::from_le_bytes(array))
    }

    fn u32(&mut self) -> Result<u32, DecodeError> {
        let bytes = self.take(4)?;
        let mut array = [0u8; 4];
        array.copy_from_slice(bytes);
        Ok(u32::from_le_bytes(array))
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn put(revision: i64, key: &str, value: &str, lease: i64) -> SegmentEvent {
        SegmentEvent {
            revision,
            kind: EventKind::Put,
            key: key.as_bytes().to_vec(),
            value: value.as_bytes().to_vec(),
            lease,
        }
    }

    #[test]
    fn the_layout_is_the_documented_one() {
        let mut buffer = new_buffer();
        encode_lease(
            &mut buffer,
            &SegmentLease {
                id: 7,
                granted_ttl: Some(600),
            },
        );
        encode_event(&mut buffer, &put(0x0102, "k", "vv", 7)).expect("encode");
        encode_lease(
            &mut buffer,
            &SegmentLease {
                id: 8,
                granted_ttl: None,
            },
        );
        let mut expected = b"ETCDSEG\x02".to_vec();
        expected.extend_from_slice(&[2, 7, 0, 0, 0, 0, 0, 0, 0]);
        expected.extend_from_slice(&[0x58, 0x02, 0, 0, 0, 0, 0, 0]);
        expected.push(0);
        expected.extend_from_slice(&[0x02, 0x01, 0, 0, 0, 0, 0, 0]);
        expected.extend_from_slice(&[7, 0, 0, 0, 0, 0, 0, 0]);
        expected.extend_from_slice(&[1, 0, 0, 0, b'k', 2, 0, 0, 0, b'v', b'v']);
        expected.extend_from_slice(&[2, 8, 0, 0, 0, 0, 0, 0, 0]);
        expected.extend_from_slice(&[0xff; 8]);
        assert_eq!(buffer, expected);
        assert_eq!(
            buffer.len(),
            HEADER_LEN + put(1, "k", "vv", 0).encoded_len() + 2 * LEASE_RECORD_LEN
        );
    }

    /// Version 1: the same events without lease records.
    fn version_1(events: &[SegmentEvent]) -> Vec<u8> {
        let mut buffer = b"ETCDSEG\x01".to_vec();
        for event in events {
            encode_event(&mut buffer, event).expect("encode");
        }
        buffer
    }

    #[test]
    fn version_1_segments_still_read_without_lease_records() {
        let events = [put(5, "a", "1", 7), put(6, "b", "2", 0)];
        let old = version_1(&events);
        let mut expected = b"ETCDSEG\x01\x00".to_vec();
        expected.extend_from_slice(&[5, 0, 0, 0, 0, 0, 0, 0]);
        expected.extend_from_slice(&[7, 0, 0, 0, 0, 0, 0, 0]);
        expected.extend_from_slice(&[1, 0, 0, 0, b'a', 1, 0, 0, 0, b'1']);
        assert!(old.starts_with(&expected), "version 1 layout");
        assert_eq!(
            decode_segment(&old).expect("version 1"),
            SegmentContents {
                events: events.to_vec(),
                leases: Vec::new(),
            }
        );
        assert_eq!(decode_events(&old).expect("version 1"), events);

        // A lease record is not part of version 1.
        let mut damaged = old.clone();
        let at = damaged.len();
        encode_lease(
            &mut damaged,
            &SegmentLease {
                id: 7,
                granted_ttl: Some(60),
            },
        );
        assert_eq!(
            decode_segment(&damaged),
            Err(DecodeError::UnknownKind { kind: 2, at })
        );
    }

    #[test]
    fn lease_records_are_not_events() {
        let mut buffer = new_buffer();
        let known = SegmentLease {
            id: 7,
            granted_ttl: Some(600),
        };
        let gone = SegmentLease {
            id: 9,
            granted_ttl: None,
        };
        encode_lease(&mut buffer, &known);
        encode_event(&mut buffer, &put(5, "a", "1", 7)).expect("encode");
        encode_lease(&mut buffer, &gone);
        encode_event(&mut buffer, &put(6, "b", "2", 9)).expect("encode");
        let contents = decode_segment(&buffer).expect("decode");
        assert_eq!(contents.leases, [known, gone]);
        assert_eq!(contents.events, [put(5, "a", "1", 7), put(6, "b", "2", 9)]);
        assert_eq!(decode_events(&buffer).expect("decode"), contents.events);
        let error = decode_segment(&buffer[..HEADER_LEN + LEASE_RECORD_LEN - 1])
            .expect_err("truncated lease record");
        assert_eq!(
            error,
            DecodeError::Truncated {
                at: HEADER_LEN,
                needed: 8,
                left: 7
            }
        );
    }

    #[test]
    fn refuses_damage() {
        let mut buffer = new_buffer();
        encode_event(&mut buffer, &put(5, "key", "value", 0)).expect("encode");
        let error = decode_events(&buffer[..buffer.len() - 1]).expect_err("truncated");
        assert_eq!(
            error,
            DecodeError::Truncated {
                at: HEADER_LEN,
                needed: 5,
                left: 4
            }
        );
        assert!(error.to_string().contains("truncated"), "{error}");
        for version in [0, VERSION + 1] {
            let mut other = buffer.clone();
            other[7] = version;
            let error = decode_events(&other).expect_err("version");
            assert_eq!(error, DecodeError::UnknownVersion { version });
            assert!(
                error.to_string().contains(&format!("version {version} ")),
                "{error}"
            );
        }
        let mut other = buffer.clone();
        other[HEADER_LEN] = 9;
        let error = decode_events(&other).expect_err("kind");
        assert_eq!(
            error,
            DecodeError::UnknownKind {
                kind: 9,
                at: HEADER_LEN
            }
        );
        assert!(error.to_string().contains("kind 9"), "{error}");
        assert_eq!(decode_events(b"PK\x03\x04"), Err(DecodeError::MissingMagic));
        assert_eq!(decode_events(MAGIC), Err(DecodeError::MissingVersion));
        let second = buffer.len();
        encode_event(&mut buffer, &put(4, "key", "older", 0)).expect("encode");
        let error = decode_events(&buffer).expect_err("backwards");
        assert_eq!(
            error,
            DecodeError::RevisionBackwards {
                revision: 4,
                at: second,
                previous: 5
            }
        );
        assert!(
            error.to_string().contains("comes after revision 5"),
            "{error}"
        );
    }

    #[test]
    fn refuses_keys_and_values_beyond_a_length_prefix() {
        let too_long = u32::MAX as usize + 1;
        assert_eq!(length_prefixes(3, 0), Ok((3, 0)));
        let error = length_prefixes(too_long, 0).expect_err("key");
        assert_eq!(error, EncodeError::KeyTooLong { len: too_long });
        assert_eq!(
            error.to_string(),
            format!("key of {too_long} bytes is too long")
        );
        let error = length_prefixes(1, too_long).expect_err("value");
        assert_eq!(error, EncodeError::ValueTooLong { len: too_long });
        assert_eq!(
            error.to_string(),
            format!("value of {too_long} bytes is too long")
        );
    }

    fn event() -> impl Strategy<Value = SegmentEvent> {
        (
            any::<bool>(),
            prop::collection::vec(any::<u8>(), 0..40),
            prop::collection::vec(any::<u8>(), 0..200),
            any::<i64>(),
        )
            .prop_map(|(delete, key, value, lease)| SegmentEvent {
                revision: 0,
                kind: if delete {
                    EventKind::Delete
                } else {
                    EventKind::Put
                },
                value: if delete { Vec::new() } else { value },
                key,
                lease,
            })
    }

    fn lease() -> impl Strategy<Value = SegmentLease> {
        (any::<i64>(), prop::option::of(0i64..1_000_000))
            .prop_map(|(id, granted_ttl)| SegmentLease { id, granted_ttl })
    }

    /// An event, with the record of a lease before it or not.
    fn record() -> impl Strategy<Value = (Option<SegmentLease>, SegmentEvent)> {
        (prop::option::of(lease()), event())
    }

    proptest! {
        #[test]
        fn events_round_trip(mut events in prop::collection::vec(event(), 0..50), start in 1i64..1_000_000) {
            for (i, event) in events.iter_mut().enumerate() {
                event.revision = start + (i as i64) / 3;
            }
            let mut buffer = new_buffer();
            for event in &events {
                encode_event(&mut buffer, event).expect("encode");
            }
            let expected_len: usize = HEADER_LEN + events.iter().map(SegmentEvent::encoded_len).sum::<usize>();
            prop_assert_eq!(buffer.len(), expected_len);
            prop_assert_eq!(decode_events(&buffer).expect("decode"), events);
        }

        #[test]
        fn events_and_lease_records_round_trip(
            mut records in prop::collection::vec(record(), 0..50),
            start in 1i64..1_000_000,
        ) {
            let mut buffer = new_buffer();
            let mut expected = SegmentContents::default();
            for (i, (lease, event)) in records.iter_mut().enumerate() {
                event.revision = start + (i as i64) / 3;
                if let Some(lease) = lease {
                    encode_lease(&mut buffer, lease);
                    expected.leases.push(*lease);
                }
                encode_event(&mut buffer, event).expect("encode");
                expected.events.push(event.clone());
            }
            prop_assert_eq!(
                buffer.len(),
                HEADER_LEN
                    + expected.events.iter().map(SegmentEvent::encoded_len).sum::<usize>()
                    + LEASE_RECORD_LEN * expected.leases.len()
            );
            prop_assert_eq!(decode_segment(&buffer).expect("decode"), expected);
        }
    }
}
