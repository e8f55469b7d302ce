//! The one way these programs add context to an I/O error: what they were
//! doing, and to which path.

use std::path::{Path, PathBuf};

/// An I/O error with the action and the path it concerned; one line.
#[derive(Debug, thiserror::Error)]
#[error("{action} {path}: {source}")]
pub struct FileError {
    /// What was being done (`reading`, `renaming into`...).
    pub action: &'static str,
    /// The path it was done to.
    pub path: PathBuf,
    /// What the system said.
    pub source: std::io::Error,
}

/// For `map_err`: the error of `action` on `path`.
pub fn io(action: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> FileError {
    let path = path.to_path_buf();
    move |source| FileError {
        action,
        path,
        source,
    }
}
