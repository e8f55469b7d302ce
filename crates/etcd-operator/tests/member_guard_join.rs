//! The member guard as etcd's parent while a new member joins, against
//! real etcd processes on loopback: the guard reads the figures of a join
//! from etcd's own metrics page (3.6 and 3.7), a new member started through
//! it joins from the leader's snapshot and serves (restarted by the guard
//! when etcd's publish race hit it, or not), and SIGTERM to the guard
//! stops etcd and the guard.
//!
//! The etcd binaries are the pinned builds of `tools/build-upstream.sh`.

use std::path::PathBuf;
use std::time::Duration;

use etcd_client::{Client, GetOptions, MemberAddOptions};
use etcd_operator::pod_programs::member_guard::first_join::join_metrics_address;
use etcd_operator::pod_programs::member_guard::supervise::read_join_sample;
use test_kit::etcd_process::{EtcdProcess, LocalCluster, READY_TIMEOUT, initial_cluster};
use test_kit::poll::eventually;
use test_kit::upstream::upstream_set;

type TestResult = Result<(), Box<dyn std::error::Error>>;

/// Keys written before the joins: past the snapshot count below, so the
/// leader's log no longer holds the start and a new member gets a snapshot.
const KEYS: usize = 400;

fn guard_binary() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_etcd-operator"))
}

fn metrics_address(member: &EtcdProcess) -> Result<std::net::SocketAddr, String> {
    let url = member.metrics_url.as_deref().ok_or("no metrics URL")?;
    let args = [
        "--initial-cluster-state=existing".to_owned(),
        format!("--listen-metrics-urls={url}"),
    ];
    join_metrics_address(&args).ok_or_else(|| format!("{url} is not an HTTP metrics URL"))
}

#[tokio::test]
async fn the_guard_reads_the_figures_of_a_join_from_etcds_own_metrics_page() -> TestResult {
    for set in ["etcd-3.6", "etcd-3.7"] {
        let dir = tempfile::tempdir()?;
        let mut member = EtcdProcess::new(dir.path(), "solo").with_metrics();
        member.set_binary(&upstream_set(set).join("etcd"));
        let initial = initial_cluster([&member]);
        member.start(&initial, "new", "metrics-page")?;
        member.wait_serving(READY_TIMEOUT).await?;
        let address = metrics_address(&member)?;
        let sample = read_join_sample(address)
            .await
            .ok_or_else(|| format!("{set}: the page lacks a figure the guard reads"))?;
        assert!(sample.has_leader, "{set}: {sample:?}");
        assert!(sample.applied_index > 0, "{set}: {sample:?}");
        assert_eq!(sample.proposals_pending, 0, "{set}: {sample:?}");
        assert!(!sample.applying_snapshot, "{set}: {sample:?}");
        member.stop(Duration::from_secs(30)).await?;
    }
    Ok(())
}

/// Keys a member holds, read from it alone (serializable: a learner
/// answers no other read).
async fn keys_on(member: &EtcdProcess) -> Result<i64, etcd_client::Error> {
    let mut client = Client::connect([member.client_url.as_str()], None).await?;
    let options = GetOptions::new()
        .with_prefix()
        .with_count_only()
        .with_serializable();
    Ok(client.get("key-", Some(options)).await?.count())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn new_members_started_through_the_guard_join_from_a_snapshot_serve_and_stop_on_sigterm()
-> TestResult {
    let cluster = LocalCluster::start_with(
        3,
        &[
            "--snapshot-count",
            "100",
            "--snapshot-catchup-entries",
            "10",
        ],
    )
    .await;
    let mut client = cluster.client().await;
    test_kit::etcd_data::write_keys(&mut client, KEYS, 1024).await;
    let expected = i64::try_from(KEYS)?;
    // Several joins: etcd's publish race hits about half of them, so the
    // guard's restart runs in most runs of this test.
    for round in 0..3 {
        let name = format!("joiner{round}");
        let volume = cluster.dir().join(format!("volume-{round}"));
        std::fs::create_dir(&volume)?;
        let data_dir = volume.join("data");
        let data_dir_arg = data_dir.display().to_string();
        let mut joiner = EtcdProcess::new(cluster.dir(), &name)
            .with_data_dir(&data_dir)
            .with_metrics()
            .with_args(&["--snapshot-count", "100"])
            .with_launcher(
                &guard_binary(),
                &[
                    "member-guard",
                    "--data-dir",
                    &data_dir_arg,
                    "--cluster-token",
                    &cluster.token,
                    "--member-name",
                    &name,
                ],
            );
        // etcd refuses a new member until every member has been connected
        // for a while (strict reconfiguration check).
        let peer_url = joiner.peer_url.clone();
        let id = eventually(&format!("{name} added as a learner"), READY_TIMEOUT, || {
            let (mut client, peer_url) = (client.clone(), peer_url.clone());
            async move {
                let options = MemberAddOptions::new().with_is_learner();
                let added = client.member_add([peer_url], Some(options)).await;
                match added.map(|added| added.member().map(|member| member.id())) {
                    Ok(Some(id)) => Ok(id),
                    Ok(None) => Err("no member in the answer".to_owned()),
                    Err(error) => Err(error.to_string()),
                }
            }
        })
        .await?;
        let initial = format!(
            "{},{name}={}",
            initial_cluster(&cluster.members),
            joiner.peer_url
        );
        joiner.start(&initial, "existing", &cluster.token)?;
        eventually(&format!("{name} serves every key"), READY_TIMEOUT, || {
            let joiner = &joiner;
            async move {
                match keys_on(joiner).await {
                    Ok(count) if count == expected => Ok(()),
                    Ok(count) => Err(format!("{count} keys of {expected}")),
                    Err(error) => Err(error.to_string()),
                }
            }
        })
        .await
        .map_err(|e| format!("{e}\n{}", joiner.log_tail()))?;
        let log = std::fs::read_to_string(&joiner.log)?;
        eprintln!(
            "{name}: joined; the guard restarted etcd {} time(s)",
            log.matches("restarting etcd on the data it now holds")
                .count()
        );
        assert!(
            volume.join("member-identity.json").exists(),
            "the guard wrote no marker beside the data dir"
        );
        // SIGTERM reaches the guard, which passes it on and exits when
        // etcd has: nothing serves on the member's port afterwards.
        joiner.stop(Duration::from_secs(30)).await?;
        assert!(!port_answers(&joiner.client_url), "etcd outlived the guard");
        client.member_remove(id).await?;
        std::fs::remove_dir_all(&volume)?;
    }
    Ok(())
}

fn port_answers(url: &str) -> bool {
    let address = url.trim_start_matches("http://");
    std::net::TcpStream::connect_timeout(
        &address.parse().unwrap_or_else(|e| panic!("{url}: {e}")),
        Duration::from_millis(500),
    )
    .is_ok()
}
