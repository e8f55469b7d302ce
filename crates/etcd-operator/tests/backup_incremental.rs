//! Continuous incremental backup against real etcd processes on loopback,
//! into the local-path destination: segments written within the interval
//! (and early at the size limit), a chain resumed after a restart without
//! a gap, restore = `etcdutl snapshot restore` of the full backup + replay,
//! which gives exactly the source's keys, values, revisions and lease
//! IDs at the chain's end and at an earlier revision; a compacted history
//! is a gap answered by a new full backup at once; a corrupt segment stops
//! the chain with a clear error, before any of its events is applied. A
//! quiet cluster stays fresh with a loss window of 0 (etcd's watch
//! progress), the recovery point follows sparse writes, a steady writer's
//! window stays within two intervals, and a history compacted exactly
//! after the chain is no gap. Two schedules writing to one folder each
//! extend only the chains after their own full backups, never a one-shot
//! backup's. Retention with `count: 1` after a new full backup keeps the
//! chain the watcher still extends (restorable to its end) and deletes it
//! once the watcher moved on. No mocks.

use std::time::{Duration, Instant};

use etcd_client::{Client, CompactionOptions, DeleteOptions, GetOptions, PutOptions, Txn, TxnOp};
use etcd_operator::backup::incremental::segment::base_name;
use etcd_operator::backup::incremental::{
    GapKind, IncrementalHandle, IncrementalNotice, IncrementalOptions, IncrementalProgress,
    fixed_endpoints, spawn,
};
use etcd_operator::backup::schedule::Freshness;
use etcd_operator::backup::{
    BackupError, BackupMetadata, BackupStore, BackupWriter, SnapshotOptions, apply_retention,
    download_backup, list_backups, replay_segments, segment_chain, take_backup,
};
use tokio::sync::mpsc;

use test_kit::backup_scenarios::{backup_of, local_store, nightly_options, schedule_writer};
use test_kit::etcd_data::write_keys;
use test_kit::etcd_process::{LocalCluster, restore_and_start};

const INTERVAL: Duration = Duration::from_secs(1);
/// Small, so that a burst of writes fills several segments.
const MAX_SEGMENT_BYTES: usize = 4096;
/// How long a write may take to become durable: one interval, plus the
/// upload and a busy two-core machine.
const DURABLE_WITHIN: Duration = Duration::from_secs(6);

fn start_watcher(store: &BackupStore, cluster: &LocalCluster) -> IncrementalHandle {
    start_watcher_with(store, cluster, nightly_options())
}

/// The watcher of schedule `prod/<schedule>`.
fn start_watcher_of(
    store: &BackupStore,
    cluster: &LocalCluster,
    schedule: &str,
) -> IncrementalHandle {
    let snapshot = SnapshotOptions::default().written_by(schedule_writer(schedule));
    start_watcher_with(store, cluster, snapshot)
}

fn start_watcher_with(
    store: &BackupStore,
    cluster: &LocalCluster,
    snapshot: SnapshotOptions,
) -> IncrementalHandle {
    let options = IncrementalOptions {
        interval: INTERVAL,
        max_segment_bytes: MAX_SEGMENT_BYTES,
        min_back_off: Duration::from_millis(200),
        max_back_off: Duration::from_secs(2),
        snapshot,
        ..IncrementalOptions::new("prod", "main")
    };
    spawn(store.clone(), fixed_endpoints(cluster.endpoints()), options)
}

async fn full_backup(store: &BackupStore, cluster: &LocalCluster) -> BackupMetadata {
    backup_of(store, &cluster.endpoints())
        .await
        .expect("full backup")
        .metadata
}

/// Waits until every write up to `revision` is durable; returns how long
/// it took.
async fn wait_durable(handle: &IncrementalHandle, revision: i64) -> Duration {
    let started = Instant::now();
    let mut progress = handle.subscribe();
    let reached = tokio::time::timeout(Duration::from_secs(30), async {
        loop {
            if progress
                .borrow_and_update()
                .durable_revision
                .is_some_and(|r| r >= revision)
            {
                return;
            }
            if progress.changed().await.is_err() {
                return;
            }
        }
    })
    .await;
    assert!(
        reached.is_ok(),
        "revision {revision} not durable within 30 s: {:?}",
        handle.progress()
    );
    started.elapsed()
}

/// The next notice that `pick` keeps, within `timeout`.
async fn next_notice<T>(
    notices: &mut mpsc::Receiver<IncrementalNotice>,
    timeout: Duration,
    mut pick: impl FnMut(IncrementalNotice) -> Option<T>,
) -> T {
    tokio::time::timeout(timeout, async {
        loop {
            let notice = notices.recv().await.expect("watcher alive");
            if let Some(found) = pick(notice) {
                return found;
            }
        }
    })
    .await
    .expect("notice within the timeout")
}

/// One key as etcd holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Kv {
    key: String,
    value: Vec<u8>,
    create_revision: i64,
    mod_revision: i64,
    version: i64,
    lease: i64,
}

/// Every key at `revision` (now when `None`), and the server's revision.
async fn dump(client: &mut Client, revision: Option<i64>) -> (Vec<Kv>, i64) {
    let mut options = GetOptions::new().with_all_keys();
    if let Some(revision) = revision {
        options = options.with_revision(revision);
    }
    let response = client.get(vec![0u8], Some(options)).await.expect("get");
    let kvs = response
        .kvs()
        .iter()
        .map(|kv| Kv {
            key: String::from_utf8_lossy(kv.key()).into_owned(),
            value: kv.value().to_vec(),
            create_revision: kv.create_revision(),
            mod_revision: kv.mod_revision(),
            version: kv.version(),
            lease: kv.lease(),
        })
        .collect();
    (kvs, response.header().expect("header").revision())
}

/// Files below `dir`, at any depth.
fn files_under(dir: &std::path::Path) -> usize {
    std::fs::read_dir(dir).map_or(0, |entries| {
        entries
            .filter_map(|entry| entry.ok())
            .map(|entry| {
                let path = entry.path();
                if path.is_dir() { files_under(&path) } else { 1 }
            })
            .sum()
    })
}

/// The TTL `lease` was granted with (-1 when it does not exist).
async fn granted_ttl(client: &mut Client, lease: i64) -> i64 {
    let answer = client
        .lease_time_to_live(lease, None)
        .await
        .expect("lease time to live");
    if answer.ttl() < 0 {
        -1
    } else {
        answer.granted_ttl()
    }
}

fn lease_of(kvs: &[Kv], key: &str) -> i64 {
    kvs.iter()
        .find(|kv| kv.key == key)
        .unwrap_or_else(|| panic!("{key} is missing"))
        .lease
}

async fn put(client: &mut Client, key: &str, value: &str) -> i64 {
    client
        .put(key, value, None)
        .await
        .expect("put")
        .header()
        .expect("header")
        .revision()
}

async fn put_with_lease(client: &mut Client, key: &str, lease: i64) -> i64 {
    client
        .put(
            key,
            format!("leased by {lease:x}"),
            Some(PutOptions::new().with_lease(lease)),
        )
        .await
        .expect("put")
        .header()
        .expect("header")
        .revision()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn full_backup_plus_segments_restores_the_source_exactly_at_its_end_and_earlier() {
    let cluster = LocalCluster::start(3).await;
    let mut client = cluster.client().await;
    write_keys(&mut client, 40, 100).await;
    let lease_in_base = client.lease_grant(600, None).await.expect("lease").id();
    put_with_lease(&mut client, "lease/in-base", lease_in_base).await;
    let root = tempfile::tempdir().expect("tempdir");
    let store = local_store(root.path());
    let base = full_backup(&store, &cluster).await;

    let mut handle = start_watcher(&store, &cluster);
    let mut notices = handle.take_notices().expect("notices");
    let from = next_notice(&mut notices, Duration::from_secs(10), |n| match n {
        IncrementalNotice::Following { from_revision, .. } => Some(from_revision),
        _ => None,
    })
    .await;
    assert_eq!(from, base.revision + 1);

    // Puts, deletes, a multi-operation transaction, a range delete, keys
    // with leases (one the full backup holds, one granted after it).
    put(&mut client, "a", "1").await;
    put(&mut client, "b", "1").await;
    put(&mut client, "a", "2").await;
    client.delete("key-000003", None).await.expect("delete");
    client
        .txn(Txn::new().and_then([
            TxnOp::put("x", "from a txn", None),
            TxnOp::put("y", "from a txn", None),
            TxnOp::delete("b", None),
        ]))
        .await
        .expect("txn");
    client
        .delete("key-00001", Some(DeleteOptions::new().with_prefix()))
        .await
        .expect("range delete");
    let lease_after = client.lease_grant(600, None).await.expect("lease").id();
    put_with_lease(&mut client, "lease/after", lease_after).await;
    put_with_lease(&mut client, "lease/in-base-again", lease_in_base).await;
    let written = put(&mut client, "last-before-the-burst", "x").await;
    let took = wait_durable(&handle, written).await;
    assert!(took <= DURABLE_WITHIN, "durable after {took:?}");
    assert!(
        handle.progress().loss_window(chrono::Utc::now()) < Some(chrono::Duration::seconds(5)),
        "{:?}",
        handle.progress()
    );

    // A burst larger than a segment: closed early at the size limit.
    let mut mid = 0;
    for i in 0..24 {
        mid = put(&mut client, &format!("burst-{i:02}"), &"z".repeat(400)).await;
    }
    wait_durable(&handle, mid).await;

    // An idle cluster writes no segment, but its durable point moves on
    // with etcd's watch progress.
    let segments = handle.progress().segments;
    tokio::time::sleep(INTERVAL * 3).await;
    let idle = handle.progress();
    assert_eq!(idle.segments, segments, "no segment while idle");
    assert_eq!(idle.durable_revision, Some(mid));
    assert!(
        idle.loss_window(chrono::Utc::now()) <= Some(chrono::Duration::seconds(2)),
        "{idle:?}"
    );

    // The operator restarts: the chain resumes after its newest segment.
    handle.stop(Duration::from_secs(10)).await;
    let segments_before = segment_chain(&store, &base)
        .await
        .expect("chain")
        .segments
        .len();
    let lease_gone = client.lease_grant(600, None).await.expect("lease").id();
    put_with_lease(&mut client, "gone/1", lease_gone).await;
    put_with_lease(&mut client, "gone/2", lease_gone).await;
    client.lease_revoke(lease_gone).await.expect("revoke");
    put(&mut client, "a", "3").await;
    let mut handle = start_watcher(&store, &cluster);
    let mut notices = handle.take_notices().expect("notices");
    let (from, resumed) = next_notice(&mut notices, Duration::from_secs(10), |n| match n {
        IncrementalNotice::Following {
            from_revision,
            segments,
            ..
        } => Some((from_revision, segments)),
        other => panic!("unexpected notice on resume: {other:?}"),
    })
    .await;
    assert_eq!(resumed, segments_before);
    assert_eq!(from, mid + 1, "resumed right after the newest segment");
    let end = put(&mut client, "the-end", "!").await;
    wait_durable(&handle, end).await;
    handle.stop(Duration::from_secs(10)).await;
    assert!(notices.try_recv().is_err(), "no gap, no failure");

    let chain = segment_chain(&store, &base).await.expect("chain");
    assert_eq!(chain.gap, None);
    assert_eq!(chain.last_revision, end);
    assert_eq!(chain.segments[0].first_revision, base.revision + 1);
    assert!(chain.segments.len() >= 4, "{:?}", chain.segments);
    assert!(
        chain
            .segments
            .iter()
            .any(|s| s.encoded_bytes >= MAX_SEGMENT_BYTES as u64),
        "a segment closed at the size limit"
    );
    assert!(
        chain
            .segments
            .iter()
            .all(|s| s.encoded_bytes < 2 * MAX_SEGMENT_BYTES as u64),
        "no segment grows far beyond the limit"
    );

    let (source_end, source_revision) = dump(&mut client, None).await;
    assert_eq!(source_revision, end);
    let (source_mid, _) = dump(&mut client, Some(mid)).await;

    // Restore at the chain's end.
    let snapshot = root.path().join("base.db");
    download_backup(&store, &base, &snapshot)
        .await
        .expect("download");
    let restore_root = tempfile::tempdir().expect("tempdir");
    let restored = restore_and_start(&snapshot, restore_root.path()).await;
    let mut restored_client = restored.client().await;
    let outcome = replay_segments(&store, &chain, None, &mut restored_client)
        .await
        .expect("replay");
    assert_eq!(outcome.revision, end);
    assert!(outcome.start_revision >= base.revision);
    assert_eq!(outcome.segments_read, chain.segments.len());
    let (restored_end, restored_revision) = dump(&mut restored_client, None).await;
    assert_eq!(restored_revision, end, "same revision as the source");
    assert_eq!(
        restored_end, source_end,
        "keys, values, revisions and leases"
    );
    // A lease the snapshot holds is kept; one granted after it is granted
    // again with its ID and TTL; one revoked before the watcher asked
    // about it is granted with the fallback TTL (its keys are deleted
    // later in the chain).
    assert_eq!(lease_of(&restored_end, "lease/in-base"), lease_in_base);
    assert_eq!(
        lease_of(&restored_end, "lease/in-base-again"),
        lease_in_base
    );
    assert_eq!(lease_of(&restored_end, "lease/after"), lease_after);
    assert_eq!(granted_ttl(&mut restored_client, lease_after).await, 600);
    assert_eq!(
        granted_ttl(&mut restored_client, lease_gone).await,
        600,
        "the longest TTL known"
    );
    assert_eq!(outcome.leases_granted, 2, "lease/after and gone/*");
    assert_eq!(outcome.leases_with_fallback_ttl, 1, "gone/*");
    assert_eq!(outcome.puts_without_lease, 0);

    // Restore at an earlier revision.
    let restore_root = tempfile::tempdir().expect("tempdir");
    let restored = restore_and_start(&snapshot, restore_root.path()).await;
    let mut restored_client = restored.client().await;
    let outcome = replay_segments(&store, &chain, Some(mid), &mut restored_client)
        .await
        .expect("replay to mid");
    assert_eq!(outcome.revision, mid);
    let (restored_mid, restored_revision) = dump(&mut restored_client, None).await;
    assert_eq!(restored_revision, mid);
    assert_eq!(restored_mid, source_mid);

    // Beyond the chain is refused with the reason.
    let error = replay_segments(&store, &chain, Some(end + 5), &mut restored_client)
        .await
        .expect_err("beyond the chain");
    assert!(
        error.to_string().contains("beyond what the chain"),
        "{error}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compaction_and_corruption_are_gaps_answered_by_a_new_full_backup() {
    let cluster = LocalCluster::start(1).await;
    let mut client = cluster.client().await;
    write_keys(&mut client, 10, 50).await;
    let root = tempfile::tempdir().expect("tempdir");
    let store = local_store(root.path());
    let first_base = full_backup(&store, &cluster).await;

    // Two segments, an interval apart.
    let handle = start_watcher(&store, &cluster);
    for round in 0..2 {
        let mut last = 0;
        for i in 0..5 {
            last = put(&mut client, &format!("round-{round}-{i}"), "v").await;
        }
        wait_durable(&handle, last).await;
    }
    handle.stop(Duration::from_secs(10)).await;
    let first_chain = segment_chain(&store, &first_base).await.expect("chain");
    assert_eq!(first_chain.gap, None);
    assert!(
        first_chain.segments.len() >= 2,
        "{:?}",
        first_chain.segments
    );

    // While the watcher is stopped, etcd compacts past the chain's end.
    for i in 0..5 {
        put(&mut client, &format!("unwatched-{i}"), "v").await;
    }
    let compacted = put(&mut client, "unwatched-last", "v").await;
    client
        .compact(compacted, Some(CompactionOptions::new().with_physical()))
        .await
        .expect("compact");

    let mut handle = start_watcher(&store, &cluster);
    let mut notices = handle.take_notices().expect("notices");
    let gap = next_notice(&mut notices, Duration::from_secs(20), |n| match n {
        IncrementalNotice::Gap(gap) => Some(gap),
        _ => None,
    })
    .await;
    assert_eq!(gap.kind, GapKind::Compacted);
    assert_eq!(gap.after_revision, first_chain.last_revision);
    assert!(
        gap.message.contains(&format!("up to revision {compacted}")),
        "{gap}"
    );
    let taken = next_notice(&mut notices, Duration::from_secs(20), |n| match n {
        IncrementalNotice::FullBackupTaken(taken) => Some(taken),
        _ => None,
    })
    .await;
    let second_base = taken.metadata.clone();
    assert!(second_base.revision >= compacted);
    let after = put(&mut client, "after-the-gap", "v").await;
    wait_durable(&handle, after).await;
    let progress = handle.progress();
    assert_eq!(progress.gaps, 1);
    assert_eq!(progress.base, Some(base_name(&second_base)));
    assert!(progress.last_gap.is_some());
    handle.stop(Duration::from_secs(10)).await;
    assert_eq!(list_backups(&store).await.expect("list").len(), 2);
    let second_chain = segment_chain(&store, &second_base).await.expect("chain");
    assert_eq!(second_chain.gap, None);
    assert_eq!(second_chain.last_revision, after);
    assert_eq!(
        second_chain.segments[0].first_revision,
        second_base.revision + 1
    );

    // A flipped byte in the first chain's second segment: the chain stops
    // before it, and a replay refuses it before applying any of its events.
    let damaged = &first_chain.segments[1];
    let first_segment_end = first_chain.segments[0].last_revision;
    let file = root.path().join("backups/prod/main").join(&damaged.object);
    let mut bytes = std::fs::read(&file).expect("segment file");
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0x20;
    std::fs::write(&file, bytes).expect("write");
    let checked = segment_chain(&store, &first_base).await.expect("chain");
    assert_eq!(checked.segments.len(), 1);
    assert_eq!(checked.last_revision, first_segment_end);
    let gap = checked.gap.expect("a gap at the damaged segment");
    assert_eq!(gap.kind, GapKind::Corrupt);
    assert!(
        gap.message.contains(&damaged.object) && gap.message.contains("SHA-256"),
        "{gap}"
    );

    let snapshot = root.path().join("first.db");
    download_backup(&store, &first_base, &snapshot)
        .await
        .expect("download");
    let restore_root = tempfile::tempdir().expect("tempdir");
    let restored = restore_and_start(&snapshot, restore_root.path()).await;
    let mut restored_client = restored.client().await;
    let error = replay_segments(&store, &first_chain, None, &mut restored_client)
        .await
        .expect_err("corrupt segment");
    assert!(matches!(error, BackupError::Corrupt { .. }), "{error}");
    assert!(error.to_string().contains(&damaged.object), "{error}");
    let (_, revision) = dump(&mut restored_client, None).await;
    assert_eq!(
        revision, first_segment_end,
        "the segment before is applied, nothing of the damaged one"
    );

    // The newest chain damaged while the operator is away: on restart the
    // watcher reports the gap and takes a new full backup at once.
    let newest = &second_chain.segments[0];
    std::fs::remove_file(root.path().join("backups/prod/main").join(&newest.object))
        .expect("remove the segment object");
    let mut handle = start_watcher(&store, &cluster);
    let mut notices = handle.take_notices().expect("notices");
    let gap = next_notice(&mut notices, Duration::from_secs(20), |n| match n {
        IncrementalNotice::Gap(gap) => Some(gap),
        _ => None,
    })
    .await;
    assert_eq!(gap.kind, GapKind::Corrupt);
    assert!(gap.message.contains("missing"), "{gap}");
    let taken = next_notice(&mut notices, Duration::from_secs(20), |n| match n {
        IncrementalNotice::FullBackupTaken(taken) => Some(taken),
        _ => None,
    })
    .await;
    assert!(taken.metadata.revision >= after);
    handle.stop(Duration::from_secs(10)).await;
    assert_eq!(list_backups(&store).await.expect("list").len(), 3);

    // Retention deletes a full backup's chain with it (the local store
    // leaves empty directories behind).
    let chains = root.path().join("backups/prod/main/incremental");
    assert!(files_under(&chains) >= 4);
    apply_retention(
        &store,
        &schedule_writer("nightly"),
        1,
        None,
        &[],
        chrono::Utc::now(),
    )
    .await
    .expect("retention");
    assert_eq!(list_backups(&store).await.expect("list").len(), 1);
    assert_eq!(
        files_under(&chains),
        0,
        "only the newest backup is left, with no segment yet"
    );
}

/// Samples the watcher every 100 ms for `length`; each sample must pass
/// `check` (given the loss window and the progress).
async fn sample_for(
    handle: &IncrementalHandle,
    length: Duration,
    mut check: impl FnMut(chrono::Duration, &IncrementalProgress),
) {
    let until = Instant::now() + length;
    while Instant::now() < until {
        let progress = handle.progress();
        let now = chrono::Utc::now();
        let window = progress.loss_window(now).expect("a durable point");
        assert!(
            matches!(progress.freshness(interval(), now), Freshness::Fresh(_)),
            "{:?}",
            progress.freshness(interval(), now)
        );
        assert_eq!(progress.last_error, None);
        check(window, &progress);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// No gap, no failure: the notices received only say what is followed.
fn only_following(mut notices: mpsc::Receiver<IncrementalNotice>) {
    while let Ok(notice) = notices.try_recv() {
        assert!(
            matches!(notice, IncrementalNotice::Following { .. }),
            "{notice:?}"
        );
    }
}

fn interval() -> chrono::Duration {
    chrono::Duration::from_std(INTERVAL).expect("interval")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quiet_cluster_stays_fresh_and_the_recovery_point_follows_the_writes() {
    let cluster = LocalCluster::start(3).await;
    let mut client = cluster.client().await;
    write_keys(&mut client, 5, 10).await;
    let root = tempfile::tempdir().expect("tempdir");
    let store = local_store(root.path());
    let base = full_backup(&store, &cluster).await;
    let handle = start_watcher(&store, &cluster);

    // Quiet: etcd's answer to the watcher's progress requests keeps the
    // loss window at 0 and the recovery point at etcd's revision, with no
    // segment written.
    let answered = tokio::time::timeout(Duration::from_secs(10), async {
        while handle.progress().loss_window(chrono::Utc::now()) != Some(chrono::Duration::zero()) {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    assert!(
        answered.is_ok(),
        "no answer from etcd: {:?}",
        handle.progress()
    );
    sample_for(&handle, INTERVAL * 8, |window, progress| {
        assert_eq!(window, chrono::Duration::zero(), "{progress:?}");
        assert_eq!(progress.durable_revision, Some(base.revision));
        assert_eq!(progress.segments, 0);
    })
    .await;

    // A write every few intervals: the window is the age of the write
    // while it waits, 0 again once it is stored, and the recovery point
    // follows each write.
    for i in 0..3 {
        let written_at = chrono::Utc::now();
        let written = put(&mut client, &format!("sparse-{i}"), "v").await;
        let took = wait_durable(&handle, written).await;
        assert!(took <= DURABLE_WITHIN, "durable after {took:?}");
        let progress = handle.progress();
        assert!(
            progress.recovery_point() >= Some(written_at),
            "{progress:?}"
        );
        sample_for(&handle, INTERVAL * 2, |window, progress| {
            assert!(window <= interval() * 2, "{window} {progress:?}");
            assert!(progress.durable_revision >= Some(written));
        })
        .await;
        assert_eq!(
            handle.progress().loss_window(chrono::Utc::now()),
            Some(chrono::Duration::zero())
        );
    }

    // A steady writer: a segment every interval, the window at most about
    // two intervals (the oldest write waits up to one, then the upload).
    let writer = {
        let mut client = client.clone();
        tokio::spawn(async move {
            let mut last = 0;
            for i in 0..80 {
                last = put(&mut client, &format!("steady-{i}"), "v").await;
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            last
        })
    };
    let mut widest = chrono::Duration::zero();
    sample_for(&handle, INTERVAL * 4, |window, _| {
        widest = widest.max(window)
    })
    .await;
    let last = writer.await.expect("writer");
    assert!(widest <= interval() * 2, "widest loss window {widest}");
    assert!(
        widest > chrono::Duration::zero(),
        "writes wait for a segment"
    );
    wait_durable(&handle, last).await;

    // etcd compacts exactly the revision after the chain while the watcher
    // is stopped: it resumes after the chain's end with no gap.
    let mut handle = handle;
    let notices = handle.take_notices().expect("notices");
    handle.stop(Duration::from_secs(10)).await;
    only_following(notices);
    let chain_end = segment_chain(&store, &base)
        .await
        .expect("chain")
        .last_revision;
    assert_eq!(chain_end, last);
    let compacted = put(&mut client, "while-stopped", "v").await;
    assert_eq!(compacted, chain_end + 1);
    client
        .compact(compacted, Some(CompactionOptions::new().with_physical()))
        .await
        .expect("compact");
    let mut handle = start_watcher(&store, &cluster);
    let notices = handle.take_notices().expect("notices");
    wait_durable(&handle, compacted).await;
    handle.stop(Duration::from_secs(10)).await;
    only_following(notices);
    let chain = segment_chain(&store, &base).await.expect("chain");
    assert_eq!(chain.gap, None);
    assert_eq!(chain.last_revision, compacted);
}

/// A one-shot `EtcdBackup` of the cluster into the folder.
async fn manual_backup(store: &BackupStore, cluster: &LocalCluster, name: &str) -> BackupMetadata {
    let writer = BackupWriter {
        kind: "EtcdBackup".to_string(),
        namespace: "prod".to_string(),
        name: name.to_string(),
        uid: String::new(),
    };
    let options = SnapshotOptions::default().written_by(writer);
    take_backup(store, &cluster.endpoints(), "prod", "main", &options)
        .await
        .expect("manual backup")
        .metadata
}

/// The base a watcher follows, and the segments it resumed with.
async fn followed(notices: &mut mpsc::Receiver<IncrementalNotice>) -> (String, usize) {
    next_notice(notices, Duration::from_secs(20), |n| match n {
        IncrementalNotice::Following { base, segments, .. } => Some((base, segments)),
        IncrementalNotice::Gap(gap) => panic!("unexpected gap: {gap}"),
        IncrementalNotice::Failed(error) => panic!("unexpected failure: {error}"),
        IncrementalNotice::FullBackupTaken(_) => None,
    })
    .await
}

/// A watcher starting in a folder without a full backup of its own: it
/// takes one and follows it.
async fn start_own_chain(
    store: &BackupStore,
    cluster: &LocalCluster,
    schedule: &str,
) -> (IncrementalHandle, BackupMetadata) {
    let mut handle = start_watcher_of(store, cluster, schedule);
    let mut notices = handle.take_notices().expect("notices");
    let taken = next_notice(&mut notices, Duration::from_secs(20), |n| match n {
        IncrementalNotice::FullBackupTaken(taken) => Some(taken.metadata),
        IncrementalNotice::Following { base, .. } => {
            panic!("{schedule} follows {base}, a full backup it did not take")
        }
        other => panic!("unexpected notice: {other:?}"),
    })
    .await;
    assert_eq!(taken.written_by, Some(schedule_writer(schedule)));
    let (base, segments) = followed(&mut notices).await;
    assert_eq!((base, segments), (base_name(&taken), 0));
    (handle, taken)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_schedules_sharing_a_folder_each_extend_only_their_own_chains() {
    let cluster = LocalCluster::start(1).await;
    let mut client = cluster.client().await;
    write_keys(&mut client, 10, 50).await;
    let root = tempfile::tempdir().expect("tempdir");
    let store = local_store(root.path());
    // A one-shot backup is in the folder first: no schedule extends it.
    let first_manual = manual_backup(&store, &cluster, "before").await;

    // Each schedule's watcher takes its own full backup, although a newer
    // full backup (the other schedule's) is in the folder.
    let (nightly, nightly_base) = start_own_chain(&store, &cluster, "nightly").await;
    let (hourly, hourly_base) = start_own_chain(&store, &cluster, "hourly").await;
    let mut last = 0;
    for i in 0..20 {
        last = put(&mut client, &format!("shared-{i:02}"), &"v".repeat(300)).await;
    }
    wait_durable(&nightly, last).await;
    wait_durable(&hourly, last).await;
    nightly.stop(Duration::from_secs(10)).await;
    hourly.stop(Duration::from_secs(10)).await;
    let nightly_segments = segment_chain(&store, &nightly_base)
        .await
        .expect("chain")
        .segments
        .len();
    let hourly_segments = segment_chain(&store, &hourly_base)
        .await
        .expect("chain")
        .segments
        .len();
    assert!(nightly_segments > 0 && hourly_segments > 0);

    // After a restart, with a newer one-shot backup in the folder, each
    // resumes its own chain where it stopped.
    put(&mut client, "while-stopped", "v").await;
    let second_manual = manual_backup(&store, &cluster, "after").await;
    let mut watchers = Vec::new();
    for (schedule, base, segments) in [
        ("nightly", &nightly_base, nightly_segments),
        ("hourly", &hourly_base, hourly_segments),
    ] {
        let mut handle = start_watcher_of(&store, &cluster, schedule);
        let mut notices = handle.take_notices().expect("notices");
        assert_eq!(
            followed(&mut notices).await,
            (base_name(base), segments),
            "{schedule} resumes its own chain"
        );
        watchers.push((handle, notices, base.clone()));
    }
    let end = put(&mut client, "the-end", "!").await;
    for (handle, notices, base) in watchers {
        wait_durable(&handle, end).await;
        assert_eq!(handle.progress().base, Some(base_name(&base)));
        handle.stop(Duration::from_secs(10)).await;
        only_following(notices);
    }

    // Both chains are whole, each under its own full backup only; the
    // one-shot backups head no chain. A restore may use any backup.
    let backups = list_backups(&store).await.expect("list");
    let names: Vec<String> = backups.iter().map(base_name).collect();
    let mut expected: Vec<String> = [&first_manual, &nightly_base, &hourly_base, &second_manual]
        .into_iter()
        .map(base_name)
        .collect();
    expected.sort();
    let mut sorted = names.clone();
    sorted.sort();
    assert_eq!(sorted, expected);
    for manual in [&first_manual, &second_manual] {
        let chain = segment_chain(&store, manual).await.expect("chain");
        assert!(chain.segments.is_empty(), "{:?}", chain.segments);
        let folder = root
            .path()
            .join("backups/prod/main/incremental")
            .join(base_name(manual));
        assert!(!folder.exists(), "{} holds segments", folder.display());
    }
    let (source, _) = dump(&mut client, None).await;
    for base in [&nightly_base, &hourly_base] {
        let chain = segment_chain(&store, base).await.expect("chain");
        assert_eq!(chain.gap, None);
        assert_eq!(chain.last_revision, end);
        assert_eq!(chain.segments[0].first_revision, base.revision + 1);
        assert!(chain.segments.iter().all(|s| s.base == base_name(base)));
    }
    let snapshot = root.path().join("hourly.db");
    download_backup(&store, &hourly_base, &snapshot)
        .await
        .expect("download");
    let restore_root = tempfile::tempdir().expect("tempdir");
    let restored = restore_and_start(&snapshot, restore_root.path()).await;
    let mut restored_client = restored.client().await;
    let chain = segment_chain(&store, &hourly_base).await.expect("chain");
    let outcome = replay_segments(&store, &chain, None, &mut restored_client)
        .await
        .expect("replay");
    assert_eq!(outcome.revision, end);
    assert_eq!(dump(&mut restored_client, None).await, (source, end));
}

/// Waits until the watcher extends the chain after `base` and needs no
/// other chain.
async fn wait_only_chain(handle: &IncrementalHandle, base: &BackupMetadata) {
    let name = base_name(base);
    let mut progress = handle.subscribe();
    let reached = tokio::time::timeout(Duration::from_secs(30), async {
        loop {
            if progress.borrow_and_update().chains_in_use() == [name.as_str()] {
                return;
            }
            if progress.changed().await.is_err() {
                return;
            }
        }
    })
    .await;
    assert!(
        reached.is_ok(),
        "the watcher still needs other chains than {name}: {:?}",
        handle.progress()
    );
}

/// A schedule keeping one full backup (`count: 1`) takes a new one while
/// its watcher still extends the previous chain: retention keeps that
/// backup and its segments, which restore every write the watcher reported
/// durable; once the watcher has moved to the new backup and its chain
/// reached the old one's end, retention deletes the old chain.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retention_keeps_the_chain_the_watcher_extends_until_it_moved_on() {
    let cluster = LocalCluster::start(1).await;
    let mut client = cluster.client().await;
    write_keys(&mut client, 10, 50).await;
    let root = tempfile::tempdir().expect("tempdir");
    let store = local_store(root.path());
    let first = full_backup(&store, &cluster).await;
    let handle = start_watcher(&store, &cluster);
    let mut last = 0;
    for i in 0..10 {
        last = put(&mut client, &format!("before-{i}"), "v").await;
    }
    wait_durable(&handle, last).await;

    // The cron's next full backup; the watcher is not told yet and keeps
    // extending the first chain.
    let second = full_backup(&store, &cluster).await;
    for i in 0..5 {
        last = put(&mut client, &format!("after-{i}"), "v").await;
    }
    wait_durable(&handle, last).await;
    assert_eq!(handle.progress().base, Some(base_name(&first)));
    let in_use = handle.progress().chains_in_use();
    let outcome = apply_retention(
        &store,
        &schedule_writer("nightly"),
        1,
        None,
        &in_use,
        chrono::Utc::now(),
    )
    .await
    .expect("retention");
    assert_eq!(outcome.held, [base_name(&first)]);
    assert!(outcome.deleted.is_empty(), "{:?}", outcome.deleted);
    assert_eq!(outcome.kept, 2);
    let chain = segment_chain(&store, &first).await.expect("chain");
    assert_eq!(chain.gap, None);
    assert_eq!(chain.last_revision, last, "every durable write is kept");

    // The first backup and its chain restore the source at its end.
    let (source, _) = dump(&mut client, Some(last)).await;
    let snapshot = root.path().join("first.db");
    download_backup(&store, &first, &snapshot)
        .await
        .expect("download");
    let restore_root = tempfile::tempdir().expect("tempdir");
    let restored = restore_and_start(&snapshot, restore_root.path()).await;
    let mut restored_client = restored.client().await;
    let outcome = replay_segments(&store, &chain, None, &mut restored_client)
        .await
        .expect("replay");
    assert_eq!(outcome.revision, last);
    assert_eq!(dump(&mut restored_client, None).await, (source, last));

    // Told about the new backup, the watcher moves on; the first chain is
    // needed until the new one reaches its end, then retention deletes it.
    handle.announce_base(second.clone());
    wait_only_chain(&handle, &second).await;
    assert!(handle.progress().durable_revision >= Some(last));
    let in_use = handle.progress().chains_in_use();
    let outcome = apply_retention(
        &store,
        &schedule_writer("nightly"),
        1,
        None,
        &in_use,
        chrono::Utc::now(),
    )
    .await
    .expect("retention");
    assert!(outcome.held.is_empty());
    assert_eq!(outcome.deleted.len(), 1, "{:?}", outcome.deleted);
    handle.stop(Duration::from_secs(10)).await;
    let left = list_backups(&store).await.expect("list");
    assert_eq!(left.len(), 1);
    assert_eq!(base_name(&left[0]), base_name(&second));
    let first_chain = root
        .path()
        .join("backups/prod/main/incremental")
        .join(base_name(&first));
    assert_eq!(files_under(&first_chain), 0, "the first chain is deleted");
    let second_chain = segment_chain(&store, &second).await.expect("chain");
    assert_eq!(second_chain.gap, None);
    assert!(second_chain.last_revision >= last);
}
