//! The steps on real directories (etcd and etcdutl played by file copies),
//! and the restore Pod's command lines read back by the steps' parser.

use std::fs;
use std::path::{Path, PathBuf};

use super::*;
use crate::pod_contract::{Outcome, Reading};
use crate::pod_programs::identity_marker::MARKER_FILE_NAME;

fn args(volume: &Path, step: RestoreStep) -> RestoreVolumeArgs {
    RestoreVolumeArgs {
        step,
        volume: volume.to_path_buf(),
        token: "main-abc-r1".into(),
        member_name: "main-0".into(),
        source: None,
        backup_namespace: None,
        backup_cluster: None,
        credentials_dir: None,
        encryption_key_file: None,
        install_to: None,
        etcd_binary: "/usr/local/bin/etcd".into(),
        peer_url: None,
    }
}

/// What `apply-wal` and etcdutl do, for the test: the copy's db as
/// the snapshot, then a data dir with it.
fn fake_etcd_steps(layout: &RestoreLayout) -> std::io::Result<()> {
    fs::copy(
        layout.survivor_copy.join("member/snap/db"),
        &layout.source_db,
    )?;
    fs::remove_dir_all(&layout.survivor_copy)?;
    let snap = layout.staging.join("member").join("snap");
    fs::create_dir_all(&snap)?;
    fs::copy(&layout.source_db, snap.join("db"))?;
    Ok(())
}

/// A survivor's data dir: a db and a WAL whose last entry (index 3) is
/// after the persisted commit index (2).
fn survivor(data: &Path) -> std::io::Result<PathBuf> {
    let snap = data.join("member").join("snap");
    let wal = data.join("member").join("wal");
    fs::create_dir_all(&snap)?;
    fs::create_dir_all(&wal)?;
    fs::write(snap.join("db"), b"survivor")?;
    let mut log = crate::pod_programs::wal::tests::Writer::new(0);
    log.entry(1, 1);
    log.entry(1, 2);
    log.state(1, 2);
    log.entry(1, 3);
    let file = wal.join("0000000000000000-0000000000000000.wal");
    fs::write(&file, log.file())?;
    Ok(file)
}

#[test]
fn restores_keep_the_old_data_and_can_run_again() -> Result<(), Box<dyn std::error::Error>> {
    let volume = tempfile::tempdir()?;
    let layout = RestoreLayout::new(volume.path(), "main-abc-r1");
    let wal_file = survivor(&layout.data)?;
    let original_wal = fs::read(&wal_file)?;

    run(&args(volume.path(), RestoreStep::Prepare))?;
    // The copy's WAL commits its tail; the survivor's own is untouched.
    let copied = layout
        .survivor_copy
        .join("member/wal")
        .join(wal_file.file_name().ok_or("name")?);
    assert_ne!(fs::read(&copied)?, original_wal);
    assert_eq!(fs::read(&wal_file)?, original_wal);
    assert_eq!(
        fs::read(layout.survivor_copy.join("member/snap/db"))?,
        b"survivor".to_vec()
    );
    fake_etcd_steps(&layout)?;
    run(&args(volume.path(), RestoreStep::Finish))?;
    assert_eq!(
        fs::read(layout.kept.join("member/snap/db"))?,
        b"survivor".to_vec()
    );
    assert_eq!(
        fs::read(
            layout
                .kept
                .join("member/wal")
                .join(wal_file.file_name().ok_or("name")?)
        )?,
        original_wal
    );
    assert_eq!(
        fs::read(layout.data.join("member/snap/db"))?,
        b"survivor".to_vec()
    );
    assert!(!layout.source_db.exists() && !layout.survivor_copy.exists());
    let marker: serde_json::Value =
        serde_json::from_str(&fs::read_to_string(volume.path().join(MARKER_FILE_NAME))?)?;
    assert_eq!(marker["cluster_token"], "main-abc-r1");
    assert_eq!(marker["has_had_data"], true);

    // Run again (the Pod restarted after finishing): restored again from
    // the kept original, never from the restored copy.
    fs::write(layout.data.join("member/snap/db"), b"restored")?;
    run(&args(volume.path(), RestoreStep::Prepare))?;
    assert_eq!(
        fs::read(layout.survivor_copy.join("member/snap/db"))?,
        b"survivor".to_vec()
    );
    fake_etcd_steps(&layout)?;
    run(&args(volume.path(), RestoreStep::Finish))?;
    assert_eq!(
        fs::read(layout.data.join("member/snap/db"))?,
        b"survivor".to_vec()
    );
    assert!(!layout.staging.exists());
    Ok(())
}

#[test]
fn nothing_to_restore_is_an_error() -> Result<(), Box<dyn std::error::Error>> {
    let volume = tempfile::tempdir()?;
    let error = run(&args(volume.path(), RestoreStep::Prepare))
        .err()
        .ok_or("restored from nothing")?;
    assert!(matches!(error, RestoreVolumeError::NoDatabase(_)));
    let snap = volume.path().join("data/member/snap");
    fs::create_dir_all(&snap)?;
    fs::write(snap.join("db"), b"db without a WAL")?;
    let error = run(&args(volume.path(), RestoreStep::Prepare))
        .err()
        .ok_or("restored without a WAL")?;
    assert!(matches!(error, RestoreVolumeError::NoWal(_)));
    let error = run(&args(volume.path(), RestoreStep::Finish))
        .err()
        .ok_or("finished without etcdutl")?;
    assert!(matches!(error, RestoreVolumeError::NothingRestored(_)));
    Ok(())
}

#[test]
fn a_failed_step_reports_what_failed() -> Result<(), Box<dyn std::error::Error>> {
    let volume = tempfile::tempdir()?;
    let error = run(&args(volume.path(), RestoreStep::Prepare))
        .err()
        .ok_or("restored from nothing")?;
    let report = error.report();
    assert_eq!(report.program, Program::RestoreVolume);
    assert_eq!(report.outcome, Outcome::Failed);
    assert!(report.detail.starts_with("no etcd db to restore at"));
    let message = report.termination_message();
    assert_eq!(
        Reading::of_termination_message(&message).text(),
        format!("restore-volume failed: {}", report.detail)
    );
    Ok(())
}

/// The command lines the restore Pod's builder writes, parsed by the
/// steps' own parser: every flag and step name of the contract is one the
/// steps accept.
#[test]
fn the_restore_pods_command_lines_parse_as_the_steps_arguments()
-> Result<(), Box<dyn std::error::Error>> {
    use clap::Parser;

    #[derive(clap::Parser)]
    struct Cli {
        #[command(subcommand)]
        command: Command,
    }
    #[derive(clap::Subcommand)]
    enum Command {
        RestoreVolume(RestoreVolumeArgs),
    }

    let mut cluster = crate::api::EtcdCluster::new("main", crate::api::EtcdClusterSpec::default());
    cluster.metadata.namespace = Some("ns".into());
    let addressing = crate::addressing::MemberAddressing::new("main", "ns");
    let source: crate::api::BackupSource = serde_json::from_value(serde_json::json!({
        "destination": {
            "s3": { "bucket": "b", "credentialsSecret": "s3" },
            "encryption": { "secretName": "backup-key" },
        },
        "clusterName": "old",
    }))?;
    let mut steps = Vec::new();
    for backup in [None, Some(source)] {
        let pod = crate::resources::restore::restore_pod(
            &cluster,
            &addressing,
            "op:1",
            1,
            "main-x-r1",
            backup,
        );
        let spec = pod.spec.ok_or("no spec")?;
        let containers = spec
            .init_containers
            .into_iter()
            .flatten()
            .chain(spec.containers);
        for container in containers {
            let args = container.args.unwrap_or_default();
            if args.first().map(String::as_str) != Some(Program::RestoreVolume.name()) {
                continue;
            }
            let command = std::iter::once("etcd-operator".to_string()).chain(args);
            let Command::RestoreVolume(parsed) = Cli::try_parse_from(command)?.command;
            assert_eq!(parsed.step.name(), container.name);
            assert_eq!(parsed.token, "main-x-r1");
            assert_eq!(parsed.member_name, "main-1");
            steps.push(parsed);
        }
    }
    let names: Vec<&str> = steps.iter().map(|s| s.step.name()).collect();
    assert_eq!(
        names,
        [
            "prepare",
            "apply-wal",
            "finish",
            "fetch-backup",
            "replay",
            "finish"
        ]
    );
    let fetch = &steps[3];
    assert_eq!(fetch.backup_namespace.as_deref(), Some("ns"));
    assert_eq!(fetch.backup_cluster.as_deref(), Some("old"));
    assert!(fetch.source.is_some() && fetch.credentials_dir.is_some());
    assert!(fetch.encryption_key_file.is_some() && steps[4].encryption_key_file.is_some());
    assert!(steps[0].install_to.is_some() && fetch.install_to.is_some());
    Ok(())
}
