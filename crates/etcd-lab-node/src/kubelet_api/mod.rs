//! The kubelet API on `node_ip:10250` over TLS, enough for `kubectl logs`:
//! `GET /containerLogs/{ns}/{pod}/{container}?follow=&tailLines=`.
//!
//! Authentication is TLS only (the API server presents its client
//! certificate; it is not verified against the CA here).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use etcd_lab_common::{IoContext, IoError};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncSeekExt, AsyncWriteExt, BufReader};
use tokio::net::TcpListener;

use crate::node_context::NodeContext;

/// The kubelet port.
pub const KUBELET_PORT: i32 = 10250;

/// Errors of the kubelet API server.
#[derive(Debug, thiserror::Error)]
pub enum KubeletApiError {
    #[error(transparent)]
    Io(#[from] IoError),
    #[error("TLS: {0}")]
    Tls(String),
}

fn tls_config(
    cert: &std::path::Path,
    key: &std::path::Path,
) -> Result<rustls::ServerConfig, KubeletApiError> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
        .map_err(|e| KubeletApiError::Tls(format!("{}: {e}", cert.display())))?
        .collect::<Result<_, _>>()
        .map_err(|e| KubeletApiError::Tls(format!("{}: {e}", cert.display())))?;
    let key = PrivateKeyDer::from_pem_file(key)
        .map_err(|e| KubeletApiError::Tls(format!("{}: {e}", key.display())))?;
    rustls::ServerConfig::builder()
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(|e| KubeletApiError::Tls(e.to_string()))
}

/// Serves until the task is aborted; logs and returns on setup errors.
pub(crate) async fn serve(ctx: Arc<NodeContext>) {
    if let Err(e) = serve_inner(ctx).await {
        tracing::warn!("kubelet API not served: {e}");
    }
}

async fn serve_inner(ctx: Arc<NodeContext>) -> Result<(), KubeletApiError> {
    let config = tls_config(&ctx.config.kubelet_cert, &ctx.config.kubelet_key)?;
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let addr = (
        ctx.config.node_ip,
        u16::try_from(KUBELET_PORT).unwrap_or(10250),
    );
    let listener = TcpListener::bind(addr)
        .await
        .context(|| format!("bind {}:{}", addr.0, addr.1))?;
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        let acceptor = acceptor.clone();
        let ctx = ctx.clone();
        tokio::spawn(async move {
            if let Ok(tls) = acceptor.accept(stream).await
                && let Err(e) = handle(ctx, tls).await
            {
                tracing::debug!("kubelet API request: {e}");
            }
        });
    }
}

/// A parsed `containerLogs` request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogRequest {
    pub namespace: String,
    pub pod: String,
    pub container: String,
    pub follow: bool,
    pub tail_lines: Option<usize>,
}

/// Parses `/containerLogs/{ns}/{pod}/{container}?follow=true&tailLines=N`.
pub fn parse_log_request(target: &str) -> Option<LogRequest> {
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    let mut parts = path.trim_start_matches('/').split('/');
    if parts.next()? != "containerLogs" {
        return None;
    }
    let namespace = parts.next()?.to_owned();
    let pod = parts.next()?.to_owned();
    let container = parts.next()?.to_owned();
    let mut request = LogRequest {
        namespace,
        pod,
        container,
        follow: false,
        tail_lines: None,
    };
    for pair in query.split('&') {
        match pair.split_once('=') {
            Some(("follow", v)) => request.follow = v == "true" || v == "1",
            Some(("tailLines", v)) => request.tail_lines = v.parse().ok(),
            _ => {}
        }
    }
    Some(request)
}

fn find_log(ctx: &NodeContext, r: &LogRequest) -> Option<PathBuf> {
    let dir = ctx.config.node_log_dir().join("pods");
    let prefix = format!("{}_{}_", r.namespace, r.pod);
    std::fs::read_dir(&dir)
        .ok()?
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with(&prefix))
        .map(|e| e.path().join(format!("{}.log", r.container)))
        .filter(|p| p.exists())
        .max_by_key(|p| std::fs::metadata(p).and_then(|m| m.modified()).ok())
}

/// The last `n` lines of `text`.
pub fn tail(text: &str, n: usize) -> &str {
    let mut count = 0;
    for (i, _) in text.rmatch_indices('\n') {
        if i + 1 == text.len() {
            continue;
        }
        count += 1;
        if count == n {
            return &text[i + 1..];
        }
    }
    text
}

async fn handle<S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin>(
    ctx: Arc<NodeContext>,
    stream: S,
) -> std::io::Result<()> {
    let mut reader = BufReader::new(stream);
    let mut line = String::new();
    reader.read_line(&mut line).await?;
    let target = line.split_whitespace().nth(1).unwrap_or("").to_owned();
    loop {
        let mut header = String::new();
        if reader.read_line(&mut header).await? == 0 || header.trim().is_empty() {
            break;
        }
    }
    let mut stream = reader.into_inner();
    let Some(request) = parse_log_request(&target) else {
        stream
            .write_all(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
            .await?;
        return Ok(());
    };
    let Some(path) = find_log(&ctx, &request) else {
        let body = format!(
            "no logs for container {} of pod {}/{}",
            request.container, request.namespace, request.pod
        );
        stream
            .write_all(format!("HTTP/1.1 404 Not Found\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}", body.len()).as_bytes())
            .await?;
        return Ok(());
    };
    let text = tokio::fs::read_to_string(&path).await.unwrap_or_default();
    let initial = match request.tail_lines {
        Some(n) => tail(&text, n).to_owned(),
        None => text.clone(),
    };
    if !request.follow {
        stream
            .write_all(format!("HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n", initial.len()).as_bytes())
            .await?;
        stream.write_all(initial.as_bytes()).await?;
        return stream.shutdown().await;
    }
    stream
        .write_all(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n")
        .await?;
    write_chunk(&mut stream, initial.as_bytes()).await?;
    let mut file = tokio::fs::File::open(&path).await?;
    file.seek(std::io::SeekFrom::Start(text.len() as u64))
        .await?;
    let mut buf = vec![0u8; 8192];
    loop {
        let n = file.read(&mut buf).await?;
        if n == 0 {
            tokio::time::sleep(Duration::from_millis(300)).await;
            continue;
        }
        write_chunk(&mut stream, &buf[..n]).await?;
    }
}

async fn write_chunk<S: tokio::io::AsyncWrite + Unpin>(
    stream: &mut S,
    data: &[u8],
) -> std::io::Result<()> {
    if data.is_empty() {
        return Ok(());
    }
    stream
        .write_all(format!("{:x}\r\n", data.len()).as_bytes())
        .await?;
    stream.write_all(data).await?;
    stream.write_all(b"\r\n").await?;
    stream.flush().await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_kubectl_logs_requests() {
        let r = parse_log_request("/containerLogs/ns1/etcd-0/etcd?follow=true&tailLines=5")
            .expect("parse");
        assert_eq!(r.namespace, "ns1");
        assert_eq!(r.pod, "etcd-0");
        assert_eq!(r.container, "etcd");
        assert!(r.follow);
        assert_eq!(r.tail_lines, Some(5));
        assert!(parse_log_request("/pods").is_none());
    }

    #[test]
    fn tails_lines() {
        assert_eq!(tail("a\nb\nc\n", 2), "b\nc\n");
        assert_eq!(tail("a\nb\nc\n", 5), "a\nb\nc\n");
        assert_eq!(tail("a\nb\nc", 1), "c");
    }
}
