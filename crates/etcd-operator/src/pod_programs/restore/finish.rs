//! `finish`: the restored data dir moved into place, the old one kept,
//! the identity marker of the new incarnation written last.

use std::fs;
use std::path::Path;

use super::{RestoreLayout, RestoreVolumeError};
use crate::pod_programs::file_error::io;
use crate::pod_programs::identity_marker::{MARKER_FILE_NAME, MemberMarker, write_marker_file};

/// `restore-volume finish`.
pub fn finish(
    layout: &RestoreLayout,
    volume: &Path,
    token: &str,
    member_name: &str,
) -> Result<(), RestoreVolumeError> {
    if !layout.staging.join("member").is_dir() {
        return Err(RestoreVolumeError::NothingRestored(layout.staging.clone()));
    }
    if !layout.kept.exists() {
        if layout.data.exists() {
            fs::rename(&layout.data, &layout.kept).map_err(io("keeping", &layout.data))?;
        }
    } else if layout.data.exists() {
        // A restored dir of an earlier run: replaced by this one.
        fs::remove_dir_all(&layout.data).map_err(io("removing", &layout.data))?;
    }
    fs::rename(&layout.staging, &layout.data).map_err(io("moving into place", &layout.data))?;
    for file in [&layout.source_db, &layout.backup_db, &layout.plan] {
        if file.exists() {
            fs::remove_file(file).map_err(io("removing", file))?;
        }
    }
    for dir in [&layout.segments, &layout.survivor_copy, &layout.base] {
        if dir.exists() {
            fs::remove_dir_all(dir).map_err(io("removing", dir))?;
        }
    }
    fs::File::open(volume)
        .and_then(|d| d.sync_all())
        .map_err(io("syncing", volume))?;
    write_marker_file(
        &volume.join(MARKER_FILE_NAME),
        &MemberMarker {
            cluster_token: token.to_string(),
            member_name: member_name.to_string(),
            cluster_id: None,
            member_id: None,
            has_had_data: true,
        },
    )?;
    Ok(())
}
