//! The report each program of the operator's binary leaves when it ends
//! without success inside a Pod, and the operator's reading of it.
//!
//! A program that fails or refuses writes two lines, to stderr and to its
//! container's termination message file ([`TERMINATION_MESSAGE_PATH`],
//! when the runtime provides one): a line for people, then the report as
//! one line of JSON, for example
//!
//! ```text
//! member-guard refused: identity marker disagrees: cluster token is a-1 on the volume but a-2 is expected for member a-0
//! {"version":1,"program":"member-guard","outcome":"refused","refusal":"foreign-cluster","detail":"identity marker disagrees: ..."}
//! ```
//!
//! The containers use [`TERMINATION_MESSAGE_POLICY`]: a runtime that
//! gives no termination message file (the lab's node agent) ends the
//! message with the tail of the container's log, whose last line is the
//! report as well. The operator reads only the last line
//! ([`Reading::of_termination_message`]).
//!
//! Version 1: `version`, `program` (`member-guard`, `restore-volume`),
//! `outcome` (`refused`, `failed`), `refusal` (only with `refused`: see
//! [`Refusal`]) and `detail` (the program's words). Fields may be added
//! within a version, and readers ignore the ones they do not know; a
//! change that an older reader would misread is a new version, which that
//! reader reports as [`Reading::Unrecognised`]. A member guard from before
//! reports wrote one plain line starting with [`LEGACY_REFUSAL_PREFIX`].

use std::fmt;

use serde_json::Value;

/// The version of the report this operator writes and reads.
pub const REPORT_VERSION: u64 = 1;

/// Where a program writes its termination message: Kubernetes' default
/// `terminationMessagePath`, which the operator's containers keep.
pub const TERMINATION_MESSAGE_PATH: &str = "/dev/termination-log";

/// The `terminationMessagePolicy` of the operator's containers: a runtime
/// without the termination message file takes the tail of the log of a
/// container that failed, which ends with the report too.
pub const TERMINATION_MESSAGE_POLICY: &str = "FallbackToLogsOnError";

/// Exit code of a member guard that refused the data it found. Not 2:
/// argument errors exit with 2 (clap), and a misconfigured guard must
/// never be read as "this data is not the member's", which leads to
/// replacing the member. Any other failure exits with 1.
pub const REFUSAL_EXIT_CODE: u8 = 3;

/// How a member guard's refusal line starts, for people, and the whole of
/// what a member guard from before reports left.
pub const LEGACY_REFUSAL_PREFIX: &str = "member-guard refused:";

/// Longest `detail` a report carries (in bytes), so that the JSON line
/// stays within the 2048 bytes of log tail a kubelet keeps.
const MAX_DETAIL_BYTES: usize = 768;

/// The program of the operator's binary that reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Program {
    /// `etcd-operator member-guard`, before every start of etcd in a member
    /// Pod.
    MemberGuard,
    /// `etcd-operator restore-volume <step>`, the steps of the restore Pod.
    RestoreVolume,
}

impl Program {
    /// Every program.
    pub const ALL: [Program; 2] = [Program::MemberGuard, Program::RestoreVolume];

    /// Its name in reports, which is also its subcommand.
    pub fn name(self) -> &'static str {
        match self {
            Program::MemberGuard => "member-guard",
            Program::RestoreVolume => "restore-volume",
        }
    }

    /// The program of a name in a report.
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|p| p.name() == name)
    }
}

/// Why the member guard refused to start etcd on a volume: whichever it
/// is, the data there is not (or no longer) the member's.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Refusal {
    /// etcd ran on the volume as this member (or the operator saw it run),
    /// and the data dir is empty: the member's data is lost.
    DataLost,
    /// The data dir holds data without an identity marker: nothing proves
    /// it is this member's.
    DataWithoutMarker,
    /// The identity marker names another cluster: another cluster token
    /// (an earlier incarnation, or another cluster) or cluster ID.
    ForeignCluster,
    /// The identity marker names another member of the cluster.
    ForeignMember,
    /// The identity marker cannot be read: it proves nothing.
    UnreadableMarker,
}

impl Refusal {
    /// Every refusal.
    pub const ALL: [Refusal; 5] = [
        Refusal::DataLost,
        Refusal::DataWithoutMarker,
        Refusal::ForeignCluster,
        Refusal::ForeignMember,
        Refusal::UnreadableMarker,
    ];

    /// Its name in reports.
    pub fn name(self) -> &'static str {
        match self {
            Refusal::DataLost => "data-lost",
            Refusal::DataWithoutMarker => "data-without-marker",
            Refusal::ForeignCluster => "foreign-cluster",
            Refusal::ForeignMember => "foreign-member",
            Refusal::UnreadableMarker => "unreadable-marker",
        }
    }

    /// The refusal of a name in a report.
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|r| r.name() == name)
    }

    /// What it says about the data dir, in a few words.
    pub fn summary(self) -> &'static str {
        match self {
            Refusal::DataLost => "data dir is empty (wiped)",
            Refusal::DataWithoutMarker => "data dir has no identity marker",
            Refusal::ForeignCluster => "data dir belongs to another cluster",
            Refusal::ForeignMember => "data dir belongs to another member",
            Refusal::UnreadableMarker => "identity marker is unreadable",
        }
    }
}

/// How a program ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The member guard refused the data (exit code [`REFUSAL_EXIT_CODE`]).
    Refused(Refusal),
    /// Any other failure; it may pass on a retry.
    Failed,
}

impl Outcome {
    /// Its name in reports.
    pub fn name(self) -> &'static str {
        match self {
            Outcome::Refused(_) => "refused",
            Outcome::Failed => "failed",
        }
    }
}

/// What a program reports as it ends without success.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Report {
    /// Who reports.
    pub program: Program,
    /// How it ended.
    pub outcome: Outcome,
    /// The program's words: one line.
    pub detail: String,
}

impl Report {
    /// A report; the detail is made one line and cut to a size that the
    /// termination message keeps whole.
    pub fn new(program: Program, outcome: Outcome, detail: &str) -> Self {
        Self {
            program,
            outcome,
            detail: one_short_line(detail),
        }
    }

    /// The line for people: `member-guard refused: <detail>`.
    pub fn text_line(&self) -> String {
        format!(
            "{} {}: {}",
            self.program.name(),
            self.outcome.name(),
            self.detail
        )
    }

    /// The report as one line of JSON, its fields in the documented order.
    pub fn json_line(&self) -> String {
        // The names are fixed ASCII words; only the detail needs escaping.
        let refusal = match self.outcome {
            Outcome::Refused(refusal) => format!(r#","refusal":"{}""#, refusal.name()),
            Outcome::Failed => String::new(),
        };
        format!(
            r#"{{"version":{REPORT_VERSION},"program":"{}","outcome":"{}"{refusal},"detail":{}}}"#,
            self.program.name(),
            self.outcome.name(),
            Value::from(self.detail.as_str()),
        )
    }

    /// The termination message: the line for people, then the report.
    pub fn termination_message(&self) -> String {
        format!("{}\n{}\n", self.text_line(), self.json_line())
    }
}

/// What a field of a report held that this operator does not know.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Unknown {
    /// Another version (or none).
    Version(String),
    /// Another program (or none).
    Program(String),
    /// Another outcome (or none).
    Outcome(String),
    /// Another refusal (or none, with `refused`).
    Refusal(String),
}

/// A report this operator cannot read: of another version, or naming a
/// program, outcome or refusal it does not know.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnrecognisedReport {
    /// The program it names, as written.
    pub program: Option<String>,
    /// What this operator does not know.
    pub unknown: Unknown,
    /// The program's words, if it gave any.
    pub detail: String,
}

impl fmt::Display for UnrecognisedReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (field, value) = match &self.unknown {
            Unknown::Version(v) => ("version", v),
            Unknown::Program(v) => ("program", v),
            Unknown::Outcome(v) => ("outcome", v),
            Unknown::Refusal(v) => ("refusal", v),
        };
        write!(
            f,
            "a report this operator cannot read ({field} {value}): {}",
            self.detail
        )
    }
}

/// The operator's reading of a termination message: its last line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reading {
    /// A report this operator reads.
    Report(Report),
    /// A report this operator cannot read.
    Unrecognised(UnrecognisedReport),
    /// A line that is no report: from a program that writes none (etcd,
    /// etcdutl), or a member guard from before reports.
    Text(String),
    /// No message at all.
    Empty,
}

impl Reading {
    /// Reads the last non-empty line of a termination message. Never
    /// fails: whatever is not a report of this version is
    /// [`Reading::Unrecognised`] or [`Reading::Text`]. A JSON line is a
    /// report when it has both `version` and `program` (etcd's own JSON
    /// log lines have neither).
    pub fn of_termination_message(message: &str) -> Self {
        let Some(line) = message.lines().map(str::trim).rfind(|l| !l.is_empty()) else {
            return Reading::Empty;
        };
        match serde_json::from_str::<Value>(line) {
            Ok(Value::Object(fields))
                if fields.contains_key("version") && fields.contains_key("program") =>
            {
                read_fields(&fields)
            }
            _ => Reading::Text(line.to_owned()),
        }
    }

    /// Whether `program` wrote the message: a report of it (readable or
    /// not), or for the member guard a line of a guard from before reports.
    pub fn is_from(&self, program: Program) -> bool {
        match self {
            Reading::Report(report) => report.program == program,
            Reading::Unrecognised(report) => report.program.as_deref() == Some(program.name()),
            Reading::Text(line) => {
                program == Program::MemberGuard && line.starts_with(LEGACY_REFUSAL_PREFIX)
            }
            Reading::Empty => false,
        }
    }

    /// What the message says, for people (empty for no message).
    pub fn text(&self) -> String {
        match self {
            Reading::Report(report) => report.text_line(),
            Reading::Unrecognised(report) => report.to_string(),
            Reading::Text(line) => line.clone(),
            Reading::Empty => String::new(),
        }
    }
}

fn read_fields(fields: &serde_json::Map<String, Value>) -> Reading {
    let text = |key: &str| fields.get(key).and_then(Value::as_str);
    let written = |key: &str| fields.get(key).map_or_else(String::new, raw);
    let unrecognised = |unknown| {
        Reading::Unrecognised(UnrecognisedReport {
            program: text("program").map(str::to_owned),
            unknown,
            detail: text("detail").unwrap_or_default().to_owned(),
        })
    };
    if fields.get("version").and_then(Value::as_u64) != Some(REPORT_VERSION) {
        return unrecognised(Unknown::Version(written("version")));
    }
    let Some(program) = text("program").and_then(Program::from_name) else {
        return unrecognised(Unknown::Program(written("program")));
    };
    let outcome = match text("outcome") {
        Some("failed") => Outcome::Failed,
        Some("refused") => match text("refusal").and_then(Refusal::from_name) {
            Some(refusal) => Outcome::Refused(refusal),
            None => return unrecognised(Unknown::Refusal(written("refusal"))),
        },
        _ => return unrecognised(Unknown::Outcome(written("outcome"))),
    };
    Reading::Report(Report {
        program,
        outcome,
        detail: text("detail").unwrap_or_default().to_owned(),
    })
}

/// A JSON value as written, strings without their quotes.
fn raw(value: &Value) -> String {
    match value {
        Value::String(text) => text.clone(),
        other => other.to_string(),
    }
}

/// `text` on one line, cut to [`MAX_DETAIL_BYTES`] on a character boundary.
fn one_short_line(text: &str) -> String {
    let line = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if line.len() <= MAX_DETAIL_BYTES {
        return line;
    }
    let mut end = MAX_DETAIL_BYTES;
    while !line.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &line[..end])
}

#[cfg(test)]
mod tests;
