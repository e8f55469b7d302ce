//! The hosted control plane scenario: a tenant `kube-apiserver` storing in
//! an operator-managed cluster, a workload creating objects through it and
//! an informer watching them, through a majority loss and return, a member
//! replaced after its data was wiped, a rolling upgrade of etcd, and a
//! restore from a full backup into a new cluster that the tenant API server
//! moves to. After each: every object the tenant API server acknowledged is
//! listed (after the restore: every one written up to the backup's
//! reported revision, by the resource versions the tenant API server
//! returned, and none acknowledged after the backup finished). At the end: the
//! informer has listed again since the restore, and its cache is the API
//! server's list (it serves no stale object and misses none).

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use serde_json::json;
use test_kit::TestResult;
use test_kit::conditions::condition_true;
use test_kit::e2e::{Harness, cluster_spec_with};
use test_kit::poll::wait_for;

use super::objects::{Informer, ObjectWriter, listed};
use super::tenant::{self, TenantApiServer};

/// The tenant's etcd cluster.
pub const CLUSTER: &str = "tenant-etcd";
/// The cluster restored from its backup.
pub const RESTORED: &str = "tenant-etcd-restored";
/// The claim its backups go to.
const BACKUP_CLAIM: &str = "tenant-backups";
/// The etcd release it starts on, and the one it is upgraded to.
pub const FROM_VERSION: &str = "3.6.16";
/// The release of the upgrade.
pub const TO_VERSION: &str = "3.7.3";

/// One phase of the scenario.
#[derive(Debug, Clone)]
pub struct Phase {
    /// What was done.
    pub name: String,
    /// From the fault's start (its duration included) to the cluster
    /// Available and objects being acknowledged again.
    pub took: Duration,
    /// Objects acknowledged before the phase, and after it.
    pub acknowledged: (usize, usize),
    /// Objects listed after it (each acknowledged one among them).
    pub listed: usize,
}

/// What the scenario did.
#[derive(Debug, Clone, Default)]
pub struct HostedReport {
    /// Each phase.
    pub phases: Vec<Phase>,
    /// Objects acknowledged in all, creations that failed or timed out.
    pub acknowledged: usize,
    /// Creations whose outcome is unknown.
    pub failed: u64,
    /// Objects listed at the end.
    pub listed: usize,
    /// The informer's full lists (the first one included) and watch errors.
    pub informer_relists: u64,
    /// Errors the informer's watch met.
    pub informer_errors: u64,
    /// From the old tenant API server's stop to the end of the informer's
    /// list of the restored cluster.
    pub informer_relisted_after_move: Option<Duration>,
    /// Objects acknowledged after the backup had finished and before the
    /// tenant moved to the restored cluster: not restored, by design.
    pub lost_to_restore: Vec<String>,
    /// The revision of the backup the new cluster was restored from.
    pub restored_revision: i64,
    /// Objects written after that revision while the backup ran, and how
    /// many of them the restore holds (the reported revision is a lower
    /// bound of the snapshot's).
    pub written_during_backup: (usize, usize),
}

/// Runs the scenario on `h`.
pub async fn run(h: &mut Harness) -> TestResult<HostedReport> {
    let started = Instant::now();
    h.create_available(
        CLUSTER,
        tenant_spec(FROM_VERSION, json!({})),
        Duration::from_secs(300),
    )
    .await?;
    let identity = etcd_identity(h, CLUSTER).await?;
    let dir = std::env::temp_dir().join(format!("tenant-apiserver-{}", std::process::id()));
    let mut apiserver = TenantApiServer::start(h, CLUSTER, &dir).await?;
    apiserver.wait_ready(Duration::from_secs(180)).await?;
    eprintln!(
        "tenant API server ready at {} ({:?} after the start; log {})",
        apiserver.url(),
        started.elapsed(),
        apiserver.log.display()
    );
    let client = apiserver.client()?;
    let writer = ObjectWriter::start(client.clone());
    let informer = Informer::start(client.clone());
    progress(&writer, 50, Duration::from_secs(60)).await?;

    let mut report = HostedReport::default();
    // 1. A majority of etcd's nodes powered off, then back.
    let done = phase(
        &writer,
        &client,
        "majority of etcd's nodes down 30 s, then back",
        &report.lost_to_restore,
        majority_down(h, &writer),
    )
    .await?;
    report.phases.push(done);
    // 2. A member's data lost: replaced learner-first.
    let member = format!("{CLUSTER}-1");
    let old_id = identity.1.get(&member).map(|(id, _)| *id);
    let done = phase(
        &writer,
        &client,
        "a member's volume wiped: replaced",
        &report.lost_to_restore,
        wipe_member(h, &member, old_id),
    )
    .await?;
    report.phases.push(done);
    // 3. A rolling upgrade of etcd.
    let done = phase(
        &writer,
        &client,
        &format!("rolling upgrade {FROM_VERSION} -> {TO_VERSION}"),
        &report.lost_to_restore,
        rolling_upgrade(h),
    )
    .await?;
    report.phases.push(done);

    // 4. A restore from backup: a full backup of the tenant's cluster, then
    // a new cluster from it and the tenant API server moved there (as a
    // person recovering the tenant would do it).
    let phase = Instant::now();
    let before = writer.acknowledged().len();
    let restore = restore_from_backup(h, &writer, &mut apiserver, &dir).await?;
    report.lost_to_restore = restore.after_backup.clone();
    report
        .lost_to_restore
        .extend(restore.during_backup.iter().cloned());
    report.phases.push(
        after_phase(
            &writer,
            &client,
            "restore from a full backup into a new cluster",
            phase,
            before,
            &report.lost_to_restore,
        )
        .await?,
    );
    let list = listed(&client).await?;
    let lost: Vec<&String> = restore
        .up_to_backup
        .iter()
        .filter(|n| !list.contains(*n))
        .collect();
    if !lost.is_empty() {
        return Err(format!(
            "{} objects written at or before the backup's revision {} are not in the restored cluster: {:?}",
            lost.len(),
            restore.revision,
            &lost[..lost.len().min(20)]
        )
        .into());
    }
    let newer: Vec<&String> = restore
        .after_backup
        .iter()
        .filter(|n| list.contains(*n))
        .collect();
    if !newer.is_empty() {
        return Err(format!(
            "{} objects acknowledged after the backup (revision {}) had finished are in the cluster restored from it: {:?}",
            newer.len(),
            restore.revision,
            &newer[..newer.len().min(20)]
        )
        .into());
    }
    let during_restored = restore
        .during_backup
        .iter()
        .filter(|n| list.contains(*n))
        .count();
    eprintln!(
        "restored from the backup reporting revision {}: every one of the {} objects written up to it is there; of the {} written after it while the backup ran, {} are there; none of the {} acknowledged after it finished",
        restore.revision,
        restore.up_to_backup.len(),
        restore.during_backup.len(),
        during_restored,
        restore.after_backup.len()
    );
    report.written_during_backup = (restore.during_backup.len(), during_restored);
    report.restored_revision = restore.revision;

    // The end: the writer stops, the informer must catch up with the list.
    let failed = writer.failed();
    let acknowledged = writer.stop().await;
    let list = listed(&client).await?;
    let missing: Vec<&String> = acknowledged
        .iter()
        .filter(|n| !list.contains(*n) && !report.lost_to_restore.contains(*n))
        .collect();
    if !missing.is_empty() {
        return Err(format!(
            "{} acknowledged objects are gone: {:?}",
            missing.len(),
            &missing[..missing.len().min(20)]
        )
        .into());
    }
    // The informer's watch resumes from a revision of the old cluster,
    // which the restored one has compacted away (its revisions were bumped
    // past it): the API server answers 410 Gone and the informer must list
    // again, dropping what the restore does not hold. It may first back off
    // (up to 30 s a retry) while the new API server's cache fills.
    let caught_up = wait_for(
        "the informer to list the restored cluster and its cache to be the API server's list",
        Duration::from_secs(300),
        || async {
            Ok(informer.relisted_after(restore.moved_at).is_some() && informer.cache() == list)
        },
    )
    .await;
    if let Err(error) = caught_up {
        let cache = informer.cache();
        let stale: BTreeSet<&String> = cache.difference(&list).collect();
        let unseen: BTreeSet<&String> = list.difference(&cache).collect();
        return Err(format!(
            "{error}: listed since the move: {:?}; the cache holds {} objects the API server does not list ({:?}) and misses {}; watch errors {} (last: {:?})",
            informer.relisted_after(restore.moved_at),
            stale.len(),
            stale.iter().take(10).collect::<Vec<_>>(),
            unseen.len(),
            informer.errors(),
            informer.last_error(),
        )
        .into());
    }
    let same = etcd_identity(h, CLUSTER).await?;
    if same.0 != identity.0 {
        return Err(format!("the cluster ID changed: {:x} -> {:x}", identity.0, same.0).into());
    }
    report.acknowledged = acknowledged.len();
    report.failed = failed;
    report.listed = list.len();
    report.informer_relists = informer.relists();
    report.informer_errors = informer.errors();
    report.informer_relisted_after_move = informer.relisted_after(restore.moved_at);
    informer.stop();
    apiserver.stop().await;
    Ok(report)
}

/// Cluster ID and members (name -> (ID, learner)), asked of etcd over TLS
/// with the users' client certificate.
async fn etcd_identity(
    h: &Harness,
    cluster: &str,
) -> TestResult<(u64, BTreeMap<String, (u64, bool)>)> {
    let mut etcd = test_kit::tls_client::user_client(h, cluster).await?;
    let list = etcd.member_list().await?;
    Ok((
        list.header().map(|h| h.cluster_id()).unwrap_or_default(),
        list.members()
            .iter()
            .map(|m| (m.name().to_owned(), (m.id(), m.is_learner())))
            .collect(),
    ))
}

/// Waits until `at_least` more objects are acknowledged than now.
async fn progress(writer: &ObjectWriter, at_least: usize, timeout: Duration) -> TestResult {
    let from = writer.acknowledged().len();
    wait_for(
        &format!("{at_least} more objects acknowledged by the tenant API server"),
        timeout,
        || async { Ok(writer.acknowledged().len() >= from + at_least) },
    )
    .await
}

/// Runs one phase: `fault` (which waits for the cluster to be Available
/// again), then [`after_phase`]'s checks.
async fn phase(
    writer: &ObjectWriter,
    client: &kube::Client,
    name: &str,
    lost_to_restore: &[String],
    fault: impl std::future::Future<Output = TestResult<()>>,
) -> TestResult<Phase> {
    let started = Instant::now();
    let before = writer.acknowledged().len();
    fault.await?;
    after_phase(writer, client, name, started, before, lost_to_restore).await
}

/// Two of the three etcd nodes powered off for 30 s, then on again.
async fn majority_down(h: &Harness, writer: &ObjectWriter) -> TestResult<()> {
    let before = writer.acknowledged().len();
    let nodes = vec![
        h.node_of(&format!("{CLUSTER}-1")).await?,
        h.node_of(&format!("{CLUSTER}-2")).await?,
    ];
    for node in &nodes {
        h.lab.node_stop(node)?;
    }
    tokio::time::sleep(Duration::from_secs(30)).await;
    let during = writer.acknowledged().len();
    for node in &nodes {
        h.lab.node_start(node)?;
    }
    eprintln!(
        "majority down 30 s: {} objects acknowledged meanwhile (quorum lost), {} creations failed so far",
        during.saturating_sub(before),
        writer.failed()
    );
    h.wait_available(CLUSTER, 3, Duration::from_secs(300)).await
}

/// `member`'s volume wiped and its etcd killed: the operator replaces it
/// (learner first) by a new voter with another ID than `old_id`.
async fn wipe_member(h: &Harness, member: &str, old_id: Option<u64>) -> TestResult<()> {
    h.lab
        .volume_wipe(&h.namespace, &format!("data-{member}"))
        .await?;
    h.lab.pod_kill(&h.namespace, member, Some("etcd")).await?;
    wait_for(
        &format!("{member} replaced by a new voter"),
        Duration::from_secs(300),
        || async {
            let now = etcd_identity(h, CLUSTER).await?;
            let replaced = now
                .1
                .get(member)
                .is_some_and(|(id, learner)| Some(*id) != old_id && !learner);
            Ok(replaced && now.1.values().filter(|(_, learner)| !learner).count() == 3)
        },
    )
    .await?;
    h.wait_available(CLUSTER, 3, Duration::from_secs(300)).await
}

/// The cluster upgraded from [`FROM_VERSION`] to [`TO_VERSION`], member by
/// member.
async fn rolling_upgrade(h: &Harness) -> TestResult<()> {
    h.patch_spec(CLUSTER, json!({ "version": TO_VERSION }))
        .await?;
    wait_for(
        &format!("every member on {TO_VERSION}"),
        Duration::from_secs(600),
        || async {
            let status = h.status(CLUSTER).await?;
            Ok(status.version.as_deref() == Some(TO_VERSION)
                && status.updated_members == 3
                && status.ready_members == 3
                && condition_true(&status, "Available"))
        },
    )
    .await
}

/// After a phase's fault: objects acknowledged again, and every object
/// acknowledged so far listed.
async fn after_phase(
    writer: &ObjectWriter,
    client: &kube::Client,
    name: &str,
    started: Instant,
    before: usize,
    lost_to_restore: &[String],
) -> TestResult<Phase> {
    progress(writer, 20, Duration::from_secs(180)).await?;
    let took = started.elapsed();
    let acknowledged = writer.acknowledged();
    let list = listed(client).await?;
    let missing: Vec<&String> = acknowledged
        .iter()
        .filter(|n| !list.contains(*n) && !lost_to_restore.contains(*n))
        .collect();
    if !missing.is_empty() {
        return Err(format!(
            "after \"{name}\": {} acknowledged objects are not listed: {:?}",
            missing.len(),
            &missing[..missing.len().min(20)]
        )
        .into());
    }
    eprintln!(
        "{name}: objects acknowledged again {took:.1?} after the fault; all {} acknowledged objects listed",
        acknowledged.len()
    );
    Ok(Phase {
        name: name.to_owned(),
        took,
        acknowledged: (before, acknowledged.len()),
        listed: list.len(),
    })
}

/// What a restore did: the objects the tenant API server acknowledged on
/// the old cluster, by when they were written.
///
/// The backup reports the revision of the member it chose, read just
/// before the snapshot began: a lower bound of what the snapshot holds
/// (writes between that read and the snapshot are in it). So: written at
/// or before the reported revision, an object must be restored;
/// acknowledged after the backup had finished, it must not be; in
/// between, either.
struct Restore {
    /// Written at or before the reported revision: must be restored.
    up_to_backup: Vec<String>,
    /// Written after it but acknowledged before the backup finished.
    during_backup: Vec<String>,
    /// Acknowledged after the backup finished: must not be restored.
    after_backup: Vec<String>,
    revision: i64,
    /// When the old tenant API server stopped: every list the informer
    /// finished later came from the restored cluster.
    moved_at: Instant,
}

/// The spec of a tenant cluster: mutual TLS with the API server's own
/// client certificate, the API server let in from outside the Pod network.
fn tenant_spec(version: &str, more: serde_json::Value) -> serde_json::Value {
    let mut spec = cluster_spec_with(
        3,
        "lab-network",
        json!({
            "version": version,
            "tls": { "builtIn": {}, "clientCertificates": [{ "name": tenant::CLIENT_NAME }] },
            "networkPolicy": { "clientsFrom": [
                { "ipBlock": { "cidr": format!("{}/32", etcd_lab_node::network::addressing::client_ip()) } }
            ] },
        }),
    );
    if let (Some(spec), serde_json::Value::Object(more)) = (spec.as_object_mut(), more) {
        spec.extend(more);
    }
    spec
}

/// A full backup of the tenant's cluster to a claim, then a new cluster
/// restored from it, and the tenant API server started again on it.
async fn restore_from_backup(
    h: &Harness,
    writer: &ObjectWriter,
    apiserver: &mut TenantApiServer,
    dir: &std::path::Path,
) -> TestResult<Restore> {
    use etcd_operator::api::{BackupPhase, EtcdBackup};

    h.create_claim(BACKUP_CLAIM).await?;
    let destination =
        json!({ "persistentVolumeClaim": { "claimName": BACKUP_CLAIM, "path": "etcd" } });
    h.create_backup_to_claim("tenant-full", CLUSTER, BACKUP_CLAIM, Some("etcd"))
        .await?;
    let backups: kube::Api<EtcdBackup> = kube::Api::namespaced(h.client.clone(), &h.namespace);
    wait_for("the full backup", Duration::from_secs(180), || async {
        let status = backups.get("tenant-full").await?.status.unwrap_or_default();
        if status.phase == Some(BackupPhase::Failed) {
            return Err(format!("the backup failed: {:?}", status.error).into());
        }
        Ok(status.phase == Some(BackupPhase::Succeeded))
    })
    .await?;
    let finished = writer.acknowledged_at().len();
    let revision = backups
        .get("tenant-full")
        .await?
        .status
        .and_then(|s| s.revision)
        .unwrap_or_default();
    eprintln!("full backup at revision {revision}");
    // A little more traffic the backup does not hold, then the move.
    progress(writer, 20, Duration::from_secs(60)).await?;
    apiserver.stop_in_place().await;
    let moved_at = Instant::now();
    let at = u64::try_from(revision).unwrap_or(0);
    let acknowledged = writer.acknowledged_at();
    let (mut up_to_backup, mut during_backup, mut after_backup) = (vec![], vec![], vec![]);
    for (index, (name, written)) in acknowledged.into_iter().enumerate() {
        if written <= at {
            up_to_backup.push(name);
        } else if index < finished {
            during_backup.push(name);
        } else {
            after_backup.push(name);
        }
    }
    h.create_cluster(
        RESTORED,
        tenant_spec(
            TO_VERSION,
            json!({ "bootstrap": { "fromBackup": { "destination": destination, "clusterName": CLUSTER } } }),
        ),
    )
    .await?;
    h.wait_available(RESTORED, 3, Duration::from_secs(300))
        .await?;
    *apiserver = TenantApiServer::start(h, RESTORED, dir).await?;
    apiserver.wait_ready(Duration::from_secs(180)).await?;
    Ok(Restore {
        up_to_backup,
        during_backup,
        after_backup,
        revision,
        moved_at,
    })
}
