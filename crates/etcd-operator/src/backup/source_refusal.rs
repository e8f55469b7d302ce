//! Why no member could serve a snapshot: each endpoint asked, and its
//! refusal. A leaf of the backup engine: [`super::BackupError`] carries
//! [`SourceRefusals`], so this names nothing that names the error.

use std::fmt;
use std::time::Duration;

/// Why asking an endpoint for its status did not give a usable answer.
#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    /// No status within the request timeout.
    #[error("no answer within {timeout:?}")]
    Timeout {
        /// The time allowed.
        timeout: Duration,
    },
    /// The connection or the status request failed.
    #[error(transparent)]
    Etcd(#[from] etcd_client::Error),
    /// The member answered and reports an error of its own (an alarm,
    /// a corrupt database).
    #[error("reports {error}")]
    MemberError {
        /// The first error the member reports.
        error: String,
    },
    /// The status carries no response header (no member or cluster ID).
    #[error("status without header")]
    NoHeader,
}

/// Why one endpoint cannot serve a snapshot.
#[derive(Debug, thiserror::Error)]
pub enum SourceRefusal {
    /// Its status could not be had.
    #[error(transparent)]
    Probe(#[from] ProbeError),
    /// It is a learner (it may lag).
    #[error("a learner")]
    Learner,
    /// It knows no leader.
    #[error("knows no leader")]
    NoLeader,
    /// Its keyspace differs from the majority's at the same revision: its
    /// data is damaged (rule 15).
    #[error(
        "its keyspace hash at revision {revision} is {hash:#010x} where the majority's is {majority:#010x}: its data differs from its peers'"
    )]
    Disagrees {
        /// The revision hashed.
        revision: i64,
        /// Its hash.
        hash: u32,
        /// The majority's.
        majority: u32,
    },
    /// Its agreement with its peers could not be checked.
    #[error("its data could not be compared with its peers' at revision {revision}: {reason}")]
    NotCompared {
        /// The revision hashed.
        revision: i64,
        /// Why.
        reason: String,
    },
}

/// Every endpoint asked and why none can serve a snapshot; shown as
/// `endpoint: reason; ...`, or "no endpoints" when none was given.
#[derive(Debug)]
pub struct SourceRefusals(pub Vec<(String, SourceRefusal)>);

impl fmt::Display for SourceRefusals {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_empty() {
            return f.write_str("no endpoints");
        }
        for (i, (endpoint, refusal)) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str("; ")?;
            }
            write!(f, "{endpoint}: {refusal}")?;
        }
        Ok(())
    }
}
