//! The per-key register model, in the compact form the search works on.
//!
//! Each key is a register holding "absent" or one value. Values are interned
//! per key into small integers ([`State`]), so a model state is one `u32`.

use std::collections::{BTreeMap, HashMap};

use crate::history::{Call, History, Nanos, Outcome, Output};

/// A register state: [`ABSENT`] or an interned value (`1..`).
pub(crate) type State = u32;

/// The state of a key that holds no value (also the initial state).
pub(crate) const ABSENT: State = 0;

/// One operation's effect on the register, with its recorded output folded in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Step {
    /// Sets the value (whatever the output, which carries no information).
    Put { value: State },
    /// Removes the value.
    Delete,
    /// A get that returned `read`; allowed only in that state.
    Get { read: State },
    /// A compare-and-swap; `succeeded: None` when the outcome is unknown, in
    /// which case it swaps exactly when the comparison holds.
    Cas {
        expected: State,
        new: State,
        succeeded: Option<bool>,
    },
}

impl Step {
    /// The state after this step, or `None` if the recorded output is
    /// impossible in `state`.
    pub(crate) fn apply(self, state: State) -> Option<State> {
        match self {
            Step::Put { value } => Some(value),
            Step::Delete => Some(ABSENT),
            Step::Get { read } => (state == read).then_some(state),
            Step::Cas {
                expected,
                new,
                succeeded,
            } => {
                let holds = state == expected;
                match succeeded {
                    Some(true) => holds.then_some(new),
                    Some(false) => (!holds).then_some(state),
                    None => Some(if holds { new } else { state }),
                }
            }
        }
    }

    /// The state this step may write, or `None` if it never changes the state.
    pub(crate) fn written(self) -> Option<State> {
        match self {
            Step::Put { value } => Some(value),
            Step::Delete => Some(ABSENT),
            Step::Get { .. }
            | Step::Cas {
                succeeded: Some(false),
                ..
            } => None,
            Step::Cas { new, .. } => Some(new),
        }
    }

    /// The value whose presence the step's output depends on: a get's
    /// result, a compare-and-swap's expected value.
    pub(crate) fn observed(self) -> Option<State> {
        match self {
            Step::Get { read } => Some(read),
            Step::Cas { expected, .. } => Some(expected),
            Step::Put { .. } | Step::Delete => None,
        }
    }

    /// Whether the step's recorded output depends on the state being `value`.
    pub(crate) fn observes(self, value: State) -> bool {
        match self {
            Step::Get { read } => read == value,
            Step::Cas { expected, .. } => expected == value,
            Step::Put { .. } | Step::Delete => false,
        }
    }

    /// Whether the step writes without looking at the state (put, delete).
    pub(crate) fn is_blind_write(self) -> bool {
        matches!(self, Step::Put { .. } | Step::Delete)
    }

    /// Whether the step only reads (a get, or a compare-and-swap known to
    /// have failed): leaving it out of a history only removes a constraint.
    pub(crate) fn is_pure_read(self) -> bool {
        self.written().is_none()
    }

    /// The same step with its output forgotten (as if it were indeterminate).
    pub(crate) fn forget_output(self) -> Step {
        match self {
            Step::Cas { expected, new, .. } => Step::Cas {
                expected,
                new,
                succeeded: None,
            },
            other => other,
        }
    }
}

/// One operation of one key, ready for the search.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct KeyOp {
    /// Position of the operation in the [`History`].
    pub(crate) index: usize,
    pub(crate) invoked_at: Nanos,
    /// `None`: indeterminate (returns "at infinity").
    pub(crate) returned_at: Option<Nanos>,
    pub(crate) step: Step,
}

impl KeyOp {
    /// Whether this is a compare-and-swap with an answer that is not "swapped"
    /// (in a real history: "not swapped"). It must be linearized, and where
    /// the state equals its expected value it would have had to swap, so it
    /// constrains the exact state, not only equality with one value.
    pub(crate) fn is_answered_non_swap(&self) -> bool {
        self.returned_at.is_some()
            && matches!(
                self.step,
                Step::Cas {
                    succeeded: Some(false) | None,
                    ..
                }
            )
    }
}

/// Assigns each distinct value of one key a [`State`] number.
#[derive(Default)]
struct Interner<'a> {
    ids: HashMap<&'a str, State>,
}

impl<'a> Interner<'a> {
    fn id(&mut self, value: &'a str) -> State {
        // More than 4 billion distinct values on one key cannot fit in memory
        // anyway; saturate rather than wrap.
        let next = State::try_from(self.ids.len() + 1).unwrap_or(State::MAX - 1);
        *self.ids.entry(value).or_insert(next)
    }

    fn optional(&mut self, value: Option<&'a str>) -> State {
        value.map_or(ABSENT, |v| self.id(v))
    }
}

/// Splits a history into per-key operation lists (keys in order), dropping
/// indeterminate gets.
pub(crate) fn split_by_key(history: &History) -> BTreeMap<&str, Vec<KeyOp>> {
    let mut keys: BTreeMap<&str, (Interner<'_>, Vec<KeyOp>)> = BTreeMap::new();
    for (index, op) in history.operations().iter().enumerate() {
        let (interner, ops) = keys.entry(op.key()).or_default();
        let step = match (&op.call, &op.outcome) {
            (Call::Put { value, .. }, _) => Step::Put {
                value: interner.id(value),
            },
            (Call::Delete { .. }, _) => Step::Delete,
            (
                Call::Get { .. },
                Outcome::Returned {
                    output: Output::Read(read),
                    ..
                },
            ) => Step::Get {
                read: interner.optional(read.as_deref()),
            },
            // An unanswered get constrains nothing. (A get with another kind
            // of output cannot occur in a validated history.)
            (Call::Get { .. }, _) => continue,
            (Call::CompareAndSwap { expected, new, .. }, outcome) => Step::Cas {
                expected: interner.optional(expected.as_deref()),
                new: interner.id(new),
                succeeded: match outcome {
                    Outcome::Returned {
                        output: Output::Swapped(swapped),
                        ..
                    } => Some(*swapped),
                    _ => None,
                },
            },
        };
        ops.push(KeyOp {
            index,
            invoked_at: op.invoked_at,
            returned_at: op.returned_at(),
            step,
        });
    }
    keys.into_iter().map(|(key, (_, ops))| (key, ops)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::Operation;

    #[test]
    fn cas_semantics() {
        let swap = |succeeded| Step::Cas {
            expected: 1,
            new: 2,
            succeeded,
        };
        assert_eq!(swap(Some(true)).apply(1), Some(2));
        assert_eq!(swap(Some(true)).apply(3), None);
        assert_eq!(swap(Some(false)).apply(1), None);
        assert_eq!(swap(Some(false)).apply(3), Some(3));
        assert_eq!(swap(None).apply(1), Some(2));
        assert_eq!(swap(None).apply(3), Some(3));
    }

    #[test]
    fn get_put_delete_semantics() {
        assert_eq!(Step::Get { read: 4 }.apply(4), Some(4));
        assert_eq!(Step::Get { read: 4 }.apply(ABSENT), None);
        assert_eq!(Step::Put { value: 7 }.apply(ABSENT), Some(7));
        assert_eq!(Step::Delete.apply(7), Some(ABSENT));
    }

    #[test]
    fn splits_and_interns_per_key() {
        let history = History::new(vec![
            Operation::returned(1, Call::put("b", "x"), 0, 1, Output::Ok),
            Operation::returned(1, Call::put("a", "y"), 2, 3, Output::Ok),
            Operation::indeterminate(2, Call::get("a"), 4),
            Operation::returned(2, Call::get("a"), 5, 6, Output::Read(Some("y".into()))),
            Operation::indeterminate(3, Call::compare_and_swap("b", Some("x"), "z"), 7),
        ])
        .unwrap();
        let keys = split_by_key(&history);
        assert_eq!(keys.keys().copied().collect::<Vec<_>>(), ["a", "b"]);
        let a = &keys["a"];
        assert_eq!(a.len(), 2, "indeterminate get dropped");
        assert_eq!(a[0].step, Step::Put { value: 1 });
        assert_eq!(a[1].step, Step::Get { read: 1 });
        assert_eq!(a[1].index, 3);
        let b = &keys["b"];
        assert_eq!(
            b[1].step,
            Step::Cas {
                expected: 1,
                new: 2,
                succeeded: None
            }
        );
        assert_eq!(b[1].returned_at, None);
    }
}
