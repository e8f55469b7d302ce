//! The entry point: [`check`], its [`Limits`] and its [`Verdict`].

use std::fmt;

use crate::anomaly::Anomaly;
use crate::history::{History, Key};
use crate::limits::{Limits, UnknownReason};
use crate::minimise::minimise;
use crate::model::split_by_key;
use crate::search::{Budget, Found, search};

/// The result of [`check`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Every key's operations have a linearization.
    Linearizable,
    /// Some key's operations have none; the anomaly shows a small witness.
    NotLinearizable(Anomaly),
    /// No violation was found, but the search of `key` stopped at a limit,
    /// so that key is unchecked.
    Unknown {
        /// The first key (in key order) whose search stopped.
        key: Key,
        /// Which limit stopped it.
        reason: UnknownReason,
    },
}

impl Verdict {
    /// Whether the verdict is [`Verdict::Linearizable`].
    pub fn is_linearizable(&self) -> bool {
        matches!(self, Verdict::Linearizable)
    }

    /// The anomaly, if the verdict is [`Verdict::NotLinearizable`].
    pub fn anomaly(&self) -> Option<&Anomaly> {
        match self {
            Verdict::NotLinearizable(anomaly) => Some(anomaly),
            _ => None,
        }
    }
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Verdict::Linearizable => f.write_str("linearizable"),
            Verdict::NotLinearizable(anomaly) => write!(f, "NOT linearizable: {anomaly}"),
            Verdict::Unknown { key, reason } => write!(f, "unknown: key {key:?}: {reason}"),
        }
    }
}

/// Checks whether `history` is linearizable, one key at a time.
///
/// Keys are checked in key order. The first key found not linearizable ends
/// the check with [`Verdict::NotLinearizable`]; a key whose search hits a
/// limit is remembered and the remaining keys are still checked, so a
/// definite violation elsewhere wins over [`Verdict::Unknown`].
pub fn check(history: &History, limits: &Limits) -> Verdict {
    let mut unknown = None;
    for (key, ops) in split_by_key(history) {
        match search(&ops, Budget::of(limits)).found {
            Found::Linearizable => {}
            Found::NotLinearizable => {
                let witness = minimise(&ops, limits);
                return Verdict::NotLinearizable(Anomaly::new(history, key, ops.len(), witness));
            }
            Found::GaveUp(reason) => {
                unknown.get_or_insert(Verdict::Unknown {
                    key: key.to_owned(),
                    reason,
                });
            }
        }
    }
    unknown.unwrap_or(Verdict::Linearizable)
}
