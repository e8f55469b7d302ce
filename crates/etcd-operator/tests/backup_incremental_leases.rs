//! Leases granted after a full backup, against real etcd processes on
//! loopback: the watcher records each lease's granted TTL in the segments,
//! and a restore (`etcdutl snapshot restore` of the full backup + replay)
//! gives the keys a lease with the same ID and TTL; a lease already gone
//! when the watcher asked comes back, at a revision before its keys were
//! deleted, with the fallback TTL. No mocks.

use std::collections::HashMap;
use std::time::Duration;

use etcd_client::{Client, GetOptions, PutOptions};
use etcd_operator::backup::incremental::replay_leases::fallback_ttl;
use etcd_operator::backup::incremental::{
    IncrementalHandle, IncrementalOptions, SegmentChain, fixed_endpoints, load_segment_contents,
    spawn,
};
use etcd_operator::backup::{
    BackupMetadata, BackupStore, ReplayOutcome, download_backup, replay_segments, segment_chain,
};

use test_kit::backup_scenarios::{backup_of, local_store, nightly_options};
use test_kit::etcd_process::{EtcdProcess, LocalCluster, restore_and_start};

fn start_watcher(store: &BackupStore, cluster: &LocalCluster) -> IncrementalHandle {
    let options = IncrementalOptions {
        interval: Duration::from_secs(1),
        min_back_off: Duration::from_millis(200),
        max_back_off: Duration::from_secs(2),
        snapshot: nightly_options(),
        ..IncrementalOptions::new("prod", "main")
    };
    spawn(store.clone(), fixed_endpoints(cluster.endpoints()), options)
}

/// Waits until every write up to `revision` is in a segment.
async fn wait_durable(handle: &IncrementalHandle, revision: i64) {
    let mut progress = handle.subscribe();
    tokio::time::timeout(Duration::from_secs(30), async {
        while progress
            .borrow_and_update()
            .durable_revision
            .is_none_or(|r| r < revision)
        {
            progress.changed().await.expect("watcher alive");
        }
    })
    .await
    .unwrap_or_else(|_| panic!("revision {revision} not durable: {:?}", handle.progress()));
}

async fn put(client: &mut Client, key: &str, lease: Option<i64>) -> i64 {
    let options = lease.map(|lease| PutOptions::new().with_lease(lease));
    client
        .put(key, "v", options)
        .await
        .expect("put")
        .header()
        .expect("header")
        .revision()
}

async fn grant(client: &mut Client, ttl: i64) -> i64 {
    client.lease_grant(ttl, None).await.expect("grant").id()
}

/// Every key with its lease and revisions, at `revision` (now when `None`).
async fn keys(client: &mut Client, revision: Option<i64>) -> Vec<(String, i64, i64, i64)> {
    let mut options = GetOptions::new().with_all_keys();
    if let Some(revision) = revision {
        options = options.with_revision(revision);
    }
    let response = client.get(vec![0u8], Some(options)).await.expect("get");
    response
        .kvs()
        .iter()
        .map(|kv| {
            let key = String::from_utf8_lossy(kv.key()).into_owned();
            (key, kv.lease(), kv.create_revision(), kv.mod_revision())
        })
        .collect()
}

fn lease_of(keys: &[(String, i64, i64, i64)], key: &str) -> i64 {
    keys.iter()
        .find(|(k, ..)| k == key)
        .unwrap_or_else(|| panic!("{key} is missing"))
        .1
}

/// The TTL `lease` was granted with, and the keys attached to it.
async fn lease(client: &mut Client, lease: i64) -> (i64, Vec<String>) {
    let answer = client
        .lease_time_to_live(
            lease,
            Some(etcd_client::LeaseTimeToLiveOptions::new().with_keys()),
        )
        .await
        .expect("time to live");
    assert!(answer.ttl() > 0, "lease {lease:x} is missing");
    let mut keys: Vec<String> = answer
        .keys()
        .iter()
        .map(|k| String::from_utf8_lossy(k).into_owned())
        .collect();
    keys.sort();
    (answer.granted_ttl(), keys)
}

/// The full backup restored into a fresh etcd, and the chain replayed on
/// it up to `revision`.
async fn restore(
    store: &BackupStore,
    base: &BackupMetadata,
    chain: &SegmentChain,
    revision: Option<i64>,
) -> (ReplayOutcome, Client, EtcdProcess, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("tempdir");
    let snapshot = dir.path().join("base.db");
    download_backup(store, base, &snapshot)
        .await
        .expect("download");
    let restored = restore_and_start(&snapshot, dir.path()).await;
    let mut client = restored.client().await;
    let outcome = replay_segments(store, chain, revision, &mut client)
        .await
        .expect("replay");
    (outcome, client, restored, dir)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leases_granted_after_the_full_backup_come_back_with_their_id_and_ttl() {
    let cluster = LocalCluster::start(1).await;
    let mut client = cluster.client().await;
    put(&mut client, "before", None).await;
    let root = tempfile::tempdir().expect("tempdir");
    let store = local_store(root.path());
    let base = backup_of(&store, &cluster.endpoints())
        .await
        .expect("full backup")
        .metadata;

    // Leases granted after the full backup, keys written with them.
    let handle = start_watcher(&store, &cluster);
    let long = grant(&mut client, 600).await;
    put(&mut client, "long/1", Some(long)).await;
    put(&mut client, "long/2", Some(long)).await;
    let short = grant(&mut client, 90).await;
    put(&mut client, "short/1", Some(short)).await;
    let written = put(&mut client, "long/3", Some(long)).await;
    wait_durable(&handle, written).await;
    handle.stop(Duration::from_secs(10)).await;

    // While the watcher is away, a lease is granted, used and revoked: when
    // the watcher asks about it, etcd no longer has it.
    let gone = grant(&mut client, 30).await;
    let while_leased = put(&mut client, "gone/1", Some(gone)).await;
    client.lease_revoke(gone).await.expect("revoke");
    let handle = start_watcher(&store, &cluster);
    let end = put(&mut client, "the-end", None).await;
    wait_durable(&handle, end).await;
    handle.stop(Duration::from_secs(10)).await;

    // The chain recorded each lease once, with its granted TTL.
    let chain = segment_chain(&store, &base).await.expect("chain");
    assert_eq!(chain.gap, None);
    assert_eq!(chain.last_revision, end);
    let mut recorded = HashMap::new();
    for segment in &chain.segments {
        let contents = load_segment_contents(&store, segment)
            .await
            .expect("segment");
        for lease in contents.leases {
            assert_eq!(recorded.insert(lease.id, lease.granted_ttl), None);
        }
    }
    let expected = HashMap::from([(long, Some(600)), (short, Some(90)), (gone, None)]);
    assert_eq!(recorded, expected);

    // Restored at the chain's end: the keys are attached to leases of the
    // same IDs, granted with the same TTLs.
    let source = keys(&mut client, None).await;
    let (outcome, mut restored, _etcd, _dir) = restore(&store, &base, &chain, None).await;
    assert_eq!(outcome.revision, end);
    assert_eq!(keys(&mut restored, None).await, source);
    assert_eq!(lease_of(&source, "long/1"), long);
    assert_eq!(
        lease(&mut restored, long).await,
        (600, vec!["long/1".into(), "long/2".into(), "long/3".into()])
    );
    assert_eq!(
        lease(&mut restored, short).await,
        (90, vec!["short/1".into()])
    );
    assert_eq!(outcome.leases_granted, 3, "long, short, gone");
    assert_eq!(outcome.leases_with_fallback_ttl, 1, "gone");
    assert_eq!(outcome.puts_without_lease, 0);

    // Restored before the revocation: the key of the lease that was gone
    // when asked keeps a lease of its ID, with the fallback TTL.
    let source = keys(&mut client, Some(while_leased)).await;
    let (outcome, mut restored, _etcd, _dir) =
        restore(&store, &base, &chain, Some(while_leased)).await;
    assert_eq!(outcome.revision, while_leased);
    assert_eq!(keys(&mut restored, None).await, source);
    assert_eq!(lease_of(&source, "gone/1"), gone);
    assert_eq!(fallback_ttl([600, 90]), 600);
    assert_eq!(
        lease(&mut restored, gone).await,
        (600, vec!["gone/1".into()])
    );
    assert_eq!(outcome.leases_with_fallback_ttl, 1);
}
