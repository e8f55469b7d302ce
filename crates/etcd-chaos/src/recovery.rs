//! When a cluster has recovered from a fault: its status says Available
//! with every member a ready voter, every member Pod is Ready, and every
//! member answers etcd's status call naming one leader. Measured from the
//! moment the last fault of a step was healed.

use std::time::{Duration, Instant};

use etcd_client::ConnectOptions;
use etcd_operator::api::MemberRole;
use kube::api::ListParams;
use test_kit::TestResult;
use test_kit::conditions::{condition_true, pod_ready};
use test_kit::e2e::Harness;

/// How often recovery is checked.
const POLL: Duration = Duration::from_millis(250);

/// Waits until cluster `cluster` of `members` members has recovered, at
/// most `budget`; returns how long it took, or `None` when it did not.
pub async fn wait_recovered(
    h: &Harness,
    cluster: &str,
    members: usize,
    budget: Duration,
) -> Option<Duration> {
    let started = Instant::now();
    while started.elapsed() < budget {
        if matches!(recovered(h, cluster, members).await, Ok(true)) {
            return Some(started.elapsed());
        }
        tokio::time::sleep(POLL).await;
    }
    None
}

/// Whether the cluster serves from every member now.
pub async fn recovered(h: &Harness, cluster: &str, members: usize) -> TestResult<bool> {
    let status = h.status(cluster).await?;
    let voters = status
        .members
        .iter()
        .filter(|m| m.role == Some(MemberRole::Voter))
        .count();
    if !condition_true(&status, "Available")
        || usize::try_from(status.ready_members).unwrap_or(0) != members
        || voters != members
    {
        return Ok(false);
    }
    let pods = h
        .pods
        .list(&ListParams::default().labels(&format!(
            "durable-etcd.io/cluster={cluster},app.kubernetes.io/name=etcd"
        )))
        .await?;
    let ips: Vec<String> = pods
        .items
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none() && pod_ready(p))
        .filter_map(|p| p.status.as_ref()?.pod_ip.clone())
        .collect();
    if ips.len() != members {
        return Ok(false);
    }
    let mut leaders = Vec::new();
    for ip in ips {
        let options = ConnectOptions::new()
            .with_connect_timeout(Duration::from_secs(1))
            .with_timeout(Duration::from_secs(1));
        let Ok(mut etcd) =
            etcd_client::Client::connect([format!("http://{ip}:2379")], Some(options)).await
        else {
            return Ok(false);
        };
        match etcd.status().await {
            Ok(status) if status.leader() != 0 => leaders.push(status.leader()),
            _ => return Ok(false),
        }
    }
    leaders.dedup();
    Ok(leaders.len() == 1)
}
