//! Errors of the backup module, each with a category that decides between
//! retrying with back-off and waiting for a change of the spec.

use std::time::Duration;

use super::segment_check::SegmentCheckError;
use super::segment_format::EncodeError;
use super::source_refusal::SourceRefusals;
use super::verify::SnapshotCheckError;

/// What kind of failure a [`BackupError`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BackupErrorCategory {
    /// Worth retrying with back-off: an unreachable member or endpoint, a
    /// timeout, a server error.
    Transient,
    /// The spec or its Secret is wrong (bad bucket, missing key, bad cron):
    /// wait for a change instead of retrying quickly.
    Configuration,
    /// The data is wrong: a snapshot or a stored backup that fails
    /// verification. Never used for a restore.
    Corrupt,
}

/// A failure to take, store, list, verify or restore a backup.
#[derive(Debug, thiserror::Error)]
pub enum BackupError {
    /// The destination spec cannot be turned into a store.
    #[error("invalid backup destination: {0}")]
    Destination(String),

    /// A credential key the destination needs is missing from its Secret.
    #[error("Secret {secret} has no key {key}")]
    MissingCredential {
        /// The Secret's name.
        secret: String,
        /// The missing key.
        key: &'static str,
    },

    /// The encryption key cannot be had: its Secret or key is missing, or
    /// its value is not a 256-bit key.
    #[error("encryption key: {0}")]
    EncryptionKey(String),

    /// A backup was sealed with another key than the one configured.
    #[error(
        "backup {backup} was encrypted with key {encrypted_with}, the Secret's key is {configured}"
    )]
    WrongKey {
        /// The backup's name (`full-<time>-r<revision>`).
        backup: String,
        /// Fingerprint recorded in the backup's metadata.
        encrypted_with: String,
        /// Fingerprint of the configured key.
        configured: String,
    },

    /// Sealing or opening an encrypted object failed, or a key is not
    /// usable; the category follows the kind (a bad key is configuration,
    /// a tampered or truncated object is corrupt).
    #[error("encrypted object: {0}")]
    Encryption(#[from] super::encryption::EncryptionError),

    /// A backup is encrypted and no key is configured.
    #[error(
        "backup {backup} was encrypted with key {encrypted_with}; no encryption key is configured"
    )]
    KeyNeeded {
        /// The backup's name (`full-<time>-r<revision>`).
        backup: String,
        /// Fingerprint recorded in the backup's metadata.
        encrypted_with: String,
    },

    /// The `EtcdCluster` to back up does not decode into this operator's
    /// type (a newer CRD version, a field of another type): the cluster
    /// controller takes no action on it, and no backup is taken of it
    /// until the object changes or the operator is upgraded.
    #[error(
        "this operator cannot read EtcdCluster {cluster} at {path}: {message}; no backup is taken until the object changes"
    )]
    UnreadableCluster {
        /// `namespace/name` of the cluster.
        cluster: String,
        /// JSON path of the field at fault.
        path: String,
        /// What serde said about it.
        message: String,
    },

    /// No member could serve a snapshot.
    #[error("no healthy member to take a snapshot from: {0}")]
    NoHealthyMember(String),

    /// The client certificate for a TLS cluster could not be read.
    #[error("the cluster's TLS: {0}")]
    ClusterTls(String),

    /// The store of a `persistentVolumeClaim` destination does not serve
    /// yet (its Pod is starting, or cannot start: the message says which).
    #[error("the backup store is not ready: {0}")]
    StoreNotReady(String),

    /// None of the endpoints asked can serve a snapshot: each one and why.
    #[error("no healthy member to take a snapshot from: {0}")]
    NoSnapshotSource(SourceRefusals),

    /// The snapshot stream from etcd failed.
    #[error("snapshot stream from {endpoint} failed: {message}")]
    Stream {
        /// The member's endpoint.
        endpoint: String,
        /// etcd's or the transport's message.
        message: String,
    },

    /// The snapshot did not arrive within the time allowed.
    #[error("snapshot from {endpoint} did not finish within {timeout:?}")]
    Timeout {
        /// The member's endpoint.
        endpoint: String,
        /// The deadline.
        timeout: Duration,
    },

    /// A snapshot or a stored backup failed verification.
    #[error("backup {location} is corrupt: {reason}")]
    Corrupt {
        /// The snapshot's endpoint or the stored object's URL.
        location: String,
        /// What does not match.
        #[source]
        reason: Corruption,
    },

    /// The object store refused or failed a request.
    #[error("object store: {0}")]
    Store(#[from] object_store::Error),

    /// Reading or writing a local file failed.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },

    /// A metadata object is not valid JSON of the expected shape.
    #[error("metadata {location} is unreadable: {source}")]
    Metadata {
        /// The metadata object's URL.
        location: String,
        /// The parse error.
        #[source]
        source: serde_json::Error,
    },

    /// No backup matches the request.
    #[error("no backup found under {0}")]
    NotFound(String),

    /// A watch, read or transaction of incremental backup or replay failed
    /// on the etcd side (connection, timeout, server error).
    #[error("etcd {endpoint}: {message}")]
    Etcd {
        /// The endpoints dialled.
        endpoint: String,
        /// etcd's or the transport's message.
        message: String,
    },

    /// Replaying incremental segments cannot go on: the restored etcd is
    /// not where the segments expect it (another writer, a different
    /// base, a revision out of reach).
    #[error("replay stopped at revision {revision}: {reason}")]
    Replay {
        /// The revision the restored etcd holds.
        revision: i64,
        /// What does not match.
        reason: String,
    },
}

/// What is wrong with data found corrupt ([`BackupError::Corrupt`]).
#[derive(Debug, thiserror::Error)]
pub enum Corruption {
    /// A snapshot stream from etcd that fails its SHA-256 trailer check.
    #[error("snapshot stream: {0}")]
    SnapshotStream(#[source] SnapshotCheckError),
    /// A stored snapshot that fails the same check once read back.
    #[error(transparent)]
    Snapshot(#[from] SnapshotCheckError),
    /// A stored segment of incremental backup that fails its checks.
    #[error(transparent)]
    Segment(#[from] SegmentCheckError),
    /// An event from etcd's watch that a segment cannot hold.
    #[error(transparent)]
    Event(#[from] EncodeError),
    /// Any other mismatch, described.
    #[error("{0}")]
    Described(String),
}

impl From<String> for Corruption {
    fn from(description: String) -> Self {
        Self::Described(description)
    }
}

impl From<&str> for Corruption {
    fn from(description: &str) -> Self {
        Self::Described(description.to_string())
    }
}

impl BackupError {
    /// The category: retry, wait for a spec change, or refuse the data.
    pub fn category(&self) -> BackupErrorCategory {
        match self {
            Self::Destination(_)
            | Self::MissingCredential { .. }
            | Self::EncryptionKey(_)
            | Self::WrongKey { .. }
            | Self::KeyNeeded { .. }
            | Self::UnreadableCluster { .. } => BackupErrorCategory::Configuration,
            Self::Corrupt { .. } | Self::Metadata { .. } | Self::Replay { .. } => {
                BackupErrorCategory::Corrupt
            }
            Self::Encryption(error) => {
                use super::encryption::EncryptionError as E;
                match error {
                    E::InvalidKey(_) | E::WrongKey { .. } => BackupErrorCategory::Configuration,
                    E::Random(_) => BackupErrorCategory::Transient,
                    E::NotEncrypted
                    | E::UnsupportedVersion(_)
                    | E::Truncated(_)
                    | E::Tampered { .. }
                    | E::TooLarge => BackupErrorCategory::Corrupt,
                }
            }
            Self::Store(error) => match error {
                object_store::Error::NotFound { .. }
                | object_store::Error::PermissionDenied { .. }
                | object_store::Error::Unauthenticated { .. }
                | object_store::Error::UnknownConfigurationKey { .. }
                | object_store::Error::InvalidPath { .. } => BackupErrorCategory::Configuration,
                _ => BackupErrorCategory::Transient,
            },
            Self::NoHealthyMember(_)
            | Self::StoreNotReady(_)
            | Self::ClusterTls(_)
            | Self::NoSnapshotSource(_)
            | Self::Stream { .. }
            | Self::Timeout { .. }
            | Self::Io { .. }
            | Self::Etcd { .. }
            | Self::NotFound(_) => BackupErrorCategory::Transient,
        }
    }

    /// Whether the backup waits for something being set up (the store Pod
    /// of a claim, the certificates of a new TLS cluster) rather than
    /// failing: a one-shot backup does not count it as an attempt.
    pub fn is_waiting(&self) -> bool {
        matches!(self, Self::StoreNotReady(_) | Self::ClusterTls(_))
    }

    pub(crate) fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        Self::Io {
            context: context.into(),
            source,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::error::Error as _;

    use super::*;
    use crate::backup::segment_format::DecodeError;

    fn corrupt(reason: Corruption) -> BackupError {
        BackupError::Corrupt {
            location: "memory:///prod/main/x".to_string(),
            reason,
        }
    }

    #[test]
    fn corruption_reads_as_before_and_keeps_its_cause() {
        let streamed = corrupt(Corruption::SnapshotStream(SnapshotCheckError::TooShort {
            bytes: 10,
        }));
        assert_eq!(
            streamed.to_string(),
            "backup memory:///prod/main/x is corrupt: snapshot stream: only 10 bytes: too short to be an etcd snapshot"
        );
        let cause = streamed
            .source()
            .and_then(|reason| reason.source())
            .and_then(|check| check.downcast_ref::<SnapshotCheckError>());
        assert_eq!(cause, Some(&SnapshotCheckError::TooShort { bytes: 10 }));

        let stored = corrupt(SnapshotCheckError::NotWholePages { bytes: 600 }.into());
        assert!(stored.to_string().ends_with("is corrupt: 600 bytes is not a whole number of database pages plus the 32-byte hash (truncated?)"), "{stored}");
        let segment =
            corrupt(SegmentCheckError::from(DecodeError::UnknownVersion { version: 3 }).into());
        assert!(
            segment.to_string().ends_with(
                "is corrupt: segment format version 3 is not known (this operator reads versions 1 to 2)"
            ),
            "{segment}"
        );
        let event = corrupt(EncodeError::KeyTooLong { len: 5 }.into());
        assert!(
            event
                .to_string()
                .ends_with("is corrupt: key of 5 bytes is too long"),
            "{event}"
        );
        let described = corrupt("digest poisoned".into());
        assert!(
            described
                .to_string()
                .ends_with("is corrupt: digest poisoned"),
            "{described}"
        );

        for error in [streamed, stored, segment, event, described] {
            assert_eq!(error.category(), BackupErrorCategory::Corrupt, "{error}");
        }
    }
}
