//! The JSON object stored beside each snapshot: what it holds and how to
//! check it. A backup is complete once its metadata exists; the metadata is
//! written after the snapshot object and deleted before it.

use chrono::{DateTime, SecondsFormat, Utc};
use kube::{Resource, ResourceExt};
use serde::{Deserialize, Serialize};

use super::encryption::EncryptionInfo;

/// Suffix of a stored snapshot (zstd-compressed etcd snapshot).
pub const SNAPSHOT_SUFFIX: &str = ".db.zst";
/// Added after [`SNAPSHOT_SUFFIX`] when the object is encrypted.
pub const ENCRYPTED_SUFFIX: &str = ".enc";
/// Suffix of a backup's metadata object.
pub const METADATA_SUFFIX: &str = ".json";
/// Version of the metadata format written by this operator.
pub const FORMAT: u32 = 1;

/// Everything recorded about one full backup.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct BackupMetadata {
    /// Metadata format version ([`FORMAT`]).
    pub format: u32,
    /// Namespace of the `EtcdCluster`.
    pub namespace: String,
    /// Name of the `EtcdCluster`.
    pub cluster: String,
    /// etcd cluster ID (hex).
    #[serde(rename = "clusterID")]
    pub cluster_id: String,
    /// ID (hex) of the member the snapshot came from.
    #[serde(rename = "memberID")]
    pub member_id: String,
    /// Revision of the member when the snapshot started: every write up to
    /// it is in the snapshot (the snapshot may hold a few later ones).
    pub revision: i64,
    /// etcd server version of that member.
    pub etcd_version: String,
    /// Bytes of the snapshot, uncompressed, trailer included.
    pub snapshot_bytes: u64,
    /// Hex SHA-256 of the database, equal to etcd's embedded trailer.
    pub sha256: String,
    /// Name of the snapshot object, relative to the cluster's folder.
    pub object: String,
    /// Compression of the snapshot object.
    pub compression: String,
    /// How the snapshot object is encrypted after compression; absent
    /// when it is stored in plaintext (and in every backup written before
    /// encryption existed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub encryption: Option<EncryptionInfo>,
    /// Bytes of the snapshot object.
    pub stored_bytes: u64,
    /// Hex SHA-256 of the snapshot object as stored (encrypted, when it
    /// is).
    pub stored_sha256: String,
    /// When streaming started.
    pub started_at: DateTime<Utc>,
    /// When the snapshot object was complete.
    pub completed_at: DateTime<Utc>,
    /// The object whose controller took the backup; absent in backups
    /// written before writers were recorded (and in those taken by other
    /// tools). Retention deletes only backups of its own writer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub written_by: Option<BackupWriter>,
}

/// Who took a backup: the `EtcdBackupSchedule` or `EtcdBackup` whose
/// controller wrote it.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct BackupWriter {
    /// Kind of the object (`EtcdBackupSchedule`, `EtcdBackup`).
    pub kind: String,
    /// Its namespace.
    pub namespace: String,
    /// Its name.
    pub name: String,
    /// Its UID when it wrote the backup, for people tracing a backup to
    /// an object; empty when unknown.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub uid: String,
}

impl BackupWriter {
    /// The writer of the backups taken for `object` (an
    /// `EtcdBackupSchedule` or an `EtcdBackup`).
    pub fn of<K: Resource<DynamicType = ()>>(object: &K) -> Self {
        Self {
            kind: K::kind(&()).into_owned(),
            namespace: object.namespace().unwrap_or_default(),
            name: object.name_any(),
            uid: object.uid().unwrap_or_default(),
        }
    }

    /// Whether `other` is the same writer: same kind, namespace and name.
    /// The UID is not compared, so that a schedule deleted and created
    /// again under its name (a re-applied manifest) keeps pruning the
    /// backups its predecessor wrote instead of leaving them forever.
    pub fn is(&self, other: &BackupWriter) -> bool {
        self.kind == other.kind && self.namespace == other.namespace && self.name == other.name
    }
}

impl std::fmt::Display for BackupWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}/{}", self.kind, self.namespace, self.name)
    }
}

impl BackupMetadata {
    /// Name of the metadata object beside the snapshot object.
    pub fn metadata_name(&self) -> String {
        metadata_name_for(&self.object)
    }

    /// The backup's name: its objects' names without suffixes.
    pub fn name(&self) -> String {
        let metadata = self.metadata_name();
        metadata
            .strip_suffix(METADATA_SUFFIX)
            .unwrap_or(&metadata)
            .to_string()
    }
}

/// The base name of a backup as written before names carried a tag:
/// `full-<UTC time>-r<revision>`, which sorts by time (tests make such
/// backups; they are read like any other).
#[cfg(test)]
pub fn backup_base_name(started_at: DateTime<Utc>, revision: i64) -> String {
    format!("full-{}-r{revision}", name_time(started_at))
}

/// The base name of a backup a writer is about to take:
/// `full-<UTC time>.<tag>-r<revision>`, `tag` 6 random hex digits. Two
/// writers sharing a folder (two schedules firing on the same minute) can
/// start at the same millisecond at the same revision: without the tag
/// both would write the same objects, one's snapshot under the other's
/// metadata. Still sorts by time, and still matches `backupName`'s shape.
pub fn unique_backup_base_name(started_at: DateTime<Utc>, revision: i64, tag: [u8; 3]) -> String {
    format!(
        "full-{}.{}-r{revision}",
        name_time(started_at),
        hex::encode(tag)
    )
}

fn name_time(at: DateTime<Utc>) -> String {
    at.to_rfc3339_opts(SecondsFormat::Millis, true)
        .replace([':', '-'], "")
}

/// The metadata object's name for a snapshot object's name.
pub fn metadata_name_for(object: &str) -> String {
    let object = object.strip_suffix(ENCRYPTED_SUFFIX).unwrap_or(object);
    let base = object.strip_suffix(SNAPSHOT_SUFFIX).unwrap_or(object);
    format!("{base}{METADATA_SUFFIX}")
}

#[cfg(test)]
mod tests {
    use chrono::TimeZone;

    use super::*;

    #[test]
    fn names_sort_by_time() {
        let a = Utc
            .with_ymd_and_hms(2026, 1, 2, 3, 4, 5)
            .single()
            .expect("time");
        let b = Utc
            .with_ymd_and_hms(2026, 1, 2, 13, 4, 5)
            .single()
            .expect("time");
        let name_a = backup_base_name(a, 99);
        let name_b = backup_base_name(b, 7);
        assert_eq!(name_a, "full-20260102T030405.000Z-r99");
        assert!(name_a < name_b);
        // Two writers at the same millisecond and revision: other names,
        // both still sorting before a later one and of backupName's shape.
        let first = unique_backup_base_name(a, 99, [0, 0x1f, 0xa2]);
        let second = unique_backup_base_name(a, 99, [0xff, 0, 7]);
        assert_eq!(first, "full-20260102T030405.000Z.001fa2-r99");
        assert_ne!(first, second);
        assert!(first < name_b && second < name_b);
        for name in [&first, &second] {
            let (time, revision) = name
                .strip_prefix("full-")
                .and_then(|rest| rest.rsplit_once("-r"))
                .expect("shape");
            assert!(time.chars().all(|c| c.is_ascii_alphanumeric() || c == '.'));
            assert!(revision.chars().all(|c| c.is_ascii_digit()));
        }
        assert_eq!(
            metadata_name_for(&format!("{name_a}{SNAPSHOT_SUFFIX}")),
            format!("{name_a}.json")
        );
        assert_eq!(
            metadata_name_for(&format!("{name_a}{SNAPSHOT_SUFFIX}{ENCRYPTED_SUFFIX}")),
            format!("{name_a}.json")
        );
    }

    #[test]
    fn format_1_metadata_without_encryption_still_reads() {
        let json = r#"{"format":1,"namespace":"prod","cluster":"main","clusterID":"a1",
            "memberID":"b2","revision":42,"etcdVersion":"3.6.5","snapshotBytes":1056,
            "sha256":"00","object":"full-x-r42.db.zst","compression":"zstd",
            "storedBytes":100,"storedSha256":"11","startedAt":"2026-01-02T03:04:05Z",
            "completedAt":"2026-01-02T03:04:06Z"}"#;
        let metadata: BackupMetadata = serde_json::from_str(json).expect("format 1");
        assert_eq!(metadata.encryption, None);
        assert_eq!(metadata.written_by, None, "no writer recorded");
        let written = serde_json::to_string(&metadata).expect("json");
        assert!(!written.contains("encryption"), "{written}");
        assert!(!written.contains("writtenBy"), "{written}");
    }

    #[test]
    fn the_writer_is_recorded_and_compared_without_its_uid() {
        let writer = BackupWriter {
            kind: "EtcdBackupSchedule".into(),
            namespace: "prod".into(),
            name: "nightly".into(),
            uid: "u-1".into(),
        };
        let value = serde_json::to_value(&writer).expect("json");
        assert_eq!(
            value,
            serde_json::json!({"kind": "EtcdBackupSchedule", "namespace": "prod",
                "name": "nightly", "uid": "u-1"})
        );
        let recreated = BackupWriter {
            uid: "u-2".into(),
            ..writer.clone()
        };
        assert!(writer.is(&recreated));
        for other in [
            BackupWriter {
                name: "hourly".into(),
                ..writer.clone()
            },
            BackupWriter {
                kind: "EtcdBackup".into(),
                ..writer.clone()
            },
            BackupWriter {
                namespace: "staging".into(),
                ..writer.clone()
            },
        ] {
            assert!(!writer.is(&other), "{other}");
        }
        assert_eq!(writer.to_string(), "EtcdBackupSchedule prod/nightly");
    }
}
