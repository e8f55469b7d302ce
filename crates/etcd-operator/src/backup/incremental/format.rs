//! The encoding of the events inside a segment (before compression).
//!
//! ```text
//! header   "ETCDSEG" | version (1 byte, = 1)
//! event    kind (1 byte: 0 put, 1 delete)
//!          revision (i64 LE: the event's mod_revision)
//!          lease (i64 LE: the lease ID the key was attached to, 0 for none)
//!          key length (u32 LE) | key bytes
//!          value length (u32 LE) | value bytes (empty for a delete)
//! event    ...
//! ```
//!
//! Events follow each other in watch order: revisions never decrease, and
//! the events of one revision (one etcd transaction) are adjacent.
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
pub const VERSION: u8 = 1;
/// Bytes of the header.
pub const HEADER_LEN: usize = MAGIC.len() + 1;
/// Bytes of an event besides its key and value.
pub const EVENT_OVERHEAD: usize = 1 + 8 + 8 + 4 + 4;

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
pub fn encode_event(buffer: &mut Vec<u8>, event: &SegmentEvent) -> Result<(), String> {
    let key_len = u32::try_from(event.key.len())
        .map_err(|_| format!("key of {} bytes is too long", event.key.len()))?;
    let value_len = u32::try_from(event.value.len())
        .map_err(|_| format!("value of {} bytes is too long", event.value.len()))?;
    buffer.reserve(event.encoded_len());
    buffer.push(match event.kind {
        EventKind::Put => 0,
        EventKind::Delete => 1,
    });
    buffer.extend_from_slice(&event.revision.to_le_bytes());
    buffer.extend_from_slice(&event.lease.to_le_bytes());
    buffer.extend_from_slice(&key_len.to_le_bytes());
    buffer.extend_from_slice(&event.key);
    buffer.extend_from_slice(&value_len.to_le_bytes());
    buffer.extend_from_slice(&event.value);
    Ok(())
}

/// Reads every event of an encoded segment. Refuses another magic, an
/// unknown version or kind, a truncated event, and revisions that go
/// backwards.
pub fn decode_events(bytes: &[u8]) -> Result<Vec<SegmentEvent>, String> {
    let Some(rest) = bytes.strip_prefix(MAGIC.as_slice()) else {
        return Err("not a segment: the magic bytes are missing".to_string());
    };
    let Some((&version, mut rest)) = rest.split_first() else {
        return Err("not a segment: no version byte".to_string());
    };
    if version != VERSION {
        return Err(format!(
            "segment format version {version} is not known (this operator reads {VERSION})"
        ));
    }
    let mut events = Vec::new();
    let mut previous = i64::MIN;
    while !rest.is_empty() {
        let at = bytes.len() - rest.len();
        let mut reader = Reader { rest, at };
        let kind = match reader.take(1)?[0] {
            0 => EventKind::Put,
            1 => EventKind::Delete,
            other => return Err(format!("unknown event kind {other} at byte {at}")),
        };
        let revision = reader.i64()?;
        let lease = reader.i64()?;
        let key_len = reader.u32()? as usize;
        let key = reader.take(key_len)?.to_vec();
        let value_len = reader.u32()? as usize;
        let value = reader.take(value_len)?.to_vec();
        if revision < previous {
            return Err(format!(
                "revision {revision} at byte {at} comes after revision {previous}"
            ));
        }
        previous = revision;
        events.push(SegmentEvent {
            revision,
            kind,
            key,
            value,
            lease,
        });
        rest = reader.rest;
    }
    Ok(events)
}

struct Reader<'a> {
    rest: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
        if self.rest.len() < n {
            return Err(format!(
                "event at byte {} is truncated: {} bytes needed, {} left",
                self.at,
                n,
                self.rest.len()
            ));
        }
        let (head, tail) = self.rest.split_at(n);
        self.rest = tail;
        Ok(head)
    }

    fn i64(&mut self) -> Result<i64, String> {
        let bytes = self.take(8)?;
        let mut array = [0u8; 8];
        array.copy_from_slice(bytes);
        Ok(i64::from_le_bytes(array))
    }

    fn u32(&mut self) -> Result<u32, String> {
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
        encode_event(&mut buffer, &put(0x0102, "k", "vv", 7)).expect("encode");
        let mut expected = b"ETCDSEG\x01\x00".to_vec();
        expected.extend_from_slice(&[0x02, 0x01, 0, 0, 0, 0, 0, 0]);
        expected.extend_from_slice(&[7, 0, 0, 0, 0, 0, 0, 0]);
        expected.extend_from_slice(&[1, 0, 0, 0, b'k', 2, 0, 0, 0, b'v', b'v']);
        assert_eq!(buffer, expected);
        assert_eq!(
            buffer.len(),
            HEADER_LEN + put(1, "k", "vv", 0).encoded_len()
        );
    }

    #[test]
    fn refuses_damage() {
        let mut buffer = new_buffer();
        encode_event(&mut buffer, &put(5, "key", "value", 0)).expect("encode");
        let error = decode_events(&buffer[..buffer.len() - 1]).expect_err("truncated");
        assert!(error.contains("truncated"), "{error}");
        let mut other = buffer.clone();
        other[7] = 2;
        let error = decode_events(&other).expect_err("version");
        assert!(error.contains("version 2"), "{error}");
        let mut other = buffer.clone();
        other[HEADER_LEN] = 9;
        let error = decode_events(&other).expect_err("kind");
        assert!(error.contains("kind 9"), "{error}");
        assert!(decode_events(b"PK\x03\x04").is_err());
        encode_event(&mut buffer, &put(4, "key", "older", 0)).expect("encode");
        let error = decode_events(&buffer).expect_err("backwards");
        assert!(error.contains("comes after revision 5"), "{error}");
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
    }
}
