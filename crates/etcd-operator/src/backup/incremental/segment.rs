//! Segment objects and their metadata at the destination.
//!
//! ```text
//! <cluster folder>/incremental/<base>/<first>-<last>.seg.zst    zstd of the encoded events
//! <cluster folder>/incremental/<base>/<first>-<last>.seg.json   metadata
//! ```
//!
//! With an encryption key, the object is `….seg.zst.enc`: the compressed
//! events sealed like a full backup (see [`crate::backup::encryption`]),
//! and the metadata records the scheme and the key's fingerprint.
//!
//! `<base>` is the name of the full backup the chain follows
//! (`full-<time>-r<revision>`); `<first>` and `<last>` are the segment's
//! first and last revisions, zero-padded to 19 digits so that names sort
//! by revision. Like a full backup, a segment exists once its metadata
//! exists: the metadata is written after the object and deleted before it.
//!
//! Every stored byte goes through [`seal`] on the way out and [`unseal`]
//! on the way back, the single place where client-side encryption applies
//! to segments.

use std::time::Duration;

use async_compression::tokio::bufread::ZstdDecoder;
use async_compression::tokio::write::ZstdEncoder;
use bytes::Bytes;
use chrono::{DateTime, Utc};
use object_store::path::Path;
use object_store::{ObjectStoreExt, PutPayload};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::backup::encryption::{self, EncryptionInfo, EncryptionKey};
use crate::backup::metadata::{ENCRYPTED_SUFFIX, METADATA_SUFFIX, metadata_name_for};
use crate::backup::restore::opening_key;
use crate::backup::segment_check::SegmentCheckError;
use crate::backup::segment_format::{SegmentContents, SegmentEvent, decode_segment};
use crate::backup::{BackupError, BackupErrorCategory, BackupMetadata, BackupStore};

/// Folder of the chains, inside the cluster's folder.
pub const INCREMENTAL_FOLDER: &str = "incremental";
/// Suffix of a stored segment.
pub const SEGMENT_SUFFIX: &str = ".seg.zst";
/// Suffix of a segment's metadata.
pub const SEGMENT_METADATA_SUFFIX: &str = ".seg.json";
/// Version of the segment metadata written by this operator.
pub const SEGMENT_FORMAT: u32 = 1;
/// Attempts of each upload before the segment is given up (the watcher
/// then resumes from the last durable revision).
const UPLOAD_ATTEMPTS: u32 = 4;
/// zstd level of segments (zstd's default).
const ZSTD_LEVEL: i32 = 3;

/// Everything recorded about one stored segment.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct SegmentMetadata {
    /// Metadata format version ([`SEGMENT_FORMAT`]).
    pub format: u32,
    /// Base name of the full backup the chain follows.
    pub base: String,
    /// Revision of that full backup.
    pub base_revision: i64,
    /// etcd cluster ID (hex) the events were watched on.
    #[serde(rename = "clusterID")]
    pub cluster_id: String,
    /// Revision of the first event.
    pub first_revision: i64,
    /// Revision of the last event; every revision from the first to the
    /// last is in the segment.
    pub last_revision: i64,
    /// Number of events.
    pub events: u64,
    /// Name of the segment object, relative to the cluster's folder.
    pub object: String,
    /// Compression of the encoded events.
    pub compression: String,
    /// How the object is encrypted after compression; absent when it is
    /// stored in plaintext.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub encryption: Option<EncryptionInfo>,
    /// Bytes of the encoded events before compression.
    pub encoded_bytes: u64,
    /// Bytes of the stored object.
    pub stored_bytes: u64,
    /// Hex SHA-256 of the stored object.
    pub stored_sha256: String,
    /// When the watch delivered the first event.
    pub opened_at: DateTime<Utc>,
    /// When the segment was closed: every event the watch had delivered by
    /// then is in it or in an earlier segment.
    pub closed_at: DateTime<Utc>,
}

impl SegmentMetadata {
    /// Name of the metadata object beside the segment object.
    pub fn metadata_name(&self) -> String {
        segment_metadata_name(&self.object)
    }
}

/// Encoded events waiting to become a segment.
#[derive(Debug, Clone, PartialEq)]
pub struct PendingSegment {
    /// Header and events in the [`super::format`] encoding.
    pub encoded: Vec<u8>,
    /// Revision of the first event.
    pub first_revision: i64,
    /// Revision of the last event.
    pub last_revision: i64,
    /// Number of events.
    pub events: u64,
    /// IDs of the leases recorded in it.
    pub leases: Vec<i64>,
    /// When the first event arrived.
    pub opened_at: DateTime<Utc>,
    /// When the segment was closed.
    pub closed_at: DateTime<Utc>,
}

/// The base name of a full backup (`full-<time>-r<revision>`).
pub fn base_name(base: &BackupMetadata) -> String {
    let metadata = metadata_name_for(&base.object);
    metadata
        .strip_suffix(METADATA_SUFFIX)
        .unwrap_or(&metadata)
        .to_string()
}

/// The folder of the chain after `base_name`, relative to the cluster's
/// folder.
pub fn chain_folder(base_name: &str) -> String {
    format!("{INCREMENTAL_FOLDER}/{base_name}")
}

/// The segment object's name, relative to the cluster's folder.
pub fn segment_object_name(base_name: &str, first: i64, last: i64) -> String {
    format!(
        "{}/{first:019}-{last:019}{SEGMENT_SUFFIX}",
        chain_folder(base_name)
    )
}

/// The first and last revisions a segment's object or metadata name
/// (`<first>-<last>.seg.…`) states; `None` for any other name.
pub fn revisions_in_name(file_name: &str) -> Option<(i64, i64)> {
    let (span, _) = file_name.split_once(".seg.")?;
    let (first, last) = span.split_once('-')?;
    Some((first.parse().ok()?, last.parse().ok()?))
}

/// The metadata object's name for a segment object's name.
pub fn segment_metadata_name(object: &str) -> String {
    let object = object.strip_suffix(ENCRYPTED_SUFFIX).unwrap_or(object);
    let stem = object.strip_suffix(SEGMENT_SUFFIX).unwrap_or(object);
    format!("{stem}{SEGMENT_METADATA_SUFFIX}")
}

/// The object at `relative` (a `/`-separated name) inside the cluster's
/// folder. Each part is a path segment of its own ([`BackupStore::path`]
/// takes a single segment).
pub fn object_path(store: &BackupStore, relative: &str) -> Path {
    relative
        .split('/')
        .filter(|part| !part.is_empty())
        .fold(store.folder().clone(), |path, part| path.join(part))
}

/// Compresses, uploads and records `pending` as the next segment after
/// `base`; durable once this returns. Each upload is retried with back-off
/// on transient failures.
pub async fn store_segment(
    store: &BackupStore,
    base: &BackupMetadata,
    pending: &PendingSegment,
) -> Result<SegmentMetadata, BackupError> {
    let name = base_name(base);
    let mut object = segment_object_name(&name, pending.first_revision, pending.last_revision);
    if store.encryption().is_some() {
        object.push_str(ENCRYPTED_SUFFIX);
    }
    let path = object_path(store, &object);
    let location = store.url(&path);
    let stored = seal(store, compress(&pending.encoded, &location).await?)?;
    let metadata = SegmentMetadata {
        format: SEGMENT_FORMAT,
        base: name,
        base_revision: base.revision,
        cluster_id: base.cluster_id.clone(),
        first_revision: pending.first_revision,
        last_revision: pending.last_revision,
        events: pending.events,
        object,
        compression: "zstd".to_string(),
        encryption: store.encryption().map(EncryptionKey::info),
        encoded_bytes: pending.encoded.len() as u64,
        stored_bytes: stored.len() as u64,
        stored_sha256: hex::encode(Sha256::digest(&stored)),
        opened_at: pending.opened_at,
        closed_at: pending.closed_at,
    };
    put_with_retry(store, &path, stored).await?;
    let json = serde_json::to_vec_pretty(&metadata).map_err(|source| BackupError::Metadata {
        location: location.clone(),
        source,
    })?;
    put_with_retry(store, &object_path(store, &metadata.metadata_name()), json).await?;
    Ok(metadata)
}

/// Reads a segment's metadata object.
pub async fn read_segment_metadata(
    store: &BackupStore,
    path: &Path,
) -> Result<SegmentMetadata, BackupError> {
    let bytes = store.store().get(path).await?.bytes().await?;
    serde_json::from_slice(&bytes).map_err(|source| BackupError::Metadata {
        location: store.url(path),
        source,
    })
}

/// Downloads a segment and checks it against its metadata before handing
/// out any event: stored size and SHA-256, decompression, encoding, event
/// count, first and last revision, and that no revision in between is
/// missing.
pub async fn load_segment(
    store: &BackupStore,
    metadata: &SegmentMetadata,
) -> Result<Vec<SegmentEvent>, BackupError> {
    Ok(load_segment_bytes(store, metadata).await?.1.events)
}

/// [`load_segment`], with the lease records of the segment.
pub async fn load_segment_contents(
    store: &BackupStore,
    metadata: &SegmentMetadata,
) -> Result<SegmentContents, BackupError> {
    Ok(load_segment_bytes(store, metadata).await?.1)
}

/// [`load_segment_contents`], also handing out the stored bytes it checked.
pub(crate) async fn load_segment_bytes(
    store: &BackupStore,
    metadata: &SegmentMetadata,
) -> Result<(Bytes, SegmentContents), BackupError> {
    let path = object_path(store, &metadata.object);
    let location = store.url(&path);
    let corrupt = |reason: SegmentCheckError| BackupError::Corrupt {
        location: location.clone(),
        reason: reason.into(),
    };
    // A wrong or missing key is refused before the object is read.
    let key = opening_key(
        store,
        &metadata.object,
        &location,
        metadata.encryption.as_ref(),
    )?;
    let stored = match store.store().get(&path).await {
        Ok(object) => object.bytes().await?,
        Err(object_store::Error::NotFound { .. }) => {
            return Err(corrupt(SegmentCheckError::ObjectMissing));
        }
        Err(error) => return Err(error.into()),
    };
    check_stored(metadata, &stored).map_err(&corrupt)?;
    let compressed = unseal(key, stored.to_vec()).map_err(&corrupt)?;
    let encoded = decompress(&compressed, metadata.encoded_bytes)
        .await
        .map_err(&corrupt)?;
    let contents = decode_segment(&encoded).map_err(|e| corrupt(e.into()))?;
    check_events(metadata, &contents.events).map_err(corrupt)?;
    Ok((stored, contents))
}

/// The stored object must be the one the metadata describes, in a
/// compression this operator reads.
fn check_stored(metadata: &SegmentMetadata, stored: &[u8]) -> Result<(), SegmentCheckError> {
    if stored.len() as u64 != metadata.stored_bytes {
        return Err(SegmentCheckError::StoredSize {
            actual: stored.len() as u64,
            expected: metadata.stored_bytes,
        });
    }
    let sha256 = hex::encode(Sha256::digest(stored));
    if sha256 != metadata.stored_sha256 {
        return Err(SegmentCheckError::StoredSha256 {
            actual: sha256,
            expected: metadata.stored_sha256.clone(),
        });
    }
    if metadata.compression != "zstd" {
        return Err(SegmentCheckError::UnknownCompression(
            metadata.compression.clone(),
        ));
    }
    Ok(())
}

/// The events must be exactly what the metadata announces, every revision
/// from the first to the last present (etcd gives every revision at least
/// one event).
pub(crate) fn check_events(
    metadata: &SegmentMetadata,
    events: &[SegmentEvent],
) -> Result<(), SegmentCheckError> {
    if events.len() as u64 != metadata.events {
        return Err(SegmentCheckError::EventCount {
            actual: events.len() as u64,
            expected: metadata.events,
        });
    }
    let (Some(first), Some(last)) = (events.first(), events.last()) else {
        return Err(SegmentCheckError::NoEvents);
    };
    if first.revision != metadata.first_revision || last.revision != metadata.last_revision {
        return Err(SegmentCheckError::RevisionSpan {
            first: first.revision,
            last: last.revision,
            expected_first: metadata.first_revision,
            expected_last: metadata.last_revision,
        });
    }
    for pair in events.windows(2) {
        if pair[1].revision > pair[0].revision + 1 {
            return Err(SegmentCheckError::MissingRevisions {
                from: pair[0].revision + 1,
                to: pair[1].revision - 1,
            });
        }
    }
    Ok(())
}

/// The stored form of a compressed segment: sealed with the store's key,
/// when it has one.
fn seal(store: &BackupStore, compressed: Vec<u8>) -> Result<Vec<u8>, BackupError> {
    match store.encryption() {
        Some(key) => Ok(encryption::seal(key, &compressed)?),
        None => Ok(compressed),
    }
}

/// The compressed segment from its stored form (inverse of [`seal`]),
/// every chunk authenticated.
fn unseal(key: Option<&EncryptionKey>, stored: Vec<u8>) -> Result<Vec<u8>, SegmentCheckError> {
    match key {
        Some(key) => encryption::open(key, &stored).map_err(SegmentCheckError::Decrypt),
        None => Ok(stored),
    }
}

async fn compress(encoded: &[u8], location: &str) -> Result<Vec<u8>, BackupError> {
    let io = |e: std::io::Error| BackupError::io(format!("compress the segment {location}"), e);
    let mut encoder = ZstdEncoder::with_quality(
        Vec::with_capacity(encoded.len() / 4 + 64),
        async_compression::Level::Precise(ZSTD_LEVEL),
    );
    encoder.write_all(encoded).await.map_err(io)?;
    encoder.shutdown().await.map_err(io)?;
    Ok(encoder.into_inner())
}

/// Decompresses at most `expected` bytes (and one more, to notice a
/// segment longer than its metadata says).
async fn decompress(compressed: &[u8], expected: u64) -> Result<Vec<u8>, SegmentCheckError> {
    let mut encoded = Vec::with_capacity(usize::try_from(expected).unwrap_or(0).min(64 << 20));
    ZstdDecoder::new(compressed)
        .take(expected.saturating_add(1))
        .read_to_end(&mut encoded)
        .await
        .map_err(SegmentCheckError::Decompress)?;
    if encoded.len() as u64 != expected {
        return Err(SegmentCheckError::DecompressedSize {
            actual: encoded.len() as u64,
            expected,
        });
    }
    Ok(encoded)
}

async fn put_with_retry(
    store: &BackupStore,
    path: &Path,
    bytes: Vec<u8>,
) -> Result<(), BackupError> {
    let payload = PutPayload::from(bytes);
    let mut attempt = 1;
    loop {
        match store.store().put(path, payload.clone()).await {
            Ok(_) => return Ok(()),
            Err(error) => {
                let error = BackupError::from(error);
                if attempt >= UPLOAD_ATTEMPTS || error.category() != BackupErrorCategory::Transient
                {
                    return Err(error);
                }
                tracing::debug!(path = %path, attempt, "segment upload failed, retrying: {error}");
                tokio::time::sleep(Duration::from_millis(250 * 2u64.pow(attempt))).await;
                attempt += 1;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use object_store::memory::InMemory;

    use super::*;
    use crate::backup::Corruption;
    use crate::backup::segment_format::DecodeError;
    use crate::backup::segment_format::{EventKind, encode_event, new_buffer};

    fn metadata(first: i64, last: i64, events: u64) -> SegmentMetadata {
        SegmentMetadata {
            format: SEGMENT_FORMAT,
            base: "full-x-r9".into(),
            base_revision: 9,
            cluster_id: "c1".into(),
            first_revision: first,
            last_revision: last,
            events,
            object: segment_object_name("full-x-r9", first, last),
            compression: "zstd".into(),
            encryption: None,
            encoded_bytes: 0,
            stored_bytes: 0,
            stored_sha256: String::new(),
            opened_at: Utc::now(),
            closed_at: Utc::now(),
        }
    }

    fn event(revision: i64) -> SegmentEvent {
        SegmentEvent {
            revision,
            kind: EventKind::Delete,
            key: b"k".to_vec(),
            value: Vec::new(),
            lease: 0,
        }
    }

    #[test]
    fn names_sort_by_revision() {
        let a = segment_object_name("full-x-r9", 10, 99);
        let b = segment_object_name("full-x-r9", 100, 100);
        assert_eq!(
            a,
            "incremental/full-x-r9/0000000000000000010-0000000000000000099.seg.zst"
        );
        assert!(a < b);
        assert_eq!(
            segment_metadata_name(&a),
            "incremental/full-x-r9/0000000000000000010-0000000000000000099.seg.json"
        );
    }

    #[test]
    fn events_must_match_the_metadata_and_leave_no_revision_out() {
        let events = [event(10), event(10), event(11), event(12)];
        assert!(check_events(&metadata(10, 12, 4), &events).is_ok());
        let error = check_events(&metadata(10, 12, 5), &events).expect_err("count");
        assert!(
            matches!(
                error,
                SegmentCheckError::EventCount {
                    actual: 4,
                    expected: 5
                }
            ),
            "{error}"
        );
        assert!(error.to_string().contains("4 events"), "{error}");
        let error = check_events(&metadata(10, 13, 4), &events).expect_err("span");
        assert!(
            matches!(
                error,
                SegmentCheckError::RevisionSpan {
                    first: 10,
                    last: 12,
                    expected_first: 10,
                    expected_last: 13
                }
            ),
            "{error}"
        );
        assert!(error.to_string().contains("10..=12"), "{error}");
        let events = [event(10), event(13)];
        let error = check_events(&metadata(10, 13, 2), &events).expect_err("hole");
        assert!(
            matches!(
                error,
                SegmentCheckError::MissingRevisions { from: 11, to: 12 }
            ),
            "{error}"
        );
        assert!(error.to_string().contains("11..=12 are missing"), "{error}");
        let error = check_events(&metadata(10, 10, 0), &[]).expect_err("empty");
        assert!(matches!(error, SegmentCheckError::NoEvents), "{error}");
    }

    fn in_memory_store() -> BackupStore {
        BackupStore::from_parts(
            Arc::new(InMemory::new()),
            Path::from("prod/main"),
            "memory:///prod/main".to_string(),
        )
    }

    /// Stores `encoded`, compressed, as the segment object `metadata`
    /// names, and records its true sizes and SHA-256 in `metadata`.
    async fn put_segment(store: &BackupStore, metadata: &mut SegmentMetadata, encoded: &[u8]) {
        let compressed = compress(encoded, "test").await.expect("compress");
        metadata.encoded_bytes = encoded.len() as u64;
        metadata.stored_bytes = compressed.len() as u64;
        metadata.stored_sha256 = hex::encode(Sha256::digest(&compressed));
        store
            .store()
            .put(&object_path(store, &metadata.object), compressed.into())
            .await
            .expect("put");
    }

    /// Why loading the segment is refused; it must be refused as corrupt.
    async fn refusal(store: &BackupStore, metadata: &SegmentMetadata) -> SegmentCheckError {
        match load_segment_bytes(store, metadata).await {
            Err(error @ BackupError::Corrupt { .. }) => {
                assert_eq!(error.category(), BackupErrorCategory::Corrupt);
                match error {
                    BackupError::Corrupt {
                        reason: Corruption::Segment(check),
                        ..
                    } => check,
                    other => panic!("expected a segment check, got {other:?}"),
                }
            }
            other => panic!("expected a corrupt segment, got {other:?}"),
        }
    }

    #[tokio::test]
    async fn a_stored_segment_is_checked_before_any_event_is_handed_out() {
        let store = in_memory_store();
        let mut stored = metadata(10, 11, 2);
        let missing = refusal(&store, &stored).await;
        assert!(
            matches!(missing, SegmentCheckError::ObjectMissing),
            "{missing}"
        );

        let mut encoded = new_buffer();
        encode_event(&mut encoded, &event(10)).expect("encode");
        encode_event(&mut encoded, &event(11)).expect("encode");
        put_segment(&store, &mut stored, &encoded).await;
        let (_, contents) = load_segment_bytes(&store, &stored).await.expect("load");
        assert_eq!(contents.events, [event(10), event(11)]);

        let mut longer = stored.clone();
        longer.stored_bytes += 1;
        let error = refusal(&store, &longer).await;
        assert!(
            matches!(error, SegmentCheckError::StoredSize { actual, expected }
                if actual == stored.stored_bytes && expected == actual + 1),
            "{error}"
        );

        let mut altered = stored.clone();
        altered.stored_sha256 = "00".repeat(32);
        let error = refusal(&store, &altered).await;
        assert!(
            matches!(&error, SegmentCheckError::StoredSha256 { actual, .. }
                if *actual == stored.stored_sha256),
            "{error}"
        );
        assert!(error.to_string().contains("SHA-256"), "{error}");

        let mut other_compression = stored.clone();
        other_compression.compression = "lz4".into();
        let error = refusal(&store, &other_compression).await;
        assert!(
            matches!(&error, SegmentCheckError::UnknownCompression(name) if name == "lz4"),
            "{error}"
        );

        let mut not_a_segment = metadata(12, 12, 1);
        put_segment(&store, &mut not_a_segment, b"PK\x03\x04").await;
        let error = refusal(&store, &not_a_segment).await;
        assert!(
            matches!(error, SegmentCheckError::Decode(DecodeError::MissingMagic)),
            "{error}"
        );
        assert_eq!(
            error.to_string(),
            "not a segment: the magic bytes are missing"
        );
    }

    #[test]
    fn a_segment_that_does_not_open_with_its_key_is_refused() {
        let key = EncryptionKey::from_bytes([7; 32]);
        let error = unseal(Some(&key), b"plain zstd bytes".to_vec()).expect_err("not sealed");
        assert!(matches!(error, SegmentCheckError::Decrypt(_)), "{error}");
        assert!(error.to_string().starts_with("cannot decrypt: "), "{error}");
        assert_eq!(
            unseal(None, b"plain".to_vec()).expect("plaintext"),
            b"plain"
        );
    }

    #[tokio::test]
    async fn compression_round_trips_and_notices_a_wrong_length() {
        let mut encoded = new_buffer();
        for revision in 1..100 {
            encode_event(&mut encoded, &event(revision)).expect("encode");
        }
        let compressed = compress(&encoded, "test").await.expect("compress");
        assert!(compressed.len() < encoded.len());
        let back = decompress(&compressed, encoded.len() as u64)
            .await
            .expect("decompress");
        assert_eq!(back, encoded);
        let error = decompress(&compressed, encoded.len() as u64 - 1)
            .await
            .expect_err("longer than announced");
        assert!(
            matches!(error, SegmentCheckError::DecompressedSize { actual, expected }
                if actual == expected + 1 && expected == encoded.len() as u64 - 1),
            "{error}"
        );
        assert!(error.to_string().contains("once decompressed"), "{error}");
        let error = decompress(b"not zstd at all", 15)
            .await
            .expect_err("not zstd");
        assert!(matches!(error, SegmentCheckError::Decompress(_)), "{error}");
        assert!(
            error.to_string().starts_with("cannot decompress: "),
            "{error}"
        );
    }
}
