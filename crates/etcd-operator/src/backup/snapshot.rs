//! Taking a full backup: stream a snapshot from a member, verify it,
//! compress it with zstd, seal it when the store has an encryption key,
//! and upload it in parts, then write its metadata. Memory stays bounded
//! by a few parts, whatever the database size.

use std::time::{Duration, Instant};

use std::io::Write;

use bytes::{Bytes, BytesMut};
use chrono::Utc;
use object_store::{ObjectStoreExt, PutPayload};
use sha2::{Digest, Sha256};
use tokio::sync::mpsc;

use super::encryption::{EncryptionKey, Sealer};
use super::metadata::{
    BackupMetadata, BackupWriter, ENCRYPTED_SUFFIX, FORMAT, SNAPSHOT_SUFFIX,
    unique_backup_base_name,
};
use super::part_upload::PartUpload;
use super::source::{SnapshotSource, choose_source, ids, open_snapshot, settle_revision};
use super::verify::SnapshotVerifier;
use super::{BackupError, BackupStore, Corruption};
use crate::etcd::ConnectSettings;

/// Size of each uploaded part (S3 needs at least 5 MiB but the last).
pub const PART_SIZE: usize = 8 * 1024 * 1024;
/// Parts uploaded concurrently.
const PARTS_IN_FLIGHT: usize = 2;
/// zstd level of full backups: level 1 took 1.25× etcdctl's time to S3
/// where level 3 took 1.45× on the same quiet machine, for 3 % more stored
/// bytes (docs/backup.md).
pub const DEFAULT_ZSTD_LEVEL: i32 = 1;
/// zstd worker threads of full backups.
pub const DEFAULT_ZSTD_WORKERS: u32 = 0;

/// How a backup is taken.
#[derive(Debug, Clone)]
pub struct SnapshotOptions {
    /// Timeouts of the status probes and of connecting.
    pub settings: ConnectSettings,
    /// Longest wait for the next message of the snapshot stream.
    pub stall_timeout: Duration,
    /// zstd level (1 fastest .. 19 smallest); 3 is zstd's default.
    pub zstd_level: i32,
    /// Worker threads of zstd's own; 0 compresses in the backup's
    /// compression thread.
    pub zstd_workers: u32,
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
            zstd_level: DEFAULT_ZSTD_LEVEL,
            zstd_workers: DEFAULT_ZSTD_WORKERS,
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
    /// Of which the upload's end took, once the snapshot's last byte was
    /// handed to it: the parts still in flight and the store's completion
    /// (an S3 `CompleteMultipartUpload`, the local store's rename).
    pub completion: Duration,
    /// Of the upload's end, the store's completion alone, once every part
    /// was stored: the store's own work, not this process's.
    pub store_completion: Duration,
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
    let mut source = choose_source(endpoints, &options.settings).await?;
    settle_revision(&mut source, &options.settings).await;
    let mut tag = [0u8; 3];
    getrandom::fill(&mut tag).map_err(|e| {
        BackupError::io(
            "drawing the tag of the backup's name",
            std::io::Error::other(e.to_string()),
        )
    })?;
    let base = unique_backup_base_name(started_at, source.revision, tag);
    let key = store.encryption();
    let sealed = if key.is_some() { ENCRYPTED_SUFFIX } else { "" };
    let object = format!("{base}{SNAPSHOT_SUFFIX}{sealed}");
    let path = store.path(&object);
    let location = store.url(&path);

    let mut stream = open_snapshot(&source, &options.settings).await?;
    let upload = store.store().put_multipart(&path).await?;
    let mut upload = PartUpload::new(upload);
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
    let completing = Instant::now();
    let store_completion = upload.finish().await?;
    let completion = completing.elapsed();

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
        completion,
        store_completion,
    })
}

/// Streams, verifies, compresses, seals (with `key`) and hands parts to
/// the upload, each stage on its own so that they overlap: this task reads
/// the stream and feeds the upload; a thread checks etcd's hash; a thread
/// compresses (with zstd's own workers when asked), seals and cuts parts.
/// Each stage holds a few chunks at most, so memory stays bounded by a few
/// parts. Returns the verified snapshot, the stored size and the stored
/// SHA-256.
async fn stream_into(
    stream: &mut etcd_client::SnapshotStreaming,
    upload: &mut PartUpload,
    source: &SnapshotSource,
    location: &str,
    key: Option<&EncryptionKey>,
    options: &SnapshotOptions,
) -> Result<(super::verify::VerifiedSnapshot, u64, String), BackupError> {
    let sealer = key
        .map(Sealer::new)
        .transpose()
        .map_err(|e| BackupError::Io {
            context: format!("encrypt the snapshot for {location}"),
            source: std::io::Error::other(e),
        })?;
    let (verify_tx, verify_rx) = mpsc::channel::<Bytes>(CHUNKS_QUEUED);
    let (compress_tx, compress_rx) = mpsc::channel::<Bytes>(CHUNKS_QUEUED);
    let (parts_tx, mut parts_rx) = mpsc::channel::<Bytes>(1);
    let verifying = tokio::task::spawn_blocking(move || verify_chunks(verify_rx));
    let (level, workers) = (options.zstd_level, options.zstd_workers);
    let compressing = tokio::task::spawn_blocking(move || {
        compress_chunks(
            compress_rx,
            level,
            workers,
            PartCutter::new(sealer, parts_tx),
        )
    });
    let reading = read_stream(
        stream,
        [verify_tx, compress_tx],
        source,
        options.stall_timeout,
    );
    let uploading = async {
        while let Some(part) = parts_rx.recv().await {
            upload.put(part, PARTS_IN_FLIGHT).await?;
        }
        Ok::<(), BackupError>(())
    };
    let (read, uploaded) = tokio::join!(reading, uploading);
    let stage = |e: tokio::task::JoinError| {
        BackupError::io(
            format!("compress the snapshot for {location}"),
            std::io::Error::other(e),
        )
    };
    let compressed = compressing.await.map_err(stage)?;
    let verifier = verifying.await.map_err(stage)?;
    // The first cause wins: a stage that stopped stops the ones before it.
    uploaded?;
    let (stored_bytes, stored_sha256) = compressed
        .map_err(|e| BackupError::io(format!("compress the snapshot for {location}"), e))?;
    read?;
    let verified = verifier.finish().map_err(|error| BackupError::Corrupt {
        location: source.endpoint.clone(),
        reason: Corruption::SnapshotStream(error),
    })?;
    Ok((verified, stored_bytes, stored_sha256))
}

/// Bytes of the snapshot handed to the stages at once.
const CHUNK_BYTES: usize = 1024 * 1024;
/// Chunks waiting before each stage; the stream is read no further ahead.
const CHUNKS_QUEUED: usize = 4;

/// Reads the snapshot stream into chunks of [`CHUNK_BYTES`] and hands each
/// to every stage.
async fn read_stream(
    stream: &mut etcd_client::SnapshotStreaming,
    stages: [mpsc::Sender<Bytes>; 2],
    source: &SnapshotSource,
    stall_timeout: Duration,
) -> Result<(), BackupError> {
    let stopped = || {
        BackupError::io(
            format!("stream the snapshot of {}", source.endpoint),
            std::io::Error::other("a stage of the backup stopped"),
        )
    };
    let mut chunk = BytesMut::with_capacity(CHUNK_BYTES);
    loop {
        let message = tokio::time::timeout(stall_timeout, stream.message())
            .await
            .map_err(|_| BackupError::Timeout {
                endpoint: source.endpoint.clone(),
                timeout: stall_timeout,
            })?
            .map_err(|e| BackupError::Stream {
                endpoint: source.endpoint.clone(),
                message: e.to_string(),
            })?;
        let end = message.is_none();
        if let Some(message) = &message {
            chunk.extend_from_slice(message.blob());
        }
        if chunk.len() >= CHUNK_BYTES || (end && !chunk.is_empty()) {
            let full = std::mem::replace(&mut chunk, BytesMut::with_capacity(CHUNK_BYTES)).freeze();
            for stage in &stages {
                stage.send(full.clone()).await.map_err(|_| stopped())?;
            }
        }
        if end {
            return Ok(());
        }
    }
}

/// The hash-check stage: etcd's trailer checked over every chunk.
fn verify_chunks(mut chunks: mpsc::Receiver<Bytes>) -> SnapshotVerifier {
    let mut verifier = SnapshotVerifier::new();
    while let Some(chunk) = chunks.blocking_recv() {
        verifier.update(&chunk);
    }
    verifier
}

/// The compression stage: zstd at `level` with `workers` threads of its
/// own (0: in this thread), into `parts`. Returns the stored size and
/// SHA-256.
fn compress_chunks(
    mut chunks: mpsc::Receiver<Bytes>,
    level: i32,
    workers: u32,
    parts: PartCutter,
) -> std::io::Result<(u64, String)> {
    let mut encoder = zstd::stream::write::Encoder::new(parts, level)?;
    if workers > 0 {
        encoder.multithread(workers)?;
    }
    while let Some(chunk) = chunks.blocking_recv() {
        encoder.write_all(&chunk)?;
    }
    encoder.finish()?.finish()
}

/// Seals (with a key) what zstd writes and cuts it into parts of exactly
/// [`PART_SIZE`] (the last one shorter: some stores take only parts of one
/// size) for the upload, hashing and counting the stored bytes.
struct PartCutter {
    sealer: Option<Sealer>,
    part: Vec<u8>,
    parts: mpsc::Sender<Bytes>,
    hasher: Sha256,
    bytes: u64,
}

impl PartCutter {
    fn new(sealer: Option<Sealer>, parts: mpsc::Sender<Bytes>) -> Self {
        Self {
            sealer,
            part: Vec::with_capacity(PART_SIZE),
            parts,
            hasher: Sha256::new(),
            bytes: 0,
        }
    }

    /// Sends the part cut so far, at most [`PART_SIZE`] of it; what is
    /// beyond starts the next part.
    fn send(&mut self) -> std::io::Result<()> {
        if self.part.is_empty() {
            return Ok(());
        }
        let mut next = Vec::with_capacity(PART_SIZE);
        if self.part.len() > PART_SIZE {
            next.extend_from_slice(&self.part[PART_SIZE..]);
            self.part.truncate(PART_SIZE);
        }
        let part = std::mem::replace(&mut self.part, next);
        self.hasher.update(&part);
        self.bytes += part.len() as u64;
        self.parts
            .blocking_send(Bytes::from(part))
            .map_err(|_| std::io::Error::other("the upload stopped"))
    }

    /// Seals the last chunk and sends the last part: the stored size and
    /// SHA-256.
    fn finish(mut self) -> std::io::Result<(u64, String)> {
        if let Some(sealer) = self.sealer.take() {
            sealer
                .finish(&mut self.part)
                .map_err(std::io::Error::other)?;
        }
        while !self.part.is_empty() {
            self.send()?;
        }
        Ok((self.bytes, hex::encode(self.hasher.finalize())))
    }
}

impl Write for PartCutter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match &mut self.sealer {
            Some(sealer) => sealer
                .push(buf, &mut self.part)
                .map_err(std::io::Error::other)?,
            None => self.part.extend_from_slice(buf),
        }
        while self.part.len() >= PART_SIZE {
            self.send()?;
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parts_are_cut_to_one_size_whatever_the_writes() {
        let (parts_tx, mut parts_rx) = mpsc::channel::<Bytes>(64);
        let mut cutter = PartCutter::new(None, parts_tx);
        let mut written = Vec::new();
        // Writes of odd sizes, one of them longer than two parts.
        for (i, size) in [1, PART_SIZE - 1, 3, 2 * PART_SIZE + 17, 5, 123_457]
            .into_iter()
            .enumerate()
        {
            let chunk = vec![i as u8; size];
            cutter.write_all(&chunk).expect("written");
            written.extend_from_slice(&chunk);
        }
        let (bytes, sha256) = cutter.finish().expect("finished");
        let mut parts = Vec::new();
        while let Ok(part) = parts_rx.try_recv() {
            parts.push(part);
        }
        let (last, whole) = parts.split_last().expect("parts");
        assert!(whole.iter().all(|p| p.len() == PART_SIZE));
        assert!(!last.is_empty() && last.len() <= PART_SIZE);
        let joined: Vec<u8> = parts.iter().flat_map(|p| p.iter().copied()).collect();
        assert_eq!(joined, written);
        assert_eq!(bytes, written.len() as u64);
        assert_eq!(sha256, hex::encode(Sha256::digest(&written)));
    }
}
