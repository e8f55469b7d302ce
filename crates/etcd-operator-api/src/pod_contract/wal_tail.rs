//! What a member's write-ahead log holds: the document the `volume-usage`
//! sidecar of every member Pod serves on request, and the one reader of it.
//!
//! `GET http://<pod IP>:`[`VOLUME_USAGE_PORT`](super::VOLUME_USAGE_PORT)[`WAL_TAIL_PATH`]
//! reads the log of the member's volume (read-only, whether etcd runs or
//! not) and answers one JSON document, for example
//!
//! ```text
//! {"version":1,"lastIndex":1042,"lastTerm":3,"persistedCommit":1039,"torn":false}
//! ```
//!
//! Version 1: `lastIndex` and `lastTerm`, the index and term of the last
//! entry the log holds (what raft compares to tell the more up-to-date of
//! two logs; an entry there may be acknowledged to a client although this
//! member had not yet learnt it was committed), `persistedCommit`, the
//! commit index of its last `HardState` record, and `torn`, whether the
//! last file ends in a torn or damaged record (the entries before it
//! count). Fields may be added within a version; a change an older reader
//! would misread is a new version, which that reader refuses.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The version of the document this operator serves and reads.
pub const WAL_TAIL_VERSION: u64 = 1;

/// The path of the document.
pub const WAL_TAIL_PATH: &str = "/wal-tail";

/// What a member's write-ahead log holds (version [`WAL_TAIL_VERSION`]).
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct WalTailReport {
    /// Index of the last entry.
    pub last_index: u64,
    /// Term of the last entry.
    pub last_term: u64,
    /// Commit index of the last `HardState` record.
    pub persisted_commit: u64,
    /// The last file ends in a torn or damaged record.
    pub torn: bool,
}

#[derive(Serialize)]
struct Versioned<'a> {
    version: u64,
    #[serde(flatten)]
    tail: &'a WalTailReport,
}

/// A document this operator cannot read.
#[derive(Debug, thiserror::Error)]
pub enum WalTailParseError {
    /// Not a JSON object.
    #[error("the WAL tail is not a JSON object: {0}")]
    NotAnObject(String),
    /// Another version (or none), as written.
    #[error("the WAL tail has a version this operator cannot read: {0}")]
    UnknownVersion(String),
    /// Of this version, but a field is missing or of another type.
    #[error("the WAL tail of version {WAL_TAIL_VERSION} is malformed: {0}")]
    Malformed(#[source] serde_json::Error),
}

impl WalTailReport {
    /// The document, one line of JSON.
    pub fn to_json(&self) -> String {
        let versioned = Versioned {
            version: WAL_TAIL_VERSION,
            tail: self,
        };
        // Only integers, a boolean and fixed names: cannot fail.
        serde_json::to_string(&versioned).unwrap_or_default()
    }

    /// Reads a document: its version first, then its fields.
    pub fn from_json(body: &[u8]) -> Result<Self, WalTailParseError> {
        let value: Value = serde_json::from_slice(body)
            .map_err(|e| WalTailParseError::NotAnObject(e.to_string()))?;
        let Value::Object(fields) = value else {
            return Err(WalTailParseError::NotAnObject(value.to_string()));
        };
        match fields.get("version") {
            Some(version) if version.as_u64() == Some(WAL_TAIL_VERSION) => {}
            Some(other) => return Err(WalTailParseError::UnknownVersion(other.to_string())),
            None => return Err(WalTailParseError::UnknownVersion("none".to_owned())),
        }
        serde_json::from_value(Value::Object(fields)).map_err(WalTailParseError::Malformed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_document_reads_back_as_written_and_other_versions_are_refused() {
        let tail = WalTailReport {
            last_index: 1042,
            last_term: 3,
            persisted_commit: 1039,
            torn: false,
        };
        let json = tail.to_json();
        assert_eq!(
            json,
            r#"{"version":1,"lastIndex":1042,"lastTerm":3,"persistedCommit":1039,"torn":false}"#
        );
        assert_eq!(
            WalTailReport::from_json(json.as_bytes()).expect("read"),
            tail
        );
        assert!(matches!(
            WalTailReport::from_json(br#"{"version":2,"lastIndex":1}"#),
            Err(WalTailParseError::UnknownVersion(_))
        ));
        assert!(matches!(
            WalTailReport::from_json(br#"{"version":1,"lastIndex":1}"#),
            Err(WalTailParseError::Malformed(_))
        ));
        assert!(matches!(
            WalTailReport::from_json(b"[]"),
            Err(WalTailParseError::NotAnObject(_))
        ));
    }
}
