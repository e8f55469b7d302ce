//! `GET /containerLogs/{ns}/{pod}/{container}?follow=&tailLines=`: the
//! container's log file; with `follow`, what the container writes next,
//! until it stops (as a kubelet follows one container instance).

use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncSeekExt, AsyncWrite, AsyncWriteExt};

use super::http::{RequestHead, is_true, respond};
use super::running_container::is_running;
use crate::node_context::NodeContext;

/// How often a followed log is read again.
const FOLLOW_POLL: Duration = Duration::from_millis(300);

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
pub fn parse_log_request(head: &RequestHead) -> Option<LogRequest> {
    let mut parts = head.path().trim_start_matches('/').split('/');
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
    for (key, value) in head.query() {
        match key.as_str() {
            "follow" => request.follow = is_true(&value),
            "tailLines" => request.tail_lines = value.parse().ok(),
            _ => {}
        }
    }
    Some(request)
}

/// The newest log of the container (`.../pods/NS_NAME_UID/CONTAINER.log`)
/// and the uid of its pod.
fn find_log(ctx: &NodeContext, r: &LogRequest) -> Option<(PathBuf, String)> {
    let dir = ctx.config.node_log_dir().join("pods");
    let prefix = format!("{}_{}_", r.namespace, r.pod);
    std::fs::read_dir(&dir)
        .ok()?
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let uid = name.strip_prefix(&prefix)?.to_owned();
            Some((e.path().join(format!("{}.log", r.container)), uid))
        })
        .filter(|(p, _)| p.exists())
        .max_by_key(|(p, _)| std::fs::metadata(p).and_then(|m| m.modified()).ok())
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

/// Serves one log request.
pub(super) async fn serve<S: AsyncWrite + Unpin>(
    ctx: &NodeContext,
    request: LogRequest,
    stream: &mut S,
) -> std::io::Result<()> {
    let Some((path, pod_uid)) = find_log(ctx, &request) else {
        let body = format!(
            "no logs for container {} of pod {}/{}",
            request.container, request.namespace, request.pod
        );
        return respond(stream, 404, "Not Found", &body).await;
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
    write_chunk(stream, initial.as_bytes()).await?;
    follow(
        ctx,
        &path,
        text.len() as u64,
        &pod_uid,
        &request.container,
        stream,
    )
    .await?;
    // The last chunk: the response, and `kubectl logs -f`, end.
    stream.write_all(b"0\r\n\r\n").await?;
    stream.flush().await?;
    stream.shutdown().await
}

/// Sends what is written to `path` from `offset` on, until the container
/// is no longer running and everything it wrote was sent.
async fn follow<S: AsyncWrite + Unpin>(
    ctx: &NodeContext,
    path: &Path,
    offset: u64,
    pod_uid: &str,
    container: &str,
    stream: &mut S,
) -> std::io::Result<()> {
    let mut file = tokio::fs::File::open(path).await?;
    file.seek(std::io::SeekFrom::Start(offset)).await?;
    let mut buf = vec![0u8; 8192];
    loop {
        // Checked before reading: output written before the container
        // stopped is read below, so nothing it wrote is lost.
        let running = is_running(ctx, pod_uid, container);
        let n = file.read(&mut buf).await?;
        if n > 0 {
            write_chunk(stream, &buf[..n]).await?;
            continue;
        }
        if !running {
            return Ok(());
        }
        tokio::time::sleep(FOLLOW_POLL).await;
    }
}

async fn write_chunk<S: AsyncWrite + Unpin>(stream: &mut S, data: &[u8]) -> std::io::Result<()> {
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

    #[tokio::test]
    async fn parses_kubectl_logs_requests() {
        let raw = "GET /containerLogs/ns1/etcd-0/etcd?follow=true&tailLines=5 HTTP/1.1\r\n\r\n";
        let head = RequestHead::read(&mut raw.as_bytes())
            .await
            .expect("read")
            .expect("head");
        let r = parse_log_request(&head).expect("parse");
        assert_eq!(r.namespace, "ns1");
        assert_eq!(r.pod, "etcd-0");
        assert_eq!(r.container, "etcd");
        assert!(r.follow);
        assert_eq!(r.tail_lines, Some(5));
        let other = RequestHead::read(&mut "GET /pods HTTP/1.1\r\n\r\n".as_bytes())
            .await
            .expect("read")
            .expect("head");
        assert!(parse_log_request(&other).is_none());
    }

    #[test]
    fn tails_lines() {
        assert_eq!(tail("a\nb\nc\n", 2), "b\nc\n");
        assert_eq!(tail("a\nb\nc\n", 5), "a\nb\nc\n");
        assert_eq!(tail("a\nb\nc", 1), "c");
    }
}
