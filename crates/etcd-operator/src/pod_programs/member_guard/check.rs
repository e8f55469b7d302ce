//! One pass of the guard on the volume: read the markers and the data
//! dir, decide, and write the markers when etcd may start.

use std::fs;
use std::path::Path;

use super::MemberGuardArgs;
use super::decision::{ExpectedIdentity, GuardDecision, GuardPass, VolumeState, decide_in_pod};
use super::refusal::{MemberGuardError, Refusal};
use crate::pod_programs::file_error::io;
use crate::pod_programs::identity_marker::{
    MarkerError, default_marker_path, read_marker, write_marker_file,
};

/// The guard's pass without its side jobs (install, exec): read the volume
/// and the Pod-scoped marker, decide, and write both markers (synced) when
/// the decision is to start. With a command to exec, this pass records that
/// etcd ran on the volume before returning.
pub fn check_volume(args: &MemberGuardArgs) -> Result<CheckedVolume, MemberGuardError> {
    let marker_path = match &args.marker_file {
        Some(path) => path.clone(),
        None => default_marker_path(&args.data_dir)?,
    };
    // A marker that cannot be read proves nothing: the data is refused, like
    // foreign data, rather than retried forever.
    let marker = read_marker(&marker_path).map_err(|error| match error {
        MarkerError::Unreadable { path, reason } => {
            MemberGuardError::Refused(Refusal::CorruptMarker {
                member_name: args.member_name.clone(),
                path: path.display().to_string(),
                reason,
            })
        }
        other => other.into(),
    })?;
    let volume = VolumeState {
        marker,
        data_present: data_present(&args.data_dir)?,
    };
    let seen = match &args.seen_marker {
        Some(path) => read_marker(path)?,
        None => None,
    };
    let expected = ExpectedIdentity {
        cluster_token: args.cluster_token.clone(),
        member_name: args.member_name.clone(),
        cluster_id: args.cluster_id,
        member_id: args.member_id,
        expect_data: args.expect_data,
    };
    let pass = if args.exec.is_empty() {
        GuardPass::Check
    } else {
        GuardPass::StartEtcd
    };
    // A command that cannot run must not be recorded as a start of etcd.
    if let Some(program) = args.exec.first() {
        ensure_executable(Path::new(program))?;
    }
    let passed = match decide_in_pod(&expected, seen.as_ref(), &volume, pass) {
        GuardDecision::Refuse(refusal) => return Err(refusal.into()),
        GuardDecision::Start { write_marker } => {
            if let Some(marker) = &write_marker {
                write_marker_file(&marker_path, marker)?;
            }
            write_marker.or(volume.marker)
        }
    };
    if let (Some(path), Some(marker)) = (&args.seen_marker, &passed) {
        write_marker_file(path, marker)?;
    }
    Ok(CheckedVolume {
        data_present: volume.data_present,
    })
}

/// What a pass that lets etcd start found on the volume.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CheckedVolume {
    /// The data directory had entries: etcd starts on its data, not as a
    /// new member.
    pub data_present: bool,
}

/// Fails unless `program` is a file with an execute bit, so that the marker
/// never says etcd started when the exec was bound to fail. A bare name is
/// looked up in `PATH` by the exec and not checked here.
fn ensure_executable(program: &Path) -> Result<(), MemberGuardError> {
    use std::os::unix::fs::PermissionsExt;
    if program.components().count() < 2 {
        return Ok(());
    }
    let metadata = fs::metadata(program).map_err(io("finding", program))?;
    if metadata.is_file() && metadata.permissions().mode() & 0o111 != 0 {
        Ok(())
    } else {
        let denied = std::io::Error::from(std::io::ErrorKind::PermissionDenied);
        Err(io("executing", program)(denied).into())
    }
}

fn data_present(data_dir: &Path) -> Result<bool, MemberGuardError> {
    match fs::read_dir(data_dir) {
        Ok(mut entries) => Ok(entries.next().is_some()),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(source) => Err(io("listing", data_dir)(source).into()),
    }
}
