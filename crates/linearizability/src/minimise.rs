//! Shrinking a non-linearizable key history to a small witness.
//!
//! Only steps that keep a linearizable history linearizable are used, so a
//! witness that fails proves that the original history fails:
//!
//! 1. **Cut at a time `t`.** Keep the operations invoked at or before `t`;
//!    of those still running at `t`, drop the reads and make the writes
//!    indeterminate. Any linearization of the full history, truncated after
//!    its last operation that returned by `t`, linearizes the cut history.
//!    Cutting earlier keeps more histories linearizable, so the earliest
//!    failing cut is found by binary search over return times.
//! 2. **Drop reads** (gets, and compare-and-swaps known to have failed):
//!    this only removes constraints.
//! 3. **Drop writes** that no remaining operation could look at: removing a
//!    write from a linearization changes the state only from that write up
//!    to the next one, so it is harmless unless a remaining operation that
//!    can lie in that stretch observes the written value (a get returning
//!    it, a compare-and-swap expecting it) or is a compare-and-swap known to
//!    have failed. An operation cannot lie there if it
//!    returned before the write was invoked, or if a remaining write with a
//!    known effect lies between the two in real time.
//!
//! Step 3 also keeps the witness readable: it does not drop the last write
//! that explains a value some remaining operation needs (a get's result, a
//! successful swap's expected value), even where dropping it would be sound.
//!
//! Steps 2 and 3 try chunks of operations, halving the chunk size down to
//! single operations, and repeat single-operation passes until nothing more
//! can go, all within [`Limits::max_minimise_steps`].

use std::collections::HashSet;

use crate::history::Nanos;
use crate::limits::Limits;
use crate::model::{ABSENT, KeyOp, State, Step};
use crate::search::{Budget, Found, search};

/// One operation of a witness.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct WitnessOp {
    /// The operation as the witness uses it (made indeterminate if it was
    /// running at the cut).
    pub(crate) op: KeyOp,
    pub(crate) pending_at_cut: bool,
}

/// A shrunk failing history of one key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Witness {
    /// Ordered by invocation time, then position in the history.
    pub(crate) ops: Vec<WitnessOp>,
    pub(crate) cut_at: Option<Nanos>,
    pub(crate) fully_minimised: bool,
}

/// Runs failure checks within the shrinking budget.
struct Tester {
    per_check: Budget,
    remaining: u64,
    /// The total budget is spent.
    exhausted: bool,
    /// Some check stopped at the per-check limit.
    inconclusive: bool,
}

impl Tester {
    /// Whether `ops` is known to be not linearizable.
    fn fails(&mut self, ops: &[WitnessOp]) -> bool {
        if self.remaining == 0 {
            self.exhausted = true;
            return false;
        }
        let ops: Vec<KeyOp> = ops.iter().map(|w| w.op).collect();
        let budget = Budget {
            max_steps: self.per_check.max_steps.min(self.remaining),
            ..self.per_check
        };
        let result = search(&ops, budget);
        self.remaining = self.remaining.saturating_sub(result.steps);
        match result.found {
            Found::NotLinearizable => true,
            Found::Linearizable => false,
            Found::GaveUp(_) => {
                if self.remaining == 0 {
                    self.exhausted = true;
                } else {
                    self.inconclusive = true;
                }
                false
            }
        }
    }
}

/// The history cut at time `t` (see the module documentation).
pub(crate) fn cut(ops: &[KeyOp], t: Nanos) -> Vec<WitnessOp> {
    ops.iter()
        .filter(|op| op.invoked_at <= t)
        .filter_map(|op| match op.returned_at {
            Some(at) if at > t => (!op.step.is_pure_read()).then(|| WitnessOp {
                op: KeyOp {
                    returned_at: None,
                    step: op.step.forget_output(),
                    ..*op
                },
                pending_at_cut: true,
            }),
            _ => Some(WitnessOp {
                op: *op,
                pending_at_cut: false,
            }),
        })
        .collect()
}

/// Whether the step surely takes effect as a write once linearized (a
/// put, delete or swap with a known outcome).
fn definite_write(op: &KeyOp) -> bool {
    op.returned_at.is_some()
        && matches!(
            op.step,
            Step::Put { .. }
                | Step::Delete
                | Step::Cas {
                    succeeded: Some(true),
                    ..
                }
        )
}

/// Whether leaving `removed` out of a history that keeps `kept` preserves
/// linearizability (see the module documentation).
///
/// Leaving a write `w` out of a linearization changes the state only from
/// `w` up to the next write. That is harmless unless some kept operation `o`
/// there looks at the state: it observes `w`'s value, or it is a
/// compare-and-swap known to have failed (which might have to succeed in the
/// state left without `w`). An indeterminate compare-and-swap that does not
/// expect `w`'s value changed nothing there and can be left out with it.
/// `o` cannot lie there if it returned before `w` was invoked, or if a kept
/// write that surely takes effect lies between them in real time.
pub(crate) fn removable(kept: &[WitnessOp], removed: &[WitnessOp]) -> bool {
    let writes: Vec<&KeyOp> = removed
        .iter()
        .map(|w| &w.op)
        .filter(|op| op.step.written().is_some())
        .collect();
    if writes.is_empty() {
        return true;
    }
    // Kept definite writes by invocation time, with the earliest return
    // among those invoked at or after each position.
    let mut separators: Vec<(Nanos, Nanos)> = kept
        .iter()
        .map(|w| &w.op)
        .filter(|op| definite_write(op))
        .filter_map(|op| Some((op.invoked_at, op.returned_at?)))
        .collect();
    separators.sort_unstable();
    let mut earliest_return = vec![Nanos::MAX; separators.len() + 1];
    for i in (0..separators.len()).rev() {
        earliest_return[i] = earliest_return[i + 1].min(separators[i].1);
    }
    writes.iter().all(|w| {
        let Some(value) = w.step.written() else {
            return true;
        };
        // The earliest return of a kept definite write invoked after `w`
        // returned: operations invoked after that are past the next write.
        let separated_after = w.returned_at.map_or(Nanos::MAX, |returned| {
            earliest_return[separators.partition_point(|&(invoked, _)| invoked <= returned)]
        });
        kept.iter().map(|k| &k.op).all(|o| {
            let looks = o.step.observes(value) || o.is_answered_non_swap();
            let before = o.returned_at.is_some_and(|at| at < w.invoked_at);
            let separated = separated_after < o.invoked_at;
            !looks || before || separated
        })
    })
}

/// Whether an operation that needs `op`'s value to have been written (an
/// answered get, or a swap that succeeded) can be explained by a write in
/// `ops`: one of that value invoked before `op` returned or, for "absent",
/// the initial state if no write surely took effect before `op` was invoked.
fn explained(op: &KeyOp, ops: &[WitnessOp]) -> bool {
    let Some(value) = needed_value(op) else {
        return true;
    };
    let writer = ops.iter().map(|w| &w.op).any(|w| {
        w.step.written() == Some(value) && op.returned_at.is_none_or(|at| w.invoked_at <= at)
    });
    let initial = value == ABSENT
        && !ops
            .iter()
            .map(|w| &w.op)
            .any(|w| definite_write(w) && w.returned_at.is_some_and(|at| at < op.invoked_at));
    writer || initial
}

/// The value an operation needs to have been written, if any.
fn needed_value(op: &KeyOp) -> Option<State> {
    match op.step {
        Step::Get { read } => Some(read),
        Step::Cas {
            expected,
            succeeded: Some(true),
            ..
        } => Some(expected),
        _ => None,
    }
}

/// Whether leaving `removed` out keeps the witness readable: every
/// operation of `kept` whose value was explained by a write (see
/// [`explained`]) still is. Without this, shrinking could keep a read of an
/// overwritten value but drop its write, which is sound but hides the story.
fn keeps_explanations(all: &[WitnessOp], kept: &[WitnessOp], removed: &[WitnessOp]) -> bool {
    let written: HashSet<State> = removed.iter().filter_map(|w| w.op.step.written()).collect();
    kept.iter().map(|w| &w.op).all(|op| {
        needed_value(op).is_none_or(|value| !written.contains(&value))
            || !explained(op, all)
            || explained(op, kept)
    })
}

/// Shrinks `ops`, a key history known not to be linearizable.
pub(crate) fn minimise(ops: &[KeyOp], limits: &Limits) -> Witness {
    let mut current: Vec<WitnessOp> = ops
        .iter()
        .map(|&op| WitnessOp {
            op,
            pending_at_cut: false,
        })
        .collect();
    let mut cut_at = None;
    let mut tester = Tester {
        per_check: Budget::of(limits),
        remaining: limits.max_minimise_steps,
        exhausted: limits.max_minimise_steps == 0,
        inconclusive: false,
    };

    let mut times: Vec<Nanos> = ops.iter().filter_map(|op| op.returned_at).collect();
    times.sort_unstable();
    times.dedup();
    if !tester.exhausted && !times.is_empty() {
        // The cut at the last return time fails (it only leaves out
        // indeterminate operations invoked after everything returned).
        let (mut low, mut high) = (0, times.len() - 1);
        while low < high && !tester.exhausted {
            let middle = (low + high) / 2;
            if tester.fails(&cut(ops, times[middle])) {
                high = middle;
            } else {
                low = middle + 1;
            }
        }
        let shortest = cut(ops, times[high]);
        if shortest != current {
            current = shortest;
            cut_at = Some(times[high]);
        }
    }
    for reads_only in [true, false] {
        if !tester.exhausted {
            shrink(&mut tester, &mut current, reads_only);
        }
    }
    current.sort_by_key(|w| (w.op.invoked_at, w.op.index));
    Witness {
        ops: current,
        cut_at,
        fully_minimised: !tester.exhausted && !tester.inconclusive,
    }
}

/// Leaves out chunks of operations (only pure reads if `reads_only`) while
/// the history still fails, halving the chunk size down to one and repeating
/// single-operation passes until none can go.
fn shrink(tester: &mut Tester, current: &mut Vec<WitnessOp>, reads_only: bool) {
    let mut chunk = usize::MAX;
    loop {
        // Earliest operations first: the failure shows at the end of the
        // (cut) history, so early operations are the likeliest to be
        // incidental, and dropping them makes later checks cheaper.
        let mut candidates: Vec<(Nanos, usize)> = current
            .iter()
            .filter(|w| !reads_only || w.op.step.is_pure_read())
            .map(|w| (w.op.invoked_at, w.op.index))
            .collect();
        candidates.sort_unstable();
        let candidates: Vec<usize> = candidates.into_iter().map(|(_, index)| index).collect();
        if candidates.is_empty() {
            return;
        }
        chunk = chunk.min(candidates.len().div_ceil(2)).max(1);
        let mut changed = false;
        for group in candidates.chunks(chunk) {
            let group: HashSet<usize> = group.iter().copied().collect();
            let (removed, kept): (Vec<WitnessOp>, Vec<WitnessOp>) =
                current.iter().partition(|w| group.contains(&w.op.index));
            if removable(&kept, &removed)
                && keeps_explanations(current, &kept, &removed)
                && tester.fails(&kept)
            {
                *current = kept;
                changed = true;
            }
            if tester.exhausted {
                return;
            }
        }
        if chunk == 1 && !changed {
            return;
        }
        chunk = (chunk / 2).max(1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Step;
    use proptest::prelude::*;

    const UNLIMITED: Budget = Budget {
        max_steps: u64::MAX,
        max_memo_bytes: usize::MAX,
    };

    fn linearizable(ops: &[KeyOp]) -> bool {
        search(ops, UNLIMITED).found == Found::Linearizable
    }

    fn plain(ops: &[KeyOp]) -> Vec<WitnessOp> {
        ops.iter()
            .map(|&op| WitnessOp {
                op,
                pending_at_cut: false,
            })
            .collect()
    }

    fn unwrap(ops: &[WitnessOp]) -> Vec<KeyOp> {
        ops.iter().map(|w| w.op).collect()
    }

    /// Small random single-key histories over three values, with
    /// indeterminate operations, so that many are and many are not
    /// linearizable.
    fn arbitrary_ops() -> impl Strategy<Value = Vec<KeyOp>> {
        let step = prop_oneof![
            (1u32..4).prop_map(|value| Step::Put { value }),
            Just(Step::Delete),
            (0u32..4).prop_map(|read| Step::Get { read }),
            (0u32..4, 1u32..4, prop::option::of(any::<bool>())).prop_map(
                |(expected, new, succeeded)| Step::Cas {
                    expected,
                    new,
                    succeeded
                }
            ),
        ];
        prop::collection::vec((step, 0u64..12, 0u64..6, 0u8..5), 1..8).prop_map(|raw| {
            raw.into_iter()
                .enumerate()
                .map(|(index, (step, invoked_at, length, mode))| {
                    let indeterminate = mode == 0 && !matches!(step, Step::Get { .. });
                    KeyOp {
                        index,
                        invoked_at,
                        returned_at: (!indeterminate).then_some(invoked_at + length),
                        step: if indeterminate {
                            step.forget_output()
                        } else {
                            step
                        },
                    }
                })
                .collect()
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig {
            cases: std::env::var("PROPTEST_CASES")
                .ok()
                .and_then(|value| value.parse().ok())
                .unwrap_or(2000),
            max_global_rejects: u32::MAX,
            ..ProptestConfig::default()
        })]

        /// Every cut of a linearizable history is linearizable.
        #[test]
        fn cuts_keep_linearizable_histories_linearizable(ops in arbitrary_ops()) {
            prop_assume!(linearizable(&ops));
            for t in 0..20 {
                prop_assert!(linearizable(&unwrap(&cut(&ops, t))), "cut at {}", t);
            }
        }

        /// Every removal allowed by `removable` keeps a linearizable history
        /// linearizable.
        #[test]
        fn allowed_removals_keep_linearizable_histories_linearizable(
            ops in arbitrary_ops(),
            mask in any::<u8>(),
        ) {
            prop_assume!(linearizable(&ops));
            let all = plain(&ops);
            let (removed, kept): (Vec<WitnessOp>, Vec<WitnessOp>) =
                all.iter().partition(|w| mask & (1 << w.op.index) != 0);
            if removable(&kept, &removed) {
                prop_assert!(linearizable(&unwrap(&kept)));
            }
        }

        /// The witness of a failing history fails, and is fully minimised
        /// with an ample budget.
        #[test]
        fn witnesses_fail(ops in arbitrary_ops()) {
            prop_assume!(!linearizable(&ops));
            let witness = minimise(&ops, &Limits::default());
            prop_assert!(witness.fully_minimised);
            prop_assert!(!linearizable(&unwrap(&witness.ops)));
            prop_assert!(witness.ops.len() <= ops.len());
        }
    }

    #[test]
    fn stale_read_shrinks_to_three_operations() {
        // put a; put b; (noise); get -> a
        let mut ops = vec![
            KeyOp {
                index: 0,
                invoked_at: 0,
                returned_at: Some(1),
                step: Step::Put { value: 1 },
            },
            KeyOp {
                index: 1,
                invoked_at: 2,
                returned_at: Some(3),
                step: Step::Put { value: 2 },
            },
        ];
        for i in 0..20 {
            ops.push(KeyOp {
                index: 2 + i,
                invoked_at: 4 + i as u64,
                returned_at: Some(5 + i as u64),
                step: Step::Get { read: 2 },
            });
        }
        ops.push(KeyOp {
            index: 22,
            invoked_at: 30,
            returned_at: Some(31),
            step: Step::Get { read: 1 },
        });
        for i in 0..10 {
            ops.push(KeyOp {
                index: 23 + i,
                invoked_at: 40 + i as u64,
                returned_at: Some(41 + i as u64),
                step: Step::Put { value: 3 },
            });
        }
        let witness = minimise(&ops, &Limits::default());
        let indices: Vec<usize> = witness.ops.iter().map(|w| w.op.index).collect();
        assert_eq!(indices, [0, 1, 22]);
        assert_eq!(witness.cut_at, Some(31));
        assert!(witness.fully_minimised);
    }

    #[test]
    fn zero_budget_keeps_the_whole_history() {
        let ops = [
            KeyOp {
                index: 0,
                invoked_at: 0,
                returned_at: Some(1),
                step: Step::Get { read: 1 },
            },
            KeyOp {
                index: 1,
                invoked_at: 2,
                returned_at: Some(3),
                step: Step::Get { read: 0 },
            },
        ];
        let limits = Limits {
            max_minimise_steps: 0,
            ..Limits::default()
        };
        let witness = minimise(&ops, &limits);
        assert_eq!(witness.ops.len(), 2);
        assert!(!witness.fully_minimised);
        assert_eq!(witness.cut_at, None);
    }
}
