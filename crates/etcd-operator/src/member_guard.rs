//! `etcd-operator member-guard`: the init container that runs before etcd
//! in every member pod and enforces durability rule 1 (identity ⇔ data).
//!
//! Next to the data directory, in the root of the member's volume, lives a
//! marker file (`member-identity.json`) naming the member the data belongs
//! to. The operator passes the identity it expects (from the PVC's
//! annotations) as arguments or environment variables. The guard:
//!
//! | data dir  | marker             | expected            | outcome                    |
//! |-----------|--------------------|---------------------|----------------------------|
//! | empty     | none               | new member allowed  | write marker, start        |
//! | empty     | none               | data expected       | refuse: data lost          |
//! | present   | none               | any                 | refuse: data of unknown origin |
//! | any       | disagrees          | any                 | refuse: foreign data       |
//! | present   | matches            | any                 | start (marker completed)   |
//! | empty     | matches, no data yet | new member allowed | start                     |
//! | empty     | matches, had data  | any                 | refuse: data lost          |
//! | empty     | matches            | data expected       | refuse: data lost          |
//!
//! A refusal exits with [`REFUSAL_EXIT_CODE`] and one line on stderr; the operator reads it
//! from the pod's container status (`lastState.terminated.message` when
//! `terminationMessagePolicy: FallbackToLogsOnError`) and replaces the
//! member instead of starting etcd on the wrong data.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::etcd::{format_id, parse_id};

/// Exit code of a guard that refused the data it found. Not 2: argument
/// errors exit with 2 (clap), and a misconfigured guard must never be read
/// as "this data is not the member's", which leads to replacing the member.
pub const REFUSAL_EXIT_CODE: u8 = 3;

/// Prefix of every refusal line (the container's termination message).
pub const REFUSAL_PREFIX: &str = "member-guard refused:";

/// The marker's file name, in the parent of the data directory.
pub const MARKER_FILE_NAME: &str = "member-identity.json";

/// Arguments of `etcd-operator member-guard`.
#[derive(Debug, Clone, clap::Args)]
pub struct MemberGuardArgs {
    /// etcd's data directory (`--data-dir` of etcd). It must be a
    /// subdirectory of the volume, so the marker can live beside it.
    #[arg(long, env = "MEMBER_GUARD_DATA_DIR")]
    pub data_dir: PathBuf,

    /// The marker file. Default: `member-identity.json` in the parent of
    /// the data directory.
    #[arg(long, env = "MEMBER_GUARD_MARKER_FILE")]
    pub marker_file: Option<PathBuf>,

    /// The token of the cluster incarnation (`--initial-cluster-token`).
    #[arg(long, env = "MEMBER_GUARD_CLUSTER_TOKEN")]
    pub cluster_token: String,

    /// The member's name (`--name`).
    #[arg(long, env = "MEMBER_GUARD_MEMBER_NAME")]
    pub member_name: String,

    /// The cluster ID in hex, when the operator knows it.
    #[arg(long, env = "MEMBER_GUARD_CLUSTER_ID", value_parser = parse_hex_id)]
    pub cluster_id: Option<u64>,

    /// The member ID in hex, when the operator knows it (known as soon as
    /// the member is added, before it first starts).
    #[arg(long, env = "MEMBER_GUARD_MEMBER_ID", value_parser = parse_hex_id)]
    pub member_id: Option<u64>,

    /// The member has run on this volume before and must find its data
    /// (the operator saw it started). Without it, an empty volume is
    /// accepted as a new member.
    #[arg(long, env = "MEMBER_GUARD_EXPECT_DATA", default_value_t = false)]
    pub expect_data: bool,

    /// A Pod-scoped copy of the marker (in an `emptyDir`, which lives as
    /// long as the Pod): written after every pass, and read at the next
    /// start of a container of the same Pod. While it exists the volume's
    /// own marker must still be there and agree: a marker that vanished
    /// under a running Pod means the volume was wiped or replaced, even when
    /// the operator has not recorded the member ID yet.
    #[arg(long, env = "MEMBER_GUARD_SEEN_MARKER")]
    pub seen_marker: Option<PathBuf>,

    /// After a pass, copy this executable to this path (the init container
    /// installs the guard into an `emptyDir`, so that the etcd container can
    /// run it before every start of etcd, restarts included).
    #[arg(long, env = "MEMBER_GUARD_INSTALL_TO")]
    pub install_to: Option<PathBuf>,

    /// After a pass, replace this process with this command (etcd), so that
    /// etcd never starts on data the guard has not checked.
    #[arg(last = true)]
    pub exec: Vec<String>,
}

fn parse_hex_id(text: &str) -> Result<u64, String> {
    parse_id(text).ok_or_else(|| format!("{text:?} is not a hexadecimal etcd ID"))
}

/// The identity the data of a volume belongs to, as stored in the marker.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemberMarker {
    pub cluster_token: String,
    pub member_name: String,
    /// Hex, like etcd prints it.
    #[serde(default, skip_serializing_if = "Option::is_none", with = "hex_id")]
    pub cluster_id: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none", with = "hex_id")]
    pub member_id: Option<u64>,
    /// Set once the guard has seen etcd's data under this marker: from then
    /// on an empty data directory means the data was lost.
    #[serde(default)]
    pub has_had_data: bool,
}

/// What the operator expects the volume to hold.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExpectedIdentity {
    pub cluster_token: String,
    pub member_name: String,
    pub cluster_id: Option<u64>,
    pub member_id: Option<u64>,
    pub expect_data: bool,
}

/// What the guard found on the volume.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VolumeState {
    pub marker: Option<MemberMarker>,
    /// The data directory exists and has entries.
    pub data_present: bool,
}

/// The guard's verdict.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GuardDecision {
    /// Start etcd; write this marker first when it differs from the one on
    /// disk (new member, or IDs learnt since).
    Start { write_marker: Option<MemberMarker> },
    /// Do not start etcd.
    Refuse(Refusal),
}

/// Why the guard refuses to start etcd. Each message is one line.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error(
        "data dir is empty and has no identity marker, but member {member_name} is expected to have data: its data is lost, replace the member"
    )]
    DataLostNoMarker { member_name: String },
    #[error(
        "data dir is empty but the marker says member {member_name} had data here: its data is lost, replace the member"
    )]
    DataLost { member_name: String },
    #[error(
        "data dir holds data without an identity marker: cannot prove it belongs to member {member_name}, refusing to start"
    )]
    DataWithoutMarker { member_name: String },
    #[error(
        "identity marker disagrees: {field} is {found} on the volume but {expected} is expected for member {member_name}"
    )]
    MarkerMismatch {
        member_name: String,
        field: &'static str,
        found: String,
        expected: String,
    },
    #[error(
        "identity marker {path} is unreadable ({reason}): cannot prove the data belongs to member {member_name}, refusing to start"
    )]
    CorruptMarker {
        member_name: String,
        path: String,
        reason: String,
    },
}

/// The pure decision of the guard. See the module table.
pub fn decide(expected: &ExpectedIdentity, volume: &VolumeState) -> GuardDecision {
    let member_name = expected.member_name.clone();
    let Some(marker) = &volume.marker else {
        return match (volume.data_present, expected.expect_data) {
            (true, _) => GuardDecision::Refuse(Refusal::DataWithoutMarker { member_name }),
            (false, true) => GuardDecision::Refuse(Refusal::DataLostNoMarker { member_name }),
            (false, false) => GuardDecision::Start {
                write_marker: Some(MemberMarker {
                    cluster_token: expected.cluster_token.clone(),
                    member_name,
                    cluster_id: expected.cluster_id,
                    member_id: expected.member_id,
                    has_had_data: false,
                }),
            },
        };
    };

    if let Some(refusal) = mismatch(expected, marker) {
        return GuardDecision::Refuse(refusal);
    }

    if !volume.data_present && (marker.has_had_data || expected.expect_data) {
        return GuardDecision::Refuse(Refusal::DataLost { member_name });
    }

    // Matching marker: complete it with what is known now.
    let completed = MemberMarker {
        cluster_id: marker.cluster_id.or(expected.cluster_id),
        member_id: marker.member_id.or(expected.member_id),
        has_had_data: marker.has_had_data || volume.data_present,
        ..marker.clone()
    };
    GuardDecision::Start {
        write_marker: (completed != *marker).then_some(completed),
    }
}

fn mismatch(expected: &ExpectedIdentity, marker: &MemberMarker) -> Option<Refusal> {
    let differs = |field: &'static str, found: String, wanted: String| Refusal::MarkerMismatch {
        member_name: expected.member_name.clone(),
        field,
        found,
        expected: wanted,
    };
    if marker.cluster_token != expected.cluster_token {
        return Some(differs(
            "cluster token",
            marker.cluster_token.clone(),
            expected.cluster_token.clone(),
        ));
    }
    if marker.member_name != expected.member_name {
        return Some(differs(
            "member name",
            marker.member_name.clone(),
            expected.member_name.clone(),
        ));
    }
    if let (Some(found), Some(wanted)) = (marker.cluster_id, expected.cluster_id)
        && found != wanted
    {
        return Some(differs("cluster id", format_id(found), format_id(wanted)));
    }
    if let (Some(found), Some(wanted)) = (marker.member_id, expected.member_id)
        && found != wanted
    {
        return Some(differs("member id", format_id(found), format_id(wanted)));
    }
    None
}

/// Errors of the member guard. The `Display` of each is one line, meant
/// for stderr and the pod's termination message.
#[derive(Debug, thiserror::Error)]
pub enum MemberGuardError {
    #[error("member-guard refused: {0}")]
    Refused(#[from] Refusal),
    #[error("member-guard: identity marker {path} is unreadable: {reason}")]
    InvalidMarker { path: PathBuf, reason: String },
    #[error("member-guard: {action} {path}: {source}")]
    Io {
        action: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("member-guard: data dir {0} has no parent directory for the identity marker")]
    NoMarkerLocation(PathBuf),
}

impl MemberGuardError {
    /// True when the guard deliberately refused (as opposed to an I/O
    /// problem that may go away on a restart).
    pub fn is_refusal(&self) -> bool {
        matches!(self, MemberGuardError::Refused(_))
    }
}

/// Runs the guard: read the volume, decide, write the marker if needed.
/// `Ok(())` means etcd may start; the caller prints the error and exits
/// non-zero otherwise.
pub fn run(args: MemberGuardArgs) -> Result<(), MemberGuardError> {
    let marker_path = match &args.marker_file {
        Some(path) => path.clone(),
        None => default_marker_path(&args.data_dir)?,
    };
    // A marker that cannot be read proves nothing: the data is refused, like
    // foreign data, rather than retried forever.
    let marker = read_marker(&marker_path).map_err(|error| match error {
        MemberGuardError::InvalidMarker { path, reason } => {
            MemberGuardError::Refused(Refusal::CorruptMarker {
                member_name: args.member_name.clone(),
                path: path.display().to_string(),
                reason,
            })
        }
        other => other,
    })?;
    let volume = VolumeState {
        marker,
        data_present: data_present(&args.data_dir)?,
    };
    let seen = match &args.seen_marker {
        Some(path) => read_marker(path)?,
        None => None,
    };
    let expected = ExpectedIdentity {
        cluster_token: args.cluster_token,
        member_name: args.member_name,
        cluster_id: args.cluster_id,
        member_id: args.member_id,
        expect_data: args.expect_data,
    };
    let passed = match decide_in_pod(&expected, seen.as_ref(), &volume) {
        GuardDecision::Refuse(refusal) => return Err(refusal.into()),
        GuardDecision::Start { write_marker } => {
            if let Some(marker) = &write_marker {
                write_marker_file(&marker_path, marker)?;
            }
            write_marker.or(volume.marker)
        }
    };
    if let (Some(path), Some(marker)) = (&args.seen_marker, &passed) {
        write_marker_file(path, marker)?;
    }
    if let Some(target) = &args.install_to {
        install_self(target)?;
    }
    if let Some((program, rest)) = args.exec.split_first() {
        use std::os::unix::process::CommandExt;
        let error = std::process::Command::new(program).args(rest).exec();
        return Err(MemberGuardError::Io {
            action: "executing",
            path: PathBuf::from(program),
            source: error,
        });
    }
    Ok(())
}

/// The decision at a start of a container of a Pod whose earlier container
/// saw `seen` on the volume: the volume's marker must still be there (it
/// only vanishes with the volume's content), with the IDs seen then, and
/// data once the marker said it had some.
pub fn decide_in_pod(
    expected: &ExpectedIdentity,
    seen: Option<&MemberMarker>,
    volume: &VolumeState,
) -> GuardDecision {
    let Some(seen) = seen else {
        return decide(expected, volume);
    };
    let member_name = expected.member_name.clone();
    if volume.marker.is_none() {
        return GuardDecision::Refuse(if volume.data_present {
            Refusal::DataWithoutMarker { member_name }
        } else {
            Refusal::DataLostNoMarker { member_name }
        });
    }
    let sharpened = ExpectedIdentity {
        cluster_id: expected.cluster_id.or(seen.cluster_id),
        member_id: expected.member_id.or(seen.member_id),
        expect_data: expected.expect_data || seen.has_had_data,
        ..expected.clone()
    };
    decide(&sharpened, volume)
}

/// Copies the running executable to `target` (temporary file, then rename).
/// Copies the running binary to `target` (mode 0555), atomically, so that a
/// container of another image can run it from a shared `emptyDir`.
pub fn install_self(target: &Path) -> Result<(), MemberGuardError> {
    use std::os::unix::fs::PermissionsExt;
    let io = |action: &'static str, path: &Path| {
        let path = path.to_path_buf();
        move |source| MemberGuardError::Io {
            action,
            path,
            source,
        }
    };
    let source = std::env::current_exe().map_err(io("locating", Path::new("/proc/self/exe")))?;
    let temporary = target.with_extension("tmp");
    fs::copy(&source, &temporary).map_err(io("copying to", &temporary))?;
    fs::set_permissions(&temporary, fs::Permissions::from_mode(0o555))
        .map_err(io("setting the mode of", &temporary))?;
    fs::rename(&temporary, target).map_err(io("renaming into", target))
}

/// `member-identity.json` beside the data directory.
pub fn default_marker_path(data_dir: &Path) -> Result<PathBuf, MemberGuardError> {
    let parent = data_dir
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .ok_or_else(|| MemberGuardError::NoMarkerLocation(data_dir.to_path_buf()))?;
    Ok(parent.join(MARKER_FILE_NAME))
}

fn read_marker(path: &Path) -> Result<Option<MemberMarker>, MemberGuardError> {
    let bytes = match fs::read(path) {
        Ok(bytes) => bytes,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => {
            return Err(MemberGuardError::Io {
                action: "reading",
                path: path.to_path_buf(),
                source,
            });
        }
    };
    // Bytes that are not even text are as unreadable as broken JSON.
    let text = String::from_utf8(bytes).map_err(|e| MemberGuardError::InvalidMarker {
        path: path.to_path_buf(),
        reason: e.to_string(),
    })?;
    serde_json::from_str(&text)
        .map(Some)
        .map_err(|e| MemberGuardError::InvalidMarker {
            path: path.to_path_buf(),
            reason: e.to_string(),
        })
}

fn data_present(data_dir: &Path) -> Result<bool, MemberGuardError> {
    match fs::read_dir(data_dir) {
        Ok(mut entries) => Ok(entries.next().is_some()),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(source) => Err(MemberGuardError::Io {
            action: "listing",
            path: data_dir.to_path_buf(),
            source,
        }),
    }
}

/// Writes the marker atomically (temporary file, fsync, rename, fsync dir).
pub fn write_marker_file(path: &Path, marker: &MemberMarker) -> Result<(), MemberGuardError> {
    let io = |action: &'static str, path: &Path| {
        let path = path.to_path_buf();
        move |source| MemberGuardError::Io {
            action,
            path,
            source,
        }
    };
    let text =
        serde_json::to_string_pretty(marker).map_err(|e| MemberGuardError::InvalidMarker {
            path: path.to_path_buf(),
            reason: e.to_string(),
        })?;
    let temporary = path.with_extension("json.tmp");
    let mut file = fs::File::create(&temporary).map_err(io("creating", &temporary))?;
    file.write_all(text.as_bytes())
        .and_then(|()| file.write_all(b"\n"))
        .and_then(|()| file.sync_all())
        .map_err(io("writing", &temporary))?;
    fs::rename(&temporary, path).map_err(io("renaming into", path))?;
    if let Some(dir) = path.parent() {
        fs::File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(io("syncing", dir))?;
    }
    Ok(())
}

mod hex_id {
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(id: &Option<u64>, serializer: S) -> Result<S::Ok, S::Error> {
        match id {
            Some(id) => serializer.serialize_str(&crate::etcd::format_id(*id)),
            None => serializer.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<Option<u64>, D::Error> {
        let text: Option<String> = Option::deserialize(deserializer)?;
        text.map(|t| {
            crate::etcd::parse_id(&t)
                .ok_or_else(|| serde::de::Error::custom(format!("{t:?} is not a hexadecimal ID")))
        })
        .transpose()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn expected(expect_data: bool) -> ExpectedIdentity {
        ExpectedIdentity {
            cluster_token: "prod-a-1".into(),
            member_name: "prod-a-0".into(),
            cluster_id: None,
            member_id: Some(0xabc),
            expect_data,
        }
    }

    fn marker(has_had_data: bool) -> MemberMarker {
        MemberMarker {
            cluster_token: "prod-a-1".into(),
            member_name: "prod-a-0".into(),
            cluster_id: None,
            member_id: Some(0xabc),
            has_had_data,
        }
    }

    fn volume(marker: Option<MemberMarker>, data_present: bool) -> VolumeState {
        VolumeState {
            marker,
            data_present,
        }
    }

    #[test]
    fn a_marker_seen_by_the_pod_must_still_be_on_the_volume() {
        // The guard of this Pod saw the marker before etcd first started
        // (no data yet, member ID not recorded): the volume is wiped while
        // etcd runs, and the next start of etcd is refused.
        let seen = MemberMarker {
            member_id: None,
            ..marker(false)
        };
        let without_id = ExpectedIdentity {
            member_id: None,
            ..expected(false)
        };
        assert!(matches!(
            decide_in_pod(&without_id, Some(&seen), &volume(None, false)),
            GuardDecision::Refuse(Refusal::DataLostNoMarker { .. })
        ));
        assert!(matches!(
            decide_in_pod(&without_id, Some(&seen), &volume(None, true)),
            GuardDecision::Refuse(Refusal::DataWithoutMarker { .. })
        ));
        // The first start of etcd after the init container: no data yet.
        assert!(matches!(
            decide_in_pod(&without_id, Some(&seen), &volume(Some(seen.clone()), false)),
            GuardDecision::Start { .. }
        ));
        // A restart on an intact volume passes; one emptied under its
        // marker does not.
        let had = marker(true);
        assert!(matches!(
            decide_in_pod(&without_id, Some(&had), &volume(Some(had.clone()), true)),
            GuardDecision::Start { .. }
        ));
        assert!(matches!(
            decide_in_pod(&without_id, Some(&had), &volume(Some(had.clone()), false)),
            GuardDecision::Refuse(Refusal::DataLost { .. })
        ));
        // Without a Pod-scoped copy (a new Pod), the plain rule applies.
        assert_eq!(
            decide_in_pod(&without_id, None, &volume(None, false)),
            decide(&without_id, &volume(None, false))
        );
    }

    #[test]
    fn empty_volume_for_a_new_member_writes_the_marker_and_starts() {
        let decision = decide(&expected(false), &volume(None, false));
        assert_eq!(
            decision,
            GuardDecision::Start {
                write_marker: Some(marker(false))
            }
        );
    }

    #[test]
    fn empty_volume_when_data_is_expected_is_data_loss() {
        let decision = decide(&expected(true), &volume(None, false));
        assert!(matches!(
            decision,
            GuardDecision::Refuse(Refusal::DataLostNoMarker { .. })
        ));
    }

    #[test]
    fn data_without_marker_is_refused_even_for_a_new_member() {
        for expect_data in [false, true] {
            let decision = decide(&expected(expect_data), &volume(None, true));
            assert!(matches!(
                decision,
                GuardDecision::Refuse(Refusal::DataWithoutMarker { .. })
            ));
        }
    }

    #[test]
    fn matching_marker_with_data_starts_and_records_that_data_was_seen() {
        let decision = decide(&expected(true), &volume(Some(marker(false)), true));
        assert_eq!(
            decision,
            GuardDecision::Start {
                write_marker: Some(marker(true))
            }
        );
        let decision = decide(&expected(true), &volume(Some(marker(true)), true));
        assert_eq!(decision, GuardDecision::Start { write_marker: None });
    }

    #[test]
    fn matching_marker_learns_ids_it_did_not_know() {
        let mut old = marker(true);
        old.member_id = None;
        let mut wanted = expected(true);
        wanted.cluster_id = Some(0x77);
        let decision = decide(&wanted, &volume(Some(old), true));
        let mut learnt = marker(true);
        learnt.cluster_id = Some(0x77);
        assert_eq!(
            decision,
            GuardDecision::Start {
                write_marker: Some(learnt)
            }
        );
    }

    #[test]
    fn new_member_whose_first_start_wrote_no_data_may_start_again() {
        let decision = decide(&expected(false), &volume(Some(marker(false)), false));
        assert_eq!(decision, GuardDecision::Start { write_marker: None });
    }

    #[test]
    fn marker_without_data_is_data_loss_once_data_was_seen_or_expected() {
        let decision = decide(&expected(false), &volume(Some(marker(true)), false));
        assert!(matches!(
            decision,
            GuardDecision::Refuse(Refusal::DataLost { .. })
        ));
        let decision = decide(&expected(true), &volume(Some(marker(false)), false));
        assert!(matches!(
            decision,
            GuardDecision::Refuse(Refusal::DataLost { .. })
        ));
    }

    #[test]
    fn disagreeing_marker_is_refused_whatever_the_data() {
        type Change = Box<dyn Fn(&mut MemberMarker)>;
        let cases: Vec<(&str, Change)> = vec![
            (
                "cluster token",
                Box::new(|m| m.cluster_token = "prod-a-0".into()),
            ),
            (
                "member name",
                Box::new(|m| m.member_name = "prod-a-2".into()),
            ),
            ("member id", Box::new(|m| m.member_id = Some(0xdef))),
            ("cluster id", Box::new(|m| m.cluster_id = Some(0x1))),
        ];
        for (field, change) in cases {
            let mut foreign = marker(true);
            change(&mut foreign);
            let mut wanted = expected(false);
            wanted.cluster_id = Some(0x2);
            for data_present in [false, true] {
                let decision = decide(&wanted, &volume(Some(foreign.clone()), data_present));
                match decision {
                    GuardDecision::Refuse(Refusal::MarkerMismatch { field: f, .. }) => {
                        assert_eq!(f, field)
                    }
                    other => panic!("{field}: expected a mismatch, got {other:?}"),
                }
            }
        }
    }

    #[test]
    fn unknown_ids_on_either_side_do_not_conflict() {
        let mut old = marker(true);
        old.member_id = None;
        let mut wanted = expected(true);
        wanted.member_id = None;
        let decision = decide(&wanted, &volume(Some(old), true));
        assert_eq!(decision, GuardDecision::Start { write_marker: None });
    }

    #[test]
    fn refusal_messages_are_one_line() {
        let refusals = [
            Refusal::DataLostNoMarker {
                member_name: "m".into(),
            },
            Refusal::DataLost {
                member_name: "m".into(),
            },
            Refusal::DataWithoutMarker {
                member_name: "m".into(),
            },
            Refusal::MarkerMismatch {
                member_name: "m".into(),
                field: "member id",
                found: "1".into(),
                expected: "2".into(),
            },
        ];
        for refusal in refusals {
            let line = MemberGuardError::from(refusal).to_string();
            assert!(!line.contains('\n'), "{line}");
        }
    }

    fn args(dir: &Path, expect_data: bool) -> MemberGuardArgs {
        MemberGuardArgs {
            data_dir: dir.join("data"),
            marker_file: None,
            cluster_token: "prod-a-1".into(),
            member_name: "prod-a-0".into(),
            cluster_id: None,
            member_id: Some(0xabc),
            expect_data,
            seen_marker: None,
            install_to: None,
            exec: Vec::new(),
        }
    }

    #[test]
    fn run_writes_the_marker_beside_the_data_dir_then_guards_it()
    -> Result<(), Box<dyn std::error::Error>> {
        let volume = tempfile::tempdir()?;
        run(args(volume.path(), false))?;
        let marker_path = volume.path().join(MARKER_FILE_NAME);
        let written: serde_json::Value = serde_json::from_str(&fs::read_to_string(&marker_path)?)?;
        assert_eq!(written["member_id"], "abc");
        assert_eq!(written["cluster_token"], "prod-a-1");

        // etcd ran and wrote data; the next start records it.
        fs::create_dir_all(volume.path().join("data/member/wal"))?;
        run(args(volume.path(), true))?;
        assert!(read_marker(&marker_path)?.is_some_and(|m| m.has_had_data));

        // Another member's pod pointed at this volume is refused.
        let mut other = args(volume.path(), true);
        other.member_name = "prod-a-1".into();
        let error = run(other).err().ok_or("foreign member accepted")?;
        assert!(error.is_refusal(), "{error}");

        // The data dir is wiped: refused, even as a "new" member.
        fs::remove_dir_all(volume.path().join("data"))?;
        let error = run(args(volume.path(), false))
            .err()
            .ok_or("data loss accepted")?;
        assert!(error.to_string().contains("data is lost"), "{error}");
        Ok(())
    }

    #[test]
    fn corrupt_marker_is_refused_not_a_new_member() -> Result<(), Box<dyn std::error::Error>> {
        let volume = tempfile::tempdir()?;
        fs::write(volume.path().join(MARKER_FILE_NAME), "{not json")?;
        let error = run(args(volume.path(), false)).err().ok_or("accepted")?;
        assert!(error.is_refusal(), "{error}");
        assert!(error.to_string().contains("unreadable"), "{error}");
        // Flipped bytes that are not UTF-8 any more.
        fs::write(
            volume.path().join(MARKER_FILE_NAME),
            [b'{', 0xff, 0xfe, b'}'],
        )?;
        let error = run(args(volume.path(), false)).err().ok_or("accepted")?;
        assert!(error.is_refusal(), "{error}");
        Ok(())
    }
}
