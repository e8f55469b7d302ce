//! End to end on the lab: scale 3 → 5 → 3 → 1 → 3 under a continuous
//! writer. Every acknowledged write is there at the end, the cluster ID
//! never changes, and a watcher polling each voter's own status throughout
//! never sees fewer than a quorum of healthy voters.
//!
//! The watcher polls once a second from the host; one poll that misses a
//! voter can be the poller's own timeout on two busy cores, so it fails on
//! two consecutive polls below quorum and reports every single dip.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::ResourceExt;
use kube::api::ListParams;
use serde_json::json;
use test_kit::TestResult;
use test_kit::e2e::{Harness, cluster_spec, etcd_at};
use test_kit::writer::ready_endpoints;
use tokio::sync::Mutex;

const NAME: &str = "scale";
const PREFIX: &str = "/scale/";

#[test]
fn scaling_keeps_every_write_and_a_quorum() {
    test_kit::e2e::run("scale", env!("CARGO_BIN_EXE_etcd-operator"), |h| {
        Box::pin(scenario(h))
    });
}

#[derive(Default, Debug)]
struct Watch {
    polls: usize,
    dips: Vec<String>,
    violation: Option<String>,
    min_healthy_margin: Option<i64>,
}

async fn scenario(h: &mut Harness) -> TestResult {
    h.create_available(
        NAME,
        cluster_spec(3, "lab-network"),
        Duration::from_secs(180),
    )
    .await?;
    let cluster_id = h.identity().await?.cluster_id;

    let stop = Arc::new(AtomicBool::new(false));
    let writer = h.start_writer(PREFIX);
    let watch = Arc::new(Mutex::new(Watch::default()));
    let watcher = tokio::spawn(watch_quorum(h.pods.clone(), stop.clone(), watch.clone()));

    let outcome = async {
        for replicas in [5, 3, 1, 3] {
            let started = Instant::now();
            h.patch_spec(NAME, json!({ "replicas": replicas })).await?;
            h.wait_available(NAME, replicas, Duration::from_secs(300))
                .await?;
            let identity = h.identity().await?;
            if identity.cluster_id != cluster_id {
                return Err(format!("cluster ID changed: {identity:x?}").into());
            }
            if identity.voters() != usize::try_from(replicas)? {
                return Err(format!("{replicas} wanted: {identity:x?}").into());
            }
            let acked = writer.acknowledged().await;
            eprintln!(
                "scaled to {replicas} in {:?} ({acked} writes acknowledged so far)",
                started.elapsed()
            );
            if let Some(violation) = &watch.lock().await.violation {
                return Err(violation.clone().into());
            }
        }
        TestResult::Ok(())
    }
    .await;
    stop.store(true, Ordering::SeqCst);
    let ledger = writer.stop().await;
    let _ = watcher.await;
    outcome?;

    let watch = watch.lock().await;
    eprintln!(
        "watcher: {} polls, {} single dips {:?}, smallest margin above quorum {:?}",
        watch.polls,
        watch.dips.len(),
        watch.dips,
        watch.min_healthy_margin
    );
    if let Some(violation) = &watch.violation {
        return Err(violation.clone().into());
    }
    if watch.polls < 10 {
        return Err(format!("the watcher polled only {} times", watch.polls).into());
    }

    ledger.verify(h, 20).await?;
    Ok(())
}

/// Once a second: the voters (member list) and each voter's own status on
/// its pod IP; healthy voters must stay at or above a quorum.
async fn watch_quorum(pods: Api<Pod>, stop: Arc<AtomicBool>, watch: Arc<Mutex<Watch>>) {
    let mut below_before = false;
    while !stop.load(Ordering::SeqCst) {
        let poll = poll_once(&pods).await;
        let mut w = watch.lock().await;
        w.polls += 1;
        match poll {
            Ok((voters, healthy)) => {
                let quorum = i64::try_from(voters / 2 + 1).unwrap_or(0);
                let margin = i64::try_from(healthy).unwrap_or(0) - quorum;
                w.min_healthy_margin = Some(w.min_healthy_margin.map_or(margin, |m| m.min(margin)));
                let below = margin < 0;
                if below {
                    w.dips.push(format!("{healthy} of {voters} voters healthy"));
                    if below_before && w.violation.is_none() {
                        w.violation = Some(format!(
                            "fewer than a quorum of healthy voters twice in a row: {healthy} of {voters}"
                        ));
                    }
                }
                below_before = below;
            }
            Err(error) => {
                w.dips.push(format!("poll failed: {error}"));
                if below_before && w.violation.is_none() {
                    w.violation = Some(format!("no voter answered twice in a row: {error}"));
                }
                below_before = true;
            }
        }
        drop(w);
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

async fn poll_once(pods: &Api<Pod>) -> TestResult<(usize, usize)> {
    let ips: BTreeMap<String, String> = pods
        .list(&ListParams::default())
        .await?
        .items
        .iter()
        .filter_map(|p| Some((p.name_any(), p.status.as_ref()?.pod_ip.clone()?)))
        .collect();
    // The member list from the first pod that gives it (a learner refuses
    // it), ready pods first: readiness lags behind etcd (a leadership
    // transfer makes every member unready for a moment while quorum holds).
    let mut candidates = ready_endpoints(pods).await?;
    candidates.extend(ips.values().map(|ip| format!("http://{ip}:2379")));
    let mut list = None;
    let mut last_error = String::from("no pod has an IP");
    for endpoint in candidates {
        let answer = async {
            let mut client = etcd_at(vec![endpoint.clone()]).await?;
            Ok::<_, Box<dyn std::error::Error + Send + Sync>>(
                tokio::time::timeout(Duration::from_secs(2), client.member_list()).await??,
            )
        }
        .await;
        match answer {
            Ok(answer) => {
                list = Some(answer);
                break;
            }
            Err(error) => last_error = format!("{endpoint}: {error}"),
        }
    }
    let list = list.ok_or(last_error)?;
    let voters: Vec<(String, u64)> = list
        .members()
        .iter()
        .filter(|m| !m.is_learner())
        .map(|m| (m.name().to_owned(), m.id()))
        .collect();
    let mut healthy = 0;
    for (name, _) in &voters {
        let Some(ip) = ips.get(name) else { continue };
        let Ok(mut one) = etcd_at(vec![format!("http://{ip}:2379")]).await else {
            continue;
        };
        let status = tokio::time::timeout(Duration::from_secs(2), one.status()).await;
        if let Ok(Ok(status)) = status
            && status.leader() != 0
            && status.errors().is_empty()
        {
            healthy += 1;
        }
    }
    Ok((voters.len(), healthy))
}
