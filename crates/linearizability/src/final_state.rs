//! A cheap check of the values read at the end of a test: no acknowledged
//! write may be lost.
//!
//! A key is a register, so "every acknowledged write is present" cannot mean
//! that every written value is still there: later writes overwrite earlier
//! ones. What can be required is that the final value comes from a write that
//! could have been the last one. A write is *definite* when it is known to
//! have taken effect (an acknowledged put or delete, or a compare-and-swap
//! that reported a swap). A write `w` could be last unless some definite write
//! was invoked after `w` returned. Indeterminate writes (and compare-and-swaps
//! with unknown outcome) could always be last. The key may be absent at the
//! end only if a delete could be last or no definite write exists.
//!
//! This is a necessary condition only. For the exact answer, add the final
//! reads to the history as gets invoked after every other operation returned
//! or gave up, and run [`crate::check()`]: it then also accounts for the reads
//! and compare-and-swaps in between.

use std::collections::BTreeMap;
use std::fmt;

use crate::history::{Call, History, Key, Operation, Output, ShowValue, Value};

/// A write that could have been the last one on its key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PossibleLastWrite {
    /// Position of the write in the [`History`].
    pub index: usize,
    /// The value it leaves (`None`: a delete).
    pub value: Option<Value>,
    /// Whether the write is known to have taken effect.
    pub definite: bool,
}

/// A key whose final value no possible last write explains.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FinalValueViolation {
    /// The key.
    pub key: Key,
    /// The value read at the end (`None`: absent).
    pub found: Option<Value>,
    /// The writes that could have been last (empty if the key was never written).
    pub possible_last_writes: Vec<PossibleLastWrite>,
    /// Whether "absent" would have been acceptable (no definite write, or a
    /// delete could be last).
    pub absent_allowed: bool,
}

impl fmt::Display for FinalValueViolation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "key {:?}: final value {} was not left by any write that could have been the last one",
            self.key,
            ShowValue(self.found.as_deref())
        )?;
        if self.possible_last_writes.is_empty() {
            return f.write_str(" (the key was never written, so it should be absent)");
        }
        f.write_str("; possible last writes:")?;
        for write in &self.possible_last_writes {
            write!(
                f,
                " #{} ({}, {})",
                write.index,
                ShowValue(write.value.as_deref()),
                if write.definite {
                    "acknowledged"
                } else {
                    "indeterminate"
                }
            )?;
        }
        Ok(())
    }
}

/// A write of the history, as this check sees it.
struct Write<'a> {
    index: usize,
    invoked_at: u64,
    returned_at: Option<u64>,
    /// The value it leaves (`None`: a delete).
    value: Option<&'a str>,
    /// Whether it surely took effect.
    definite: bool,
}

impl<'a> Write<'a> {
    /// The write `op` makes, or `None` for operations that never write.
    fn of(index: usize, op: &'a Operation) -> Option<Self> {
        let answered = !op.is_indeterminate();
        let (value, definite) = match &op.call {
            Call::Put { value, .. } => (Some(value.as_str()), answered),
            Call::Delete { .. } => (None, answered),
            Call::CompareAndSwap { new, .. } => match op.output() {
                Some(Output::Swapped(false)) => return None,
                Some(_) => (Some(new.as_str()), true),
                None => (Some(new.as_str()), false),
            },
            Call::Get { .. } => return None,
        };
        Some(Write {
            index,
            invoked_at: op.invoked_at,
            returned_at: op.returned_at(),
            value,
            definite,
        })
    }
}

/// Checks each key of `final_values` (the value read once every operation of
/// `history` had returned or given up; `None`: absent) against the writes of
/// `history`. Keys not in `final_values` are not checked. Returns the
/// violations in key order.
pub fn check_final_values(
    history: &History,
    final_values: &BTreeMap<Key, Option<Value>>,
) -> Vec<FinalValueViolation> {
    let mut writes: BTreeMap<&str, Vec<Write<'_>>> = BTreeMap::new();
    for (index, op) in history.operations().iter().enumerate() {
        if let Some(write) = Write::of(index, op) {
            writes.entry(op.key()).or_default().push(write);
        }
    }
    let mut violations = Vec::new();
    for (key, found) in final_values {
        let key_writes = writes.get(key.as_str()).map(Vec::as_slice).unwrap_or(&[]);
        // The latest invocation among definite writes: a write that returned
        // before it is certainly overwritten.
        let latest_definite_start = key_writes
            .iter()
            .filter(|w| w.definite)
            .map(|w| w.invoked_at)
            .max();
        let possible: Vec<PossibleLastWrite> = key_writes
            .iter()
            .filter(|w| match (w.returned_at, latest_definite_start) {
                (Some(returned), Some(latest)) => returned >= latest,
                _ => true,
            })
            .map(|w| PossibleLastWrite {
                index: w.index,
                value: w.value.map(str::to_owned),
                definite: w.definite,
            })
            .collect();
        let absent_allowed =
            latest_definite_start.is_none() || possible.iter().any(|w| w.value.is_none());
        let explained = match found {
            None => absent_allowed,
            Some(value) => possible.iter().any(|w| w.value.as_ref() == Some(value)),
        };
        if !explained {
            violations.push(FinalValueViolation {
                key: key.clone(),
                found: found.clone(),
                possible_last_writes: possible,
                absent_allowed,
            });
        }
    }
    violations
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::Operation;

    fn finals(entries: &[(&str, Option<&str>)]) -> BTreeMap<Key, Option<Value>> {
        entries
            .iter()
            .map(|(k, v)| ((*k).to_owned(), v.map(str::to_owned)))
            .collect()
    }

    fn history() -> History {
        History::new(vec![
            // k: put a, then put b (sequential), then put c concurrent with b.
            Operation::returned(1, Call::put("k", "a"), 0, 10, Output::Ok),
            Operation::returned(1, Call::put("k", "b"), 20, 30, Output::Ok),
            Operation::returned(2, Call::put("k", "c"), 25, 40, Output::Ok),
            // j: put x acknowledged, put y timed out.
            Operation::returned(1, Call::put("j", "x"), 0, 5, Output::Ok),
            Operation::indeterminate(2, Call::put("j", "y"), 1),
            // d: put then delete.
            Operation::returned(1, Call::put("d", "v"), 0, 5, Output::Ok),
            Operation::returned(1, Call::delete("d"), 6, 7, Output::Ok),
            // s: failed swap writes nothing; successful swap does.
            Operation::returned(1, Call::put("s", "p"), 0, 5, Output::Ok),
            Operation::returned(
                1,
                Call::compare_and_swap("s", Some("z"), "q"),
                6,
                7,
                Output::Swapped(false),
            ),
            Operation::returned(
                1,
                Call::compare_and_swap("s", Some("p"), "r"),
                8,
                9,
                Output::Swapped(true),
            ),
        ])
        .unwrap()
    }

    #[test]
    fn accepts_values_of_possible_last_writes() {
        let ok = finals(&[
            ("k", Some("b")),
            ("j", Some("x")),
            ("d", None),
            ("s", Some("r")),
            ("never", None),
        ]);
        assert_eq!(check_final_values(&history(), &ok), vec![]);
        let ok = finals(&[("k", Some("c")), ("j", Some("y"))]);
        assert_eq!(check_final_values(&history(), &ok), vec![]);
    }

    #[test]
    fn reports_lost_and_invented_values() {
        let bad = finals(&[
            ("k", Some("a")),
            ("j", None),
            ("d", Some("v")),
            ("s", Some("q")),
            ("never", Some("x")),
        ]);
        let violations = check_final_values(&history(), &bad);
        let keys: Vec<&str> = violations.iter().map(|v| v.key.as_str()).collect();
        assert_eq!(keys, ["d", "j", "k", "never", "s"]);
        let k = &violations[2];
        assert_eq!(
            k.possible_last_writes
                .iter()
                .map(|w| w.index)
                .collect::<Vec<_>>(),
            [1, 2]
        );
        assert_eq!(
            k.to_string(),
            r#"key "k": final value "a" was not left by any write that could have been the last one; possible last writes: #1 ("b", acknowledged) #2 ("c", acknowledged)"#
        );
        assert!(!violations[1].absent_allowed);
        assert!(violations[3].to_string().contains("never written"));
    }
}
