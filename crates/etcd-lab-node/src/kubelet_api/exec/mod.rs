//! `/exec/{namespace}/{pod}/{container}?command=..&stdin=&stdout=&stderr=&tty=`:
//! a command run in a running container, its streams carried over
//! WebSocket (`v5.channel.k8s.io`, or `v4`) as a kubelet that declares
//! `ExtendWebSocketsToKubelet` serves them: the API server then proxies
//! kubectl's WebSocket here unchanged instead of translating it to SPDY.
//!
//! SPDY is not served: an exec that is not a WebSocket upgrade is refused
//! after the pod and container were found, so that kubectl (which tries
//! WebSocket, then SPDY) reports the same "not found" either way.

mod channel;
mod session;

use std::sync::Arc;

use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::handshake::derive_accept_key;
use tokio_tungstenite::tungstenite::protocol::Role;

use super::http::{RequestHead, is_true, respond};
use super::running_container::{self, Lookup};
use crate::node_context::NodeContext;

/// A parsed exec request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecRequest {
    pub namespace: String,
    pub pod: String,
    /// Set when the path names the pod's uid too (`/exec/ns/pod/uid/container`).
    pub pod_uid: Option<String>,
    pub container: String,
    pub command: Vec<String>,
    pub stdin: bool,
    pub stdout: bool,
    pub stderr: bool,
    pub tty: bool,
}

/// Parses the path and query of an exec request; `None` when the path is
/// not an exec path.
pub fn parse_exec_request(head: &RequestHead) -> Option<ExecRequest> {
    let segments: Vec<&str> = head
        .path()
        .trim_start_matches('/')
        .split('/')
        .filter(|s| !s.is_empty())
        .collect();
    let (namespace, pod, pod_uid, container) = match segments.as_slice() {
        ["exec", ns, pod, container] => (*ns, *pod, None, *container),
        ["exec", ns, pod, uid, container] => (*ns, *pod, Some(*uid), *container),
        _ => return None,
    };
    let mut request = ExecRequest {
        namespace: namespace.to_owned(),
        pod: pod.to_owned(),
        pod_uid: pod_uid.map(str::to_owned),
        container: container.to_owned(),
        command: Vec::new(),
        stdin: false,
        stdout: false,
        stderr: false,
        tty: false,
    };
    for (key, value) in head.query() {
        match key.as_str() {
            "command" => request.command.push(value),
            "stdin" | "input" => request.stdin = is_true(&value),
            "stdout" | "output" => request.stdout = is_true(&value),
            "stderr" | "error" => request.stderr = is_true(&value),
            "tty" => request.tty = is_true(&value),
            _ => {}
        }
    }
    Some(request)
}

/// Serves one exec request: checks it, finds the running container (the
/// kubelet's answers when it cannot: 404 `pod does not exist`, 500
/// `container not found ("NAME")`), upgrades to WebSocket and runs the
/// command.
pub(super) async fn serve<S>(
    ctx: Arc<NodeContext>,
    head: RequestHead,
    request: ExecRequest,
    mut reader: BufReader<S>,
) -> std::io::Result<()>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    if request.command.is_empty() {
        let body = "you must specify at least 1 command";
        return respond(reader.get_mut(), 400, "Bad Request", body).await;
    }
    if !(request.stdin || request.stdout || request.stderr) {
        let body = "you must specify at least 1 of stdin, stdout, stderr";
        return respond(reader.get_mut(), 400, "Bad Request", body).await;
    }
    let target = match running_container::find(
        &ctx,
        &request.namespace,
        &request.pod,
        request.pod_uid.as_deref(),
        &request.container,
    ) {
        Lookup::Running(target) => target,
        Lookup::NoPod => {
            return respond(reader.get_mut(), 404, "Not Found", "pod does not exist").await;
        }
        Lookup::NotRunning => {
            let body = format!("container not found ({:?})", request.container);
            return respond(reader.get_mut(), 500, "Internal Server Error", &body).await;
        }
    };
    if !head.is_websocket_upgrade() {
        let body = format!(
            "etcd-lab's node agent serves exec over WebSocket only ({}); SPDY is not served",
            channel::SERVED.join(", ")
        );
        return respond(reader.get_mut(), 400, "Bad Request", &body).await;
    }
    let offered = head.header("sec-websocket-protocol").unwrap_or("");
    let (Some(protocol), Some(key)) = (
        channel::negotiate(offered),
        head.header("sec-websocket-key"),
    ) else {
        let body = format!(
            "requested protocol(s) are not supported: [{offered}]; supports [{}]",
            channel::SERVED.join(" ")
        );
        return respond(reader.get_mut(), 400, "Bad Request", &body).await;
    };
    let accept = derive_accept_key(key.as_bytes());
    let switch = format!(
        "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: {accept}\r\nSec-WebSocket-Protocol: {}\r\n\r\n",
        protocol.name()
    );
    reader.get_mut().write_all(switch.as_bytes()).await?;
    reader.get_mut().flush().await?;
    // Whatever the client sent after its head already belongs to the
    // WebSocket.
    let early = reader.buffer().to_vec();
    let ws =
        WebSocketStream::from_partially_read(reader.into_inner(), early, Role::Server, None).await;
    tracing::info!(
        pod = %format!("{}/{}", request.namespace, request.pod),
        container = %request.container,
        command = ?request.command,
        protocol = protocol.name(),
        "exec"
    );
    session::run(ws, protocol, &ctx, &request, *target).await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn head(target: &str) -> RequestHead {
        let raw = format!("GET {target} HTTP/1.1\r\n\r\n");
        RequestHead::read(&mut raw.as_bytes())
            .await
            .expect("read")
            .expect("head")
    }

    #[tokio::test]
    async fn parses_the_exec_request_of_the_api_server() {
        let r = parse_exec_request(&head(
            "/exec/ns1/durable-0/etcd?command=etcdctl&command=endpoint&command=status&container=etcd&stdin=true&stdout=true&stderr=true",
        ).await)
        .expect("exec");
        assert_eq!(r.namespace, "ns1");
        assert_eq!(r.pod, "durable-0");
        assert_eq!(r.pod_uid, None);
        assert_eq!(r.container, "etcd");
        assert_eq!(r.command, ["etcdctl", "endpoint", "status"]);
        assert!(r.stdin && r.stdout && r.stderr && !r.tty);

        let r = parse_exec_request(&head("/exec/ns1/p/uid-1/c?command=true&tty=1").await)
            .expect("exec with uid");
        assert_eq!(r.pod_uid.as_deref(), Some("uid-1"));
        assert_eq!(r.container, "c");
        assert!(r.tty && !r.stdout);

        assert!(parse_exec_request(&head("/exec/ns1/p").await).is_none());
        assert!(parse_exec_request(&head("/containerLogs/ns1/p/c").await).is_none());
    }
}
