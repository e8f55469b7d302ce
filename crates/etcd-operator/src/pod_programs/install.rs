//! Installing the running binary into a shared `emptyDir`, so that a
//! container of another image (etcd's) runs the next program.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use super::file_error::{FileError, io};

/// Copies the running binary to `target` (mode 0555), atomically.
pub fn install_self(target: &Path) -> Result<(), FileError> {
    let source = std::env::current_exe().map_err(io("locating", Path::new("/proc/self/exe")))?;
    let temporary = target.with_extension("tmp");
    fs::copy(&source, &temporary).map_err(io("copying to", &temporary))?;
    fs::set_permissions(&temporary, fs::Permissions::from_mode(0o555))
        .map_err(io("setting the mode of", &temporary))?;
    fs::rename(&temporary, target).map_err(io("renaming into", target))
}
