//! Why the guard refuses a volume, how else it can fail, and the report
//! each leaves for the operator.

use std::fmt;

use crate::pod_contract::{self, Outcome, Program, Report};
use crate::pod_programs::file_error::FileError;
use crate::pod_programs::identity_marker::MarkerError;

/// Why the guard refuses to start etcd. Each message is one line; every
/// refusal for missing data says "data is lost".
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error(
        "data dir is empty and has no identity marker, but member {member_name} is expected to have data: its data is lost, replace the member"
    )]
    DataLostNoMarker { member_name: String },
    #[error(
        "data dir is empty but the marker says etcd ran here as member {member_name}: its data is lost, replace the member"
    )]
    DataLost { member_name: String },
    #[error(
        "data dir and identity marker are gone, but etcd ran on this volume as member {member_name} in this pod: its data is lost, replace the member"
    )]
    VolumeWipedUnderPod { member_name: String },
    #[error(
        "data dir holds data without an identity marker: cannot prove it belongs to member {member_name}, refusing to start"
    )]
    DataWithoutMarker { member_name: String },
    #[error(
        "identity marker disagrees: {field} is {found} on the volume but {expected} is expected for member {member_name}"
    )]
    MarkerMismatch {
        member_name: String,
        field: MarkerField,
        found: String,
        expected: String,
    },
    #[error(
        "identity marker {path} is unreadable ({reason}): cannot prove the data belongs to member {member_name}, refusing to start"
    )]
    CorruptMarker {
        member_name: String,
        path: String,
        reason: String,
    },
}

impl Refusal {
    /// The kind of refusal the operator reads from the report.
    pub fn kind(&self) -> pod_contract::Refusal {
        match self {
            Refusal::DataLostNoMarker { .. }
            | Refusal::DataLost { .. }
            | Refusal::VolumeWipedUnderPod { .. } => pod_contract::Refusal::DataLost,
            Refusal::DataWithoutMarker { .. } => pod_contract::Refusal::DataWithoutMarker,
            Refusal::MarkerMismatch { field, .. } => field.refusal(),
            Refusal::CorruptMarker { .. } => pod_contract::Refusal::UnreadableMarker,
        }
    }
}

/// A field of the identity marker that can disagree with the member.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MarkerField {
    ClusterToken,
    ClusterId,
    MemberName,
    MemberId,
}

impl MarkerField {
    /// A disagreeing cluster token or ID is another cluster's data (or an
    /// earlier incarnation's); a member name or ID, another member's.
    pub fn refusal(self) -> pod_contract::Refusal {
        match self {
            MarkerField::ClusterToken | MarkerField::ClusterId => {
                pod_contract::Refusal::ForeignCluster
            }
            MarkerField::MemberName | MarkerField::MemberId => pod_contract::Refusal::ForeignMember,
        }
    }
}

impl fmt::Display for MarkerField {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            MarkerField::ClusterToken => "cluster token",
            MarkerField::ClusterId => "cluster id",
            MarkerField::MemberName => "member name",
            MarkerField::MemberId => "member id",
        })
    }
}

/// How the guard ends without letting etcd start. The `Display` of each is
/// one line, the `detail` of its report.
#[derive(Debug, thiserror::Error)]
pub enum MemberGuardError {
    #[error("{0}")]
    Refused(#[from] Refusal),
    #[error(transparent)]
    Marker(#[from] MarkerError),
    #[error(transparent)]
    File(#[from] FileError),
    /// The guard could not run etcd as its child while a new member joins
    /// (no async runtime, no signal handlers, no process ID).
    #[error("running etcd while the new member joins: {0}")]
    Watch(std::io::Error),
}

impl MemberGuardError {
    /// The refusal, when the guard deliberately refused (as opposed to an
    /// I/O problem that may go away on a restart).
    pub fn refusal(&self) -> Option<&Refusal> {
        match self {
            MemberGuardError::Refused(refusal) => Some(refusal),
            _ => None,
        }
    }

    /// True when the guard deliberately refused.
    pub fn is_refusal(&self) -> bool {
        self.refusal().is_some()
    }

    /// The report the guard ends with.
    pub fn report(&self) -> Report {
        let outcome = match self.refusal() {
            Some(refusal) => Outcome::Refused(refusal.kind()),
            None => Outcome::Failed,
        };
        Report::new(Program::MemberGuard, outcome, &self.to_string())
    }
}
