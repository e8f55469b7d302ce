//! The programs the operator's binary runs inside the Pods it creates, as
//! subcommands of `etcd-operator`:
//!
//! - [`member_guard`] (`member-guard`): the init container of every member
//!   Pod, and the start of its etcd container; refuses to start etcd on
//!   data that is not the member's (durability rule 1);
//! - [`restore`] (`restore-volume <step>`): the steps of the restore Pod,
//!   which restore a survivor's data or a backup into a new incarnation on
//!   one member's volume;
//! - [`volume_usage`] (`volume-usage`): the sidecar of every member Pod,
//!   which serves how full the member's volume is;
//! - [`backup_store`] (`backup-store`): the Pod that mounts the claim of a
//!   `persistentVolumeClaim` backup destination and serves it.
//!
//! What the operator needs from them — their command lines, where the
//! restore keeps its files, the report each ends with — is the contract
//! in [`crate::pod_contract`]; nothing here is read by the operator's
//! controller. Beside the programs: the [`identity_marker`] both write,
//! [`install`]ing this binary for a container of the etcd image,
//! [`file_error`] for I/O errors and [`termination`] for the report.

pub mod backup_store;
pub mod file_error;
pub mod identity_marker;
pub mod install;
pub mod member_guard;
pub mod restore;
pub mod termination;
pub mod volume_usage;
pub mod wal;

use std::process::ExitCode;

use crate::pod_contract::REFUSAL_EXIT_CODE;

/// Runs `member-guard`: returns success when etcd may start (or, with a
/// command to exec, never returns then; with etcd run as its child, etcd's
/// exit code); otherwise leaves the report and returns
/// [`REFUSAL_EXIT_CODE`] for a refusal, failure for anything else.
pub fn run_member_guard(args: member_guard::MemberGuardArgs) -> ExitCode {
    match member_guard::run(args) {
        Ok(member_guard::GuardEnd::Passed) => ExitCode::SUCCESS,
        Ok(member_guard::GuardEnd::EtcdExited(code)) => ExitCode::from(code),
        Err(error) => {
            termination::leave(&error.report());
            if error.is_refusal() {
                ExitCode::from(REFUSAL_EXIT_CODE)
            } else {
                ExitCode::FAILURE
            }
        }
    }
}

/// Runs one step of `restore-volume`; a failed step leaves its report.
pub fn run_restore_step(args: &restore::RestoreVolumeArgs) -> ExitCode {
    match restore::run(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            termination::leave(&error.report());
            ExitCode::FAILURE
        }
    }
}

/// Runs the `volume-usage` sidecar until it is told to stop; fails only
/// when it cannot start.
pub fn run_volume_usage(args: volume_usage::VolumeUsageArgs) -> ExitCode {
    match volume_usage::run(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            tracing::error!("{error}");
            ExitCode::FAILURE
        }
    }
}

/// Runs the store of a `persistentVolumeClaim` backup destination.
pub fn run_backup_store(args: backup_store::BackupStoreArgs) -> ExitCode {
    match backup_store::run(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            tracing::error!("{error}");
            ExitCode::FAILURE
        }
    }
}
