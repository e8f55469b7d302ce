//! `etcd-operator member-guard`: runs before every start of etcd in every
//! member pod (the init container, then the etcd container itself, which
//! execs etcd through it) and enforces durability rule 1 (identity ⇔ data).
//!
//! Next to the data directory, in the root of the member's volume, lives a
//! marker file (`member-identity.json`) naming the member the data belongs
//! to. The operator passes the identity it expects (from the PVC's
//! annotations) as arguments or environment variables. The guard:
//!
//! | data dir  | marker             | expected            | outcome                    |
//! |-----------|--------------------|---------------------|----------------------------|
//! | empty     | none               | new member allowed  | write marker, start        |
//! | empty     | none               | data expected       | refuse: data lost          |
//! | present   | none               | any                 | refuse: data of unknown origin |
//! | any       | disagrees          | any                 | refuse: foreign data       |
//! | present   | matches            | any                 | start (marker completed)   |
//! | empty     | matches, etcd never started | new member allowed | start             |
//! | empty     | matches, etcd started or had data | any  | refuse: data lost          |
//! | empty     | matches            | data expected       | refuse: data lost          |
//!
//! **Once etcd has started on a volume, that volume never starts etcd empty
//! under the same identity again.** The pass that execs etcd records
//! `has_had_data` in the marker (written and synced *before* the exec), so
//! from etcd's very first start an empty data dir under that marker is data
//! loss: etcd writes its WAL at once, and may vote and acknowledge writes
//! before the operator records the member ID on the PVC.
//!
//! The marker lives on the volume, so a volume recreated whole (filesystem
//! and marker gone) looks like a new one. Within a Pod a second copy covers
//! that: the Pod-scoped marker (`--seen-marker`, in an `emptyDir` that
//! survives container restarts) says what the guard let start in this Pod;
//! when it says etcd ran here, a volume without its marker is refused. A
//! *new* Pod on a volume recreated whole is only caught when the operator
//! passes `--expect-data` (it recorded on the PVC that etcd ran there).
//!
//! A refusal exits with
//! [`REFUSAL_EXIT_CODE`](crate::pod_contract::REFUSAL_EXIT_CODE) and ends with a
//! [`Report`](crate::pod_contract::Report) naming its
//! [kind](crate::pod_contract::Refusal); the operator reads it from the
//! Pod's container status (`lastState.terminated.message`) and replaces
//! the member instead of starting etcd on the wrong data.
//!
//! When etcd starts on an empty data dir to join a cluster that exists, the
//! guard does not exec etcd but stays its parent until the new member has
//! published its name, and restarts it once if etcd's publish race would
//! keep it from serving for its request timeout (see [`first_join`]).
//!
//! The guard is split by concern: [`decision`] is the pure table above,
//! [`check`] one pass on the volume, [`refusal`] what a refusal or a
//! failure says, [`first_join`] what the guard watches while a new member
//! joins, [`peer_reach`] its wait for a peer before that member's first
//! start and [`supervise`] the guard as etcd's parent then.

pub mod check;
pub mod decision;
pub mod first_join;
pub mod peer_reach;
pub mod refusal;
pub mod supervise;

use std::path::PathBuf;

use crate::etcd::parse_id;
use crate::pod_programs::file_error::io;
use crate::pod_programs::install::install_self;

pub use check::{CheckedVolume, check_volume};
pub use decision::{
    ExpectedIdentity, GuardDecision, GuardPass, VolumeState, decide, decide_in_pod,
};
pub use refusal::{MarkerField, MemberGuardError, Refusal};

/// Arguments of `etcd-operator member-guard`.
#[derive(Debug, Clone, clap::Args)]
pub struct MemberGuardArgs {
    /// etcd's data directory (`--data-dir` of etcd). It must be a
    /// subdirectory of the volume, so the marker can live beside it.
    #[arg(long, env = "MEMBER_GUARD_DATA_DIR")]
    pub data_dir: PathBuf,

    /// The marker file. Default: `member-identity.json` in the parent of
    /// the data directory.
    #[arg(long, env = "MEMBER_GUARD_MARKER_FILE")]
    pub marker_file: Option<PathBuf>,

    /// The token of the cluster incarnation (`--initial-cluster-token`).
    #[arg(long, env = "MEMBER_GUARD_CLUSTER_TOKEN")]
    pub cluster_token: String,

    /// The member's name (`--name`).
    #[arg(long, env = "MEMBER_GUARD_MEMBER_NAME")]
    pub member_name: String,

    /// The cluster ID in hex, when the operator knows it.
    #[arg(long, env = "MEMBER_GUARD_CLUSTER_ID", value_parser = parse_hex_id)]
    pub cluster_id: Option<u64>,

    /// The member ID in hex, when the operator knows it (known as soon as
    /// the member is added, before it first starts).
    #[arg(long, env = "MEMBER_GUARD_MEMBER_ID", value_parser = parse_hex_id)]
    pub member_id: Option<u64>,

    /// The member has run on this volume before and must find its data
    /// (the operator saw it started). Without it, an empty volume is
    /// accepted as a new member.
    #[arg(long, env = "MEMBER_GUARD_EXPECT_DATA", default_value_t = false)]
    pub expect_data: bool,

    /// A Pod-scoped copy of the marker (in an `emptyDir`, which lives as
    /// long as the Pod): written after every pass, and read at the next
    /// start of a container of the same Pod. While it exists the volume's
    /// own marker must still be there and agree: a marker that vanished
    /// under a running Pod means the volume was wiped or replaced, even when
    /// the operator has not recorded the member ID yet.
    #[arg(long, env = "MEMBER_GUARD_SEEN_MARKER")]
    pub seen_marker: Option<PathBuf>,

    /// After a pass, copy this executable to this path (the init container
    /// installs the guard into an `emptyDir`, so that the etcd container can
    /// run it before every start of etcd, restarts included).
    #[arg(long, env = "MEMBER_GUARD_INSTALL_TO")]
    pub install_to: Option<PathBuf>,

    /// After a pass, replace this process with this command (etcd), so that
    /// etcd never starts on data the guard has not checked.
    #[arg(last = true)]
    pub exec: Vec<String>,
}

/// An argument that is not an etcd ID.
#[derive(Debug, thiserror::Error)]
#[error("{0:?} is not a hexadecimal etcd ID")]
pub struct NotAnId(String);

fn parse_hex_id(text: &str) -> Result<u64, NotAnId> {
    parse_id(text).ok_or_else(|| NotAnId(text.to_owned()))
}

/// How the guard ends when it let etcd start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GuardEnd {
    /// The volume passed and there was no command to run (or to exec).
    Passed,
    /// The guard ran etcd as its child (a new member's join) and etcd
    /// exited: the guard exits with this code.
    EtcdExited(u8),
}

/// Runs the guard: read the volume, decide, write the marker if needed,
/// then exec etcd (or, for a new member's join, run it as a child).
/// `Ok` means etcd may start or has run; the caller prints the error and
/// exits non-zero otherwise.
pub fn run(args: MemberGuardArgs) -> Result<GuardEnd, MemberGuardError> {
    let volume = check_volume(&args)?;
    if let Some(target) = &args.install_to {
        install_self(target)?;
    }
    if let Some((program, rest)) = args.exec.split_first() {
        let join_metrics = (!volume.data_present)
            .then(|| first_join::join_metrics_address(rest))
            .flatten();
        if let Some(metrics) = join_metrics {
            return supervise::run_watched(&args, metrics).map(GuardEnd::EtcdExited);
        }
        use std::os::unix::process::CommandExt;
        let error = std::process::Command::new(program).args(rest).exec();
        return Err(io("executing", std::path::Path::new(program))(error).into());
    }
    Ok(GuardEnd::Passed)
}

#[cfg(test)]
mod tests;
