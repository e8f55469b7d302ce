//! The search for a linearization of one key's operations.
//!
//! Wing & Gong's algorithm with Lowe's memoisation. The call and return
//! events of the operations with a known outcome are kept in time order in a
//! doubly linked list. Walking it from the start, the search tries to
//! linearize each operation whose call it meets before the first return
//! event (a "minimal" operation: no remaining operation returned before it
//! was called). A success removes the operation's events and restarts from
//! the head. Meeting a return event means that operation has to come first.
//!
//! Indeterminate operations return "at infinity": they may be linearized at
//! any point after their call, or never, and never constrain the order of
//! others. They are kept apart, in classes of identical steps, and tried only
//! when the walk reaches the first return event, and only if they were
//! invoked by then. When those are exhausted too, the search undoes its
//! latest choice and tries the next candidate. It succeeds as soon as every
//! operation with a known outcome is linearized.
//!
//! Each configuration (linearized operations, state) is explored at most
//! once, and configurations covered by an explored one are skipped (see
//! [`crate::memo`]). Configurations are compared up to what the rest of the
//! search can tell apart: for indeterminate operations only how many of each
//! class were used counts (members of a class that were invoked by now are
//! interchangeable), and states that no remaining operation can observe
//! (and writes of them) count as one. Trying indeterminate operations last
//! makes the first visit of a configuration use as few of them as possible,
//! which lets that visit cover the later ones.
//!
//! Before searching, the operations are simplified without changing the
//! answer (see [`prepare`]), and the search skips choices that some other
//! choice it makes is known to subsume:
//!
//! * a put or delete right after an indeterminate operation (that one would
//!   be overwritten at once; leaving it out is tried from the same parent);
//! * an indeterminate operation that changes nothing, or whose new state no
//!   operation that may come next can use (it observes that state, or is a
//!   swap known to have failed that could not fail in the current state):
//!   the operation may just as well be linearized later, when it is useful,
//!   since what it is allowed to follow only grows;
//! * all but one of several interchangeable indeterminate operations (same
//!   step, such as several timed-out deletes): the one invoked last among
//!   those allowed is tried, which keeps the most options open.

use std::collections::HashSet;

use crate::events::{Events, KNOWN_HEAD, NIL};
use crate::limits::{Limits, UnknownReason};
use crate::memo::{Memo, MemoFull, mix};
use crate::model::{ABSENT, KeyOp, State, Step};

/// How much one search may spend.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Budget {
    pub(crate) max_steps: u64,
    pub(crate) max_memo_bytes: usize,
}

impl Budget {
    /// The budget of one key's search under `limits`.
    pub(crate) fn of(limits: &Limits) -> Self {
        Self {
            max_steps: limits.max_steps_per_key,
            max_memo_bytes: limits.max_memo_bytes_per_key,
        }
    }
}

/// What one search found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Found {
    Linearizable,
    NotLinearizable,
    GaveUp(UnknownReason),
}

/// The result of one search and the steps it took.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct SearchResult {
    pub(crate) found: Found,
    pub(crate) steps: u64,
}

/// The state left by writes of values that no operation observes: as no get
/// or compare-and-swap can match any of them, they all behave alike.
const UNOBSERVED: State = State::MAX;

/// Simplifies `ops` without changing whether they are linearizable:
///
/// * values that no operation observes (no answered get returns them and no
///   compare-and-swap expects them) are all written as [`UNOBSERVED`], since
///   no operation can tell them apart;
/// * indeterminate writes of such values are dropped if no compare-and-swap
///   known to have failed returned after their invocation: linearized, such
///   a write leaves a state that every operation up to the next write
///   accepts just as well without it (puts, deletes, and indeterminate
///   operations, which may be left out too).
fn prepare(ops: &[KeyOp]) -> Vec<KeyOp> {
    let observed: HashSet<State> = ops
        .iter()
        .filter_map(|op| match op.step {
            Step::Get { read } if op.returned_at.is_some() => Some(read),
            Step::Cas { expected, .. } => Some(expected),
            _ => None,
        })
        .collect();
    let seen = |value: State| {
        if observed.contains(&value) {
            value
        } else {
            UNOBSERVED
        }
    };
    let last_failed_cas = ops
        .iter()
        .filter(|op| op.is_answered_non_swap())
        .filter_map(|op| op.returned_at)
        .max();
    ops.iter()
        .filter_map(|op| {
            let step = match op.step {
                Step::Put { value } => Step::Put { value: seen(value) },
                Step::Delete if !observed.contains(&ABSENT) => Step::Put { value: UNOBSERVED },
                Step::Cas {
                    expected,
                    new,
                    succeeded,
                } => Step::Cas {
                    expected,
                    new: seen(new),
                    succeeded,
                },
                other => other,
            };
            let useless = op.returned_at.is_none()
                && step.written() == Some(UNOBSERVED)
                && last_failed_cas.is_none_or(|at| at < op.invoked_at);
            (!useless).then_some(KeyOp { step, ..*op })
        })
        .collect()
}

/// Where the walk over the candidates of the current configuration is.
#[derive(Clone, Copy)]
enum Cursor {
    /// At a node of the known-outcome list.
    Known(u32),
    /// At class `class` of indeterminate operations; those invoked after
    /// `barrier` (the earliest remaining return) are not candidates.
    Open { class: u32, barrier: u64 },
    /// No candidate left.
    Exhausted,
}

/// The linearized operations as the memo sees them: a bitset of those with
/// a known outcome (with an incremental hash), and per class the number of
/// indeterminate ones.
struct Linearized<'a> {
    known: Vec<u64>,
    known_hash: u64,
    /// Per operation: its bit number among the known-outcome ones.
    bit: Vec<usize>,
    zobrist: &'a [u64],
    /// Per class of indeterminate operations: how many are linearized.
    used: Vec<u32>,
    /// Scratch space for the memo's view of `used`.
    open_key: Vec<u32>,
}

impl Linearized<'_> {
    fn toggle(&mut self, op: usize, events: &Events, done: bool) {
        let class = events.class_of[op];
        if class == NIL {
            let bit = self.bit[op];
            self.known[bit / 64] ^= 1u64 << (bit % 64);
            self.known_hash ^= self.zobrist[op];
        } else if done {
            self.used[class as usize] += 1;
        } else {
            self.used[class as usize] -= 1;
        }
    }

    /// The per-class counts as the memo sees them. Puts and deletes of
    /// values that no remaining operation can observe all leave states that
    /// behave alike, so their classes are pooled into the last count.
    fn update_open_key(&mut self, events: &Events, observers: &Observers) {
        let mut pooled = 0;
        for (class, &used) in self.used.iter().enumerate() {
            let step = events.class_step[class];
            let dead = step.is_blind_write() && step.written().is_some_and(|v| !observers.live(v));
            if dead {
                pooled += used;
                self.open_key[class] = 0;
            } else {
                self.open_key[class] = used;
            }
        }
        if let Some(last) = self.open_key.last_mut() {
            *last = pooled;
        }
    }
}

/// Which values some remaining operation may still observe.
struct Observers {
    /// Per state: remaining known-outcome gets and swaps that observe it.
    pending: Vec<u32>,
    /// Values expected by indeterminate swaps (observed at any time).
    open_cas: HashSet<State>,
}

impl Observers {
    fn new(ops: &[KeyOp]) -> Self {
        let mut pending: Vec<u32> = Vec::new();
        let mut open_cas = HashSet::new();
        for op in ops {
            match (op.returned_at, op.step.observed()) {
                (Some(_), Some(value)) if value != UNOBSERVED => {
                    let slot = value as usize;
                    if pending.len() <= slot {
                        pending.resize(slot + 1, 0);
                    }
                    pending[slot] += 1;
                }
                (None, Some(value)) => {
                    open_cas.insert(value);
                }
                _ => {}
            }
        }
        Observers { pending, open_cas }
    }

    /// Whether some remaining operation may observe `value`.
    fn live(&self, value: State) -> bool {
        self.pending.get(value as usize).is_some_and(|&n| n > 0) || self.open_cas.contains(&value)
    }

    /// Records that `op` was linearized (`done`) or undone.
    fn update(&mut self, op: &KeyOp, done: bool) {
        if op.returned_at.is_none() {
            return;
        }
        if let Some(count) = op
            .step
            .observed()
            .and_then(|value| self.pending.get_mut(value as usize))
        {
            if done {
                *count -= 1;
            } else {
                *count += 1;
            }
        }
    }

    /// The state as the memo sees it: all values no remaining operation can
    /// observe behave alike.
    fn canonical(&self, state: State) -> State {
        if self.live(state) { state } else { UNOBSERVED }
    }
}

/// Searches for a linearization of `ops` (all of one key) from the absent state.
pub(crate) fn search(ops: &[KeyOp], budget: Budget) -> SearchResult {
    // Node numbers (at most two per operation plus one head each) must fit
    // below `NIL`.
    let Some(count) = u32::try_from(ops.len()).ok().filter(|&n| n < NIL / 3) else {
        return SearchResult {
            found: Found::GaveUp(UnknownReason::TooManyOperations { count: ops.len() }),
            steps: 0,
        };
    };
    let prepared = prepare(ops);
    let ops = prepared.as_slice();
    let mut events = Events::new(ops);
    let zobrist: Vec<u64> = (0..u64::from(count)).map(mix).collect();
    let mut known_count = 0usize;
    let bit: Vec<usize> = ops
        .iter()
        .map(|op| {
            let bit = known_count;
            if op.returned_at.is_some() {
                known_count += 1;
            }
            bit
        })
        .collect();
    let classes = events.classes as usize;
    let mut linearized = Linearized {
        known: vec![0; known_count.div_ceil(64)],
        known_hash: 0,
        bit,
        zobrist: &zobrist,
        used: vec![0; classes],
        open_key: vec![0; classes + 1],
    };
    let mut observers = Observers::new(ops);
    let mut memo = Memo::new(linearized.known.len(), classes + 1, budget.max_memo_bytes);

    let mut state: State = ABSENT;
    // Per linearized operation: the state before it and where the walk was.
    let mut undo: Vec<(u32, State, Cursor)> = Vec::new();
    let mut pending_known = known_count;
    let mut steps = 0u64;
    let mut cursor = Cursor::Known(events.first(KNOWN_HEAD));
    let done = |found, steps| SearchResult { found, steps };

    loop {
        if pending_known == 0 {
            return done(Found::Linearizable, steps);
        }
        if steps >= budget.max_steps {
            return done(Found::GaveUp(UnknownReason::StepLimit { steps }), steps);
        }
        steps += 1;
        // Find the next candidate and where to continue after it. The
        // known-outcome list ends with a return event while any known
        // operation is left, so the walk never runs off its end.
        let (n, after) = match cursor {
            Cursor::Known(n) => {
                let node = events.nodes[n as usize];
                if node.is_call {
                    (n, Cursor::Known(node.next))
                } else {
                    cursor = Cursor::Open {
                        class: 1,
                        barrier: node.time,
                    };
                    continue;
                }
            }
            Cursor::Open { class, barrier } => {
                if class > events.classes {
                    cursor = Cursor::Exhausted;
                    continue;
                }
                let next = Cursor::Open {
                    class: class + 1,
                    barrier,
                };
                match events.class_candidate(class, barrier) {
                    Some(n) => (n, next),
                    None => {
                        cursor = next;
                        continue;
                    }
                }
            }
            Cursor::Exhausted => {
                // Undo the latest choice and try the next candidate there.
                let Some((op, previous, at)) = undo.pop() else {
                    return done(Found::NotLinearizable, steps);
                };
                let index = op as usize;
                state = previous;
                linearized.toggle(index, &events, false);
                events.unlift(op);
                observers.update(&ops[index], false);
                if ops[index].returned_at.is_some() {
                    pending_known += 1;
                }
                cursor = at;
                continue;
            }
        };
        cursor = after;
        let op = events.nodes[n as usize].op;
        let index = op as usize;
        let step = ops[index].step;
        let after_open = undo
            .last()
            .is_some_and(|&(last, _, _)| ops[last as usize].returned_at.is_none());
        if step.is_blind_write() && after_open {
            // Would overwrite the effect of the indeterminate operation just
            // linearized: leaving that one out is tried from the parent.
            continue;
        }
        let Some(next_state) = step.apply(state) else {
            continue;
        };
        if ops[index].returned_at.is_none()
            && (next_state == state || !events.needed(ops, next_state, state, &observers.open_cas))
        {
            // An indeterminate operation that changes nothing, or whose
            // effect nothing can use yet: it can as well come later.
            continue;
        }
        linearized.toggle(index, &events, true);
        observers.update(&ops[index], true);
        let key_state = observers.canonical(next_state);
        let hash = linearized.known_hash ^ mix(u64::from(key_state) ^ 0xA076_1D64_78BD_642F);
        linearized.update_open_key(&events, &observers);
        match memo.visit(&linearized.known, key_state, hash, &linearized.open_key) {
            Ok(true) => {
                undo.push((op, state, after));
                state = next_state;
                events.lift(op);
                if ops[index].returned_at.is_some() {
                    pending_known -= 1;
                }
                cursor = Cursor::Known(events.first(KNOWN_HEAD));
            }
            Ok(false) => {
                linearized.toggle(index, &events, false);
                observers.update(&ops[index], false);
            }
            Err(MemoFull) => {
                let bytes = memo.bytes();
                return done(Found::GaveUp(UnknownReason::MemoryLimit { bytes }), steps);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Step;

    const UNLIMITED: Budget = Budget {
        max_steps: u64::MAX,
        max_memo_bytes: usize::MAX,
    };

    fn op(index: usize, invoked_at: u64, returned_at: Option<u64>, step: Step) -> KeyOp {
        KeyOp {
            index,
            invoked_at,
            returned_at,
            step,
        }
    }

    #[test]
    fn empty_history_is_linearizable() {
        assert_eq!(search(&[], UNLIMITED).found, Found::Linearizable);
    }

    #[test]
    fn reorders_concurrent_operations() {
        // get -> 1 is invoked first but must come after the put.
        let ops = [
            op(0, 0, Some(10), Step::Get { read: 1 }),
            op(1, 5, Some(8), Step::Put { value: 1 }),
        ];
        assert_eq!(search(&ops, UNLIMITED).found, Found::Linearizable);
    }

    #[test]
    fn rejects_read_of_the_future() {
        let ops = [
            op(0, 0, Some(4), Step::Get { read: 1 }),
            op(1, 5, Some(8), Step::Put { value: 1 }),
        ];
        assert_eq!(search(&ops, UNLIMITED).found, Found::NotLinearizable);
    }

    #[test]
    fn gives_up_at_the_step_limit() {
        let mut ops: Vec<KeyOp> = (0..12)
            .map(|i| {
                op(
                    i,
                    0,
                    Some(100),
                    Step::Put {
                        value: i as u32 + 1,
                    },
                )
            })
            .collect();
        ops.push(op(12, 0, Some(100), Step::Get { read: 99 }));
        let budget = Budget {
            max_steps: 500,
            max_memo_bytes: usize::MAX,
        };
        let result = search(&ops, budget);
        assert_eq!(
            result.found,
            Found::GaveUp(UnknownReason::StepLimit { steps: 500 })
        );
        assert_eq!(result.steps, 500);
        assert_eq!(search(&ops, UNLIMITED).found, Found::NotLinearizable);
    }

    /// Twenty timed-out deletes, each of which may explain any of twenty
    /// reads of "absent" between puts, then a stale read. Which deletes were
    /// used where does not matter, only how many: the refutation must stay
    /// cheap instead of trying every assignment.
    #[test]
    fn interchangeable_timeouts_stay_cheap() {
        let mut ops = vec![op(0, 0, Some(1), Step::Put { value: 1 })];
        for i in 0..20u64 {
            ops.push(op(ops.len(), 2 + i, None, Step::Delete));
        }
        for i in 1..=20u64 {
            let t = 100 * i;
            ops.push(op(
                ops.len(),
                t,
                Some(t + 10),
                Step::Put {
                    value: 1 + i as u32,
                },
            ));
            ops.push(op(
                ops.len(),
                t + 20,
                Some(t + 30),
                Step::Get { read: ABSENT },
            ));
        }
        let stale = ops.len();
        ops.push(op(stale, 5_000, Some(5_010), Step::Get { read: 1 }));
        let budget = Budget {
            max_steps: 200_000,
            max_memo_bytes: usize::MAX,
        };
        assert_eq!(search(&ops, budget).found, Found::NotLinearizable);
        ops.pop();
        assert_eq!(search(&ops, budget).found, Found::Linearizable);
        // One read of "absent" too many: only twenty deletes.
        ops.push(op(stale, 5_000, Some(5_010), Step::Put { value: 99 }));
        ops.push(op(
            stale + 1,
            5_020,
            Some(5_030),
            Step::Get { read: ABSENT },
        ));
        assert_eq!(search(&ops, budget).found, Found::NotLinearizable);
    }
}
