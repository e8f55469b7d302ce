//! Shared test support: a simulator that produces histories of real
//! executions, mutations that make them non-linearizable, and a brute-force
//! linearizability oracle for tiny histories.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;

use linearizability::{Call, Nanos, Operation, Outcome, Output};

/// What happens to a planned operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fate {
    /// Takes effect inside its interval and is answered.
    Answered,
    /// Times out, but takes effect (possibly after the client gave up).
    TimedOutApplied,
    /// Times out and never takes effect.
    TimedOutLost,
}

/// One operation of a simulated run, before execution.
#[derive(Clone, Copy, Debug)]
pub struct PlannedOp {
    pub client: usize,
    pub key: usize,
    /// 0 put, 1 get, 2 compare-and-swap, 3 delete.
    pub kind: u8,
    /// Idle time of the client before invoking.
    pub think: Nanos,
    /// Time from invocation to answer (or to the client's timeout).
    pub duration: Nanos,
    /// Where in its interval the operation takes effect, in thousandths.
    pub point: u16,
    pub fate: Fate,
    /// How a compare-and-swap picks its expected value.
    pub choice: u8,
}

/// Number of property-test cases: `default`, unless the `PROPTEST_CASES`
/// environment variable says otherwise (for longer soak runs).
pub fn cases(default: u32) -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|value| value.parse().ok())
        .unwrap_or(default)
}

pub fn key_name(key: usize) -> String {
    format!("key-{key}")
}

/// Runs the plan against a real sequential key-value map: each client issues
/// its operations one after another; each operation that takes effect does
/// so at one instant inside its interval (later, for timed-out ones); the
/// outputs are those of the map executed in the order of those instants.
/// Every write stores a value unique to it (`v<position>`).
pub fn simulate(plan: &[PlannedOp], clients: usize) -> Vec<Operation> {
    let mut clock = vec![0u64; clients.max(1)];
    let mut intervals = Vec::with_capacity(plan.len());
    let mut effects = Vec::new();
    for (i, p) in plan.iter().enumerate() {
        let c = p.client % clock.len();
        let invoked = clock[c] + p.think;
        let duration = p.duration.max(1);
        let returned = invoked + duration;
        clock[c] = returned;
        intervals.push((invoked, returned));
        let point = u64::from(p.point.min(1000));
        let instant = match p.fate {
            Fate::Answered => Some(invoked + duration * point / 1000),
            // Applied up to three durations after the client gave up.
            Fate::TimedOutApplied => Some(invoked + duration * 4 * point / 1000),
            Fate::TimedOutLost => None,
        };
        if let Some(instant) = instant {
            effects.push((instant, i));
        }
    }
    effects.sort_unstable();

    let mut state: BTreeMap<usize, String> = BTreeMap::new();
    let mut written: BTreeMap<usize, Vec<String>> = BTreeMap::new();
    let mut calls: Vec<Option<(Call, Output)>> = vec![None; plan.len()];
    for &(_, i) in &effects {
        let p = plan[i];
        let key = key_name(p.key);
        let value = format!("v{i}");
        let (call, output) = match p.kind % 4 {
            0 => {
                state.insert(p.key, value.clone());
                written.entry(p.key).or_default().push(value.clone());
                (Call::put(key, value), Output::Ok)
            }
            1 => (Call::get(key), Output::Read(state.get(&p.key).cloned())),
            2 => {
                let current = state.get(&p.key).cloned();
                let expected = match p.choice % 3 {
                    0 => current.clone(),
                    1 => None,
                    _ => written
                        .get(&p.key)
                        .filter(|values| !values.is_empty())
                        .map(|values| values[usize::from(p.choice) % values.len()].clone()),
                };
                let swapped = expected == current;
                if swapped {
                    state.insert(p.key, value.clone());
                    written.entry(p.key).or_default().push(value.clone());
                }
                (
                    Call::compare_and_swap(key, expected.as_deref(), value),
                    Output::Swapped(swapped),
                )
            }
            _ => {
                state.remove(&p.key);
                (Call::delete(key), Output::Ok)
            }
        };
        calls[i] = Some((call, output));
    }

    plan.iter()
        .enumerate()
        .map(|(i, p)| {
            let (invoked, returned) = intervals[i];
            let call = match &calls[i] {
                Some((call, _)) => call.clone(),
                None => {
                    // Never took effect: any input will do.
                    let key = key_name(p.key);
                    match p.kind % 4 {
                        0 => Call::put(key, format!("v{i}")),
                        1 => Call::get(key),
                        2 => Call::compare_and_swap(key, None, format!("v{i}")),
                        _ => Call::delete(key),
                    }
                }
            };
            let client = (p.client % clock.len()) as u64;
            match (&calls[i], p.fate) {
                (Some((_, output)), Fate::Answered) => {
                    Operation::returned(client, call, invoked, returned, output.clone())
                }
                _ => Operation::indeterminate(client, call, invoked),
            }
        })
        .collect()
}

/// Writes that surely took effect: acknowledged puts and deletes, and
/// compare-and-swaps that reported a swap.
fn definite_write(op: &Operation) -> bool {
    matches!(
        (&op.call, op.output()),
        (Call::Put { .. } | Call::Delete { .. }, Some(_))
            | (Call::CompareAndSwap { .. }, Some(Output::Swapped(true)))
    )
}

/// The value an operation may write, if any.
fn value_written(op: &Operation) -> Option<&str> {
    match (&op.call, op.output()) {
        (Call::Put { value, .. }, _) => Some(value),
        (Call::CompareAndSwap { new, .. }, Some(Output::Swapped(true)) | None) => Some(new),
        _ => None,
    }
}

/// How a read was made impossible.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mutation {
    /// Reads a value no operation writes.
    NeverWritten,
    /// Reads a value that was surely overwritten before the read began.
    Stale,
    /// Reads a value whose write began after the read returned.
    FromTheFuture,
}

/// Changes the answer of one answered get (picked by `selector`) to a value
/// it cannot have read in any linearization. Prefers the kind `wanted`, and
/// falls back to a never-written value. Returns the mutated read's position
/// and the kind used, or `None` if the history has no answered get.
/// Relies on every write storing a unique value, as [`simulate`] does.
pub fn make_read_impossible(
    ops: &mut [Operation],
    selector: usize,
    wanted: Mutation,
) -> Option<(usize, Mutation)> {
    let reads: Vec<usize> = ops
        .iter()
        .enumerate()
        .filter(|(_, op)| matches!(op.call, Call::Get { .. }) && !op.is_indeterminate())
        .map(|(i, _)| i)
        .collect();
    if reads.is_empty() {
        return None;
    }
    let r = reads[selector % reads.len()];
    let read = ops[r].clone();
    let (read_invoked, read_returned) = (read.invoked_at, read.returned_at().unwrap());
    let same_key: Vec<&Operation> = ops.iter().filter(|op| op.key() == read.key()).collect();
    let candidates: Vec<String> = match wanted {
        Mutation::NeverWritten => Vec::new(),
        Mutation::Stale => same_key
            .iter()
            .filter(|w| definite_write(w) && w.returned_at().is_some())
            .filter_map(|w| {
                let value = value_written(w)?;
                let overwritten = same_key.iter().any(|later| {
                    definite_write(later)
                        && w.returned_at().unwrap() < later.invoked_at
                        && later.returned_at().unwrap() < read_invoked
                });
                overwritten.then(|| value.to_owned())
            })
            .collect(),
        Mutation::FromTheFuture => same_key
            .iter()
            .filter(|w| w.invoked_at > read_returned)
            .filter_map(|w| value_written(w).map(str::to_owned))
            .collect(),
    };
    let (value, used) = if candidates.is_empty() {
        ("never-written".to_owned(), Mutation::NeverWritten)
    } else {
        (candidates[selector % candidates.len()].clone(), wanted)
    };
    ops[r].outcome = Outcome::Returned {
        at: read_returned,
        output: Output::Read(Some(value)),
    };
    Some((r, used))
}

/// A small deterministic random number generator (SplitMix64).
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// A random plan of `count` operations over `keys` keys and `clients` clients;
/// `timeouts_per_mille` of them time out (half of those still take effect).
pub fn random_plan(
    rng: &mut Rng,
    count: usize,
    keys: usize,
    clients: usize,
    timeouts_per_mille: u64,
) -> Vec<PlannedOp> {
    (0..count)
        .map(|_| {
            let fate = match rng.below(1000) {
                x if x < timeouts_per_mille / 2 => Fate::TimedOutLost,
                x if x < timeouts_per_mille => Fate::TimedOutApplied,
                _ => Fate::Answered,
            };
            PlannedOp {
                client: rng.below(clients as u64) as usize,
                key: rng.below(keys as u64) as usize,
                kind: rng.below(4) as u8,
                think: rng.below(50),
                duration: 1 + rng.below(200),
                point: rng.below(1001) as u16,
                fate,
                choice: rng.below(256) as u8,
            }
        })
        .collect()
}

/// Decides linearizability of a tiny history by trying every order, with
/// the whole store (all keys) as one state. Independent of the library.
pub fn brute_force_linearizable(ops: &[Operation]) -> bool {
    let ops: Vec<&Operation> = ops
        .iter()
        .filter(|op| !(op.is_indeterminate() && matches!(op.call, Call::Get { .. })))
        .collect();
    let mut done = vec![false; ops.len()];
    let mut state = BTreeMap::new();
    search(&ops, &mut done, &mut state)
}

fn search(ops: &[&Operation], done: &mut [bool], state: &mut BTreeMap<String, String>) -> bool {
    let all_answered_done = ops
        .iter()
        .zip(done.iter())
        .all(|(op, &d)| d || op.is_indeterminate());
    if all_answered_done {
        return true;
    }
    for i in 0..ops.len() {
        if done[i] {
            continue;
        }
        let preceded = (0..ops.len()).any(|j| {
            !done[j] && j != i && ops[j].returned_at().is_some_and(|r| r < ops[i].invoked_at)
        });
        if preceded {
            continue;
        }
        let saved = state.clone();
        if apply(ops[i], state) {
            done[i] = true;
            if search(ops, done, state) {
                return true;
            }
            done[i] = false;
        }
        *state = saved;
    }
    false
}

fn apply(op: &Operation, state: &mut BTreeMap<String, String>) -> bool {
    let key = op.key().to_owned();
    let current = state.get(&key).cloned();
    match (&op.call, op.output()) {
        (Call::Put { value, .. }, _) => {
            state.insert(key, value.clone());
            true
        }
        (Call::Delete { .. }, _) => {
            state.remove(&key);
            true
        }
        (Call::Get { .. }, Some(Output::Read(read))) => *read == current,
        (Call::Get { .. }, _) => true,
        (Call::CompareAndSwap { expected, new, .. }, output) => {
            let holds = *expected == current;
            match output {
                Some(Output::Swapped(swapped)) if *swapped != holds => false,
                _ => {
                    if holds {
                        state.insert(key, new.clone());
                    }
                    true
                }
            }
        }
    }
}
