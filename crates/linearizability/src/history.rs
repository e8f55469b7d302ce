//! Recorded client operations and the [`History`] that collects them.

use std::collections::BTreeSet;
use std::fmt;

/// Name of a key. Every key is an independent register.
pub type Key = String;

/// A value stored under a key.
///
/// Values are compared for equality only. etcd stores bytes: record them as
/// UTF-8 text, or encode other bytes injectively (for example as hex) so that
/// two different byte strings never map to the same `Value`.
pub type Value = String;

/// Identifies the client that issued an operation.
///
/// Used only to label operations in reports: the checker does not assume that
/// one client's operations are sequential.
pub type ClientId = u64;

/// A point in time, in nanoseconds on one monotonic clock shared by all
/// clients of a history.
pub type Nanos = u64;

/// What a client asked the store to do (the input of an operation).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "snake_case"))]
pub enum Call {
    /// Store `value` under `key`. Expected output: [`Output::Ok`].
    Put {
        /// The key written.
        key: Key,
        /// The value written.
        value: Value,
    },
    /// Read `key`. Expected output: [`Output::Read`].
    Get {
        /// The key read.
        key: Key,
    },
    /// Store `new` under `key` if the current value equals `expected`
    /// (`None`: the key is absent). Expected output: [`Output::Swapped`].
    CompareAndSwap {
        /// The key compared and written.
        key: Key,
        /// The value required for the swap; `None` requires the key to be absent.
        expected: Option<Value>,
        /// The value written when the comparison holds.
        new: Value,
    },
    /// Remove `key`. Expected output: [`Output::Ok`].
    Delete {
        /// The key removed.
        key: Key,
    },
}

impl Call {
    /// A [`Call::Put`].
    pub fn put(key: impl Into<Key>, value: impl Into<Value>) -> Self {
        Call::Put {
            key: key.into(),
            value: value.into(),
        }
    }

    /// A [`Call::Get`].
    pub fn get(key: impl Into<Key>) -> Self {
        Call::Get { key: key.into() }
    }

    /// A [`Call::CompareAndSwap`]; `expected: None` requires the key to be absent.
    pub fn compare_and_swap(
        key: impl Into<Key>,
        expected: Option<&str>,
        new: impl Into<Value>,
    ) -> Self {
        Call::CompareAndSwap {
            key: key.into(),
            expected: expected.map(str::to_owned),
            new: new.into(),
        }
    }

    /// A [`Call::Delete`].
    pub fn delete(key: impl Into<Key>) -> Self {
        Call::Delete { key: key.into() }
    }

    /// The key this call touches.
    pub fn key(&self) -> &str {
        match self {
            Call::Put { key, .. }
            | Call::Get { key }
            | Call::CompareAndSwap { key, .. }
            | Call::Delete { key } => key,
        }
    }

    /// Whether `output` is the kind of output this call produces.
    pub fn accepts(&self, output: &Output) -> bool {
        matches!(
            (self, output),
            (Call::Put { .. } | Call::Delete { .. }, Output::Ok)
                | (Call::Get { .. }, Output::Read(_))
                | (Call::CompareAndSwap { .. }, Output::Swapped(_))
        )
    }
}

/// What the store answered (the output of an operation).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "snake_case"))]
pub enum Output {
    /// A put or delete was acknowledged.
    Ok,
    /// A get returned this value (`None`: the key was absent).
    Read(Option<Value>),
    /// A compare-and-swap reported whether it swapped.
    Swapped(bool),
}

/// How an operation ended, as seen by its client.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "snake_case"))]
pub enum Outcome {
    /// The store answered at time `at` with `output`.
    Returned {
        /// When the client received the answer.
        at: Nanos,
        /// The answer.
        output: Output,
    },
    /// No answer (timeout, broken connection): the operation may or may not
    /// have taken effect, at any time after its invocation.
    Indeterminate,
}

/// One client operation: its call, when it was invoked, and how it ended.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct Operation {
    /// The client that issued the operation (for reports only).
    pub client: ClientId,
    /// What was asked.
    pub call: Call,
    /// When the client sent the request.
    pub invoked_at: Nanos,
    /// How it ended.
    pub outcome: Outcome,
}

impl Operation {
    /// An operation that returned `output` at `returned_at`.
    pub fn returned(
        client: ClientId,
        call: Call,
        invoked_at: Nanos,
        returned_at: Nanos,
        output: Output,
    ) -> Self {
        Operation {
            client,
            call,
            invoked_at,
            outcome: Outcome::Returned {
                at: returned_at,
                output,
            },
        }
    }

    /// An operation whose outcome is unknown.
    pub fn indeterminate(client: ClientId, call: Call, invoked_at: Nanos) -> Self {
        Operation {
            client,
            call,
            invoked_at,
            outcome: Outcome::Indeterminate,
        }
    }

    /// The key this operation touches.
    pub fn key(&self) -> &str {
        self.call.key()
    }

    /// When the answer arrived, or `None` for an indeterminate operation.
    pub fn returned_at(&self) -> Option<Nanos> {
        match self.outcome {
            Outcome::Returned { at, .. } => Some(at),
            Outcome::Indeterminate => None,
        }
    }

    /// The answer, or `None` for an indeterminate operation.
    pub fn output(&self) -> Option<&Output> {
        match &self.outcome {
            Outcome::Returned { output, .. } => Some(output),
            Outcome::Indeterminate => None,
        }
    }

    /// Whether the outcome is unknown.
    pub fn is_indeterminate(&self) -> bool {
        self.outcome == Outcome::Indeterminate
    }
}

/// A validated list of operations, in any order.
///
/// Indeterminate gets are kept in the list but ignored by the checks: a read
/// without an answer constrains nothing.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(
    feature = "serde",
    serde(try_from = "Vec<Operation>", into = "Vec<Operation>")
)]
pub struct History {
    operations: Vec<Operation>,
}

impl History {
    /// Validates and wraps `operations`: every output must suit its call, and
    /// no operation may return before it was invoked.
    pub fn new(operations: Vec<Operation>) -> Result<Self, HistoryError> {
        for (index, op) in operations.iter().enumerate() {
            if let Outcome::Returned { at, output } = &op.outcome {
                if !op.call.accepts(output) {
                    return Err(HistoryError::OutputDoesNotMatchCall { index });
                }
                if *at < op.invoked_at {
                    return Err(HistoryError::ReturnedBeforeInvoked {
                        index,
                        invoked_at: op.invoked_at,
                        returned_at: *at,
                    });
                }
            }
        }
        Ok(History { operations })
    }

    /// Wraps operations already known to be valid.
    pub(crate) fn from_valid(operations: Vec<Operation>) -> Self {
        History { operations }
    }

    /// The operations, in the order given to [`History::new`]. Reports refer
    /// to operations by their position in this slice (`#index`).
    pub fn operations(&self) -> &[Operation] {
        &self.operations
    }

    /// Gives the operations back.
    pub fn into_operations(self) -> Vec<Operation> {
        self.operations
    }

    /// Number of operations.
    pub fn len(&self) -> usize {
        self.operations.len()
    }

    /// Whether there are no operations.
    pub fn is_empty(&self) -> bool {
        self.operations.is_empty()
    }

    /// The distinct keys touched, in order.
    pub fn keys(&self) -> BTreeSet<&str> {
        self.operations.iter().map(Operation::key).collect()
    }
}

impl TryFrom<Vec<Operation>> for History {
    type Error = HistoryError;

    fn try_from(operations: Vec<Operation>) -> Result<Self, Self::Error> {
        History::new(operations)
    }
}

impl From<History> for Vec<Operation> {
    fn from(history: History) -> Self {
        history.operations
    }
}

/// Why a list of operations is not a valid [`History`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HistoryError {
    /// The output kind does not suit the call (e.g. a put that returned a read).
    OutputDoesNotMatchCall {
        /// Position of the operation.
        index: usize,
    },
    /// The operation returned before it was invoked.
    ReturnedBeforeInvoked {
        /// Position of the operation.
        index: usize,
        /// Its invocation time.
        invoked_at: Nanos,
        /// Its (earlier) return time.
        returned_at: Nanos,
    },
}

impl fmt::Display for HistoryError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HistoryError::OutputDoesNotMatchCall { index } => {
                write!(f, "operation #{index}: output does not suit the call")
            }
            HistoryError::ReturnedBeforeInvoked {
                index,
                invoked_at,
                returned_at,
            } => write!(
                f,
                "operation #{index}: returned at {returned_at} before it was invoked at {invoked_at}"
            ),
        }
    }
}

impl std::error::Error for HistoryError {}

/// Formats an optional value: `"text"` or `absent`.
pub(crate) struct ShowValue<'a>(pub(crate) Option<&'a str>);

impl fmt::Display for ShowValue<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(value) => write!(f, "{value:?}"),
            None => f.write_str("absent"),
        }
    }
}

/// `put("k", "v")`, `get("k")`, `cas("k", expected absent, new "v")`, `delete("k")`.
impl fmt::Display for Call {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Call::Put { key, value } => write!(f, "put({key:?}, {value:?})"),
            Call::Get { key } => write!(f, "get({key:?})"),
            Call::CompareAndSwap { key, expected, new } => write!(
                f,
                "cas({key:?}, expected {}, new {new:?})",
                ShowValue(expected.as_deref())
            ),
            Call::Delete { key } => write!(f, "delete({key:?})"),
        }
    }
}

/// `ok`, `"v"` / `absent` for reads, `swapped` / `not swapped`.
impl fmt::Display for Output {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Output::Ok => f.write_str("ok"),
            Output::Read(value) => write!(f, "{}", ShowValue(value.as_deref())),
            Output::Swapped(true) => f.write_str("swapped"),
            Output::Swapped(false) => f.write_str("not swapped"),
        }
    }
}

/// `client 3 [1200 .. 1500] put("k", "v") -> ok`; an indeterminate operation
/// shows `[1200 .. ?]` and `-> indeterminate`.
impl fmt::Display for Operation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "client {} [{} .. ", self.client, self.invoked_at)?;
        match &self.outcome {
            Outcome::Returned { at, output } => write!(f, "{at}] {} -> {output}", self.call),
            Outcome::Indeterminate => write!(f, "?] {} -> indeterminate", self.call),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejects_mismatched_output() {
        let err = History::new(vec![Operation::returned(
            1,
            Call::put("k", "v"),
            0,
            1,
            Output::Read(None),
        )]);
        assert_eq!(err, Err(HistoryError::OutputDoesNotMatchCall { index: 0 }));
    }

    #[test]
    fn rejects_return_before_invoke() {
        let err = History::new(vec![
            Operation::indeterminate(1, Call::get("k"), 5),
            Operation::returned(1, Call::delete("k"), 10, 9, Output::Ok),
        ]);
        assert_eq!(
            err,
            Err(HistoryError::ReturnedBeforeInvoked {
                index: 1,
                invoked_at: 10,
                returned_at: 9
            })
        );
    }

    #[test]
    fn displays_operations() {
        let op = Operation::returned(
            3,
            Call::compare_and_swap("k", None, "b"),
            1200,
            1500,
            Output::Swapped(false),
        );
        assert_eq!(
            op.to_string(),
            r#"client 3 [1200 .. 1500] cas("k", expected absent, new "b") -> not swapped"#
        );
        let op = Operation::indeterminate(2, Call::put("k", "v"), 7);
        assert_eq!(
            op.to_string(),
            r#"client 2 [7 .. ?] put("k", "v") -> indeterminate"#
        );
        let op = Operation::returned(1, Call::get("k"), 1, 2, Output::Read(Some("x".into())));
        assert_eq!(op.to_string(), r#"client 1 [1 .. 2] get("k") -> "x""#);
    }
}
