//! Restore from a backup never reuses a revision, with real etcd processes
//! on loopback, the local-path destination, and the restore Pod's
//! containers run as the Pod builder writes them: after a restore of a full
//! backup with its incremental segments replayed (and of a full backup
//! alone), every key is there, the restored revision is the source's last
//! plus `REVISION_BUMP` (the bump applies to the replayed data, not to the
//! full backup), and reads and watches at revisions the old cluster served
//! are refused as compacted, so a watch cache of the old cluster lists
//! again. No mocks.

use std::time::Duration;

use etcd_operator::api::BackupSource;
use etcd_operator::backup::incremental::{IncrementalOptions, fixed_endpoints, spawn};
use etcd_operator::pod_contract::REVISION_BUMP;

use test_kit::backup_scenarios::{backup_of, local_destination, local_store};
use test_kit::etcd_process::{EtcdProcess, LocalCluster as SourceCluster};
use test_kit::restore_checks::{
    assert_compacted_read, assert_compacted_watch, assert_keys, revision_now, write,
};
use test_kit::restore_pod::{restore_pod_of_main, run_pod};

const TOKEN: &str = "main-restored-r1";
const OPERATOR: &str = env!("CARGO_BIN_EXE_etcd-operator");

/// Restores the newest backup of `prod/main` under `root` into a new
/// volume with the restore Pod; starts etcd on it.
async fn restore(root: &std::path::Path) -> EtcdProcess {
    let volume = root.join("volume");
    let tools = root.join("tools");
    std::fs::create_dir_all(&volume).expect("volume");
    std::fs::create_dir_all(&tools).expect("tools");
    let source = BackupSource {
        destination: local_destination(root),
        cluster_name: None,
        namespace: None,
        backup_name: None,
        revision: None,
    };
    let pod = restore_pod_of_main(TOKEN, Some(source));
    eprintln!("{}", run_pod(&pod, &volume, &tools, OPERATOR.as_ref()));
    EtcdProcess::start_on(root, "main-0", &volume.join("data")).await
}

async fn assert_no_old_revision(
    restored: &EtcdProcess,
    keys: std::ops::Range<usize>,
    seen: &[i64],
    last: i64,
) {
    let mut client = restored.client().await;
    assert_keys(&mut client, keys).await;
    let header = revision_now(&mut client).await;
    let bump = i64::try_from(REVISION_BUMP).expect("bump");
    assert!(
        header > last,
        "the restored etcd is at revision {header}, not after the old cluster's {last}"
    );
    for &old in seen.iter().chain([last, last + 1].iter()) {
        assert_compacted_read(&mut client, old).await;
        assert_compacted_watch(&mut client, old).await;
    }
    assert_eq!(
        header,
        last + bump,
        "restored revision {header}: expected the restored point {last} + {bump}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restore_with_replayed_segments_bumps_past_the_last_replayed_revision() {
    let root = tempfile::tempdir().expect("temp dir");
    let store = local_store(root.path());
    let source = SourceCluster::start(1).await;
    let mut client = source.client().await;
    let before = write(&mut client, 0..100).await;
    let full = backup_of(&store, &source.endpoints())
        .await
        .expect("full backup")
        .metadata;
    let options = IncrementalOptions {
        interval: Duration::from_secs(1),
        min_back_off: Duration::from_millis(200),
        max_back_off: Duration::from_secs(2),
        ..IncrementalOptions::new("prod", "main")
    };
    let handle = spawn(store.clone(), fixed_endpoints(source.endpoints()), options);
    let after = write(&mut client, 100..300).await;
    let last = *after.last().expect("writes");
    let mut progress = handle.subscribe();
    tokio::time::timeout(Duration::from_secs(60), async {
        while progress
            .borrow_and_update()
            .durable_revision
            .is_none_or(|r| r < last)
        {
            progress.changed().await.expect("watcher alive");
        }
    })
    .await
    .expect("every write durable in a segment");
    handle.stop(Duration::from_secs(10)).await;
    drop(source);
    assert!(full.revision < last, "no segment after the full backup");

    let restored = restore(root.path()).await;
    // Revisions a client saw before the full backup, and between it and
    // the end of the segments.
    assert_no_old_revision(&restored, 0..300, &[before[10], after[10]], last).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restore_of_a_full_backup_alone_bumps_past_its_revision() {
    let root = tempfile::tempdir().expect("temp dir");
    let store = local_store(root.path());
    let source = SourceCluster::start(1).await;
    let mut client = source.client().await;
    let revisions = write(&mut client, 0..100).await;
    let full = backup_of(&store, &source.endpoints())
        .await
        .expect("full backup")
        .metadata;
    drop(source);
    let last = *revisions.last().expect("writes");
    assert_eq!(full.revision, last);

    let restored = restore(root.path()).await;
    assert_no_old_revision(&restored, 0..100, &[revisions[10]], last).await;
}
