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

use super::format::{SegmentEvent, decode_events};
use crate::backup::encryption::{self, EncryptionInfo, EncryptionKey};
use crate::backup::metadata::{ENCRYPTED_SUFFIX, METADATA_SUFFIX, metadata_name_for};
use crate::backup::restore::opening_key;
use crate::backup::verify::hex;
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
        stored_sha256: hex(&Sha256::digest(&stored)),
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
    Ok(load_segment_bytes(store, metadata).await?.1)
}

/// [`load_segment`], also handing out the stored bytes it checked.
pub(crate) async fn load_segment_bytes(
    store: &BackupStore,
    metadata: &SegmentMetadata,
) -> Result<(Bytes, Vec<SegmentEvent>), BackupError> {
    let path = object_path(store, &metadata.object);
    let location = store.url(&path);
    let corrupt = |reason: String| BackupError::Corrupt {
        location: location.clone(),
        reason,
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
            return Err(corrupt(
                "the segment object is missing (its metadata exists)".to_string(),
            ));
        }
        Err(error) => return Err(error.into()),
    };
    if stored.len() as u64 != metadata.stored_bytes {
        return Err(corrupt(format!(
            "stored object has {} bytes, the metadata says {} (truncated?)",
            stored.len(),
            metadata.stored_bytes
        )));
    }
    let sha256 = hex(&Sha256::digest(&stored));
    if sha256 != metadata.stored_sha256 {
        return Err(corrupt(format!(
            "stored object's SHA-256 {sha256} differs from the metadata's {}",
            metadata.stored_sha256
        )));
    }
    if metadata.compression != "zstd" {
        return Err(corrupt(format!(
            "unknown compression {:?}",
            metadata.compression
        )));
    }
    let compressed = unseal(key, stored.to_vec()).map_err(&corrupt)?;
    let encoded = decompress(&compressed, metadata.encoded_bytes)
        .await
        .map_err(&corrupt)?;
    let events = decode_events(&encoded).map_err(&corrupt)?;
    check_events(metadata, &events).map_err(corrupt)?;
    Ok((stored, events))
}

/// The events must be exactly what the metadata announces, every revision
/// from the first to the last present (etcd gives every revision at least
/// one event).
pub(crate) fn check_events(
    metadata: &SegmentMetadata,
    events: &[SegmentEvent],
) -> Result<(), String> {
    if events.len() as u64 != metadata.events {
        return Err(format!(
            "{} events, the metadata says {}",
            events.len(),
            metadata.events
        ));
    }
    let (Some(first), Some(last)) = (events.first(), events.last()) else {
        return Err("the segment holds no event".to_string());
    };
    if first.revision != metadata.first_revision || last.revision != metadata.last_revision {
        return Err(format!(
            "events span revisions {}..={}, the metadata says {}..={}",
            first.revision, last.revision, metadata.first_revision, metadata.last_revision
        ));
    }
    for pair in events.windows(2) {
        if pair[1].revision > pair[0].revision + 1 {
            return Err(format!(
                "revisions {}..={} are missing inside the segment",
                pair[0].revision + 1,
                pair[1].revision - 1
            ));
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
fn unseal(key: Option<&EncryptionKey>, stored: Vec<u8>) -> Result<Vec<u8>, String> {
    match key {
        Some(key) => encryption::open(key, &stored).map_err(|e| format!("cannot decrypt: {e}")),
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
async fn decompress(compressed: &[u8], expected: u64) -> Result<Vec<u8>, String> {
    let mut encoded = Vec::with_capacity(usize::try_from(expected).unwrap_or(0).min(64 << 20));
    ZstdDecoder::new(compressed)
        .take(expected.saturating_add(1))
        .read_to_end(&mut encoded)
        .await
        .map_err(|e| format!("cannot decompress: {e}"))?;
    if encoded.len() as u64 != expected {
        return Err(format!(
            "{} bytes once decompressed, the metadata says {expected}",
            encoded.len()
        ));
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
    use super::*;
    use crate::backup::incremental::format::{EventKind, encode_event, new_buffer};

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
        assert!(error.contains("4 events"), "{error}");
        let error = check_events(&metadata(10, 13, 4), &events).expect_err("span");
        assert!(error.contains("10..=12"), "{error}");
        let events = [event(10), event(13)];
        let error = check_events(&metadata(10, 13, 2), &events).expect_err("hole");
        assert!(error.contains("11..=12 are missing"), "{error}");
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
        assert!(error.contains("once decompressed"), "{error}");
    }
}
