//! Reads how full a member's volume is, and what its write-ahead log holds,
//! from the `volume-usage` sidecar of its Pod (see
//! [`crate::pod_contract::volume_usage`] and [`crate::pod_contract::wal_tail`]).

use std::net::IpAddr;
use std::sync::OnceLock;
use std::time::Duration;

use crate::pod_contract::{
    VOLUME_USAGE_PATH, VOLUME_USAGE_PORT, VolumeUsage, VolumeUsageParseError, WAL_TAIL_PATH,
    WalTailParseError, WalTailReport,
};

/// Longest error body kept in [`VolumeUsageError::Status`].
const MAX_ERROR_BODY_CHARS: usize = 256;

/// Why a member's volume usage could not be read.
#[derive(Debug, thiserror::Error)]
pub enum VolumeUsageError {
    /// The Pod IP given is no IP address.
    #[error("{0:?} is not an IP address")]
    InvalidAddress(String),
    /// The HTTP client could not be built.
    #[error("cannot build the HTTP client: {0}")]
    Client(#[source] reqwest::Error),
    /// No answer in time.
    #[error("no answer from {url} within {timeout:?}")]
    Timeout {
        /// What was asked.
        url: String,
        /// How long it was waited for.
        timeout: Duration,
    },
    /// The sidecar could not be reached, or the answer broke off.
    #[error("cannot read {url}: {source}")]
    Unreachable {
        /// What was asked.
        url: String,
        /// Cause.
        source: reqwest::Error,
    },
    /// The sidecar answered with an error (it could not measure).
    #[error("{url} answered {status}: {body}")]
    Status {
        /// What was asked.
        url: String,
        /// The HTTP status.
        status: u16,
        /// The start of what it said.
        body: String,
    },
    /// The answer is no volume usage this operator reads.
    #[error("{url}: {source}")]
    Unrecognised {
        /// What was asked.
        url: String,
        /// Cause.
        source: VolumeUsageParseError,
    },
    /// The answer is no WAL tail this operator reads.
    #[error("{url}: {source}")]
    UnrecognisedWalTail {
        /// What was asked.
        url: String,
        /// Cause.
        source: WalTailParseError,
    },
}

/// The volume usage of the member Pod at `pod_ip` (IPv4 or IPv6), asked
/// of its sidecar on [`VOLUME_USAGE_PORT`], within `timeout`.
pub async fn read(pod_ip: &str, timeout: Duration) -> Result<VolumeUsage, VolumeUsageError> {
    read_port(pod_ip, VOLUME_USAGE_PORT, timeout).await
}

/// [`read`] on another port.
pub async fn read_port(
    pod_ip: &str,
    port: u16,
    timeout: Duration,
) -> Result<VolumeUsage, VolumeUsageError> {
    let (url, body) = fetch(pod_ip, port, VOLUME_USAGE_PATH, timeout).await?;
    VolumeUsage::from_json(&body).map_err(|source| VolumeUsageError::Unrecognised { url, source })
}

/// What the write-ahead log on the volume of the member Pod at `pod_ip`
/// holds, read by its sidecar (whether etcd runs or not), within `timeout`.
pub async fn read_wal_tail(
    pod_ip: &str,
    timeout: Duration,
) -> Result<WalTailReport, VolumeUsageError> {
    read_wal_tail_port(pod_ip, VOLUME_USAGE_PORT, timeout).await
}

/// [`read_wal_tail`] on another port.
pub async fn read_wal_tail_port(
    pod_ip: &str,
    port: u16,
    timeout: Duration,
) -> Result<WalTailReport, VolumeUsageError> {
    let (url, body) = fetch(pod_ip, port, WAL_TAIL_PATH, timeout).await?;
    WalTailReport::from_json(&body)
        .map_err(|source| VolumeUsageError::UnrecognisedWalTail { url, source })
}

/// The body of a successful `GET` of `path` on the sidecar, with its URL.
async fn fetch(
    pod_ip: &str,
    port: u16,
    path: &str,
    timeout: Duration,
) -> Result<(String, bytes::Bytes), VolumeUsageError> {
    let url = url(pod_ip, port, path)?;
    let client = client()?;
    let failed = |source: reqwest::Error| {
        if source.is_timeout() {
            VolumeUsageError::Timeout {
                url: url.clone(),
                timeout,
            }
        } else {
            VolumeUsageError::Unreachable {
                url: url.clone(),
                source,
            }
        }
    };
    let response = client
        .get(&url)
        .timeout(timeout)
        .send()
        .await
        .map_err(failed)?;
    let status = response.status();
    let body = response.bytes().await.map_err(failed)?;
    if !status.is_success() {
        return Err(VolumeUsageError::Status {
            url,
            status: status.as_u16(),
            body: String::from_utf8_lossy(&body)
                .trim()
                .chars()
                .take(MAX_ERROR_BODY_CHARS)
                .collect(),
        });
    }
    Ok((url, body))
}

/// The URL of a document on a Pod IP; an IPv6 address in brackets.
pub fn url(pod_ip: &str, port: u16, path: &str) -> Result<String, VolumeUsageError> {
    let ip: IpAddr = pod_ip
        .parse()
        .map_err(|_| VolumeUsageError::InvalidAddress(pod_ip.to_owned()))?;
    Ok(match ip {
        IpAddr::V4(v4) => format!("http://{v4}:{port}{path}"),
        IpAddr::V6(v6) => format!("http://[{v6}]:{port}{path}"),
    })
}

/// One client for every read: no proxy (Pod IPs are reached directly), no
/// idle connection kept (a Pod IP may belong to another Pod next time).
fn client() -> Result<&'static reqwest::Client, VolumeUsageError> {
    static CLIENT: OnceLock<reqwest::Client> = OnceLock::new();
    if let Some(client) = CLIENT.get() {
        return Ok(client);
    }
    // reqwest is built without a bundled TLS provider: the ring provider
    // the rest of the operator uses (installing fails only when one is).
    let _ = rustls::crypto::ring::default_provider().install_default();
    let client = reqwest::Client::builder()
        .no_proxy()
        .pool_max_idle_per_host(0)
        .build()
        .map_err(VolumeUsageError::Client)?;
    Ok(CLIENT.get_or_init(|| client))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_of_ipv4_and_ipv6_pod_ips() {
        assert_eq!(
            url("10.244.1.7", VOLUME_USAGE_PORT, VOLUME_USAGE_PATH).expect("url"),
            "http://10.244.1.7:2383/volume-usage"
        );
        assert_eq!(
            url("fd00:10:244::7", VOLUME_USAGE_PORT, VOLUME_USAGE_PATH).expect("url"),
            "http://[fd00:10:244::7]:2383/volume-usage"
        );
        for bad in ["", "demo-0.demo-peer", "10.0.0.1:2383", "[::1]"] {
            assert!(
                matches!(
                    url(bad, VOLUME_USAGE_PORT, VOLUME_USAGE_PATH),
                    Err(VolumeUsageError::InvalidAddress(_))
                ),
                "{bad}"
            );
        }
    }

    /// A server on loopback that answers every connection with `answer`.
    async fn answering(bind: &str, answer: &'static str) -> Option<u16> {
        use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
        let listener = tokio::net::TcpListener::bind(bind).await.ok()?;
        let port = listener.local_addr().ok()?.port();
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                let mut request = [0_u8; 1024];
                let _ = stream.read(&mut request).await;
                let _ = stream.write_all(answer.as_bytes()).await;
                let _ = stream.shutdown().await;
            }
        });
        Some(port)
    }

    fn http(status: &str, body: &str) -> &'static str {
        let text = format!(
            "HTTP/1.1 {status}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        );
        Box::leak(text.into_boxed_str())
    }

    #[tokio::test]
    async fn a_document_is_read_over_ipv4_and_ipv6() {
        let body =
            r#"{"version":1,"capacityBytes":10,"availableBytes":4,"usedBytes":6,"walBytes":2}"#;
        let port = answering("127.0.0.1:0", http("200 OK", body))
            .await
            .expect("listen on 127.0.0.1");
        let usage = read_port("127.0.0.1", port, Duration::from_secs(5))
            .await
            .expect("read");
        assert_eq!(usage.available_bytes, 4);
        assert_eq!(usage.wal_bytes, Some(2));
        // Only where this machine has IPv6 loopback.
        if let Some(port) = answering("[::1]:0", http("200 OK", body)).await {
            let usage = read_port("::1", port, Duration::from_secs(5))
                .await
                .expect("read over IPv6");
            assert_eq!(usage.capacity_bytes, 10);
        }
    }

    #[tokio::test]
    async fn errors_say_what_went_wrong() {
        let port = answering(
            "127.0.0.1:0",
            http(
                "500 Internal Server Error",
                "measuring the filesystem of /x: EIO",
            ),
        )
        .await
        .expect("listen");
        let error = read_port("127.0.0.1", port, Duration::from_secs(5))
            .await
            .expect_err("status");
        assert!(
            matches!(&error, VolumeUsageError::Status { status: 500, body, .. } if body.contains("EIO")),
            "{error}"
        );

        let port = answering("127.0.0.1:0", http("200 OK", r#"{"version":2}"#))
            .await
            .expect("listen");
        let error = read_port("127.0.0.1", port, Duration::from_secs(5))
            .await
            .expect_err("version");
        assert!(
            matches!(
                &error,
                VolumeUsageError::Unrecognised {
                    source: VolumeUsageParseError::UnknownVersion(_),
                    ..
                }
            ),
            "{error}"
        );

        // A port nobody listens on.
        let closed = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let port = closed.local_addr().expect("address").port();
        drop(closed);
        let error = read_port("127.0.0.1", port, Duration::from_secs(5))
            .await
            .expect_err("refused");
        assert!(
            matches!(error, VolumeUsageError::Unreachable { .. }),
            "{error}"
        );
    }

    #[tokio::test]
    async fn a_silent_sidecar_times_out() {
        // Accepts connections (the backlog) but never answers.
        let silent = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let port = silent.local_addr().expect("address").port();
        let error = read_port("127.0.0.1", port, Duration::from_millis(300))
            .await
            .expect_err("timeout");
        assert!(matches!(error, VolumeUsageError::Timeout { .. }), "{error}");
        drop(silent);
    }
}
