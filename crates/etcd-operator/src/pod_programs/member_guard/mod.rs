//! `etcd-operator member-guard`: runs before every start of etcd in every
//! member pod (the init container, then the etcd container itself, which
//! execs etcd through it) and enforces durability rule 1 (identity ⇔ data).
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
//! | empty     | matches, etcd never started | new member allowed | start             |
//! | empty     | matches, etcd started or had data | any  | refuse: data lost          |
//! | empty     | matches            | data expected       | refuse: data lost          |
//!
//! **Once etcd has started on a volume, that volume never starts etcd empty
//! under the same identity again.** The pass that execs etcd records
//! `has_had_data` in the marker (written and synced *before* the exec), so
//! from etcd's very first start an empty data dir under that marker is data
//! loss: etcd writes its WAL at once, and may vote and acknowledge writes
//! before the operator records the member ID on the PVC.
//!
//! The marker lives on the volume, so a volume recreated whole (filesystem
//! and marker gone) looks like a new one. Within a Pod a second copy covers
//! that: the Pod-scoped marker (`--seen-marker`, in an `emptyDir` that
//! survives container restarts) says what the guard let start in this Pod;
//! when it says etcd ran here, a volume without its marker is refused. A
//! *new* Pod on a volume recreated whole is only caught when the operator
//! passes `--expect-data` (it recorded on the PVC that etcd ran there).
//!
//! A refusal exits with [`REFUSAL_EXIT_CODE`] and one line on stderr; the operator reads it
//! from the pod's container status (`lastState.terminated.message` when
//! `terminationMessagePolicy: FallbackToLogsOnError`) and replaces the
//! member instead of starting etcd on the wrong data. Every refusal for
//! missing data says "data is lost".

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
    /// Set before the guard first lets etcd start under this marker (and
    /// whenever it sees etcd's data): from then on an empty data directory
    /// means the data was lost.
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

/// Which pass of the guard this is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GuardPass {
    /// Only check the volume (the init container): etcd does not start yet.
    Check,
    /// etcd is exec'd right after this pass: the marker written first says
    /// that etcd ran on this volume.
    StartEtcd,
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
        "data dir is empty but the marker says etcd ran here as member {member_name}: its data is lost, replace the member"
    )]
    DataLost { member_name: String },
    #[error(
        "data dir and identity marker are gone, but etcd ran on this volume as member {member_name} in this pod: its data is lost, replace the member"
    )]
    VolumeWipedUnderPod { member_name: String },
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
pub fn decide(expected: &ExpectedIdentity, volume: &VolumeState, pass: GuardPass) -> GuardDecision {
    let member_name = expected.member_name.clone();
    let starts_etcd = pass == GuardPass::StartEtcd;
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
                    has_had_data: starts_etcd,
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

    // Matching marker: complete it with what is known now, and with the
    // start of etcd that follows this pass.
    let completed = MemberMarker {
        cluster_id: marker.cluster_id.or(expected.cluster_id),
        member_id: marker.member_id.or(expected.member_id),
        has_had_data: marker.has_had_data || volume.data_present || starts_etcd,
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
    check_volume(&args)?;
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

/// The guard's pass without its side jobs (install, exec): read the volume
/// and the Pod-scoped marker, decide, and write both markers (synced) when
/// the decision is to start. With a command to exec, this pass records that
/// etcd ran on the volume before returning.
pub fn check_volume(args: &MemberGuardArgs) -> Result<(), MemberGuardError> {
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
        cluster_token: args.cluster_token.clone(),
        member_name: args.member_name.clone(),
        cluster_id: args.cluster_id,
        member_id: args.member_id,
        expect_data: args.expect_data,
    };
    let pass = if args.exec.is_empty() {
        GuardPass::Check
    } else {
        GuardPass::StartEtcd
    };
    // A command that cannot run must not be recorded as a start of etcd.
    if let Some(program) = args.exec.first() {
        ensure_executable(Path::new(program))?;
    }
    let passed = match decide_in_pod(&expected, seen.as_ref(), &volume, pass) {
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
    Ok(())
}

/// The decision at a start of a container of a Pod whose earlier container
/// saw `seen` on the volume. Once the guard let etcd start in this Pod (or
/// saw data), the volume's marker must still be there (it only vanishes
/// with the volume's content), with the IDs seen then, and data. A Pod-scoped
/// marker that says etcd never started proves nothing more than the volume.
pub fn decide_in_pod(
    expected: &ExpectedIdentity,
    seen: Option<&MemberMarker>,
    volume: &VolumeState,
    pass: GuardPass,
) -> GuardDecision {
    let Some(seen) = seen else {
        return decide(expected, volume, pass);
    };
    let member_name = expected.member_name.clone();
    let etcd_ran_here = seen.has_had_data || expected.expect_data;
    if volume.marker.is_none() && etcd_ran_here {
        return GuardDecision::Refuse(if volume.data_present {
            Refusal::DataWithoutMarker { member_name }
        } else {
            Refusal::VolumeWipedUnderPod { member_name }
        });
    }
    let sharpened = ExpectedIdentity {
        cluster_id: expected.cluster_id.or(seen.cluster_id),
        member_id: expected.member_id.or(seen.member_id),
        expect_data: etcd_ran_here,
        ..expected.clone()
    };
    decide(&sharpened, volume, pass)
}

/// Fails unless `program` is a file with an execute bit, so that the marker
/// never says etcd started when the exec was bound to fail. A bare name is
/// looked up in `PATH` by the exec and not checked here.
fn ensure_executable(program: &Path) -> Result<(), MemberGuardError> {
    use std::os::unix::fs::PermissionsExt;
    if program.components().count() < 2 {
        return Ok(());
    }
    let metadata = fs::metadata(program).map_err(|source| MemberGuardError::Io {
        action: "finding",
        path: program.to_path_buf(),
        source,
    })?;
    if metadata.is_file() && metadata.permissions().mode() & 0o111 != 0 {
        Ok(())
    } else {
        Err(MemberGuardError::Io {
            action: "executing",
            path: program.to_path_buf(),
            source: std::io::Error::from(std::io::ErrorKind::PermissionDenied),
        })
    }
}

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
    use GuardPass::{Check, StartEtcd};

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

    fn refused(decision: &GuardDecision) -> Option<&Refusal> {
        match decision {
            GuardDecision::Refuse(refusal) => Some(refusal),
            GuardDecision::Start { .. } => None,
        }
    }

    #[test]
    fn empty_volume_for_a_new_member_writes_the_marker_and_starts() {
        let decision = decide(&expected(false), &volume(None, false), Check);
        assert_eq!(
            decision,
            GuardDecision::Start {
                write_marker: Some(marker(false))
            }
        );
    }

    #[test]
    fn the_start_of_etcd_is_recorded_in_the_marker_before_etcd_runs() {
        // The pass that execs etcd writes a marker saying etcd ran here,
        // whether the volume had no marker yet or one from the init pass.
        for on_volume in [None, Some(marker(false))] {
            let decision = decide(&expected(false), &volume(on_volume, false), StartEtcd);
            assert_eq!(
                decision,
                GuardDecision::Start {
                    write_marker: Some(marker(true))
                }
            );
        }
    }

    #[test]
    fn empty_volume_when_data_is_expected_is_data_loss() {
        for pass in [Check, StartEtcd] {
            let decision = decide(&expected(true), &volume(None, false), pass);
            assert!(matches!(
                refused(&decision),
                Some(Refusal::DataLostNoMarker { .. })
            ));
        }
    }

    #[test]
    fn data_without_marker_is_refused_even_for_a_new_member() {
        for expect_data in [false, true] {
            let decision = decide(&expected(expect_data), &volume(None, true), StartEtcd);
            assert!(matches!(
                refused(&decision),
                Some(Refusal::DataWithoutMarker { .. })
            ));
        }
    }

    #[test]
    fn matching_marker_with_data_starts_and_records_that_data_was_seen() {
        let decision = decide(&expected(true), &volume(Some(marker(false)), true), Check);
        assert_eq!(
            decision,
            GuardDecision::Start {
                write_marker: Some(marker(true))
            }
        );
        let decision = decide(
            &expected(true),
            &volume(Some(marker(true)), true),
            StartEtcd,
        );
        assert_eq!(decision, GuardDecision::Start { write_marker: None });
    }

    #[test]
    fn matching_marker_learns_ids_it_did_not_know() {
        let mut old = marker(true);
        old.member_id = None;
        let mut wanted = expected(true);
        wanted.cluster_id = Some(0x77);
        let decision = decide(&wanted, &volume(Some(old), true), StartEtcd);
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
    fn a_checked_volume_on_which_etcd_never_started_may_start_empty() {
        // The init container wrote the marker; etcd has not run yet.
        let decision = decide(&expected(false), &volume(Some(marker(false)), false), Check);
        assert_eq!(decision, GuardDecision::Start { write_marker: None });
        let decision = decide(
            &expected(false),
            &volume(Some(marker(false)), false),
            StartEtcd,
        );
        assert_eq!(
            decision,
            GuardDecision::Start {
                write_marker: Some(marker(true))
            }
        );
    }

    #[test]
    fn marker_without_data_is_data_loss_once_etcd_ran_or_data_is_expected() {
        for pass in [Check, StartEtcd] {
            let decision = decide(&expected(false), &volume(Some(marker(true)), false), pass);
            assert!(matches!(refused(&decision), Some(Refusal::DataLost { .. })));
            let decision = decide(&expected(true), &volume(Some(marker(false)), false), pass);
            assert!(matches!(refused(&decision), Some(Refusal::DataLost { .. })));
        }
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
                let decision = decide(
                    &wanted,
                    &volume(Some(foreign.clone()), data_present),
                    StartEtcd,
                );
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
        let decision = decide(&wanted, &volume(Some(old), true), StartEtcd);
        assert_eq!(decision, GuardDecision::Start { write_marker: None });
    }

    #[test]
    fn in_a_pod_where_etcd_ran_a_volume_without_its_marker_is_refused() {
        // The Pod-scoped marker says the guard let etcd start in this Pod;
        // the member ID is not recorded yet (a bootstrap member).
        let ran = MemberMarker {
            member_id: None,
            ..marker(true)
        };
        let bootstrap = ExpectedIdentity {
            member_id: None,
            ..expected(false)
        };
        for pass in [Check, StartEtcd] {
            let wiped = decide_in_pod(&bootstrap, Some(&ran), &volume(None, false), pass);
            assert!(matches!(
                refused(&wiped),
                Some(Refusal::VolumeWipedUnderPod { .. })
            ));
            let replaced = decide_in_pod(&bootstrap, Some(&ran), &volume(None, true), pass);
            assert!(matches!(
                refused(&replaced),
                Some(Refusal::DataWithoutMarker { .. })
            ));
            // The data dir alone wiped, the marker kept.
            let emptied = decide_in_pod(
                &bootstrap,
                Some(&ran),
                &volume(Some(ran.clone()), false),
                pass,
            );
            assert!(matches!(refused(&emptied), Some(Refusal::DataLost { .. })));
            // An intact volume restarts.
            let intact = decide_in_pod(
                &bootstrap,
                Some(&ran),
                &volume(Some(ran.clone()), true),
                pass,
            );
            assert!(refused(&intact).is_none(), "{intact:?}");
        }
    }

    #[test]
    fn the_pod_scoped_marker_lends_its_ids_to_the_check() {
        // Seen with a member ID, the volume's marker now names another one.
        let ran = marker(true);
        let bootstrap = ExpectedIdentity {
            member_id: None,
            ..expected(false)
        };
        let other = MemberMarker {
            member_id: Some(0xdef),
            ..marker(true)
        };
        let decision = decide_in_pod(&bootstrap, Some(&ran), &volume(Some(other), true), Check);
        assert!(matches!(
            refused(&decision),
            Some(Refusal::MarkerMismatch {
                field: "member id",
                ..
            })
        ));
    }

    #[test]
    fn a_pod_scoped_marker_from_before_etcd_started_proves_no_loss() {
        // The init container checked the volume, etcd never started in this
        // Pod, and the volume was recreated in between: nothing ran on it.
        let checked = marker(false);
        let decision = decide_in_pod(
            &expected(false),
            Some(&checked),
            &volume(None, false),
            Check,
        );
        assert_eq!(
            decision,
            GuardDecision::Start {
                write_marker: Some(marker(false))
            }
        );
        // Without a Pod-scoped copy (a new Pod), the plain rule applies.
        assert_eq!(
            decide_in_pod(&expected(false), None, &volume(None, false), StartEtcd),
            decide(&expected(false), &volume(None, false), StartEtcd)
        );
    }

    #[test]
    fn refusals_are_one_line_and_missing_data_says_data_is_lost() {
        let member_name = || "m".to_string();
        // `reconcile::facts::classify_refusal` reads "data is lost" as the
        // member's data being gone (the member is replaced).
        let data_lost = [
            Refusal::DataLostNoMarker {
                member_name: member_name(),
            },
            Refusal::DataLost {
                member_name: member_name(),
            },
            Refusal::VolumeWipedUnderPod {
                member_name: member_name(),
            },
        ];
        let others = [
            Refusal::DataWithoutMarker {
                member_name: member_name(),
            },
            Refusal::MarkerMismatch {
                member_name: member_name(),
                field: "member id",
                found: "1".into(),
                expected: "2".into(),
            },
        ];
        for refusal in data_lost {
            let line = MemberGuardError::from(refusal).to_string();
            assert!(line.starts_with(REFUSAL_PREFIX), "{line}");
            assert!(line.contains("data is lost"), "{line}");
            assert!(!line.contains('\n'), "{line}");
        }
        for refusal in others {
            let line = MemberGuardError::from(refusal).to_string();
            assert!(!line.contains("data is lost"), "{line}");
            assert!(!line.contains('\n'), "{line}");
        }
    }

    /// A member's volume and the `emptyDir` of its Pod, as real directories.
    struct MemberDirs {
        volume: tempfile::TempDir,
        pod: tempfile::TempDir,
    }

    impl MemberDirs {
        fn new() -> std::io::Result<Self> {
            Ok(Self {
                volume: tempfile::tempdir()?,
                pod: tempfile::tempdir()?,
            })
        }

        /// The arguments of the guard in this Pod: the init container's
        /// pass, or with `starts_etcd` the etcd container's (which execs
        /// etcd after the pass; here a real executable that is not run).
        fn args(&self, starts_etcd: bool, expect_data: bool) -> MemberGuardArgs {
            MemberGuardArgs {
                data_dir: self.volume.path().join("data"),
                marker_file: None,
                cluster_token: "prod-a-1".into(),
                member_name: "prod-a-0".into(),
                cluster_id: None,
                member_id: None,
                expect_data,
                seen_marker: Some(self.pod.path().join("seen-member-identity.json")),
                install_to: None,
                exec: if starts_etcd {
                    vec!["/bin/sh".into(), "-c".into(), "exit 0".into()]
                } else {
                    Vec::new()
                },
            }
        }

        /// The Pod starts: init container, then the etcd container.
        fn start_pod(&self) -> Result<(), MemberGuardError> {
            check_volume(&self.args(false, false))?;
            self.restart_etcd()
        }

        /// The etcd container (re)starts in the same Pod.
        fn restart_etcd(&self) -> Result<(), MemberGuardError> {
            check_volume(&self.args(true, false))
        }

        /// The Pod is deleted and a new one created on the same volume.
        fn new_pod(&mut self) -> std::io::Result<()> {
            self.pod = tempfile::tempdir()?;
            Ok(())
        }

        /// etcd writes its data, as its first start does at once.
        fn etcd_writes_data(&self) -> std::io::Result<()> {
            let wal = self.volume.path().join("data/member/wal");
            fs::create_dir_all(&wal)?;
            fs::write(wal.join("0000000000000000-0000000000000000.wal"), b"raft")
        }

        fn wipe_data_dir(&self) -> std::io::Result<()> {
            fs::remove_dir_all(self.volume.path().join("data"))
        }

        /// The whole filesystem of the volume recreated: marker and data gone.
        fn wipe_volume(&self) -> std::io::Result<()> {
            for entry in fs::read_dir(self.volume.path())? {
                let path = entry?.path();
                if path.is_dir() {
                    fs::remove_dir_all(path)?;
                } else {
                    fs::remove_file(path)?;
                }
            }
            Ok(())
        }

        fn volume_marker(&self) -> Result<Option<MemberMarker>, MemberGuardError> {
            read_marker(&self.volume.path().join(MARKER_FILE_NAME))
        }
    }

    fn expect_data_loss(outcome: Result<(), MemberGuardError>) -> Result<(), String> {
        match outcome {
            Ok(()) => Err("etcd would start on an empty volume under its old identity".into()),
            Err(error) if error.is_refusal() && error.to_string().contains("data is lost") => {
                Ok(())
            }
            Err(error) => Err(format!("not a data-loss refusal: {error}")),
        }
    }

    #[test]
    fn the_marker_says_etcd_ran_before_etcd_is_started() -> Result<(), Box<dyn std::error::Error>> {
        let dirs = MemberDirs::new()?;
        check_volume(&dirs.args(false, false))?;
        assert!(dirs.volume_marker()?.is_some_and(|m| !m.has_had_data));
        dirs.restart_etcd()?;
        assert!(dirs.volume_marker()?.is_some_and(|m| m.has_had_data));
        let seen = read_marker(&dirs.pod.path().join("seen-member-identity.json"))?;
        assert!(seen.is_some_and(|m| m.has_had_data));
        Ok(())
    }

    #[test]
    fn started_once_then_everything_wiped_then_the_container_restarts_is_refused()
    -> Result<(), Box<dyn std::error::Error>> {
        // Before etcd wrote anything, and after it did.
        for writes_data in [false, true] {
            let dirs = MemberDirs::new()?;
            dirs.start_pod()?;
            if writes_data {
                dirs.etcd_writes_data()?;
            }
            dirs.wipe_volume()?;
            expect_data_loss(dirs.restart_etcd())?;
            // A restart of the whole Pod sandbox runs the init container
            // again: refused there as well, and the volume stays unmarked.
            expect_data_loss(check_volume(&dirs.args(false, false)))?;
            assert_eq!(dirs.volume_marker()?, None);
        }
        Ok(())
    }

    #[test]
    fn started_once_then_the_data_dir_wiped_with_the_marker_kept_is_refused()
    -> Result<(), Box<dyn std::error::Error>> {
        for writes_data in [false, true] {
            let mut dirs = MemberDirs::new()?;
            dirs.start_pod()?;
            if writes_data {
                dirs.etcd_writes_data()?;
            }
            if dirs.volume.path().join("data").exists() {
                dirs.wipe_data_dir()?;
            }
            expect_data_loss(dirs.restart_etcd())?;
            // A new Pod (no Pod-scoped marker, nothing on the PVC) too: the
            // volume's own marker says etcd ran here.
            dirs.new_pod()?;
            expect_data_loss(dirs.start_pod())?;
        }
        Ok(())
    }

    #[test]
    fn restarts_on_an_intact_volume_pass() -> Result<(), Box<dyn std::error::Error>> {
        let mut dirs = MemberDirs::new()?;
        dirs.start_pod()?;
        dirs.etcd_writes_data()?;
        dirs.restart_etcd()?;
        dirs.restart_etcd()?;
        dirs.new_pod()?;
        dirs.start_pod()?;
        // The operator has recorded the member on the PVC by now.
        check_volume(&dirs.args(true, true))?;
        Ok(())
    }

    #[test]
    fn a_volume_recreated_before_etcd_first_started_starts_as_new()
    -> Result<(), Box<dyn std::error::Error>> {
        let dirs = MemberDirs::new()?;
        check_volume(&dirs.args(false, false))?;
        dirs.wipe_volume()?;
        dirs.restart_etcd()?;
        assert!(dirs.volume_marker()?.is_some_and(|m| m.has_had_data));
        Ok(())
    }

    #[test]
    fn a_new_pod_on_a_volume_recreated_whole_needs_the_operators_record()
    -> Result<(), Box<dyn std::error::Error>> {
        // The limit of what the volume and the Pod can prove: with both
        // markers gone, only `--expect-data` (the operator's record on the
        // PVC that etcd ran there) tells a wiped volume from a new one.
        let mut dirs = MemberDirs::new()?;
        dirs.start_pod()?;
        dirs.etcd_writes_data()?;
        dirs.wipe_volume()?;
        dirs.new_pod()?;
        expect_data_loss(check_volume(&dirs.args(true, true)))?;
        check_volume(&dirs.args(true, false))?;
        Ok(())
    }

    #[test]
    fn a_command_that_cannot_run_is_not_recorded_as_a_start_of_etcd()
    -> Result<(), Box<dyn std::error::Error>> {
        let dirs = MemberDirs::new()?;
        let mut args = dirs.args(true, false);
        args.exec = vec![dirs.pod.path().join("no-etcd").display().to_string()];
        let error = check_volume(&args).err().ok_or("a missing etcd accepted")?;
        assert!(!error.is_refusal(), "{error}");
        assert_eq!(dirs.volume_marker()?, None);
        dirs.restart_etcd()?;
        Ok(())
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
