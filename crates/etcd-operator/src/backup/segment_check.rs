//! Why a stored segment of the continuous backup is refused before any of
//! its events is used. A leaf of the backup engine: [`super::BackupError`]
//! wraps it, so it names nothing that names the error.

use super::encryption::EncryptionError;
use super::segment_format::DecodeError;

/// Why a stored segment fails the checks it passes before any of its
/// events is handed out. Every one of them makes the segment corrupt
/// ([`super::BackupError::Corrupt`]).
#[derive(Debug, thiserror::Error)]
pub enum SegmentCheckError {
    /// The metadata exists, the segment object does not.
    #[error("the segment object is missing (its metadata exists)")]
    ObjectMissing,
    /// The stored object's size differs from the metadata's.
    #[error("stored object has {actual} bytes, the metadata says {expected} (truncated?)")]
    StoredSize {
        /// Bytes of the stored object.
        actual: u64,
        /// Bytes the metadata records.
        expected: u64,
    },
    /// The stored object's SHA-256 differs from the metadata's.
    #[error("stored object's SHA-256 {actual} differs from the metadata's {expected}")]
    StoredSha256 {
        /// Hex SHA-256 of the stored object.
        actual: String,
        /// Hex SHA-256 the metadata records.
        expected: String,
    },
    /// The metadata names a compression this operator does not read.
    #[error("unknown compression {0:?}")]
    UnknownCompression(String),
    /// The sealed object does not open with the key its metadata names.
    #[error("cannot decrypt: {0}")]
    Decrypt(#[source] EncryptionError),
    /// The compressed events are not a valid zstd stream.
    #[error("cannot decompress: {0}")]
    Decompress(#[source] std::io::Error),
    /// The decompressed events are longer or shorter than the metadata
    /// says.
    #[error("{actual} bytes once decompressed, the metadata says {expected}")]
    DecompressedSize {
        /// Bytes once decompressed (at most one more than expected).
        actual: u64,
        /// Bytes the metadata records.
        expected: u64,
    },
    /// The decompressed bytes are not a valid encoding of events.
    #[error(transparent)]
    Decode(#[from] DecodeError),
    /// The segment holds another number of events than its metadata says.
    #[error("{actual} events, the metadata says {expected}")]
    EventCount {
        /// Events in the segment.
        actual: u64,
        /// Events the metadata records.
        expected: u64,
    },
    /// The segment holds no event at all.
    #[error("the segment holds no event")]
    NoEvents,
    /// The events start or end at other revisions than the metadata says.
    #[error(
        "events span revisions {first}..={last}, the metadata says {expected_first}..={expected_last}"
    )]
    RevisionSpan {
        /// Revision of the first event.
        first: i64,
        /// Revision of the last event.
        last: i64,
        /// First revision the metadata records.
        expected_first: i64,
        /// Last revision the metadata records.
        expected_last: i64,
    },
    /// Revisions between two events of the segment are in no event.
    #[error("revisions {from}..={to} are missing inside the segment")]
    MissingRevisions {
        /// First missing revision.
        from: i64,
        /// Last missing revision.
        to: i64,
    },
}
