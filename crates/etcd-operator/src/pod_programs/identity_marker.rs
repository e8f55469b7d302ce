//! The identity marker: a file in the root of a member's volume, beside
//! the data directory, naming the member the data belongs to. The member
//! guard reads and completes it; the restore's last step writes the one
//! of the new incarnation.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::file_error::{FileError, io};

/// The marker's file name, in the parent of the data directory.
pub const MARKER_FILE_NAME: &str = "member-identity.json";

/// The identity the data of a volume belongs to, as stored in the marker.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemberMarker {
    pub cluster_token: String,
    pub member_name: String,
    /// Hex, like etcd prints it.
    #[serde(default, skip_serializing_if = "Option::is_none", with = "hex_id")]
    pub cluster_id: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none", with = "hex_id")]
    pub member_id: Option<u64>,
    /// Set before the guard first lets etcd start under this marker (and
    /// whenever it sees etcd's data): from then on an empty data directory
    /// means the data was lost.
    #[serde(default)]
    pub has_had_data: bool,
}

/// Why a marker could not be found, read or written; one line.
#[derive(Debug, thiserror::Error)]
pub enum MarkerError {
    #[error("identity marker {path} is unreadable: {reason}")]
    Unreadable { path: PathBuf, reason: String },
    #[error("identity marker {path} cannot be encoded: {source}")]
    Encode {
        path: PathBuf,
        source: serde_json::Error,
    },
    #[error("data dir {0} has no parent directory for the identity marker")]
    NoLocation(PathBuf),
    #[error(transparent)]
    File(#[from] FileError),
}

/// `member-identity.json` beside the data directory.
pub fn default_marker_path(data_dir: &Path) -> Result<PathBuf, MarkerError> {
    let parent = data_dir
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .ok_or_else(|| MarkerError::NoLocation(data_dir.to_path_buf()))?;
    Ok(parent.join(MARKER_FILE_NAME))
}

/// The marker at `path`; `None` when there is no file.
pub fn read_marker(path: &Path) -> Result<Option<MemberMarker>, MarkerError> {
    let bytes = match fs::read(path) {
        Ok(bytes) => bytes,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => return Err(io("reading", path)(source).into()),
    };
    let unreadable = |reason: String| MarkerError::Unreadable {
        path: path.to_path_buf(),
        reason,
    };
    // Bytes that are not even text are as unreadable as broken JSON.
    let text = String::from_utf8(bytes).map_err(|e| unreadable(e.to_string()))?;
    serde_json::from_str(&text)
        .map(Some)
        .map_err(|e| unreadable(e.to_string()))
}

/// Writes the marker atomically (temporary file, fsync, rename, fsync dir).
pub fn write_marker_file(path: &Path, marker: &MemberMarker) -> Result<(), MarkerError> {
    let text = serde_json::to_string_pretty(marker).map_err(|source| MarkerError::Encode {
        path: path.to_path_buf(),
        source,
    })?;
    let temporary = path.with_extension("json.tmp");
    let mut file = fs::File::create(&temporary).map_err(io("creating", &temporary))?;
    file.write_all(text.as_bytes())
        .and_then(|()| file.write_all(b"\n"))
        .and_then(|()| file.sync_all())
        .map_err(io("writing", &temporary))?;
    fs::rename(&temporary, path).map_err(io("renaming into", path))?;
    if let Some(dir) = path.parent() {
        fs::File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(io("syncing", dir))?;
    }
    Ok(())
}

mod hex_id {
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(id: &Option<u64>, serializer: S) -> Result<S::Ok, S::Error> {
        match id {
            Some(id) => serializer.serialize_str(&crate::etcd::format_id(*id)),
            None => serializer.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<Option<u64>, D::Error> {
        let text: Option<String> = Option::deserialize(deserializer)?;
        text.map(|t| {
            crate::etcd::parse_id(&t)
                .ok_or_else(|| serde::de::Error::custom(format!("{t:?} is not a hexadecimal ID")))
        })
        .transpose()
    }
}
