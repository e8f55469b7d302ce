//! The baseline: member replacement done by hand on 3 etcd processes of the
//! pinned 3.6 set (the version the clusters run) on loopback. Per run: remove
//! a follower, delete its data, add a learner on an empty data dir, start it
//! with `--initial-cluster-state=existing`, time until it has applied up to
//! the leader's revision and index (etcd sending and applying a snapshot of
//! the database) and is promoted; then until it also serves clients.

use std::path::Path;
use std::time::{Duration, Instant};

use etcd_client::{Client, MemberAddOptions, PutOptions};
use serde_json::{Value, json};
use test_kit::TestResult;
use test_kit::e2e::etcd_at;
use test_kit::etcd_process::{EtcdProcess, initial_cluster};
use test_kit::figures::{mib, summary};
use test_kit::poll::wait_for_every;

use crate::fill::Filler;
use crate::probe;
use crate::trickle::Trickle;

const POLL: Duration = Duration::from_millis(200);
/// etcd refuses a membership change until the voters have been connected
/// for 5 s; each run starts after this.
const SETTLE: Duration = Duration::from_secs(6);

/// The replacement figures of a `size_mib` database, `runs` times.
pub async fn measure(size_mib: u64, runs: usize) -> TestResult<Value> {
    let dir = tempfile::tempdir()?;
    let mut members: Vec<EtcdProcess> = (0..3)
        .map(|i| local_etcd(dir.path(), &format!("m{i}")))
        .collect();
    let initial = initial_cluster(&members);
    for member in &mut members {
        member.start(&initial, "new", TOKEN)?;
    }
    let client = connect(&members).await?;

    let filled = Instant::now();
    let db_size = Filler::default()
        .fill_to(&client, i64::try_from(size_mib)? << 20)
        .await?;
    eprintln!(
        "etcd alone: filled to {:.0} MiB in {:.0} s",
        mib(db_size),
        filled.elapsed().as_secs_f64()
    );

    let mut runs_done = Runs::default();
    for run in 0..runs {
        if let Err(error) = replace_one(dir.path(), &mut members, run, &mut runs_done).await {
            return Ok(runs_done.into_json(db_size, Some(error.to_string())));
        }
    }
    Ok(runs_done.into_json(db_size, None))
}

/// The samples of the runs done so far.
#[derive(Default)]
struct Runs {
    /// From the add to a voter that has applied up to the target.
    total: Vec<f64>,
    /// From the add until the data has been applied (its metrics).
    applied: Vec<f64>,
    /// From applied to promoted.
    promote: Vec<f64>,
    /// From the add until it serves clients with the data.
    serving: Vec<f64>,
    snapshots_sent: Vec<u64>,
}

impl Runs {
    fn into_json(self, db_size: i64, error: Option<String>) -> Value {
        let mut value = summary(&self.total);
        value["applied"] = summary(&self.applied);
        value["promote"] = summary(&self.promote);
        value["serving"] = summary(&self.serving);
        value["snapshots_sent"] = json!(self.snapshots_sent);
        value["db_size_mib"] = json!(mib(db_size));
        if let Some(error) = error {
            value["error"] = json!(error);
        }
        value
    }
}

async fn replace_one(
    root: &Path,
    members: &mut [EtcdProcess],
    run: usize,
    runs: &mut Runs,
) -> TestResult {
    tokio::time::sleep(SETTLE).await;
    let endpoints: Vec<String> = members.iter().map(|m| m.client_url.clone()).collect();
    let (leader_id, target) = probe::leader(&endpoints).await?;
    let mut ids = Vec::new();
    for endpoint in &endpoints {
        ids.push(probe::member_id(&probe::status_at(endpoint).await?));
    }
    let followers: Vec<usize> = (0..members.len())
        .filter(|&i| ids[i] != leader_id)
        .collect();
    let victim = followers[run % followers.len()];
    let survivors: Vec<String> = (0..members.len())
        .filter(|&i| i != victim)
        .map(|i| members[i].client_url.clone())
        .collect();
    let mut client = etcd_at(survivors.clone()).await?;
    let _trickle = Trickle::start(client.clone());

    remove_member(&mut client, ids[victim]).await?;
    members[victim].kill();
    std::fs::remove_dir_all(&members[victim].data_dir)?;
    let snapshots_before = probe::snapshots_sent(&survivors).await?;

    let name = members[victim].name.clone();
    let mut fresh = local_etcd(root, &name);
    let started = Instant::now();
    let added = client
        .member_add(
            [fresh.peer_url.as_str()],
            Some(MemberAddOptions::new().with_is_learner()),
        )
        .await?;
    let id = added.member().ok_or("member add answered no member")?.id();
    let mut others: Vec<&EtcdProcess> = members.iter().filter(|m| m.name != name).collect();
    others.push(&fresh);
    let initial = initial_cluster(others);
    fresh.start(&initial, "existing", TOKEN)?;
    let timeout = Duration::from_secs(600);
    let metrics_url = fresh.metrics_url.as_deref().ok_or("no metrics URL")?;
    until(timeout, || {
        probe::applied_per_metrics(metrics_url, id, target)
    })
    .await?;
    let applied = started.elapsed().as_secs_f64();
    until(timeout, || promote(client.clone(), id)).await?;
    let total = started.elapsed().as_secs_f64();
    until(timeout, || probe::serving(&fresh.client_url, id, target)).await?;
    let serving = started.elapsed().as_secs_f64();
    let snapshots = probe::snapshots_sent(&survivors)
        .await?
        .saturating_sub(snapshots_before);
    eprintln!(
        "etcd alone run {run}: {name} applied in {applied:.2} s, voter in {total:.2} s, \
         serving in {serving:.2} s ({snapshots} snapshot(s) sent; leader at revision {})",
        target.revision
    );
    members[victim] = fresh;
    runs.total.push(total);
    runs.applied.push(applied);
    runs.promote.push(total - applied);
    runs.serving.push(serving);
    runs.snapshots_sent.push(snapshots);
    Ok(())
}

/// Removes member `id`, again while etcd refuses it as unsafe (a voter not
/// connected for long enough).
async fn remove_member(client: &mut Client, id: u64) -> TestResult {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        match client.member_remove(id).await {
            Ok(_) => return Ok(()),
            Err(error) if Instant::now() < deadline => {
                eprintln!("member remove {id:x}: {error}; again");
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
            Err(error) => return Err(format!("member remove {id:x}: {error}").into()),
        }
    }
}

/// One promote attempt: false while etcd says the learner is not ready.
async fn promote(mut client: Client, id: u64) -> TestResult<bool> {
    match client.member_promote(id).await {
        Ok(_) => Ok(true),
        Err(etcd_client::Error::GRpcStatus(status))
            if status.message().contains("in sync with leader") =>
        {
            Ok(false)
        }
        Err(error) => Err(error.into()),
    }
}

/// Polls `check` until it says true; its errors only mean "not yet".
async fn until<F, Fut>(timeout: Duration, check: F) -> TestResult
where
    F: FnMut() -> Fut,
    Fut: Future<Output = TestResult<bool>>,
{
    wait_for_every("the replacement step", timeout, POLL, check).await
}

/// A client on every member, once a write succeeds.
async fn connect(members: &[EtcdProcess]) -> TestResult<Client> {
    let endpoints: Vec<String> = members.iter().map(|m| m.client_url.clone()).collect();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let attempt = async {
            let mut client = etcd_at(endpoints.clone()).await?;
            client.put("/bench/ready", "x", None::<PutOptions>).await?;
            TestResult::Ok(client)
        };
        match attempt.await {
            Ok(client) => return Ok(client),
            Err(error) if Instant::now() > deadline => {
                return Err(format!("etcd alone never served a write: {error}").into());
            }
            Err(_) => tokio::time::sleep(POLL).await,
        }
    }
}

/// A member of the baseline on fresh ports, with a metrics URL and the
/// quota of the bench; its data dir is `root/<name>-<client port>`, apart
/// from an earlier member of the same name.
fn local_etcd(root: &Path, name: &str) -> EtcdProcess {
    let member = EtcdProcess::new(root, name)
        .with_metrics()
        .with_args(&["--quota-backend-bytes", &QUOTA_BYTES.to_string()]);
    let port = member.client_url.rsplit(':').next().unwrap_or_default();
    let data_dir = root.join(format!("{name}-{port}"));
    member.with_data_dir(&data_dir)
}

/// The cluster token of the baseline's members.
const TOKEN: &str = "bench-replacement";

/// The backend quota of both sides of the bench (4 GiB: room for 1 GiB).
pub const QUOTA_BYTES: i64 = 4 << 30;
