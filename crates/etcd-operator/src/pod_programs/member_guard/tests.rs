//! The guard on real directories: a member's volume and its Pod's
//! `emptyDir`, through container restarts, new Pods and wiped volumes; and
//! what each refusal reports.

use std::fs;
use std::path::Path;

use super::*;
use crate::pod_contract::{self, Outcome, Program, Reading};
use crate::pod_programs::identity_marker::{
    MARKER_FILE_NAME, MarkerError, MemberMarker, read_marker,
};

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
    fn start_pod(&self) -> Result<CheckedVolume, MemberGuardError> {
        check_volume(&self.args(false, false))?;
        self.restart_etcd()
    }

    /// The etcd container (re)starts in the same Pod.
    fn restart_etcd(&self) -> Result<CheckedVolume, MemberGuardError> {
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

    fn volume_marker(&self) -> Result<Option<MemberMarker>, MarkerError> {
        read_marker(&self.volume.path().join(MARKER_FILE_NAME))
    }
}

fn expect_data_loss(outcome: Result<CheckedVolume, MemberGuardError>) -> Result<(), String> {
    match outcome {
        Ok(_) => Err("etcd would start on an empty volume under its old identity".into()),
        Err(error)
            if error.refusal().map(Refusal::kind) == Some(pod_contract::Refusal::DataLost) =>
        {
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
    assert_eq!(
        error.report().outcome,
        Outcome::Refused(pod_contract::Refusal::ForeignMember),
        "{error}"
    );

    // The data dir is wiped: refused, even as a "new" member.
    fs::remove_dir_all(volume.path().join("data"))?;
    let error = run(args(volume.path(), false))
        .err()
        .ok_or("data loss accepted")?;
    assert_eq!(
        error.report().outcome,
        Outcome::Refused(pod_contract::Refusal::DataLost),
        "{error}"
    );
    Ok(())
}

#[test]
fn corrupt_marker_is_refused_not_a_new_member() -> Result<(), Box<dyn std::error::Error>> {
    let volume = tempfile::tempdir()?;
    fs::write(volume.path().join(MARKER_FILE_NAME), "{not json")?;
    let error = run(args(volume.path(), false)).err().ok_or("accepted")?;
    assert_eq!(
        error.report().outcome,
        Outcome::Refused(pod_contract::Refusal::UnreadableMarker),
        "{error}"
    );
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

#[test]
fn every_refusal_reports_its_kind_in_one_line_that_the_operator_reads() {
    let member_name = || "m".to_string();
    let cases = [
        (
            Refusal::DataLostNoMarker {
                member_name: member_name(),
            },
            pod_contract::Refusal::DataLost,
        ),
        (
            Refusal::DataLost {
                member_name: member_name(),
            },
            pod_contract::Refusal::DataLost,
        ),
        (
            Refusal::VolumeWipedUnderPod {
                member_name: member_name(),
            },
            pod_contract::Refusal::DataLost,
        ),
        (
            Refusal::DataWithoutMarker {
                member_name: member_name(),
            },
            pod_contract::Refusal::DataWithoutMarker,
        ),
        (
            Refusal::MarkerMismatch {
                member_name: member_name(),
                field: MarkerField::ClusterToken,
                found: "a-1".into(),
                expected: "a-2".into(),
            },
            pod_contract::Refusal::ForeignCluster,
        ),
        (
            Refusal::MarkerMismatch {
                member_name: member_name(),
                field: MarkerField::MemberId,
                found: "1".into(),
                expected: "2".into(),
            },
            pod_contract::Refusal::ForeignMember,
        ),
        (
            Refusal::CorruptMarker {
                member_name: member_name(),
                path: "/v/member-identity.json".into(),
                reason: "EOF while parsing".into(),
            },
            pod_contract::Refusal::UnreadableMarker,
        ),
    ];
    for (refusal, kind) in cases {
        let line = refusal.to_string();
        let report = MemberGuardError::from(refusal).report();
        assert_eq!(report.program, Program::MemberGuard);
        assert_eq!(report.outcome, Outcome::Refused(kind));
        assert_eq!(report.detail, line);
        assert!(!line.contains('\n'), "{line}");
        // Missing data says so, in words, to people too.
        assert_eq!(
            kind == pod_contract::Refusal::DataLost,
            line.contains("data is lost"),
            "{line}"
        );
        let message = report.termination_message();
        assert_eq!(
            Reading::of_termination_message(&message),
            Reading::Report(report)
        );
    }
}

#[test]
fn a_failure_that_is_no_refusal_reports_failed() -> Result<(), Box<dyn std::error::Error>> {
    let dirs = MemberDirs::new()?;
    let mut args = dirs.args(true, false);
    args.exec = vec![dirs.pod.path().join("no-etcd").display().to_string()];
    let error = check_volume(&args).err().ok_or("a missing etcd accepted")?;
    let report = error.report();
    assert_eq!(report.outcome, Outcome::Failed);
    assert!(report.detail.contains("no-etcd"), "{}", report.detail);
    Ok(())
}
