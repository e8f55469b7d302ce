//! Reading backups back: listing them, and downloading one into a local
//! snapshot file that `etcdutl snapshot restore` accepts, verified on the
//! way (stored SHA-256 and size, decryption of every chunk when encrypted,
//! decompression, etcd's embedded SHA-256, snapshot size). A corrupted or
//! truncated backup is refused before any file is left where a restore
//! would use it; one encrypted with another key is refused before anything
//! is downloaded or created.

use std::path::Path as FsPath;

use std::io::{BufRead, Read, Write};
use std::path::PathBuf as FsPathBuf;

use bytes::{Buf, Bytes};
use futures::StreamExt;
use object_store::ObjectStoreExt;
use sha2::{Digest, Sha256};
use tokio::sync::mpsc;

use super::encryption::{EncryptionInfo, EncryptionKey, Opener, SCHEME, encryption_error};
use super::metadata::{BackupMetadata, METADATA_SUFFIX};
use super::verify::{SnapshotVerifier, VerifiedSnapshot};
use super::{BackupError, BackupStore};

/// Every complete backup (one with metadata) of the store's cluster, oldest
/// first, whoever wrote it. Only the folder's own objects are read: a
/// folder nested in it (another cluster's, under a prefix that happens to
/// name this folder) holds none of this cluster's backups.
pub async fn list_backups(store: &BackupStore) -> Result<Vec<BackupMetadata>, BackupError> {
    let listed = store
        .store()
        .list_with_delimiter(Some(store.folder()))
        .await?;
    let mut names: Vec<_> = listed
        .objects
        .into_iter()
        .map(|meta| meta.location)
        .filter(|path| {
            path.filename()
                .is_some_and(|name| name.starts_with("full-") && name.ends_with(METADATA_SUFFIX))
        })
        .collect();
    names.sort();
    let mut backups = Vec::with_capacity(names.len());
    for path in names {
        let bytes = store.store().get(&path).await?.bytes().await?;
        let metadata: BackupMetadata =
            serde_json::from_slice(&bytes).map_err(|source| BackupError::Metadata {
                location: store.url(&path),
                source,
            })?;
        backups.push(metadata);
    }
    backups.sort_by_key(|b| b.started_at);
    Ok(backups)
}

/// The complete backup started last. Not what a restore starts from when
/// several writers share the folder: see [`super::restore_choice`].
pub async fn newest_backup(store: &BackupStore) -> Result<BackupMetadata, BackupError> {
    list_backups(store)
        .await?
        .pop()
        .ok_or_else(|| BackupError::NotFound(store.url(store.folder())))
}

/// Checks a stored backup end to end without keeping it.
pub async fn verify_backup(
    store: &BackupStore,
    metadata: &BackupMetadata,
) -> Result<VerifiedSnapshot, BackupError> {
    let key = key_for(store, metadata)?;
    read_verified(store, metadata, key, None).await
}

/// Downloads a backup into `target` (an etcd snapshot file, trailer
/// included). Writes to `<target>.partial`, makes it durable, and renames
/// it only once every check passed; on failure nothing is left at
/// `target`.
pub async fn download_backup(
    store: &BackupStore,
    metadata: &BackupMetadata,
    target: &FsPath,
) -> Result<VerifiedSnapshot, BackupError> {
    let key = key_for(store, metadata)?;
    let partial = target.with_extension("partial");
    let file = tokio::fs::File::create(&partial)
        .await
        .map_err(|e| BackupError::io(format!("create {}", partial.display()), e))?
        .into_std()
        .await;
    let result = read_verified(store, metadata, key, Some((file, partial.clone()))).await;
    match result {
        Ok(verified) => {
            tokio::fs::rename(&partial, target)
                .await
                .map_err(|e| BackupError::io(format!("rename to {}", target.display()), e))?;
            Ok(verified)
        }
        Err(error) => {
            let _ = tokio::fs::remove_file(&partial).await;
            Err(error)
        }
    }
}

/// The key to open a backup with: none for a plaintext backup; the
/// store's key when its fingerprint is the one the metadata records.
pub(crate) fn key_for<'a>(
    store: &'a BackupStore,
    metadata: &BackupMetadata,
) -> Result<Option<&'a EncryptionKey>, BackupError> {
    let location = store.url(&store.path(&metadata.object));
    opening_key(
        store,
        &metadata.name(),
        &location,
        metadata.encryption.as_ref(),
    )
}

/// The key to open the object `name` (at `location`) with, from what its
/// metadata records: none for plaintext; the store's key when its
/// fingerprint matches; otherwise an error naming both keys, before any
/// byte of the object is read.
pub(crate) fn opening_key<'a>(
    store: &'a BackupStore,
    name: &str,
    location: &str,
    encryption: Option<&EncryptionInfo>,
) -> Result<Option<&'a EncryptionKey>, BackupError> {
    let Some(info) = encryption else {
        return Ok(None);
    };
    if info.scheme != SCHEME {
        return Err(BackupError::Corrupt {
            location: location.to_string(),
            reason: format!(
                "unknown encryption scheme {:?} (this operator reads {SCHEME})",
                info.scheme
            )
            .into(),
        });
    }
    match store.encryption() {
        None => Err(BackupError::KeyNeeded {
            backup: name.to_string(),
            encrypted_with: info.key_fingerprint.clone(),
        }),
        Some(key) if key.fingerprint() != info.key_fingerprint => Err(BackupError::WrongKey {
            backup: name.to_string(),
            encrypted_with: info.key_fingerprint.clone(),
            configured: key.fingerprint(),
        }),
        Some(key) => Ok(Some(key)),
    }
}

/// Whether an object recorded with `encryption` is sealed exactly as the
/// store seals new objects (both plaintext, or the same key).
pub(crate) fn sealed_like_store(store: &BackupStore, encryption: Option<&EncryptionInfo>) -> bool {
    match (store.encryption(), encryption) {
        (None, None) => true,
        (Some(key), Some(info)) => key.fingerprint() == info.key_fingerprint,
        _ => false,
    }
}

/// Reads the stored object with every check, each stage on its own so that
/// they overlap: this task downloads and hashes the stored bytes; a thread
/// decrypts (with a key) and decompresses; a thread checks etcd's hash; a
/// thread writes the snapshot into `out` (a file and its path for errors)
/// and makes it durable, starting the write-back while the download goes
/// on. Each stage holds a few chunks at most.
async fn read_verified(
    store: &BackupStore,
    metadata: &BackupMetadata,
    key: Option<&EncryptionKey>,
    out: Option<(std::fs::File, FsPathBuf)>,
) -> Result<VerifiedSnapshot, BackupError> {
    let path = store.path(&metadata.object);
    let location = store.url(&path);
    let corrupt = |reason: String| BackupError::Corrupt {
        location: location.clone(),
        reason: reason.into(),
    };
    if metadata.compression != "zstd" {
        return Err(corrupt(format!(
            "unknown compression {:?}",
            metadata.compression
        )));
    }
    let mut body = store.store().get(&path).await?.into_stream();
    let (stored_tx, stored_rx) = mpsc::channel::<Bytes>(CHUNKS_QUEUED);
    let (verify_tx, verify_rx) = mpsc::channel::<Bytes>(CHUNKS_QUEUED);
    let (write_tx, write_rx) = mpsc::channel::<Bytes>(CHUNKS_QUEUED);
    let opener = key.map(Opener::new);
    let decompressing = tokio::task::spawn_blocking(move || {
        decompress_chunks(StoredReader::new(stored_rx, opener), [verify_tx, write_tx])
    });
    let verifying = tokio::task::spawn_blocking(move || {
        let mut verifier = SnapshotVerifier::new();
        let mut verify_rx = verify_rx;
        while let Some(chunk) = verify_rx.blocking_recv() {
            verifier.update(&chunk);
        }
        verifier
    });
    let writing = tokio::task::spawn_blocking(move || write_chunks(write_rx, out));
    // Hash and count the stored bytes as they arrive.
    let mut digest = Sha256::new();
    let mut stored_bytes = 0u64;
    let downloaded = async {
        while let Some(chunk) = body.next().await {
            let chunk = chunk?;
            digest.update(&chunk);
            stored_bytes += chunk.len() as u64;
            if stored_tx.send(chunk).await.is_err() {
                // The decompression stopped: its error says why.
                break;
            }
        }
        Ok::<(), BackupError>(())
    }
    .await;
    drop(stored_tx);
    let stage = |e: tokio::task::JoinError| {
        BackupError::io(
            format!("read the snapshot of {location}"),
            std::io::Error::other(e),
        )
    };
    let decompressed = decompressing.await.map_err(stage)?;
    let verifier = verifying.await.map_err(stage)?;
    let written = writing.await.map_err(stage)?;
    // The first cause wins: a stage that stopped stops the ones before it.
    downloaded?;
    decompressed.map_err(|e| match encryption_error(&e) {
        Some(error) => corrupt(format!("cannot decrypt: {error}")),
        None => corrupt(format!("cannot decompress: {e}")),
    })?;
    written?;
    let stored_sha256 = hex::encode(digest.finalize());
    if stored_bytes != metadata.stored_bytes {
        return Err(corrupt(format!(
            "stored object has {stored_bytes} bytes, the metadata says {} (truncated?)",
            metadata.stored_bytes
        )));
    }
    if stored_sha256 != metadata.stored_sha256 {
        return Err(corrupt(format!(
            "stored object's SHA-256 {stored_sha256} differs from the metadata's {}",
            metadata.stored_sha256
        )));
    }
    let verified = verifier.finish().map_err(|error| BackupError::Corrupt {
        location: location.clone(),
        reason: error.into(),
    })?;
    if verified.sha256 != metadata.sha256 || verified.size != metadata.snapshot_bytes {
        return Err(corrupt(format!(
            "snapshot is {} bytes with SHA-256 {}, the metadata says {} bytes with {}",
            verified.size, verified.sha256, metadata.snapshot_bytes, metadata.sha256
        )));
    }
    Ok(verified)
}

/// Bytes of snapshot handed on at once.
const CHUNK_BYTES: usize = 1024 * 1024;
/// Chunks waiting before each stage; the download reads no further ahead.
const CHUNKS_QUEUED: usize = 4;
/// Bytes written between two starts of the write-back.
const WRITE_BACK_BYTES: u64 = 64 * 1024 * 1024;

/// The decompression stage: the snapshot out of `stored`, in chunks of
/// [`CHUNK_BYTES`] handed to every stage after it. An error of decryption
/// comes out as the I/O error [`encryption_error`] recognises.
fn decompress_chunks(
    stored: StoredReader,
    stages: [mpsc::Sender<Bytes>; 2],
) -> std::io::Result<()> {
    let mut decoder = zstd::stream::read::Decoder::with_buffer(stored)?;
    loop {
        let mut chunk = vec![0u8; CHUNK_BYTES];
        let mut filled = 0;
        while filled < chunk.len() {
            match decoder.read(&mut chunk[filled..]) {
                Ok(0) => break,
                Ok(n) => filled += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        if filled == 0 {
            return Ok(());
        }
        chunk.truncate(filled);
        let chunk = Bytes::from(chunk);
        for stage in &stages {
            if stage.blocking_send(chunk.clone()).is_err() {
                return Err(std::io::Error::other("a stage of the download stopped"));
            }
        }
    }
}

/// The write stage: every chunk into the file (none for a check alone),
/// its write-back started every [`WRITE_BACK_BYTES`] by a thread of its
/// own, and the whole file durable at the end.
fn write_chunks(
    mut chunks: mpsc::Receiver<Bytes>,
    out: Option<(std::fs::File, FsPathBuf)>,
) -> Result<(), BackupError> {
    let Some((mut file, path)) = out else {
        while chunks.blocking_recv().is_some() {}
        return Ok(());
    };
    let failed = |e| BackupError::io(format!("write {}", path.display()), e);
    let (flush_tx, flush_rx) = std::sync::mpsc::sync_channel::<()>(1);
    let flushed = file.try_clone().map_err(failed)?;
    let flusher = std::thread::spawn(move || {
        while flush_rx.recv().is_ok() {
            flushed.sync_data()?;
        }
        Ok::<(), std::io::Error>(())
    });
    let mut since_flush = 0u64;
    let mut result = Ok(());
    while let Some(chunk) = chunks.blocking_recv() {
        if let Err(e) = file.write_all(&chunk) {
            result = Err(e);
            break;
        }
        since_flush += chunk.len() as u64;
        if since_flush >= WRITE_BACK_BYTES {
            // Busy flushing already: the next one will take these too.
            let _ = flush_tx.try_send(());
            since_flush = 0;
        }
    }
    drop(flush_tx);
    let flushed = flusher
        .join()
        .unwrap_or_else(|_| Err(std::io::Error::other("the write-back thread panicked")));
    result
        .and(flushed)
        .and_then(|()| file.sync_all())
        .map_err(failed)
}

/// The stored object as it downloads, opened chunk by chunk with the key
/// (only authenticated plaintext comes out) or passed through without.
struct StoredReader {
    chunks: mpsc::Receiver<Bytes>,
    opener: Option<Opener>,
    opening: bool,
    current: Bytes,
}

impl StoredReader {
    fn new(chunks: mpsc::Receiver<Bytes>, opener: Option<Opener>) -> Self {
        Self {
            chunks,
            opening: opener.is_some(),
            opener,
            current: Bytes::new(),
        }
    }
}

impl std::io::BufRead for StoredReader {
    fn fill_buf(&mut self) -> std::io::Result<&[u8]> {
        while self.current.is_empty() {
            let next = self.chunks.blocking_recv();
            if !self.opening {
                match next {
                    Some(chunk) => self.current = chunk,
                    None => break,
                }
                continue;
            }
            let mut opened = Vec::new();
            match (next, self.opener.take()) {
                (Some(chunk), Some(mut opener)) => {
                    opener.push(&chunk, &mut opened).map_err(invalid_data)?;
                    self.opener = Some(opener);
                }
                // The end of the object: its last chunk checked.
                (None, Some(opener)) => opener.finish(&mut opened).map_err(invalid_data)?,
                (_, None) => break,
            }
            self.current = Bytes::from(opened);
        }
        Ok(&self.current)
    }

    fn consume(&mut self, amount: usize) {
        self.current.advance(amount.min(self.current.len()));
    }
}

impl Read for StoredReader {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let available = self.fill_buf()?;
        let n = available.len().min(buf.len());
        buf[..n].copy_from_slice(&available[..n]);
        self.consume(n);
        Ok(n)
    }
}

fn invalid_data(error: super::encryption::EncryptionError) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, error)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use chrono::Utc;
    use object_store::PutPayload;
    use object_store::local::LocalFileSystem;

    use super::*;
    use crate::backup::BackupErrorCategory;
    use crate::backup::encryption::seal;
    use crate::backup::metadata::FORMAT;

    /// A snapshot as etcd streams it: whole pages and their SHA-256, larger
    /// than a few chunks of the download's stages.
    fn snapshot() -> Vec<u8> {
        let mut state = 0x9e37_79b9_u32;
        let mut db: Vec<u8> = (0..(3 * CHUNK_BYTES + 4096))
            .map(|i| {
                // Half compressible, half not, as the bench's data.
                if i % 8192 < 4096 {
                    b"kind: ConfigMap\n"[i % 16]
                } else {
                    state ^= state << 13;
                    state ^= state >> 17;
                    state ^= state << 5;
                    state as u8
                }
            })
            .collect();
        let hash = Sha256::digest(&db);
        db.extend_from_slice(&hash);
        db
    }

    /// `snapshot` stored in `store` as `take_backup` stores it, sealed
    /// with the store's key if any; returns its metadata.
    async fn stored(
        store: &BackupStore,
        snapshot: &[u8],
        tamper: fn(&mut Vec<u8>),
    ) -> BackupMetadata {
        let compressed = zstd::encode_all(snapshot, 3).expect("compress");
        let mut bytes = match store.encryption() {
            Some(key) => seal(key, &compressed).expect("seal"),
            None => compressed,
        };
        let metadata = BackupMetadata {
            format: FORMAT,
            namespace: "ns".into(),
            cluster: "c".into(),
            cluster_id: "1".into(),
            member_id: "2".into(),
            revision: 7,
            etcd_version: "3.6.0".into(),
            snapshot_bytes: snapshot.len() as u64,
            sha256: hex::encode(&snapshot[snapshot.len() - 32..]),
            object: format!(
                "full-x-r7.db.zst{}",
                if store.encryption().is_some() {
                    ".enc"
                } else {
                    ""
                }
            ),
            compression: "zstd".into(),
            encryption: store.encryption().map(EncryptionKey::info),
            stored_bytes: bytes.len() as u64,
            stored_sha256: hex::encode(Sha256::digest(&bytes)),
            started_at: Utc::now(),
            completed_at: Utc::now(),
            written_by: None,
        };
        tamper(&mut bytes);
        store
            .store()
            .put(&store.path(&metadata.object), PutPayload::from(bytes))
            .await
            .expect("put");
        metadata
    }

    fn local_store(dir: &FsPath) -> BackupStore {
        let store = LocalFileSystem::new_with_prefix(dir).expect("store");
        BackupStore::from_parts(Arc::new(store), "ns/c".into(), "file:///b".into())
    }

    #[tokio::test]
    async fn a_download_is_the_snapshot_byte_for_byte_with_or_without_a_key() {
        let snapshot = snapshot();
        for key in [None, Some(EncryptionKey::from_bytes([7; 32]))] {
            let dir = tempfile::tempdir().expect("tempdir");
            let store = local_store(dir.path()).with_encryption(key);
            let metadata = stored(&store, &snapshot, |_| {}).await;
            let target = dir.path().join("restore.db");
            let verified = download_backup(&store, &metadata, &target)
                .await
                .expect("download");
            assert_eq!(verified.size, snapshot.len() as u64);
            assert_eq!(std::fs::read(&target).expect("read"), snapshot);
            assert!(!target.with_extension("partial").exists());
            verify_backup(&store, &metadata).await.expect("verify");
        }
    }

    #[tokio::test]
    async fn a_flipped_or_missing_byte_is_refused_and_leaves_no_file() {
        let snapshot = snapshot();
        let tampering: [fn(&mut Vec<u8>); 3] = [
            |bytes| bytes[1000] ^= 0x01,
            |bytes| {
                let end = bytes.len() - 1;
                bytes[end] ^= 0x80;
            },
            |bytes| bytes.truncate(bytes.len() / 2),
        ];
        for key in [None, Some(EncryptionKey::from_bytes([7; 32]))] {
            for tamper in tampering {
                let dir = tempfile::tempdir().expect("tempdir");
                let store = local_store(dir.path()).with_encryption(key.clone());
                let metadata = stored(&store, &snapshot, tamper).await;
                let target = dir.path().join("restore.db");
                let error = download_backup(&store, &metadata, &target)
                    .await
                    .expect_err("corrupt");
                assert_eq!(error.category(), BackupErrorCategory::Corrupt, "{error}");
                assert!(
                    error.to_string().contains("file:///b/ns/c/full-x-r7"),
                    "{error}"
                );
                assert!(!target.exists());
                assert!(!target.with_extension("partial").exists());
                let error = verify_backup(&store, &metadata).await.expect_err("corrupt");
                assert_eq!(error.category(), BackupErrorCategory::Corrupt, "{error}");
            }
        }
    }
}
