//! The bounds on a check's work ([`Limits`]) and why a search stopped at
//! one ([`UnknownReason`]).

use std::fmt;

/// Bounds on the work [`check`](crate::check) may do, so that it always ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Search steps allowed for one key (one step: one event visited). A key
    /// whose search needs more gets [`Verdict::Unknown`](crate::Verdict::Unknown).
    pub max_steps_per_key: u64,
    /// Approximate memory allowed for one key's memo of explored
    /// configurations. A key whose search needs more gets [`Verdict::Unknown`](crate::Verdict::Unknown).
    pub max_memo_bytes_per_key: usize,
    /// Search steps allowed, in total, for shrinking an anomaly to a small
    /// witness. When they run out the witness is returned as it stands
    /// ([`Anomaly::fully_minimised`](crate::Anomaly::fully_minimised) is then `false`); `0` skips shrinking.
    pub max_minimise_steps: u64,
}

impl Default for Limits {
    /// 10 million steps and 512 MiB per key; 20 million steps for shrinking.
    fn default() -> Self {
        Limits {
            max_steps_per_key: 10_000_000,
            max_memo_bytes_per_key: 512 << 20,
            max_minimise_steps: 20_000_000,
        }
    }
}

/// Why a key's search stopped without an answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum UnknownReason {
    /// The search used [`Limits::max_steps_per_key`] steps.
    StepLimit {
        /// Steps taken.
        steps: u64,
    },
    /// The memo reached [`Limits::max_memo_bytes_per_key`].
    MemoryLimit {
        /// Bytes in use when it stopped.
        bytes: usize,
    },
    /// The key has more operations than the search can index.
    TooManyOperations {
        /// Operations of the key.
        count: usize,
    },
}

impl fmt::Display for UnknownReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            UnknownReason::StepLimit { steps } => {
                write!(f, "search step limit reached after {steps} steps")
            }
            UnknownReason::MemoryLimit { bytes } => {
                write!(f, "search memory limit reached at {bytes} bytes")
            }
            UnknownReason::TooManyOperations { count } => {
                write!(f, "too many operations for one key ({count})")
            }
        }
    }
}
