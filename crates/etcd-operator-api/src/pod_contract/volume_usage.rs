//! How full a member's volume is: the document the `volume-usage` sidecar
//! of every member Pod serves, and the one reader of it.
//!
//! `GET http://<pod IP>:`[`VOLUME_USAGE_PORT`][`VOLUME_USAGE_PATH`]
//! answers one JSON document, measured at request time, for example
//!
//! ```text
//! {"version":1,"capacityBytes":2040373248,"availableBytes":1913651200,
//!  "usedBytes":110051328,"availableInodes":131061,"dbFileBytes":20480,
//!  "walBytes":64000000,"snapDirBytes":20480}
//! ```
//!
//! Version 1: the filesystem of the data dir as `statvfs` reports it —
//! `capacityBytes` (its size), `availableBytes` (free to a process without
//! privilege, what etcd can still write), `usedBytes` (capacity less every
//! free block, reserved ones included) and `availableInodes` (absent when
//! the filesystem counts none) — and what etcd's own files take on it, in
//! allocated bytes as `du` counts them: `dbFileBytes` (`member/snap/db`),
//! `walBytes` (the `member/wal` directory) and `snapDirBytes` (the whole
//! `member/snap` directory, the db file included). Each of those three is
//! absent when its path does not exist (etcd has not started on the
//! volume yet) or cannot be read. Fields may be added within a version and
//! readers ignore the ones they do not know; a change that an older reader
//! would misread is a new version, which that reader refuses
//! ([`VolumeUsageParseError::UnknownVersion`]).

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The version of the document this operator serves and reads.
pub const VOLUME_USAGE_VERSION: u64 = 1;

/// The sidecar's port: beside etcd's client (2379), peer (2380) and
/// metrics (2381) ports.
pub const VOLUME_USAGE_PORT: u16 = 2383;

/// The path of the document.
pub const VOLUME_USAGE_PATH: &str = "/volume-usage";

/// How full a member's volume is (version [`VOLUME_USAGE_VERSION`]).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct VolumeUsage {
    /// Size of the filesystem.
    pub capacity_bytes: u64,
    /// Free space a process without privilege can write (`f_bavail`).
    pub available_bytes: u64,
    /// Capacity less every free block (reserved blocks included).
    pub used_bytes: u64,
    /// Inodes a process without privilege can still create; absent when
    /// the filesystem counts none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub available_inodes: Option<u64>,
    /// Allocated bytes of etcd's database file, `member/snap/db`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub db_file_bytes: Option<u64>,
    /// Allocated bytes of etcd's write-ahead log, `member/wal`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wal_bytes: Option<u64>,
    /// Allocated bytes of `member/snap`: the db file and etcd's snapshots.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snap_dir_bytes: Option<u64>,
}

/// The document as served: the usage with its version first.
#[derive(Serialize)]
struct Versioned<'a> {
    version: u64,
    #[serde(flatten)]
    usage: &'a VolumeUsage,
}

/// A document this operator cannot read.
#[derive(Debug, thiserror::Error)]
pub enum VolumeUsageParseError {
    /// Not a JSON object.
    #[error("the volume usage is not a JSON object: {0}")]
    NotAnObject(String),
    /// Another version (or none), as written.
    #[error("the volume usage has a version this operator cannot read: {0}")]
    UnknownVersion(String),
    /// Of this version, but a field is missing or of another type.
    #[error("the volume usage of version {VOLUME_USAGE_VERSION} is malformed: {0}")]
    Malformed(#[source] serde_json::Error),
}

impl VolumeUsage {
    /// The document, one line of JSON.
    pub fn to_json(&self) -> String {
        let versioned = Versioned {
            version: VOLUME_USAGE_VERSION,
            usage: self,
        };
        // Only integers and fixed names: serialising cannot fail.
        serde_json::to_string(&versioned).unwrap_or_default()
    }

    /// Reads a document: its version first, then its fields.
    pub fn from_json(body: &[u8]) -> Result<Self, VolumeUsageParseError> {
        let value: Value = serde_json::from_slice(body)
            .map_err(|e| VolumeUsageParseError::NotAnObject(e.to_string()))?;
        let Value::Object(fields) = value else {
            return Err(VolumeUsageParseError::NotAnObject(value.to_string()));
        };
        match fields.get("version") {
            Some(version) if version.as_u64() == Some(VOLUME_USAGE_VERSION) => {}
            Some(other) => return Err(VolumeUsageParseError::UnknownVersion(other.to_string())),
            None => return Err(VolumeUsageParseError::UnknownVersion("none".to_owned())),
        }
        serde_json::from_value(Value::Object(fields)).map_err(VolumeUsageParseError::Malformed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn usage() -> VolumeUsage {
        VolumeUsage {
            capacity_bytes: 2_000_000,
            available_bytes: 1_500_000,
            used_bytes: 400_000,
            available_inodes: Some(1000),
            db_file_bytes: Some(20_480),
            wal_bytes: Some(64_000_000),
            snap_dir_bytes: None,
        }
    }

    #[test]
    fn a_document_reads_back_as_written() {
        let json = usage().to_json();
        assert!(json.starts_with(r#"{"version":1,"capacityBytes":2000000,"#));
        assert!(!json.contains("snapDirBytes"), "absent, not null: {json}");
        assert_eq!(
            VolumeUsage::from_json(json.as_bytes()).expect("read"),
            usage()
        );
    }

    #[test]
    fn the_wire_names_are_camel_case() {
        let body = br#"{"version":1,"capacityBytes":10,"availableBytes":4,"usedBytes":6,
            "dbFileBytes":1,"walBytes":2,"snapDirBytes":3}"#;
        let read = VolumeUsage::from_json(body).expect("read");
        assert_eq!(read.capacity_bytes, 10);
        assert_eq!(read.available_bytes, 4);
        assert_eq!(read.used_bytes, 6);
        assert_eq!(read.available_inodes, None);
        assert_eq!(read.db_file_bytes, Some(1));
        assert_eq!(read.wal_bytes, Some(2));
        assert_eq!(read.snap_dir_bytes, Some(3));
    }

    #[test]
    fn fields_added_within_the_version_are_ignored() {
        let body =
            br#"{"version":1,"capacityBytes":10,"availableBytes":4,"usedBytes":6,"someday":true}"#;
        let read = VolumeUsage::from_json(body).expect("read");
        assert_eq!(read.capacity_bytes, 10);
    }

    #[test]
    fn another_version_is_refused() {
        for body in [
            &br#"{"version":2,"capacityBytes":10,"availableBytes":4,"usedBytes":6}"#[..],
            br#"{"version":"1","capacityBytes":10,"availableBytes":4,"usedBytes":6}"#,
            br#"{"capacityBytes":10,"availableBytes":4,"usedBytes":6}"#,
        ] {
            let error = VolumeUsage::from_json(body).expect_err("refused");
            assert!(
                matches!(error, VolumeUsageParseError::UnknownVersion(_)),
                "{error}"
            );
        }
    }

    #[test]
    fn a_malformed_document_is_an_error() {
        let missing = br#"{"version":1,"capacityBytes":10}"#;
        assert!(matches!(
            VolumeUsage::from_json(missing),
            Err(VolumeUsageParseError::Malformed(_))
        ));
        let negative = br#"{"version":1,"capacityBytes":-1,"availableBytes":4,"usedBytes":6}"#;
        assert!(matches!(
            VolumeUsage::from_json(negative),
            Err(VolumeUsageParseError::Malformed(_))
        ));
        for body in [&b"[1]"[..], b"not json", b""] {
            assert!(matches!(
                VolumeUsage::from_json(body),
                Err(VolumeUsageParseError::NotAnObject(_))
            ));
        }
    }
}
