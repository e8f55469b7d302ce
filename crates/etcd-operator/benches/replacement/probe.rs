//! What the replacement bench reads from etcd: members' status, whether a new
//! member has caught up with the leader (its data, and whether it serves),
//! and how many database snapshots the members have sent to peers.

use std::time::Duration;

use etcd_client::StatusResponse;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use test_kit::TestResult;
use test_kit::e2e::etcd_at;

/// Where the leader stood when a member was lost (writes stopped): the
/// replacement has caught up once it has applied as far.
#[derive(Debug, Clone, Copy)]
pub struct Target {
    pub revision: i64,
    pub applied_index: u64,
}

/// The status of the member serving `endpoint`.
pub async fn status_at(endpoint: &str) -> TestResult<StatusResponse> {
    let mut client = etcd_at(vec![endpoint.to_owned()]).await?;
    Ok(client.status().await?)
}

/// The member ID behind a status answer.
pub fn member_id(status: &StatusResponse) -> u64 {
    status.header().map(|h| h.member_id()).unwrap_or_default()
}

/// The leader's ID and where it stands, asked of each endpoint in turn.
pub async fn leader(endpoints: &[String]) -> TestResult<(u64, Target)> {
    let mut statuses = Vec::new();
    for endpoint in endpoints {
        if let Ok(status) = status_at(endpoint).await {
            statuses.push(status);
        }
    }
    let leader_id = statuses
        .iter()
        .map(StatusResponse::leader)
        .find(|&id| id != 0)
        .ok_or("no member knows a leader")?;
    let status = statuses
        .iter()
        .find(|s| member_id(s) == leader_id)
        .ok_or_else(|| format!("the leader {leader_id:x} is not among {endpoints:?}"))?;
    Ok((
        leader_id,
        Target {
            revision: status.header().map(|h| h.revision()).unwrap_or_default(),
            applied_index: status.raft_applied_index(),
        },
    ))
}

/// Whether member `id` serves clients on `endpoint` and its status shows it
/// has applied up to `target`.
pub async fn serving(endpoint: &str, id: u64, target: Target) -> TestResult<bool> {
    let status = status_at(endpoint).await?;
    let revision = status.header().map(|h| h.revision()).unwrap_or_default();
    Ok(member_id(&status) == id
        && revision >= target.revision
        && status.raft_applied_index() >= target.applied_index)
}

/// Whether member `id` has applied up to `target`, read from its metrics
/// endpoint (`--listen-metrics-urls`), which etcd serves from the start,
/// whereas it serves clients only once it has published its name to the
/// cluster: the data has arrived even while the member is not ready yet.
pub async fn applied_per_metrics(
    metrics_endpoint: &str,
    id: u64,
    target: Target,
) -> TestResult<bool> {
    let text = metrics(metrics_endpoint).await?;
    let value = |name: &str| -> Option<f64> {
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
    };
    let server_id = format!("etcd_server_id{{server_id=\"{id:x}\"}}");
    let is_member = text.lines().any(|l| l.starts_with(&server_id));
    let applied = value("etcd_server_proposals_applied_total").unwrap_or_default();
    let revision = value("etcd_debugging_mvcc_current_revision").unwrap_or_default();
    Ok(is_member && applied >= target.applied_index as f64 && revision >= target.revision as f64)
}

/// Database snapshots sent to peers, summed over the members serving
/// `endpoints` (etcd's `etcd_network_snapshot_send_success` counter, read
/// from `/metrics` on the client URL). Tells whether a new member caught up
/// from a snapshot or from the raft log.
pub async fn snapshots_sent(endpoints: &[String]) -> TestResult<u64> {
    let mut total = 0.0;
    for endpoint in endpoints {
        let text = metrics(endpoint).await?;
        total += text
            .lines()
            .filter(|l| l.starts_with("etcd_network_snapshot_send_success"))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum::<f64>();
    }
    Ok(total.round() as u64)
}

/// `GET /metrics` over plain HTTP/1.0 on an `http://host:port` endpoint.
async fn metrics(endpoint: &str) -> TestResult<String> {
    let address = endpoint
        .strip_prefix("http://")
        .ok_or_else(|| format!("{endpoint} is not a plain http endpoint"))?;
    let exchange = async {
        let mut stream = tokio::net::TcpStream::connect(address).await?;
        stream
            .write_all(format!("GET /metrics HTTP/1.0\r\nHost: {address}\r\n\r\n").as_bytes())
            .await?;
        let mut response = Vec::new();
        stream.read_to_end(&mut response).await?;
        TestResult::Ok(String::from_utf8_lossy(&response).into_owned())
    };
    let response = tokio::time::timeout(Duration::from_secs(5), exchange)
        .await
        .map_err(|_| format!("GET {endpoint}/metrics timed out"))??;
    let (head, body) = response
        .split_once("\r\n\r\n")
        .ok_or_else(|| format!("GET {endpoint}/metrics: malformed response"))?;
    if !head.starts_with("HTTP/1.") || !head.contains(" 200 ") {
        let line = head.lines().next().unwrap_or_default();
        return Err(format!("GET {endpoint}/metrics: {line}").into());
    }
    Ok(body.to_owned())
}
