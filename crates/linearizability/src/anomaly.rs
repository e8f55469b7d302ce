//! [`Anomaly`]: a small set of operations of one key that has no
//! linearization, shown to a person.

use std::fmt;

use crate::history::{History, Key, Nanos, Operation, Outcome};
use crate::minimise::Witness;

/// A violation of linearizability on one key, with a witness: operations of
/// that key that by themselves admit no linearization.
///
/// The witness is derived from the key's history only by steps that keep a
/// linearizable history linearizable: cutting the history at a time
/// ([`Anomaly::cut_at`]), leaving out reads, and leaving out writes that no
/// remaining operation could observe. So the witness failing proves that the
/// whole key history fails. Each operation in it is needed for the failure,
/// or is the write that shows where a value read in the witness came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Anomaly {
    /// The key whose operations cannot be linearized.
    pub key: Key,
    /// The witness, ordered by invocation time.
    pub operations: Vec<AnomalyOperation>,
    /// How many operations of the key were checked (indeterminate gets are
    /// not counted: they are ignored).
    pub key_operation_count: usize,
    /// When set, the witness considers only operations invoked at or before
    /// this time, and treats those still running then as indeterminate.
    pub cut_at: Option<Nanos>,
    /// Whether shrinking finished: no single operation of the witness can be
    /// left out by the steps above while it still fails. `false` when the
    /// shrinking budget ran out, or a check within it hit the per-key step
    /// limit (the witness still fails, it may just be larger).
    pub fully_minimised: bool,
}

/// One operation of an [`Anomaly`] witness.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AnomalyOperation {
    /// Position of the operation in the checked [`History`].
    pub index: usize,
    /// The operation as recorded.
    pub operation: Operation,
    /// The operation was still running at [`Anomaly::cut_at`], so the witness
    /// treats it as indeterminate (it may or may not have taken effect).
    pub pending_at_cut: bool,
}

impl Anomaly {
    pub(crate) fn new(
        history: &History,
        key: &str,
        key_operation_count: usize,
        witness: Witness,
    ) -> Self {
        let operations = witness
            .ops
            .iter()
            .filter_map(|w| {
                let operation = history.operations().get(w.op.index)?.clone();
                Some(AnomalyOperation {
                    index: w.op.index,
                    operation,
                    pending_at_cut: w.pending_at_cut,
                })
            })
            .collect();
        Anomaly {
            key: key.to_owned(),
            operations,
            key_operation_count,
            cut_at: witness.cut_at,
            fully_minimised: witness.fully_minimised,
        }
    }

    /// The witness as a history of its own (operations pending at the cut
    /// made indeterminate). Checking it gives [`crate::Verdict::NotLinearizable`].
    pub fn witness(&self) -> History {
        History::from_valid(
            self.operations
                .iter()
                .map(|entry| {
                    let mut operation = entry.operation.clone();
                    if entry.pending_at_cut {
                        operation.outcome = Outcome::Indeterminate;
                    }
                    operation
                })
                .collect(),
        )
    }

    /// Positions in the checked [`History`] of the witness's operations.
    pub fn indices(&self) -> Vec<usize> {
        self.operations.iter().map(|entry| entry.index).collect()
    }
}

/// A multi-line report: a header naming the key, one line per operation
/// (`#index client [invoked .. returned] call -> output`), then notes.
impl fmt::Display for Anomaly {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "key {:?}: no linearization exists for these operations ({} of the key's {}){}:",
            self.key,
            self.operations.len(),
            self.key_operation_count,
            if self.fully_minimised {
                ""
            } else {
                " (shrinking stopped at its budget)"
            }
        )?;
        let width = self
            .operations
            .iter()
            .map(|entry| entry.index.to_string().len())
            .max()
            .unwrap_or(1);
        for entry in &self.operations {
            write!(f, "  #{:<width$} {}", entry.index, entry.operation)?;
            if entry.pending_at_cut {
                f.write_str("  [running at the cut: treated as indeterminate]")?;
            }
            writeln!(f)?;
        }
        if let Some(cut) = self.cut_at {
            writeln!(
                f,
                "Only operations invoked at or before {cut} are considered; those still running then may or may not have taken effect."
            )?;
        }
        write!(
            f,
            "Times are nanoseconds; an operation precedes another when it returned before the other was invoked; \
             \"?\" marks an operation with no answer, which may take effect at any time after its invocation, or never."
        )
    }
}
