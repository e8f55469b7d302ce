//! Verification of etcd snapshots as they stream by.
//!
//! etcd's maintenance Snapshot API sends the bbolt database followed by 32
//! bytes: the SHA-256 of everything before them. `etcdutl snapshot restore`
//! checks that trailer; so do we, on the way to the object store and again
//! on the way back, without holding the snapshot in memory.

use sha2::{Digest, Sha256};

/// Length of etcd's SHA-256 trailer.
pub const TRAILER_LEN: usize = 32;

/// Why a snapshot stream is not a whole etcd snapshot.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SnapshotCheckError {
    /// Fewer bytes than one database page and the trailer.
    #[error("only {bytes} bytes: too short to be an etcd snapshot")]
    TooShort {
        /// Bytes of the stream.
        bytes: u64,
    },
    /// Not whole 512-byte database pages plus the trailer: cut short.
    #[error(
        "{bytes} bytes is not a whole number of database pages plus the 32-byte hash (truncated?)"
    )]
    NotWholePages {
        /// Bytes of the stream.
        bytes: u64,
    },
    /// The trailer is not the SHA-256 of the database before it.
    #[error("embedded SHA-256 {embedded} does not match the content's {computed}")]
    HashMismatch {
        /// Hex of the trailer.
        embedded: String,
        /// Hex SHA-256 of the database.
        computed: String,
    },
}

/// Checks a snapshot stream against its SHA-256 trailer. Feed every chunk in
/// order with [`SnapshotVerifier::update`], then call
/// [`SnapshotVerifier::finish`].
#[derive(Clone)]
pub struct SnapshotVerifier {
    hasher: Sha256,
    /// The last (up to) 32 bytes seen: the trailer candidate, not hashed yet.
    tail: Vec<u8>,
    total: u64,
}

/// A verified snapshot: its length (trailer included) and SHA-256.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifiedSnapshot {
    /// Bytes of the whole snapshot, trailer included, as `etcdctl snapshot
    /// save` writes it.
    pub size: u64,
    /// Hex SHA-256 of the database (the embedded trailer).
    pub sha256: String,
}

impl Default for SnapshotVerifier {
    fn default() -> Self {
        Self::new()
    }
}

impl SnapshotVerifier {
    /// A verifier that has seen nothing yet.
    pub fn new() -> Self {
        Self {
            hasher: Sha256::new(),
            tail: Vec::with_capacity(2 * TRAILER_LEN),
            total: 0,
        }
    }

    /// Bytes seen so far.
    pub fn bytes_seen(&self) -> u64 {
        self.total
    }

    /// Feeds the next chunk of the stream.
    pub fn update(&mut self, chunk: &[u8]) {
        self.total += chunk.len() as u64;
        if chunk.len() >= TRAILER_LEN {
            // Everything held back so far and all but the last 32 bytes of
            // this chunk are database content.
            self.hasher.update(&self.tail);
            let (body, tail) = chunk.split_at(chunk.len() - TRAILER_LEN);
            self.hasher.update(body);
            self.tail.clear();
            self.tail.extend_from_slice(tail);
        } else {
            self.tail.extend_from_slice(chunk);
            if self.tail.len() > TRAILER_LEN {
                let excess = self.tail.len() - TRAILER_LEN;
                self.hasher.update(&self.tail[..excess]);
                self.tail.drain(..excess);
            }
        }
    }

    /// Checks the trailer: refused when the stream is too short, not a
    /// whole number of 512-byte blocks plus the trailer (truncated), or
    /// its hash does not match.
    pub fn finish(self) -> Result<VerifiedSnapshot, SnapshotCheckError> {
        if self.tail.len() < TRAILER_LEN || self.total < 512 + TRAILER_LEN as u64 {
            return Err(SnapshotCheckError::TooShort { bytes: self.total });
        }
        // bbolt files are whole pages; etcd appends exactly 32 bytes.
        if !(self.total - TRAILER_LEN as u64).is_multiple_of(512) {
            return Err(SnapshotCheckError::NotWholePages { bytes: self.total });
        }
        let computed = self.hasher.finalize();
        if computed.as_slice() != self.tail.as_slice() {
            return Err(SnapshotCheckError::HashMismatch {
                embedded: hex::encode(&self.tail),
                computed: hex::encode(computed),
            });
        }
        Ok(VerifiedSnapshot {
            size: self.total,
            sha256: hex::encode(computed),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn snapshot(pages: usize) -> Vec<u8> {
        let mut db: Vec<u8> = (0..pages * 4096).map(|i| (i * 31 % 251) as u8).collect();
        let hash = Sha256::digest(&db);
        db.extend_from_slice(&hash);
        db
    }

    fn verify_in_chunks(data: &[u8], chunk: usize) -> Result<VerifiedSnapshot, SnapshotCheckError> {
        let mut verifier = SnapshotVerifier::new();
        for part in data.chunks(chunk) {
            verifier.update(part);
        }
        verifier.finish()
    }

    #[test]
    fn accepts_a_snapshot_in_any_chunking() {
        let data = snapshot(3);
        let expected = hex::encode(&data[data.len() - 32..]);
        for chunk in [1, 7, 31, 32, 33, 4096, 100_000] {
            let verified = verify_in_chunks(&data, chunk).expect("valid");
            assert_eq!(verified.size, data.len() as u64);
            assert_eq!(verified.sha256, expected);
        }
    }

    #[test]
    fn refuses_a_flipped_byte() {
        let mut data = snapshot(2);
        data[5000] ^= 0x40;
        let error = verify_in_chunks(&data, 1000).expect_err("corrupt");
        let embedded = hex::encode(&data[data.len() - 32..]);
        assert!(
            matches!(&error, SnapshotCheckError::HashMismatch { embedded: e, computed }
                if *e == embedded && *computed != embedded),
            "{error}"
        );
        assert!(error.to_string().contains("does not match"), "{error}");
    }

    #[test]
    fn refuses_a_truncated_snapshot() {
        let data = snapshot(2);
        let cut = data.len() - 100;
        let error = verify_in_chunks(&data[..cut], 1000).expect_err("truncated");
        assert_eq!(
            error,
            SnapshotCheckError::NotWholePages { bytes: cut as u64 }
        );
        assert!(error.to_string().contains("truncated"), "{error}");
        let error = verify_in_chunks(&data[..10], 1000).expect_err("short");
        assert_eq!(error, SnapshotCheckError::TooShort { bytes: 10 });
        assert!(error.to_string().contains("too short"), "{error}");
    }
}
