//! How far a member that does not serve clients yet has applied the raft
//! log, read from its metrics port.
//!
//! etcd serves its metrics (`--listen-metrics-urls`, plain HTTP on
//! [`METRICS_PORT`]) from its start, but its client port only once it has
//! published its name through raft. A joining learner that has applied the
//! cluster's data but not served yet is told apart from one still receiving
//! its snapshot by `etcd_server_proposals_applied_total`, the raft index it
//! has applied; `etcd_server_id` says which member the page is of.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::addressing::METRICS_PORT;

/// The metric that holds the applied raft index.
const APPLIED_INDEX_METRIC: &str = "etcd_server_proposals_applied_total";
/// The metric whose `server_id` label is the member ID (hex).
const SERVER_ID_METRIC: &str = "etcd_server_id";

/// What a member's metrics page says of its progress.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MetricsProgress {
    /// The member the page is of.
    pub member_id: u64,
    /// The raft index it has applied.
    pub applied: u64,
}

/// The most a metrics page is read (etcd's is about 100 KiB).
const MAX_PAGE_BYTES: u64 = 4 * 1024 * 1024;

/// The progress of the member behind client endpoint `client_endpoint`,
/// from its metrics port ([`METRICS_PORT`]) on the same host; `None` when
/// that port does not answer within `timeout` or the page lacks the metrics.
pub async fn progress_of(client_endpoint: &str, timeout: Duration) -> Option<MetricsProgress> {
    progress(host_of(client_endpoint)?, METRICS_PORT, timeout).await
}

/// The progress served by the metrics port `host:port`.
pub async fn progress(host: &str, port: u16, timeout: Duration) -> Option<MetricsProgress> {
    let page = tokio::time::timeout(timeout, metrics_page(host, port))
        .await
        .ok()??;
    parse_progress(&page)
}

/// The host of an endpoint URL (`http://host:2379` → `host`).
fn host_of(endpoint: &str) -> Option<&str> {
    let authority = endpoint
        .split_once("://")
        .map_or(endpoint, |(_, rest)| rest);
    let authority = authority.split('/').next()?;
    let host = match authority.rsplit_once(':') {
        Some((host, port)) if port.chars().all(|c| c.is_ascii_digit()) => host,
        _ => authority,
    };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    (!host.is_empty()).then_some(host)
}

/// One `GET /metrics` over HTTP/1.0 (the connection closes after the page).
async fn metrics_page(host: &str, port: u16) -> Option<String> {
    let mut stream = TcpStream::connect((host, port)).await.ok()?;
    let request = format!("GET /metrics HTTP/1.0\r\nHost: {host}:{port}\r\n\r\n");
    stream.write_all(request.as_bytes()).await.ok()?;
    let mut response = Vec::new();
    stream
        .take(MAX_PAGE_BYTES)
        .read_to_end(&mut response)
        .await
        .ok()?;
    let text = String::from_utf8_lossy(&response);
    let (head, body) = text.split_once("\r\n\r\n")?;
    head.starts_with("HTTP/1.")
        .then(|| head.split_whitespace().nth(1) == Some("200"))
        .filter(|ok| *ok)
        .map(|_| body.to_string())
}

/// The member ID and applied index in a Prometheus text page.
pub fn parse_progress(page: &str) -> Option<MetricsProgress> {
    Some(MetricsProgress {
        member_id: parse_server_id(page)?,
        applied: parse_applied_index(page)?,
    })
}

/// The `server_id` label of [`SERVER_ID_METRIC`] (`etcd_server_id{server_id="c101dfba14dad56"} 1`).
fn parse_server_id(page: &str) -> Option<u64> {
    let prefix = format!("{SERVER_ID_METRIC}{{server_id=\"");
    page.lines()
        .find_map(|line| line.strip_prefix(prefix.as_str()))
        .and_then(|rest| rest.split('"').next())
        .and_then(crate::addressing::parse_id)
}

/// The value of [`APPLIED_INDEX_METRIC`] in a Prometheus text page.
fn parse_applied_index(page: &str) -> Option<u64> {
    page.lines()
        .filter(|line| !line.starts_with('#'))
        .find_map(|line| {
            let (name, value) = line.split_once(char::is_whitespace)?;
            (name == APPLIED_INDEX_METRIC).then_some(value.trim())
        })
        .and_then(parse_number)
}

/// A sample value: `12345` or `1.2345e+06`.
fn parse_number(value: &str) -> Option<u64> {
    if let Ok(n) = value.parse::<u64>() {
        return Some(n);
    }
    let n = value.parse::<f64>().ok()?;
    // An index is an integer below 2^53 in practice; the float holds it whole.
    (0.0..9.007_199_254_740_992e15).contains(&n).then(|| {
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        let whole = n as u64;
        whole
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_member_and_its_applied_index_are_read_from_the_metrics_page() {
        let page = "# TYPE etcd_server_id gauge\n\
                    etcd_server_id{server_id=\"c101dfba14dad56\"} 1\n\
                    etcd_server_proposals_applied_total 15635\n";
        assert_eq!(
            parse_progress(page),
            Some(MetricsProgress {
                member_id: 0x0c10_1dfb_a14d_ad56,
                applied: 15635
            })
        );
        assert_eq!(
            parse_progress("etcd_server_proposals_applied_total 15635\n"),
            None
        );
    }

    #[test]
    fn the_applied_index_is_read_from_the_metrics_page() {
        let page = "# HELP etcd_server_proposals_applied_total The total number of consensus proposals applied.\n\
                    # TYPE etcd_server_proposals_applied_total gauge\n\
                    etcd_server_proposals_applied_total 1.234567e+06\n\
                    etcd_server_proposals_committed_total 1.234570e+06\n";
        assert_eq!(parse_applied_index(page), Some(1_234_567));
        assert_eq!(
            parse_applied_index("etcd_server_proposals_applied_total 42\n"),
            Some(42)
        );
        assert_eq!(
            parse_applied_index("etcd_server_proposals_committed_total 42\n"),
            None
        );
        assert_eq!(parse_applied_index(""), None);
    }

    #[test]
    fn the_host_of_an_endpoint_drops_scheme_and_port() {
        assert_eq!(
            host_of("https://a-0.a-peer.ns.svc.cluster.local:2379"),
            Some("a-0.a-peer.ns.svc.cluster.local")
        );
        assert_eq!(host_of("http://127.0.0.1:2379/"), Some("127.0.0.1"));
        assert_eq!(host_of("http://[::1]:2379"), Some("::1"));
        assert_eq!(host_of("a-0"), Some("a-0"));
        assert_eq!(host_of("http://:2379"), None);
    }
}
