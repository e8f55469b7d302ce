//! Restore from a survivor's data, with real etcd processes on loopback and
//! the restore Pod's containers run as the Pod builder writes them: a
//! member SIGKILLed right after acknowledged writes, whose db file lacks
//! them (etcd commits its backend only every `--backend-batch-interval`
//! or `--backend-batch-limit` writes, both set out of reach here, and
//! `--snapshot-count` too so no raft snapshot forces a commit), is
//! restored with every write it had applied, from its WAL; the original
//! data stays byte for byte beside the restored one; and the restored
//! etcd serves no old revision again: reads and watches at revisions the
//! old cluster served are refused as compacted, and its revisions start
//! `REVISION_BUMP` after the survivor's. No mocks.

use etcd_client::GetOptions;
use etcd_operator::pod_contract::REVISION_BUMP;

use test_kit::etcd_process::{EtcdProcess, LocalCluster, READY_TIMEOUT};
use test_kit::poll::eventually;
use test_kit::restore_checks::{
    assert_compacted_read, assert_compacted_watch, assert_keys, revision_now, write,
};
use test_kit::restore_pod::{copy_tree, db_revision, restore_pod_of_main, run_pod, tree_digest};

const TOKEN: &str = "main-restored-r1";
const OPERATOR: &str = env!("CARGO_BIN_EXE_etcd-operator");
const KEYS: usize = 300;

/// The backend commits neither by time nor by count during the test.
const RARE_BACKEND_COMMITS: &[&str] = &[
    "--backend-batch-interval=1h",
    "--backend-batch-limit=100000000",
    "--snapshot-count=1000000",
];

async fn survivor_restore(size: usize) {
    let root = tempfile::tempdir().expect("temp dir");
    let mut cluster = LocalCluster::start_with(size, RARE_BACKEND_COMMITS).await;
    let members = &mut cluster.members;
    let mut client = members[0].client().await;
    let mut revisions = write(&mut client, 0..KEYS / 2).await;
    // A defragmentation commits the backend: the db file then holds the
    // first half of the writes, the WAL alone the second.
    for member in members.iter() {
        member
            .client()
            .await
            .defragment()
            .await
            .expect("defragment");
    }
    revisions.extend(write(&mut client, KEYS / 2..KEYS).await);
    // A revision a client of the old cluster saw (a watch cache resumes
    // from the next one).
    let seen = revisions[KEYS / 10];
    let last = *revisions.last().expect("writes");
    // The survivor has applied every write (its own serializable read
    // answers at the last revision): each is in its WAL, and "committed"
    // as far as this member knows.
    let survivor = members[0].client().await;
    eventually("the survivor applied every write", READY_TIMEOUT, || {
        let mut survivor = survivor.clone();
        async move {
            let response = survivor
                .get(
                    "key-",
                    Some(GetOptions::new().with_serializable().with_count_only()),
                )
                .await
                .map_err(|e| e.to_string())?;
            let revision = response.header().map_or(0, |h| h.revision());
            if revision == last {
                Ok(())
            } else {
                Err(format!("at revision {revision}"))
            }
        }
    })
    .await
    .expect("survivor caught up");
    for member in members.iter_mut() {
        member.kill();
    }

    // The scenario: the survivor's db file alone lacks the last writes.
    let survivor_dir = members[0].data_dir.clone();
    let db_alone = db_revision(&survivor_dir.join("member/snap/db"), root.path());
    assert!(
        db_alone > 1 && db_alone < last,
        "the db file holds revision {db_alone} of {last}: the test proves nothing"
    );
    eprintln!("the survivor's db file holds revision {db_alone}, its WAL up to {last}");

    // The survivor's volume, and the restore Pod on it.
    let volume = root.path().join("volume");
    let tools = root.path().join("tools");
    std::fs::create_dir_all(&tools).expect("tools dir");
    copy_tree(&survivor_dir, &volume.join("data"));
    let original = tree_digest(&volume.join("data"));
    let pod = restore_pod_of_main(TOKEN, None);
    let log = run_pod(&pod, &volume, &tools, OPERATOR.as_ref());
    eprintln!("{log}");

    assert_eq!(
        tree_digest(&volume.join(format!("data.before-{TOKEN}"))),
        original,
        "the survivor's own data changed"
    );
    let leftovers: Vec<String> = std::fs::read_dir(&volume)
        .expect("volume")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("restore-"))
        .collect();
    assert!(leftovers.is_empty(), "scratch files left: {leftovers:?}");

    let restored = EtcdProcess::start_on(root.path(), "main-0", &volume.join("data")).await;
    let mut client = restored.client().await;
    assert_keys(&mut client, 0..KEYS).await;
    let header = revision_now(&mut client).await;
    let bump = i64::try_from(REVISION_BUMP).expect("bump");
    assert_eq!(
        header,
        last + bump,
        "restored revision {header}: expected the survivor's last revision {last} + {bump}"
    );
    // Nothing the old cluster served is served again.
    for old in [seen, last, last + 1] {
        assert_compacted_read(&mut client, old).await;
        assert_compacted_watch(&mut client, old).await;
    }
    let next = client
        .put("after-restore", "x", None)
        .await
        .expect("put")
        .header()
        .expect("header")
        .revision();
    assert_eq!(next, last + bump + 1);
}

/// A single member killed after its last write: its last acknowledged
/// write is in its WAL, but the commit index that covers it was never
/// flushed (etcd does not fsync a commit-only HardState), which
/// `--force-new-cluster` alone would discard.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_single_member_restore_keeps_every_write_of_its_wal_and_bumps_the_revision() {
    survivor_restore(1).await;
}

/// A member of three, all killed at once: the survivor's WAL holds the
/// writes its db lacks; `--force-new-cluster` on the copy removes the dead
/// members.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_survivor_of_three_restores_every_write_of_its_wal_and_bumps_the_revision() {
    survivor_restore(3).await;
}
