//! Taking a full backup: stream a snapshot from a member, verify it,
//! compress it with zstd, seal it when the store has an encryption key,
//! and upload it in parts, then write its metadata. Memory stays bounded
//! by a few parts, whatever the database size.

use std::time::{Duration, Instant};

use async_compression::Level;
use async_compression::tokio::write::ZstdEncoder;
use bytes::Bytes;
use chrono::Utc;
use object_store::{ObjectStoreExt, PutPayload, WriteMultipart};
use sha2::{Digest, Sha256};
use tokio::io::AsyncWriteExt;

use super::encryption::{EncryptionKey, SealingWriter};
use super::metadata::{
    BackupMetadata, BackupWriter, ENCRYPTED_SUFFIX, FORMAT, SNAPSHOT_SUFFIX, backup_base_name,
};
use super::source::{SnapshotSource, choose_source, ids, open_snapshot};
use super::verify::SnapshotVerifier;
use super::{BackupError, BackupStore, Corruption};
use crate::etcd::ConnectSettings;

/// Size of each uploaded part (S3 needs at least 5 MiB but the last).
pub const PART_SIZE: usize = 8 * 1024 * 1024;
/// Parts uploaded concurrently.
const PARTS_IN_FLIGHT: usize = 2;

/// How a backup is taken.
#[derive(Debug, Clone)]
pub struct SnapshotOptions {
    /// Timeouts of the status probes and of connecting.
    pub settings: ConnectSettings,
    /// Longest wait for the next message of the snapshot stream.
    pub stall_timeout: Duration,
    /// zstd level (1 fastest .. 19 smallest); 3 is zstd's default.
    pub zstd_level: i32,
    /// Who takes the backup, recorded in its metadata (retention deletes
    /// only its writer's backups).
    pub writer: Option<BackupWriter>,
}

impl SnapshotOptions {
    /// The same options, recording `writer` in every backup taken.
    pub fn written_by(&self, writer: BackupWriter) -> Self {
        Self {
            writer: Some(writer),
            ..self.clone()
        }
    }
}

impl Default for SnapshotOptions {
    fn default() -> Self {
        Self {
            settings: ConnectSettings::default(),
            stall_timeout: Duration::from_secs(60),
            zstd_level: 3,
            writer: None,
        }
    }
}

/// A backup that is stored and verified.
#[derive(Debug, Clone)]
pub struct TakenBackup {
    /// What was recorded beside the snapshot.
    pub metadata: BackupMetadata,
    /// URL of the snapshot object.
    pub location: String,
    /// The member it came from.
    pub source: SnapshotSource,
    /// Time from the first status probe to the written metadata.
    pub duration: Duration,
}

/// Takes one full backup of the cluster behind `endpoints` into `store`.
pub async fn take_backup(
    store: &BackupStore,
    endpoints: &[String],
    namespace: &str,
    cluster: &str,
    options: &SnapshotOptions,
) -> Result<TakenBackup, BackupError> {
    let started = Instant::now();
    let started_at = Utc::now();
    let source = choose_source(endpoints, &options.settings).await?;
    let base = backup_base_name(started_at, source.revision);
    let key = store.encryption();
    let sealed = if key.is_some() { ENCRYPTED_SUFFIX } else { "" };
    let object = format!("{base}{SNAPSHOT_SUFFIX}{sealed}");
    let path = store.path(&object);
    let location = store.url(&path);

    let mut stream = open_snapshot(&source, &options.settings).await?;
    let upload = store.store().put_multipart(&path).await?;
    let mut upload = WriteMultipart::new_with_chunk_size(upload, PART_SIZE);
    let streamed = stream_into(&mut stream, &mut upload, &source, &location, key, options).await;
    let (verified, stored_bytes, stored_sha256) = match streamed {
        Ok(done) => done,
        Err(error) => {
            // Nothing partial is left behind: an aborted multipart upload
            // (or the local store's staging file) is discarded.
            let _ = upload.abort().await;
            return Err(error);
        }
    };
    upload.finish().await?;

    let (member_id, cluster_id) = ids(&source);
    let metadata = BackupMetadata {
        format: FORMAT,
        namespace: namespace.to_string(),
        cluster: cluster.to_string(),
        cluster_id,
        member_id,
        revision: source.revision,
        etcd_version: source.version.clone(),
        snapshot_bytes: verified.size,
        sha256: verified.sha256,
        object,
        compression: "zstd".to_string(),
        encryption: key.map(EncryptionKey::info),
        stored_bytes,
        stored_sha256,
        started_at,
        completed_at: Utc::now(),
        written_by: options.writer.clone(),
    };
    let json = serde_json::to_vec_pretty(&metadata).map_err(|source| BackupError::Metadata {
        location: location.clone(),
        source,
    })?;
    store
        .store()
        .put(
            &store.path(&metadata.metadata_name()),
            PutPayload::from(json),
        )
        .await?;
    Ok(TakenBackup {
        metadata,
        location,
        source,
        duration: started.elapsed(),
    })
}

/// Streams, verifies, compresses, seals (with `key`) and hands parts to
/// the upload. Returns the verified snapshot, the stored size and the
/// stored SHA-256.
async fn stream_into(
    stream: &mut etcd_client::SnapshotStreaming,
    upload: &mut WriteMultipart,
    source: &SnapshotSource,
    location: &str,
    key: Option<&EncryptionKey>,
    options: &SnapshotOptions,
) -> Result<(super::verify::VerifiedSnapshot, u64, String), BackupError> {
    let io =
        |e: std::io::Error| BackupError::io(format!("compress the snapshot for {location}"), e);
    let mut verifier = SnapshotVerifier::new();
    let sealing =
        SealingWriter::new(Vec::with_capacity(PART_SIZE), key).map_err(|e| BackupError::Io {
            context: format!("encrypt the snapshot for {location}"),
            source: std::io::Error::other(e),
        })?;
    let mut encoder = ZstdEncoder::with_quality(sealing, Level::Precise(options.zstd_level));
    let mut stored = StoredDigest::default();
    loop {
        let message = tokio::time::timeout(options.stall_timeout, stream.message())
            .await
            .map_err(|_| BackupError::Timeout {
                endpoint: source.endpoint.clone(),
                timeout: options.stall_timeout,
            })?
            .map_err(|e| BackupError::Stream {
                endpoint: source.endpoint.clone(),
                message: e.to_string(),
            })?;
        let Some(message) = message else { break };
        verifier.update(message.blob());
        encoder.write_all(message.blob()).await.map_err(io)?;
        if encoder.get_ref().get_ref().len() >= PART_SIZE {
            let part =
                std::mem::replace(encoder.get_mut().get_mut(), Vec::with_capacity(PART_SIZE));
            stored.put(upload, part).await?;
        }
    }
    encoder.shutdown().await.map_err(io)?;
    let rest = std::mem::take(encoder.get_mut().get_mut());
    stored.put(upload, rest).await?;
    let verified = verifier.finish().map_err(|error| BackupError::Corrupt {
        location: source.endpoint.clone(),
        reason: Corruption::SnapshotStream(error),
    })?;
    Ok((
        verified,
        stored.bytes,
        hex::encode(stored.hasher.finalize()),
    ))
}

/// Size and SHA-256 of what is uploaded.
#[derive(Default)]
struct StoredDigest {
    hasher: Sha256,
    bytes: u64,
}

impl StoredDigest {
    async fn put(&mut self, upload: &mut WriteMultipart, part: Vec<u8>) -> Result<(), BackupError> {
        if part.is_empty() {
            return Ok(());
        }
        self.hasher.update(&part);
        self.bytes += part.len() as u64;
        upload.wait_for_capacity(PARTS_IN_FLIGHT).await?;
        upload.put(Bytes::from(part));
        Ok(())
    }
}
