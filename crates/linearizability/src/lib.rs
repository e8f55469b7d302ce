//! A linearizability checker for histories of a key-value store, with two
//! smaller checks that go with it: final values, and watch streams.
//!
//! # The model
//!
//! Every key is an independent register that holds either nothing ("absent",
//! its initial state) or one [`Value`]. Values are `String`s, compared for
//! equality only, so that whatever is read back can be recorded: store etcd's
//! bytes as UTF-8 text, or hex-encode them. Give every write a value of its
//! own (say, client id and sequence number): then each read names the write
//! it saw, which keeps the search fast and anomalies easy to follow. Four
//! operations act on one key each:
//!
//! | call | effect | output |
//! | --- | --- | --- |
//! | [`Call::Put`] | set the value | [`Output::Ok`] |
//! | [`Call::Get`] | none | [`Output::Read`]: the value, or `None` if absent |
//! | [`Call::CompareAndSwap`] | set `new` if the value equals `expected` (`None`: absent) | [`Output::Swapped`]: whether it did |
//! | [`Call::Delete`] | make the key absent | [`Output::Ok`] |
//!
//! An [`Operation`] records its client, its call, when it was invoked and how
//! it ended ([`Outcome`]), with times in nanoseconds on one monotonic clock.
//! A [`History`] is a validated list of operations, in any order.
//!
//! A history is *linearizable* when every operation can be given a single
//! instant inside its interval `[invoked_at, returned_at]` so that, performed
//! one at a time in that order, the operations produce exactly the recorded
//! outputs. Operation `a` precedes `b` when `a` returned strictly before `b`
//! was invoked; intervals that touch count as concurrent.
//!
//! # Indeterminate operations
//!
//! A client that timed out or lost its connection does not know whether its
//! operation took effect. Record it with [`Outcome::Indeterminate`]. It is
//! treated as returning at infinity: it may take effect at any instant after
//! its invocation, or never. A compare-and-swap with unknown outcome swaps
//! exactly when its comparison holds at the instant chosen for it. An
//! indeterminate get constrains nothing and is ignored (it may stay in the
//! history).
//!
//! # Per-key checking
//!
//! Linearizability is compositional: a history is linearizable if and only if
//! each key's sub-history is. [`check()`] therefore splits the history by key
//! and searches each key separately, in key order. The search is the
//! Wing–Gong algorithm with Lowe's memoisation: it builds a linearization
//! operation by operation, always choosing among operations that no remaining
//! operation precedes, backtracks on dead ends, and never revisits a
//! configuration (operations linearized so far, register state).
//!
//! Indeterminate operations are what makes such searches expensive, since
//! each may be placed almost anywhere. The search therefore tries them only
//! when no operation with a known outcome can proceed and only if something
//! can use their effect, treats identical ones (say, several timed-out
//! deletes) as interchangeable, and treats states that no remaining operation
//! can observe as one. None of this changes the answer.
//!
//! # Limits
//!
//! The search is exponential in the worst case (many long-running concurrent
//! operations on one key). [`Limits`] caps the steps and the memo memory
//! spent on each key, and the steps spent shrinking an anomaly. A key that
//! hits a cap makes the result [`Verdict::Unknown`] (naming the key), unless
//! another key is found not linearizable, which takes precedence. The check
//! never runs unbounded.
//!
//! Cost grows with the operations per key and, above all, with the
//! indeterminate ones among them. Spreading a workload over many keys keeps
//! each search small: a history of 20,000 operations over 200 keys with 8
//! clients and 5% timeouts checks in milliseconds. Refuting a violation is
//! the expensive case, since every alternative must be ruled out: with
//! about 2,000 operations on one key, 5% timeouts take well under a second,
//! while 30% timeouts exceed the default step limit.
//!
//! # Reading an anomaly
//!
//! [`Verdict::NotLinearizable`] carries an [`Anomaly`]: the key, and a small
//! set of its operations that by themselves have no linearization, one per
//! line, for example:
//!
//! ```text
//! key "k": no linearization exists for these operations (3 of the key's 57):
//!   #4  client 1 [100 .. 200] put("k", "a") -> ok
//!   #9  client 2 [250 .. 300] put("k", "b") -> ok
//!   #12 client 3 [350 .. 400] get("k") -> "a"
//! Only operations invoked at or before 400 are considered; ...
//! ```
//!
//! `#n` is the operation's position in the history; `[a .. b]` its invocation
//! and return times (`?` when indeterminate). Here the get started after the
//! put of `"b"` finished, yet read the older `"a"`: a stale read. The witness
//! is obtained by cutting the history at the earliest time at which it
//! already fails (operations still running then are treated as
//! indeterminate, and marked), then leaving out reads, and writes that no
//! remaining operation could observe, while it still fails; the write that a
//! remaining read got its value from is kept. Each of these steps keeps a
//! linearizable history linearizable, so the witness failing proves that the
//! whole history fails. [`Anomaly::witness`] returns it as a [`History`] to
//! check again or to save.
//!
//! # Final values
//!
//! With overwrites, "every acknowledged write is present at the end" means:
//! the final value of each key was left by a write that could have been the
//! last one. [`check_final_values`] checks that cheaply, without a search.
//! The exact check is to add the final reads to the history as gets invoked
//! after everything else finished, and run [`check()`].
//!
//! # Watch streams
//!
//! [`check_watch_stream`] checks the revisions one watcher saw against the
//! revisions known to have changed the watched range: no revision may go
//! backwards, and none may be skipped, except those after the last event of
//! a stream that ended early (compaction error or broken connection).
//!
//! # Example
//!
//! ```
//! use linearizability::{check, Call, History, Limits, Operation, Output, Verdict};
//!
//! let history = History::new(vec![
//!     Operation::returned(1, Call::put("k", "a"), 0, 10, Output::Ok),
//!     Operation::returned(2, Call::put("k", "b"), 20, 30, Output::Ok),
//!     // Invoked after "b" was acknowledged, yet reads "a".
//!     Operation::returned(3, Call::get("k"), 40, 50, Output::Read(Some("a".into()))),
//!     // A put that timed out: it may or may not have happened.
//!     Operation::indeterminate(1, Call::put("k", "c"), 45),
//! ])?;
//! let Verdict::NotLinearizable(anomaly) = check(&history, &Limits::default()) else {
//!     panic!("the stale read must be found");
//! };
//! assert_eq!(anomaly.key, "k");
//! assert_eq!(anomaly.indices(), [0, 1, 2]);
//! println!("{anomaly}");
//! # Ok::<(), linearizability::HistoryError>(())
//! ```
//!
//! # Features
//!
//! `serde`: derives `Serialize` and `Deserialize` for the history and watch
//! types (a [`History`] is validated when deserialised).
#![forbid(unsafe_code)]

mod anomaly;
mod checker;
mod events;
mod final_state;
mod history;
mod limits;
mod memo;
mod minimise;
mod model;
mod search;
mod watch;

pub use anomaly::{Anomaly, AnomalyOperation};
pub use checker::{Verdict, check};
pub use final_state::{FinalValueViolation, PossibleLastWrite, check_final_values};
pub use history::{
    Call, ClientId, History, HistoryError, Key, Nanos, Operation, Outcome, Output, Value,
};
pub use limits::{Limits, UnknownReason};
pub use watch::{WatchEnd, WatchStream, WatchViolation, check_watch_stream};
