//! The etcd layer against real etcd processes on loopback: membership,
//! learners, status, health, endpoint selection through outages, quorum
//! loss, leadership transfer and damaged data found by etcd's corruption
//! checks. No mocks.
//!
//! The etcd binary is the pinned build of `tools/build-upstream.sh`
//! (`$ETCD_LAB_CACHE/upstream/etcd-3.6-<hash>/etcd`); `ETCD_BIN` overrides.

use std::future::Future;
use std::time::Duration;

use etcd_operator::etcd::{
    Alarm, AlarmKind, ConnectSettings, ErrorCategory, EtcdAdmin, EtcdError, MemberHealth,
    ObservedEtcd, observe, parse_alarms,
};
use nix::sys::signal::Signal;
use test_kit::etcd_process::{EtcdProcess, LocalCluster, READY_TIMEOUT, initial_cluster};
use test_kit::loopback::free_port;
use test_kit::poll::eventually;

type TestResult = Result<(), Box<dyn std::error::Error>>;

fn settings() -> ConnectSettings {
    ConnectSettings {
        tls: None,
        connect_timeout: Duration::from_millis(1500),
        request_timeout: Duration::from_secs(5),
        quorum_read_timeout: Duration::from_secs(2),
    }
}

/// Starts `size` members as a new cluster and waits until it is healthy.
async fn start_cluster(size: usize) -> LocalCluster {
    start_cluster_with(size, &[]).await
}

/// [`start_cluster`] with more etcd flags for every member.
async fn start_cluster_with(size: usize, args: &[&str]) -> LocalCluster {
    let cluster = LocalCluster::spawn(size, args).unwrap_or_else(|e| panic!("{e}"));
    cluster.wait_healthy().await;
    cluster
}

/// The etcd layer's view of a [`LocalCluster`].
trait Layer {
    fn admin(&self) -> EtcdAdmin;
    async fn wait_healthy(&self);
}

impl Layer for LocalCluster {
    fn admin(&self) -> EtcdAdmin {
        EtcdAdmin::new(self.endpoints(), settings()).expect("endpoints")
    }

    async fn wait_healthy(&self) {
        let admin = self.admin();
        // Quorum alone is not enough: tests kill or freeze members, so every
        // member must have started and answer on its own.
        eventually(
            "cluster healthy, every member started",
            READY_TIMEOUT,
            || async {
                admin.cluster_health().await.map_err(|e| e.to_string())?;
                for endpoint in self.endpoints() {
                    let health = admin.local_health(&endpoint).await;
                    if health != MemberHealth::Healthy {
                        return Err(format!("{endpoint}: {health:?}"));
                    }
                }
                Ok(())
            },
        )
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", self.logs()));
    }
}

/// Retries a membership change while etcd says it is not safe yet.
async fn until_safe<T, F, Fut>(what: &str, mut change: F) -> Result<Result<T, EtcdError>, String>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, EtcdError>>,
{
    eventually(what, READY_TIMEOUT, || {
        let attempt = change();
        async move {
            match attempt.await {
                Err(error @ EtcdError::UnsafeMembershipChange { .. }) => Err(error),
                other => Ok(other),
            }
        }
    })
    .await
}

async fn observe_until(
    endpoints: &[String],
    what: &str,
    condition: impl Fn(&ObservedEtcd) -> bool,
) -> Result<ObservedEtcd, String> {
    eventually(what, READY_TIMEOUT, || async {
        let observed = observe(endpoints.iter().cloned(), settings()).await;
        if condition(&observed) {
            Ok(observed)
        } else {
            Err(format!("{observed:#?}"))
        }
    })
    .await
}

// ---------------------------------------------------------------------------
// Tests

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn member_list_status_and_health_of_a_healthy_cluster() -> TestResult {
    let cluster = start_cluster(3).await;
    let admin = cluster.admin();

    let list = admin.member_list().await?;
    let mut names: Vec<&str> = list.members.iter().map(|m| m.name.as_str()).collect();
    names.sort();
    assert_eq!(names, ["m0", "m1", "m2"]);
    for member in &list.members {
        let process = cluster
            .members
            .iter()
            .find(|p| p.name == member.name)
            .ok_or("unknown member")?;
        assert_eq!(member.peer_urls, std::slice::from_ref(&process.peer_url));
        assert_eq!(
            member.client_urls,
            std::slice::from_ref(&process.client_url)
        );
        assert!(!member.is_learner);
        assert!(member.has_started());
    }

    let leader = admin.find_leader().await?;
    let cluster_id = admin.cluster_id().await?;
    assert_eq!(cluster_id, list.cluster_id);
    for (endpoint, status) in admin.statuses().await {
        let status = status?;
        assert_eq!(status.endpoint, endpoint);
        assert_eq!(status.cluster_id, cluster_id);
        assert!(list.members.iter().any(|m| m.id == status.member_id));
        assert_eq!(status.leader_id, Some(leader.member_id));
        assert!(status.raft_term >= 2 && status.raft_index > 0);
        assert!(status.revision >= 1 && status.db_size > 0);
        assert!(status.version.starts_with("3.6."), "{}", status.version);
        assert!(!status.is_learner);
        assert!(status.errors.is_empty(), "{:?}", status.errors);
        assert_eq!(admin.local_health(&endpoint).await, MemberHealth::Healthy);
    }
    let revision = admin.cluster_health().await?;
    assert!(revision >= 1);

    let observed = admin.observe().await;
    assert_eq!(observed.cluster_id, Some(cluster_id));
    assert_eq!(observed.leader, Some(leader.member_id));
    assert_eq!(observed.members_reported_by, Some(leader.member_id));
    assert!(observed.quorum_reachable, "{:?}", observed.quorum_error);
    assert_eq!(observed.members.len(), 3);
    assert_eq!(observed.healthy_voters(), 3);
    assert!(observed.max_revision.is_some_and(|r| r >= 1));
    assert_eq!(observed.foreign_endpoints().count(), 0);
    for member in &observed.members {
        assert_eq!(
            member.endpoint.as_deref(),
            member.client_urls.first().map(String::as_str)
        );
        assert!(member.status.is_some());
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn learner_is_added_started_and_promoted_once_caught_up() -> TestResult {
    let mut cluster = start_cluster(3).await;
    let admin = cluster.admin();

    let mut learner = EtcdProcess::new(cluster.dir(), "m3");
    // etcd accepts membership changes once every voter has been
    // connected for 5 s; a fresh cluster must wait for that.
    let added = until_safe("add learner", || {
        admin.add_learner(std::slice::from_ref(&learner.peer_url))
    })
    .await??;
    let id = added.member.id;
    assert!(added.member.is_learner);
    assert!(!added.member.has_started(), "{:?}", added.member);
    assert_eq!(added.member.peer_urls, [learner.peer_url.clone()]);
    assert_eq!(added.members.len(), 4);

    // Not started, so not in sync: etcd refuses, and says why.
    let refused = admin.promote_learner(id).await.err().ok_or("promoted")?;
    assert!(
        matches!(refused, EtcdError::LearnerNotReady { member_id } if member_id == id),
        "{refused:?}"
    );
    assert_eq!(refused.category(), ErrorCategory::Refused);

    // One learner at a time.
    let second = admin
        .add_learner(&[format!("http://127.0.0.1:{}", free_port())])
        .await
        .err()
        .ok_or("second learner added")?;
    assert!(matches!(second, EtcdError::TooManyLearners), "{second:?}");

    let initial = format!(
        "{},{}={}",
        initial_cluster(cluster.members.iter()),
        learner.name,
        learner.peer_url
    );
    learner
        .start(&initial, "existing", &cluster.token)
        .expect("start the learner");
    let learner_url = learner.client_url.clone();
    cluster.members.push(learner);

    let status = eventually("learner serves", READY_TIMEOUT, || {
        admin.status(&learner_url)
    })
    .await?;
    assert!(status.is_learner);
    assert_eq!(status.member_id, id);

    let members = eventually("learner promoted", READY_TIMEOUT, || async {
        match admin.promote_learner(id).await {
            Err(EtcdError::LearnerNotReady { .. }) => Err("learner not yet in sync".to_string()),
            // A busy machine may time a request out; etcd's answer decides.
            Err(error) if error.category() == ErrorCategory::Transient => Err(error.to_string()),
            other => Ok(other),
        }
    })
    .await??;
    let promoted = members
        .iter()
        .find(|m| m.id == id)
        .ok_or("promoted member")?;
    assert!(!promoted.is_learner);
    assert_eq!(promoted.name, "m3");

    let again = admin
        .promote_learner(id)
        .await
        .err()
        .ok_or("promoted twice")?;
    assert!(matches!(again, EtcdError::NotALearner { .. }), "{again:?}");

    let endpoints = cluster.endpoints();
    let observed = observe_until(&endpoints, "four healthy voters", |o| {
        o.quorum_reachable && o.voters().count() == 4 && o.healthy_voters() == 4
    })
    .await?;
    assert_eq!(observed.learners().count(), 0);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn member_is_removed() -> TestResult {
    let mut cluster = start_cluster(3).await;
    let admin = cluster.admin();
    let leader = admin.find_leader().await?;
    let list = admin.member_list().await?;
    let follower = list
        .members
        .iter()
        .find(|m| m.id != leader.member_id)
        .ok_or("follower")?
        .clone();

    let members = until_safe("remove member", || admin.remove_member(follower.id)).await??;
    assert_eq!(members.len(), 2);
    assert!(members.iter().all(|m| m.id != follower.id));

    let again = admin
        .remove_member(follower.id)
        .await
        .err()
        .ok_or("removed twice")?;
    assert!(
        matches!(again, EtcdError::MemberNotFound { .. }),
        "{again:?}"
    );

    // The removed member's own process notices and stops.
    let removed = cluster
        .members
        .iter_mut()
        .find(|m| m.name == follower.name)
        .ok_or("process")?;
    eventually("removed member exits", READY_TIMEOUT, || {
        let exited = removed.has_exited();
        async move { if exited { Ok(()) } else { Err("still running") } }
    })
    .await?;

    let observed = admin.observe().await;
    assert!(observed.quorum_reachable);
    assert_eq!(observed.members.len(), 2);
    assert!(observed.member(follower.id).is_none());
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_and_frozen_endpoints_are_skipped() -> TestResult {
    let mut cluster = start_cluster(3).await;
    let admin = cluster.admin();
    let list = admin.member_list().await?;
    let id_of = |name: &str| list.members.iter().find(|m| m.name == name).map(|m| m.id);
    let dead_id = id_of("m0").ok_or("m0")?;

    // The first endpoint is dead: its refused connection is an error of
    // its own (no request timeout waited for), and the next endpoint answers.
    cluster.members[0].kill();
    let list = admin.member_list().await?;
    assert_eq!(list.members.len(), 3, "the dead member is still a member");
    let observed = observe_until(&cluster.endpoints(), "quorum with m0 dead", |o| {
        o.quorum_reachable
    })
    .await?;
    let dead = observed.member(dead_id).ok_or("dead member listed")?;
    match &dead.health {
        MemberHealth::Unreachable(why) => assert!(!why.contains("timed out"), "{why}"),
        other => panic!("expected the dead member unreachable, got {other:?}"),
    }
    assert_eq!(
        dead.endpoint.as_deref(),
        Some(cluster.members[0].client_url.as_str())
    );
    assert_eq!(observed.healthy_voters(), 2);
    assert!(observed.endpoints[0].error.is_some());

    // A frozen member accepts connections and never answers: our request
    // deadline ends the wait, and the others still serve.
    cluster.members[1].signal(Signal::SIGSTOP);
    let frozen_id = id_of("m1").ok_or("m1")?;
    let observed = admin.observe().await;
    cluster.members[1].signal(Signal::SIGCONT);
    let frozen = observed.member(frozen_id).ok_or("frozen member listed")?;
    let deadline = format!("timed out after {:?}", settings().request_timeout);
    match &frozen.health {
        MemberHealth::Unreachable(why) => assert!(why.contains(&deadline), "{why}"),
        other => panic!("expected the frozen member unreachable, got {other:?}"),
    }
    // m2 alone answers: one of three voters is no quorum.
    let survivor = observed.member_named("m2").ok_or("m2")?;
    assert_eq!(survivor.health, MemberHealth::Healthy);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quorum_loss_is_observed_not_an_error() -> TestResult {
    let mut cluster = start_cluster(3).await;
    let admin = cluster.admin();
    let cluster_id = admin.cluster_id().await?;
    let survivor_url = cluster.members[2].client_url.clone();

    cluster.members[0].kill();
    cluster.members[1].kill();

    let observed = observe_until(&cluster.endpoints(), "quorum lost", |o| {
        !o.quorum_reachable && o.leader.is_none()
    })
    .await?;
    assert_eq!(observed.cluster_id, Some(cluster_id));
    assert_eq!(
        observed.members.len(),
        3,
        "the survivor still lists all members"
    );
    let survivor = observed.member_named("m2").ok_or("survivor")?;
    assert_eq!(
        survivor.health,
        MemberHealth::Healthy,
        "local health needs no quorum"
    );
    let status = survivor.status.as_ref().ok_or("survivor status")?;
    assert_eq!(status.leader_id, None);
    assert!(observed.max_revision.is_some());
    for name in ["m0", "m1"] {
        let member = observed.member_named(name).ok_or("member")?;
        assert!(
            matches!(member.health, MemberHealth::Unreachable(_)),
            "{member:?}"
        );
    }
    assert!(observed.quorum_error.is_some());

    assert_eq!(
        admin.local_health(&survivor_url).await,
        MemberHealth::Healthy
    );
    let health = admin
        .cluster_health()
        .await
        .err()
        .ok_or("healthy without quorum")?;
    assert_ne!(health.category(), ErrorCategory::Invalid, "{health:?}");
    let change = admin
        .add_learner(&[format!("http://127.0.0.1:{}", free_port())])
        .await
        .err()
        .ok_or("membership change without quorum")?;
    assert!(
        matches!(
            change.category(),
            ErrorCategory::Transient | ErrorCategory::Unreachable
        ),
        "{change:?}"
    );

    // The members come back on their data: quorum re-forms by itself.
    let initial = initial_cluster(cluster.members.iter());
    let token = cluster.token.clone();
    for member in &mut cluster.members[..2] {
        member
            .start(&initial, "new", &token)
            .expect("start etcd again");
    }
    cluster.wait_healthy().await;
    let observed = observe_until(&cluster.endpoints(), "quorum back", |o| {
        o.quorum_reachable && o.healthy_voters() == 3
    })
    .await?;
    assert_eq!(observed.cluster_id, Some(cluster_id));
    Ok(())
}

/// A member that still knows a leader, which is frozen with the other
/// member: the quorum read gives up at its own deadline (here 1 s), not at
/// the request timeout (here 30 s) nor etcd's (15 s with these timeouts),
/// so a lost majority shows in an observation within seconds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quorum_read_waiting_on_a_gone_majority_stops_at_its_own_deadline() -> TestResult {
    // A long election timeout: the survivor keeps naming its leader while
    // the read waits.
    let cluster =
        start_cluster_with(3, &["--heartbeat-interval=500", "--election-timeout=5000"]).await;
    let patient = ConnectSettings {
        request_timeout: Duration::from_secs(30),
        quorum_read_timeout: Duration::from_secs(1),
        ..settings()
    };
    let survivor = cluster.members[2].client_url.clone();
    assert!(
        observe([survivor.clone()], patient.clone())
            .await
            .quorum_reachable
    );

    cluster.members[0].signal(Signal::SIGSTOP);
    cluster.members[1].signal(Signal::SIGSTOP);
    let observed = observe([survivor], patient).await;
    cluster.members[0].signal(Signal::SIGCONT);
    cluster.members[1].signal(Signal::SIGCONT);

    assert!(
        observed.leader.is_some(),
        "the survivor names a leader: {observed:#?}"
    );
    assert!(!observed.quorum_reachable);
    let error = observed.quorum_error.ok_or("no quorum error")?;
    assert!(
        error.contains("cluster health check") && error.contains("timed out after 1s"),
        "{error}"
    );
    cluster.wait_healthy().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leadership_moves_to_the_chosen_member() -> TestResult {
    let cluster = start_cluster(3).await;
    let admin = cluster.admin();
    let leader = admin.find_leader().await?;
    let list = admin.member_list().await?;
    let target = list
        .members
        .iter()
        .find(|m| m.id != leader.member_id)
        .ok_or("follower")?
        .id;

    admin.move_leader(target).await?;
    let new_leader = eventually("leader moved", READY_TIMEOUT, || async {
        match admin.find_leader().await {
            Ok(l) if l.member_id == target => Ok(l),
            Ok(l) => Err(format!("leader is {:x}", l.member_id)),
            Err(e) => Err(e.to_string()),
        }
    })
    .await?;
    assert_eq!(new_leader.member_id, target);
    // Moving to the current leader is a no-op.
    admin.move_leader(target).await?;

    let unknown = admin
        .move_leader(0x1234)
        .await
        .err()
        .ok_or("moved to a stranger")?;
    assert!(
        matches!(unknown, EtcdError::LeadershipTransferRefused { .. }),
        "{unknown:?}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nothing_reachable_is_an_observation_and_a_typed_error() -> TestResult {
    let endpoints = vec![
        format!("http://127.0.0.1:{}", free_port()),
        format!("http://127.0.0.1:{}", free_port()),
    ];
    let observed = observe(endpoints.clone(), settings()).await;
    assert!(!observed.quorum_reachable);
    assert!(observed.members.is_empty() && observed.cluster_id.is_none());
    assert_eq!(observed.endpoints.len(), 2);
    // Refused at once, each: no request deadline waited for.
    for endpoint in &observed.endpoints {
        match &endpoint.health {
            MemberHealth::Unreachable(why) => assert!(!why.contains("timed out"), "{why}"),
            other => panic!("expected {} unreachable, got {other:?}", endpoint.endpoint),
        }
    }

    let admin = EtcdAdmin::new(endpoints, settings())?;
    let error = admin.member_list().await.err().ok_or("listed nothing")?;
    assert_eq!(error.category(), ErrorCategory::Unreachable, "{error:?}");

    let none = EtcdAdmin::new(Vec::<String>::new(), settings())
        .err()
        .ok_or("no endpoints")?;
    assert_eq!(none.category(), ErrorCategory::Invalid);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_of_another_cluster_is_reported_as_foreign() -> TestResult {
    let cluster = start_cluster(3).await;
    let stranger = start_cluster(1).await;
    let stranger_url = stranger.members[0].client_url.clone();
    let mut endpoints = cluster.endpoints();
    endpoints.push(stranger_url.clone());

    let observed = observe(endpoints, settings()).await;
    assert!(observed.quorum_reachable);
    assert_eq!(observed.members.len(), 3, "the stranger is not a member");
    let foreign: Vec<&str> = observed
        .foreign_endpoints()
        .map(|e| e.endpoint.as_str())
        .collect();
    assert_eq!(foreign, [stranger_url.as_str()]);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn raft_log_advances_without_touching_the_keyspace() -> TestResult {
    let cluster = start_cluster(3).await;
    let admin = cluster.admin();
    let leader = admin.find_leader().await?;
    let before = admin.status(&leader.endpoint).await?;
    admin.append_log_entries().await?;
    let after = admin.status(&leader.endpoint).await?;
    assert!(
        after.raft_index >= before.raft_index + 2,
        "raft index {} -> {}",
        before.raft_index,
        after.raft_index
    );
    // No key written: the key-value revision is unchanged.
    assert_eq!(after.revision, before.revision);
    Ok(())
}

// ---------------------------------------------------------------------------
// Damaged data (rule 15): etcd's own corruption checks, with exactly the
// flags every member Pod gets.

/// The byte every value written by [`write_values`] is made of, so the
/// values can be found in a member's `member/snap/db`.
const VALUE_BYTE: u8 = b'Z';
/// Each value spans several bbolt pages (4 KiB).
const VALUE_LEN: usize = 32 * 1024;

/// The flags of [`etcd_operator::resources::feature_and_corruption_check_flags`],
/// as every member's `etcd_args` carries them.
fn corruption_check_flags() -> Vec<String> {
    etcd_operator::resources::feature_and_corruption_check_flags()
}

/// Starts three members with the corruption-check flags of the member Pods.
async fn start_checked_cluster() -> LocalCluster {
    let flags = corruption_check_flags();
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    start_cluster_with(3, &flags).await
}

/// Writes `count` keys of [`VALUE_LEN`] bytes of [`VALUE_BYTE`].
async fn write_values(cluster: &LocalCluster, count: usize) -> TestResult {
    let mut client = cluster.client().await;
    for i in 0..count {
        client
            .put(format!("value-{i:04}"), vec![VALUE_BYTE; VALUE_LEN], None)
            .await?;
    }
    Ok(())
}

/// The index of a member that is not the leader.
async fn a_follower(cluster: &LocalCluster) -> Result<usize, Box<dyn std::error::Error>> {
    let leader = cluster.admin().find_leader().await?;
    Ok(cluster
        .members
        .iter()
        .position(|m| m.client_url != leader.endpoint)
        .ok_or("no follower")?)
}

/// The offsets of the middle of every page-long (4 KiB) run of
/// [`VALUE_BYTE`] in a member's database file: inside the values' pages,
/// away from bbolt's meta, branch pages and page headers.
fn value_middles(data_dir: &std::path::Path) -> std::io::Result<Vec<u64>> {
    let bytes = std::fs::read(data_dir.join("member/snap/db"))?;
    let mut middles = Vec::new();
    let mut at = 0;
    while at < bytes.len() {
        let run = bytes[at..].iter().take_while(|b| **b == VALUE_BYTE).count();
        if run >= 4096 {
            middles.push((at + run / 2) as u64);
        }
        at += run.max(1);
    }
    Ok(middles)
}

/// Damages the values in a member's database file as a failing disk
/// would, the way `etcd-lab volume corrupt` inverts bytes of it: one byte
/// inverted in the middle of every value run ([`value_middles`]), so the
/// file still opens and only the values differ. Written in place, at the
/// bytes' offsets, as a running member's memory map of the file sees it.
/// Returns how many bytes were inverted.
fn damage_values(data_dir: &std::path::Path) -> std::io::Result<usize> {
    use std::os::unix::fs::FileExt;
    let middles = value_middles(data_dir)?;
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(data_dir.join("member/snap/db"))?;
    for middle in &middles {
        file.write_at(&[!VALUE_BYTE], *middle)?;
    }
    file.sync_all()?;
    Ok(middles.len())
}

/// A follower that restarts on a database whose values were damaged while
/// it was stopped is refused by etcd's initial corruption check: it
/// compares its keyspace hash with its peers' at its revision and exits
/// before it serves anything. The operator sees it unreachable, the two
/// others keep quorum and no alarm is raised (the member never joined).
/// Without `InitialCorruptCheck` the member starts and serves its damaged
/// values.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_restarted_on_damaged_values_refuses_to_start() -> TestResult {
    let mut cluster = start_checked_cluster().await;
    write_values(&cluster, 64).await?;
    let follower = a_follower(&cluster).await?;
    let name = cluster.members[follower].name.clone();

    cluster.members[follower]
        .stop(Duration::from_secs(30))
        .await?;
    let inverted = damage_values(&cluster.members[follower].data_dir)?;
    assert!(inverted >= 64, "only {inverted} value runs found in the db");
    let initial = initial_cluster(cluster.members.iter());
    let token = cluster.token.clone();
    cluster.members[follower].start(&initial, "existing", &token)?;

    eventually("the damaged member exits", READY_TIMEOUT, || {
        let exited = cluster.members[follower].has_exited();
        async move { if exited { Ok(()) } else { Err("still runs") } }
    })
    .await
    .map_err(|e| format!("{e}\n{}", cluster.logs()))?;
    let log = std::fs::read_to_string(&cluster.members[follower].log)?;
    assert!(
        log.contains("found data inconsistency with peers"),
        "{}",
        cluster.members[follower].log_tail()
    );

    let observed = observe_until(&cluster.endpoints(), "the damaged member is down", |o| {
        o.member_named(&name)
            .is_some_and(|m| matches!(m.health, MemberHealth::Unreachable(_)))
    })
    .await?;
    assert!(observed.quorum_reachable, "{:?}", observed.quorum_error);
    assert_eq!(observed.healthy_voters(), 2);
    for (_, status) in cluster.admin().statuses().await {
        if let Ok(status) = status {
            assert!(parse_alarms(&status.errors).is_empty(), "{status:?}");
        }
    }
    Ok(())
}

/// Values damaged under a running follower (its memory map sees the file's
/// bytes) are found by etcd's compaction hash check: the next compaction
/// hashes the damaged values on the follower, the leader compares the
/// hashes within `--compact-hash-check-time` and raises CORRUPT naming the
/// follower, which the operator reads from every member's status (and
/// every member then reports itself unhealthy). Without `CompactHashCheck`
/// no alarm is ever raised.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn values_damaged_under_a_running_follower_raise_corrupt_naming_it() -> TestResult {
    let cluster = start_checked_cluster().await;
    let (_, follower_id, alarmed) = corrupt_a_running_follower(&cluster).await?;
    assert_eq!(
        alarmed,
        [Alarm {
            member_id: follower_id,
            kind: AlarmKind::Corrupt
        }],
        "CORRUPT names the damaged follower, and only it"
    );
    let admin = cluster.admin();
    for member in &cluster.members {
        assert!(
            matches!(admin.local_health(&member.client_url).await, MemberHealth::Unhealthy(ref why) if why.contains("alarm:CORRUPT")),
            "{} is not reported unhealthy",
            member.name
        );
    }
    Ok(())
}

/// Damages the values under a running follower and compacts, then waits
/// for CORRUPT. Returns the follower's index and member ID, and the alarms
/// the members report.
async fn corrupt_a_running_follower(
    cluster: &LocalCluster,
) -> Result<(usize, u64, Vec<Alarm>), Box<dyn std::error::Error>> {
    write_values(cluster, 64).await?;
    let admin = cluster.admin();
    let follower = a_follower(cluster).await?;
    let follower_id = admin
        .status(&cluster.members[follower].client_url)
        .await?
        .member_id;
    // bbolt commits every 100 ms: the values are in the file after that.
    let data_dir = cluster.members[follower].data_dir.clone();
    eventually("the values are in the follower's db", READY_TIMEOUT, || {
        let found = value_middles(&data_dir).map_err(|e| e.to_string());
        async move {
            match found {
                Ok(middles) if middles.len() >= 64 => Ok(()),
                Ok(middles) => Err(format!("{} value runs", middles.len())),
                Err(e) => Err(e),
            }
        }
    })
    .await?;
    let inverted = damage_values(&data_dir)?;
    assert!(inverted >= 64, "only {inverted} value runs found in the db");

    // A compaction, as auto-compaction does every few minutes.
    let mut client = cluster.client().await;
    let revision = client
        .put("after-the-damage", "x", None)
        .await?
        .header()
        .ok_or("no header")?
        .revision();
    admin.compact(revision).await?;

    // The leader compares compaction hashes every minute.
    let alarmed = eventually(
        "CORRUPT naming the damaged follower",
        Duration::from_secs(150),
        || async {
            for (endpoint, status) in admin.statuses().await {
                let status = status.map_err(|e| format!("{endpoint}: {e}"))?;
                let alarms = parse_alarms(&status.errors);
                if alarms.iter().any(|a| a.kind == AlarmKind::Corrupt) {
                    return Ok(alarms);
                }
            }
            Err("no CORRUPT alarm".to_string())
        },
    )
    .await
    .map_err(|e| format!("{e}\n{}", cluster.logs()))?;
    Ok((follower, follower_id, alarmed))
}

/// What the operator relies on to rebuild a member that CORRUPT names
/// while it runs, on real etcd: under the alarm writes are refused but a
/// quorum read still answers; every member answers `HashKV` at one
/// revision, and only the named member's hash differs from the majority's;
/// the named member can be removed (and its process stops), after which
/// the alarm can be disarmed and the two others serve writes again, every
/// value intact.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_corrupt_names_can_be_removed_and_the_alarm_disarmed() -> TestResult {
    let mut cluster = start_checked_cluster().await;
    let (follower, follower_id, _) = corrupt_a_running_follower(&cluster).await?;
    let admin = cluster.admin();

    let observed = observe(cluster.endpoints(), settings()).await;
    assert!(
        observed.quorum_reachable,
        "a quorum read fails under CORRUPT: {:?}",
        observed.quorum_error
    );
    let mut client = cluster.client().await;
    let refused = client.put("under-corrupt", "x", None).await;
    assert!(
        refused
            .as_ref()
            .is_err_and(|e| e.to_string().contains("corrupt")),
        "a write under CORRUPT: {refused:?}"
    );

    let revision = observed
        .endpoints
        .iter()
        .filter_map(|e| e.status.as_ref().map(|s| s.revision))
        .min()
        .ok_or("no status")?;
    let mut hashes = Vec::new();
    for endpoint in observed.endpoints.iter() {
        let id = endpoint.status.as_ref().ok_or("no status")?.member_id;
        let hash = admin
            .keyspace_hash(&endpoint.endpoint, revision)
            .await
            .map_err(|e| e.to_string());
        hashes.push((id, hash));
    }
    let compared = etcd_operator::etcd::agreement::compare(&hashes);
    for (id, agreement) in &compared {
        use etcd_operator::etcd::agreement::Agreement;
        if *id == follower_id {
            assert!(
                matches!(agreement, Agreement::Disagrees { .. }),
                "the damaged member: {agreement:?}"
            );
        } else {
            assert_eq!(*agreement, Agreement::Agrees, "member {id:x}");
        }
    }

    admin.remove_member(follower_id).await?;
    eventually("the removed member stops", READY_TIMEOUT, || {
        let exited = cluster.members[follower].has_exited();
        async move { if exited { Ok(()) } else { Err("still runs") } }
    })
    .await
    .map_err(|e| format!("{e}\n{}", cluster.members[follower].log_tail()))?;

    let survivors: Vec<String> = cluster
        .members
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != follower)
        .map(|(_, m)| m.client_url.clone())
        .collect();
    let admin = EtcdAdmin::new(survivors.clone(), settings())?;
    admin
        .disarm(&Alarm {
            member_id: follower_id,
            kind: AlarmKind::Corrupt,
        })
        .await?;
    for endpoint in &survivors {
        assert_eq!(admin.local_health(endpoint).await, MemberHealth::Healthy);
    }
    let mut client = etcd_client::Client::connect(survivors, None).await?;
    client.put("after-the-disarm", "x", None).await?;
    let values = client
        .get("value-", Some(etcd_client::GetOptions::new().with_prefix()))
        .await?;
    assert_eq!(values.kvs().len(), 64);
    assert!(
        values
            .kvs()
            .iter()
            .all(|kv| kv.value().iter().all(|b| *b == VALUE_BYTE))
    );
    Ok(())
}
