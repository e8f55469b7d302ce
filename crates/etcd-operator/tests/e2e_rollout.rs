//! End to end on the lab: rolling changes under a continuous writer on a
//! 3-member cluster.
//!
//! 1. Upgrade 3.6 → 3.7: every member ends on 3.7 (as etcd itself
//!    reports), with the same cluster ID and member IDs.
//! 2. Downgrade 3.7 → 3.6 through etcd's downgrade API: enabled before the
//!    first member runs 3.6, every member ends on 3.6 with its data's
//!    storage version 3.6.
//! 3. A tuning change and an image override (another registry's image of
//!    the same release) roll together; the node of a member not yet replaced stops
//!    while the first member is being replaced: once that member is back
//!    the rollout halts (no other member is replaced while one is down) and
//!    resumes when the node returns.
//!
//! 4. `storage.size` grows 1Gi → 2Gi: every PVC is expanded (the lab's
//!    volumes are ext4 filesystems of their size, grown offline), each
//!    member restarts once, one at a time, and the filesystem its Pod mounts
//!    has the new size.
//!
//! Throughout, a watcher asks each member Pod's etcd for its status once a
//! second and fails on two members not answering (or answering without a
//! leader) at once twice in a row, except while the test itself holds a node
//! stopped; Pod readiness is not the oracle (a leadership transfer makes
//! every member unready for a moment while quorum holds). At the end every
//! acknowledged write is there.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Container, Pod};
use kube::api::ListParams;
use kube::{Api, ResourceExt};
use serde_json::json;
use test_kit::TestResult;
use test_kit::conditions::{condition_true, pod_ready};
use test_kit::e2e::{Harness, Identity, cluster_spec_with};
use test_kit::poll::wait_for;
use tokio::sync::Mutex;

const NAME: &str = "rolling";
const PREFIX: &str = "/rolling/";
const TEMPLATE_HASH: &str = "durable-etcd.io/pod-template-hash";
/// The same release from another registry (`spec.image`).
const MIRROR_IMAGE: &str = "quay.io/coreos/etcd:v3.6.16";

#[test]
fn rolling_changes_keep_quorum_identity_and_every_write() {
    test_kit::e2e::run("rollout", env!("CARGO_BIN_EXE_etcd-operator"), |h| {
        Box::pin(scenario(h))
    });
}

#[derive(Default, Debug)]
struct Watch {
    polls: usize,
    most_down: usize,
    violation: Option<String>,
    /// The test stopped a node on purpose: two members down is the fault,
    /// not the operator's doing.
    node_stopped: bool,
}

async fn scenario(h: &mut Harness) -> TestResult {
    h.create_available(
        NAME,
        cluster_spec_with(3, "lab-network", json!({ "version": "3.6.16" })),
        Duration::from_secs(180),
    )
    .await?;
    let identity = h.identity().await?;
    let stop = Arc::new(AtomicBool::new(false));
    let writer = h.start_writer(PREFIX);
    let watch = Arc::new(Mutex::new(Watch::default()));
    let watcher = tokio::spawn(watch_pods(h.pods.clone(), stop.clone(), watch.clone()));

    let outcome = steps(h, &identity, &watch).await;
    stop.store(true, Ordering::SeqCst);
    let ledger = writer.stop().await;
    let _ = watcher.await;
    outcome?;
    let watch = watch.lock().await;
    eprintln!(
        "watcher: {} polls, at most {} member(s) not serving at once outside the node stop",
        watch.polls, watch.most_down
    );
    if let Some(violation) = &watch.violation {
        return Err(violation.clone().into());
    }
    ledger.verify(h, 50).await?;
    Ok(())
}

async fn steps(h: &mut Harness, identity: &Identity, watch: &Arc<Mutex<Watch>>) -> TestResult {
    // 1. Upgrade.
    let started = Instant::now();
    h.patch_spec(NAME, json!({ "version": "3.7.3" })).await?;
    rolled_to(h, "3.7.3", "3.7.0").await?;
    same_identity(h, identity).await?;
    eprintln!("upgraded to 3.7.3 in {:?}", started.elapsed());
    check_watch(watch).await?;

    // 2. Downgrade through etcd's downgrade API.
    let started = Instant::now();
    h.patch_spec(NAME, json!({ "version": "3.6.16" })).await?;
    rolled_to(h, "3.6.16", "3.6.0").await?;
    same_identity(h, identity).await?;
    let enabled = h
        .events_about(NAME)
        .await?
        .iter()
        .any(|e| e.reason.as_deref() == Some("DowngradeEnabled"));
    if !enabled {
        return Err("no DowngradeEnabled Event: etcd's downgrade was not used".into());
    }
    eprintln!("downgraded to 3.6.16 in {:?}", started.elapsed());
    check_watch(watch).await?;

    // 3. A tuning change, with a node stopped midway: while the first
    // member is being replaced (the operator waits for it anyway, so the
    // stop cannot race a decision already taken).
    let before = templates(&h.pods).await?;
    h.patch_spec(
        NAME,
        json!({ "etcd": { "snapshotCount": 5000 }, "image": MIRROR_IMAGE }),
    )
    .await?;
    let first = wait_first_replacing(h, &before).await?;
    let (outdated, node) = outdated_member_node(h, &before, &first).await?;
    eprintln!("{first} is being replaced; stopping node {node} of {outdated}, not replaced yet");
    watch.lock().await.node_stopped = true;
    h.lab.node_stop(&node)?;
    let halted = halted_while_stopped(h, &before, &first).await;
    h.lab.node_start(&node)?;
    halted?;
    let started = Instant::now();
    wait_for(
        "every member on the new template",
        Duration::from_secs(360),
        || async {
            let status = h.status(NAME).await?;
            let args_ok = every_etcd(&h.pods, |c| {
                c.image.as_deref() == Some(MIRROR_IMAGE)
                    && c.args
                        .iter()
                        .flatten()
                        .any(|a| a == "--snapshot-count=5000")
            })
            .await?;
            Ok(status.updated_members == 3
                && args_ok
                && condition_true(&status, "Available")
                && status.ready_members == 3)
        },
    )
    .await?;
    eprintln!(
        "the rollout resumed when {node} came back and finished in {:?}",
        started.elapsed()
    );
    watch.lock().await.node_stopped = false;
    same_identity(h, identity).await?;
    check_watch(watch).await?;

    // 4. Volume expansion.
    let started = Instant::now();
    h.patch_spec(NAME, json!({ "storage": { "size": "2Gi" } }))
        .await?;
    wait_for("every volume at 2Gi", Duration::from_secs(420), || async {
        let status = h.status(NAME).await?;
        let claims = h.pvcs.list(&ListParams::default()).await?.items;
        let grown = claims.len() == 3
            && claims.iter().all(|c| {
                c.status
                    .as_ref()
                    .and_then(|s| s.capacity.as_ref()?.get("storage"))
                    .is_some_and(|q| q.0 == "2Gi")
            });
        Ok(grown
            && status
                .members
                .iter()
                .all(|m| m.volume_size.as_deref() == Some("2Gi"))
            && status.ready_members == 3
            && condition_true(&status, "Available"))
    })
    .await?;
    for claim in h.pvcs.list(&ListParams::default()).await?.items {
        let dir = h.lab.volume_dir(&h.namespace, &claim.name_any()).await?;
        let bytes = filesystem_size(&dir)?;
        eprintln!("{}: its filesystem has {bytes} bytes", claim.name_any());
        if bytes < 1900 * 1024 * 1024 {
            return Err(format!(
                "{}: the filesystem still has {bytes} bytes",
                claim.name_any()
            )
            .into());
        }
    }
    eprintln!("every volume grew to 2Gi in {:?}", started.elapsed());
    same_identity(h, identity).await?;
    check_watch(watch).await?;
    Ok(())
}

/// The total bytes of the filesystem mounted at `dir` (`df`).
fn filesystem_size(dir: &std::path::Path) -> TestResult<u64> {
    let out = std::process::Command::new("df")
        .args(["-B1", "--output=size"])
        .arg(dir)
        .output()?;
    let text = String::from_utf8_lossy(&out.stdout);
    Ok(text
        .lines()
        .nth(1)
        .ok_or_else(|| format!("df printed nothing for {}", dir.display()))?
        .trim()
        .parse()?)
}

/// Waits until every member reports `version` with data of
/// `storage_version`, the status says so and nothing is in progress.
async fn rolled_to(h: &Harness, version: &str, storage_version: &str) -> TestResult {
    let result = wait_for(
        &format!("every member on {version}"),
        Duration::from_secs(420),
        || async {
            let status = h.status(NAME).await?;
            if status.version.as_deref() != Some(version)
                || status.updated_members != 3
                || status.ready_members != 3
                || !condition_true(&status, "Available")
            {
                return Ok(false);
            }
            let reported = member_versions(h).await?;
            Ok(reported.len() == 3
                && reported
                    .values()
                    .all(|(v, s)| v == version && s == storage_version))
        },
    )
    .await;
    if result.is_err() {
        eprintln!(
            "status: {:#?}\nmembers report: {:?}",
            h.status(NAME).await?,
            member_versions(h).await
        );
    }
    result
}

/// What each member's own endpoint reports: (server version, storage
/// version), by endpoint.
async fn member_versions(h: &Harness) -> TestResult<BTreeMap<String, (String, String)>> {
    let mut out = BTreeMap::new();
    for endpoint in h.endpoints().await? {
        let mut client = test_kit::e2e::etcd_at(vec![endpoint.clone()]).await?;
        let status = client.status().await?;
        out.insert(
            endpoint,
            (
                status.version().to_string(),
                status.storage_version().to_string(),
            ),
        );
    }
    Ok(out)
}

async fn same_identity(h: &Harness, before: &Identity) -> TestResult {
    let now = h.identity().await?;
    if now.cluster_id != before.cluster_id || now.members != before.members {
        return Err(format!("identity changed: {before:x?} → {now:x?}").into());
    }
    Ok(())
}

/// Pod name → template hash of the member Pods.
async fn templates(pods: &Api<Pod>) -> TestResult<BTreeMap<String, String>> {
    Ok(pods
        .list(&ListParams::default())
        .await?
        .items
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .filter_map(|p| Some((p.name_any(), p.annotations().get(TEMPLATE_HASH)?.clone())))
        .collect())
}

/// Waits until the first member is being replaced: its Pod terminating or
/// recreated on the new template, not Ready yet. Returns its name.
async fn wait_first_replacing(
    h: &Harness,
    before: &BTreeMap<String, String>,
) -> TestResult<String> {
    let found = Mutex::new(None);
    wait_for(
        "the first member being replaced",
        Duration::from_secs(180),
        || async {
            for pod in h.pods.list(&ListParams::default()).await?.items {
                let hash = pod.annotations().get(TEMPLATE_HASH);
                let terminating = pod.metadata.deletion_timestamp.is_some();
                let recreated = hash.is_some() && hash != before.get(&pod.name_any());
                if terminating || recreated {
                    *found.lock().await = Some(pod.name_any());
                    return Ok(true);
                }
            }
            Ok(false)
        },
    )
    .await?;
    found
        .into_inner()
        .ok_or_else(|| "no member being replaced".into())
}

/// A member still on the old template, and its node.
async fn outdated_member_node(
    h: &Harness,
    before: &BTreeMap<String, String>,
    first: &str,
) -> TestResult<(String, String)> {
    let now = templates(&h.pods).await?;
    let outdated = now
        .iter()
        .find(|(name, hash)| name.as_str() != first && before.get(*name) == Some(*hash))
        .map(|(name, _)| name.clone())
        .ok_or("no member left on the old template")?;
    let node = h.node_of(&outdated).await?;
    Ok((outdated, node))
}

/// While the node is stopped: the first member comes back on the new
/// template, and for 40 s after that no other member is replaced and status
/// says the rollout waits.
async fn halted_while_stopped(
    h: &Harness,
    before: &BTreeMap<String, String>,
    first: &str,
) -> TestResult {
    let no_other_replaced = || async {
        let now = templates(&h.pods).await?;
        let replaced: Vec<String> = now
            .iter()
            .filter(|(name, hash)| before.get(*name) != Some(*hash))
            .map(|(name, _)| name.clone())
            .filter(|name| name != first)
            .collect();
        let terminating: Vec<String> = h
            .pods
            .list(&ListParams::default())
            .await?
            .items
            .iter()
            .filter(|p| p.metadata.deletion_timestamp.is_some() && p.name_any() != first)
            .map(|p| p.name_any())
            .collect();
        if replaced.is_empty() && terminating.is_empty() {
            TestResult::Ok(())
        } else {
            Err(format!(
                "another member was replaced while a node was stopped: replaced {replaced:?}, terminating {terminating:?}"
            )
            .into())
        }
    };
    wait_for(
        &format!("{first} back on the new template"),
        Duration::from_secs(180),
        || async {
            no_other_replaced().await?;
            let pod = h.pods.get(first).await?;
            Ok(pod.metadata.deletion_timestamp.is_none()
                && pod.annotations().get(TEMPLATE_HASH) != before.get(first)
                && pod_ready(&pod))
        },
    )
    .await?;
    let until = Instant::now() + Duration::from_secs(40);
    while Instant::now() < until {
        no_other_replaced().await?;
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    let status = h.status(NAME).await?;
    let progressing = status
        .conditions
        .iter()
        .find(|c| c.type_ == "Progressing")
        .map(|c| format!("{} {}: {}", c.status, c.reason, c.message))
        .unwrap_or_default();
    eprintln!("while the node was stopped: Progressing {progressing}");
    if !progressing.contains("RollingOut") {
        return Err(format!("status does not say the rollout waits: {progressing}").into());
    }
    Ok(())
}

/// Whether the etcd container of every member Pod passes `check`.
async fn every_etcd(pods: &Api<Pod>, check: impl Fn(&Container) -> bool) -> TestResult<bool> {
    let list = pods.list(&ListParams::default()).await?.items;
    Ok(list.len() == 3
        && list.iter().all(|pod| {
            pod.spec.as_ref().is_some_and(|spec| {
                spec.containers
                    .iter()
                    .filter(|c| c.name == "etcd")
                    .any(&check)
            })
        }))
}

async fn check_watch(watch: &Arc<Mutex<Watch>>) -> TestResult {
    match &watch.lock().await.violation {
        Some(violation) => Err(violation.clone().into()),
        None => Ok(()),
    }
}

/// Once a second: how many members do not answer their own status with a
/// leader (a missing Pod counts). Two at once on two polls in a row is a
/// violation (one poll can time out on two busy cores).
async fn watch_pods(pods: Api<Pod>, stop: Arc<AtomicBool>, watch: Arc<Mutex<Watch>>) {
    let mut two_before = false;
    while !stop.load(Ordering::SeqCst) {
        if let Ok(list) = pods.list(&ListParams::default()).await {
            let mut serving = 0usize;
            for pod in &list.items {
                if pod.metadata.deletion_timestamp.is_some() {
                    continue;
                }
                let Some(ip) = pod.status.as_ref().and_then(|s| s.pod_ip.clone()) else {
                    continue;
                };
                let Ok(mut client) =
                    test_kit::e2e::etcd_at(vec![format!("http://{ip}:2379")]).await
                else {
                    continue;
                };
                let status = tokio::time::timeout(Duration::from_secs(2), client.status()).await;
                if let Ok(Ok(status)) = status
                    && status.leader() != 0
                {
                    serving += 1;
                }
            }
            let down = 3usize.saturating_sub(serving);
            let mut w = watch.lock().await;
            w.polls += 1;
            if !w.node_stopped {
                w.most_down = w.most_down.max(down);
            }
            let two = down >= 2 && !w.node_stopped;
            if two && two_before && w.violation.is_none() {
                w.violation = Some(format!("{down} members not serving on two polls in a row"));
            }
            two_before = two;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}
