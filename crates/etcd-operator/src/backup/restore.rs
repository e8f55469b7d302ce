//! Reading backups back: listing them, and downloading one into a local
//! snapshot file that `etcdutl snapshot restore` accepts, verified on the
//! way (stored SHA-256 and size, decryption of every chunk when encrypted,
//! decompression, etcd's embedded SHA-256, snapshot size). A corrupted or
//! truncated backup is refused before any file is left where a restore
//! would use it; one encrypted with another key is refused before anything
//! is downloaded or created.

use std::path::Path as FsPath;

use async_compression::tokio::bufread::ZstdDecoder;
use futures::{StreamExt, TryStreamExt};
use object_store::ObjectStoreExt;
use sha2::{Digest, Sha256};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_util::io::StreamReader;

use super::encryption::{EncryptionInfo, EncryptionKey, OpeningReader, SCHEME, encryption_error};
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

/// The newest complete backup.
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
    read_verified(store, metadata, key, &mut tokio::io::sink()).await
}

/// Downloads a backup into `target` (an etcd snapshot file, trailer
/// included). Writes to `<target>.partial` and renames only once every
/// check passed; on failure nothing is left at `target`.
pub async fn download_backup(
    store: &BackupStore,
    metadata: &BackupMetadata,
    target: &FsPath,
) -> Result<VerifiedSnapshot, BackupError> {
    let key = key_for(store, metadata)?;
    let partial = target.with_extension("partial");
    let file = tokio::fs::File::create(&partial)
        .await
        .map_err(|e| BackupError::io(format!("create {}", partial.display()), e))?;
    let mut writer = tokio::io::BufWriter::new(file);
    let result = read_verified(store, metadata, key, &mut writer).await;
    let result = match result {
        Ok(verified) => writer
            .flush()
            .await
            .and(Ok(verified))
            .map_err(|e| BackupError::io(format!("write {}", partial.display()), e)),
        Err(error) => Err(error),
    };
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

async fn read_verified<W: tokio::io::AsyncWrite + Unpin>(
    store: &BackupStore,
    metadata: &BackupMetadata,
    key: Option<&EncryptionKey>,
    out: &mut W,
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
    // Hash and count the stored bytes as they pass into the decryption
    // (when encrypted) and the decoder.
    let stored = std::sync::Arc::new(std::sync::Mutex::new((Sha256::new(), 0u64)));
    let counter = stored.clone();
    let body = store
        .store()
        .get(&path)
        .await?
        .into_stream()
        .inspect(move |chunk| {
            if let (Ok(chunk), Ok(mut digest)) = (chunk, counter.lock()) {
                digest.0.update(chunk);
                digest.1 += chunk.len() as u64;
            }
        })
        .map_err(std::io::Error::other);
    let mut decoder = ZstdDecoder::new(OpeningReader::new(StreamReader::new(body), key));
    let mut verifier = SnapshotVerifier::new();
    let mut buffer = vec![0u8; 1024 * 1024];
    loop {
        let read = decoder
            .read(&mut buffer)
            .await
            .map_err(|e| match encryption_error(&e) {
                Some(error) => corrupt(format!("cannot decrypt: {error}")),
                None => corrupt(format!("cannot decompress: {e}")),
            })?;
        if read == 0 {
            break;
        }
        verifier.update(&buffer[..read]);
        out.write_all(&buffer[..read])
            .await
            .map_err(|e| BackupError::io(format!("write the snapshot of {location}"), e))?;
    }
    let (stored_sha256, stored_bytes) = {
        let digest = stored
            .lock()
            .map_err(|_| corrupt("digest poisoned".to_string()))?;
        (hex::encode(digest.0.clone().finalize()), digest.1)
    };
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
