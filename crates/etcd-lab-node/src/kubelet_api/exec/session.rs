//! One exec over an upgraded WebSocket: the command runs in the container
//! the way exec probes run theirs (`etcd-lab run-container --spec FILE`
//! with the container's own spec and the command as argv), its stdin,
//! stdout and stderr piped to the channels; when it exits, the rest of its
//! output, then its status on the error channel, then a normal close
//! (kubectl reads the error channel to its end, which a normal close is).

use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use futures::{SinkExt, StreamExt};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;

use super::ExecRequest;
use super::channel::{self, Incoming, Outcome, Protocol};
use crate::kubelet_api::running_container::RunningContainer;
use crate::node_context::NodeContext;

/// Output still arriving after the command exited (from processes it left
/// behind holding its stdout) is waited for this long, then dropped.
const OUTPUT_DRAIN: Duration = Duration::from_secs(2);
/// How long the client has to answer the close.
const CLOSE_WAIT: Duration = Duration::from_secs(5);

/// Numbers the spec files of concurrent execs.
static EXEC_SEQUENCE: AtomicU64 = AtomicU64::new(0);

/// Runs the exec to its end (or until the client goes away, which kills
/// the command).
pub(super) async fn run<S>(
    ws: WebSocketStream<S>,
    protocol: Protocol,
    ctx: &NodeContext,
    request: &ExecRequest,
    target: RunningContainer,
) where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (sink, stream) = ws.split();
    let (out_tx, out_rx) = mpsc::channel::<Vec<u8>>(16);
    let writer = tokio::spawn(write_messages(sink, out_rx));
    if request.tty {
        let refused = Outcome::Refused(
            "etcd-lab's node agent does not allocate a TTY: run kubectl exec without -t".into(),
        );
        finish(out_tx, writer, stream, &refused).await;
        return;
    }
    let sequence = EXEC_SEQUENCE.fetch_add(1, Ordering::Relaxed);
    let spec_path = target
        .specs_dir
        .join(format!("{}.exec-{sequence}.json", request.container));
    let mut spec = target.spec.clone();
    spec.argv = request.command.clone();
    let spawned = match serde_json::to_vec(&spec) {
        Ok(json) => match tokio::fs::write(&spec_path, json).await {
            Ok(()) => spawn(ctx, request, &spec_path),
            Err(e) => Err(format!("write {}: {e}", spec_path.display())),
        },
        Err(e) => Err(e.to_string()),
    };
    let mut child = match spawned {
        Ok(child) => child,
        Err(message) => {
            let _ = tokio::fs::remove_file(&spec_path).await;
            finish(out_tx, writer, stream, &Outcome::Failed(message)).await;
            return;
        }
    };
    let (stdin_tx, stdin_task) = match child.stdin.take() {
        Some(stdin) => {
            let (tx, rx) = mpsc::channel::<Vec<u8>>(16);
            (Some(tx), Some(tokio::spawn(write_stdin(stdin, rx))))
        }
        None => (None, None),
    };
    let pumps: Vec<JoinHandle<()>> = [
        child
            .stdout
            .take()
            .map(|out| tokio::spawn(pump(out, channel::STDOUT, out_tx.clone()))),
        child
            .stderr
            .take()
            .map(|err| tokio::spawn(pump(err, channel::STDERR, out_tx.clone()))),
    ]
    .into_iter()
    .flatten()
    .collect();
    let mut reader = tokio::spawn(read_messages(stream, protocol, stdin_tx));
    let outcome = tokio::select! {
        status = child.wait() => match status {
            Ok(status) => Outcome::Exited(exit_code(status)),
            Err(e) => Outcome::Failed(format!("wait for the command: {e}")),
        },
        _ = &mut reader => {
            // The client went away: the command goes too.
            tracing::info!(pod = %request.pod, container = %request.container, "exec client gone: command killed");
            let _ = child.kill().await;
            for task in pumps.iter().chain(stdin_task.iter()) {
                task.abort();
            }
            writer.abort();
            let _ = tokio::fs::remove_file(&spec_path).await;
            return;
        }
    };
    let _ = tokio::fs::remove_file(&spec_path).await;
    if let Some(task) = stdin_task {
        task.abort();
    }
    let aborts: Vec<_> = pumps.iter().map(JoinHandle::abort_handle).collect();
    let drained = tokio::time::timeout(OUTPUT_DRAIN, futures::future::join_all(pumps)).await;
    if drained.is_err() {
        // Aborted, the pumps drop their senders and the writer can end.
        aborts.iter().for_each(tokio::task::AbortHandle::abort);
        tracing::info!(pod = %request.pod, container = %request.container, "exec: output of processes left behind dropped");
    }
    let stream_back = reader;
    send_outcome(out_tx, writer, &outcome).await;
    // The client answers the close; its reader then ends.
    let _ = tokio::time::timeout(CLOSE_WAIT, stream_back).await;
}

/// Spawns `etcd-lab run-container --spec SPEC` with the streams the
/// request asks for.
fn spawn(
    ctx: &NodeContext,
    request: &ExecRequest,
    spec_path: &std::path::Path,
) -> Result<tokio::process::Child, String> {
    let piped_or_null = |wanted: bool| {
        if wanted {
            Stdio::piped()
        } else {
            Stdio::null()
        }
    };
    tokio::process::Command::new(&ctx.config.etcd_lab_binary)
        .arg("run-container")
        .arg("--spec")
        .arg(spec_path)
        .stdin(piped_or_null(request.stdin))
        .stdout(piped_or_null(request.stdout))
        .stderr(piped_or_null(request.stderr))
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| format!("run {}: {e}", ctx.config.etcd_lab_binary.display()))
}

/// The exit code as a container runtime reports it: the code, or 128 plus
/// the number of the signal that ended the process.
fn exit_code(status: std::process::ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => code,
        (None, Some(signal)) => 128 + signal,
        (None, None) => 255,
    }
}

/// Ends an exec that ran nothing: the outcome, then the close.
async fn finish<R>(
    out_tx: mpsc::Sender<Vec<u8>>,
    writer: JoinHandle<()>,
    stream: R,
    outcome: &Outcome,
) where
    R: futures::Stream<Item = Result<Message, tokio_tungstenite::tungstenite::Error>>
        + Unpin
        + Send
        + 'static,
{
    let drain = tokio::spawn(async move {
        let mut stream = stream;
        while let Some(Ok(_)) = stream.next().await {}
    });
    send_outcome(out_tx, writer, outcome).await;
    let _ = tokio::time::timeout(CLOSE_WAIT, drain).await;
}

/// Sends the outcome on the error channel, lets the writer send the rest
/// and the close.
async fn send_outcome(out_tx: mpsc::Sender<Vec<u8>>, writer: JoinHandle<()>, outcome: &Outcome) {
    let status = channel::status(outcome).to_string();
    let _ = out_tx
        .send(channel::frame(channel::ERROR, status.as_bytes()))
        .await;
    drop(out_tx);
    let _ = writer.await;
}

/// Sends every message, then a normal close once every sender is gone
/// (client-go treats any other close code as a broken stream).
async fn write_messages<K>(mut sink: K, mut out_rx: mpsc::Receiver<Vec<u8>>)
where
    K: futures::Sink<Message> + Unpin,
{
    while let Some(message) = out_rx.recv().await {
        if sink.send(Message::binary(message)).await.is_err() {
            return;
        }
    }
    let close = CloseFrame {
        code: CloseCode::Normal,
        reason: "".into(),
    };
    let _ = sink.send(Message::Close(Some(close))).await;
}

/// Reads the client's messages until it closes or goes away, feeding
/// stdin. Reading also answers client-go's pings (tungstenite queues the
/// pong), which kubectl needs to keep the connection.
async fn read_messages<R>(
    mut stream: R,
    protocol: Protocol,
    mut stdin_tx: Option<mpsc::Sender<Vec<u8>>>,
) where
    R: futures::Stream<Item = Result<Message, tokio_tungstenite::tungstenite::Error>> + Unpin,
{
    while let Some(Ok(message)) = stream.next().await {
        let Message::Binary(data) = message else {
            if matches!(message, Message::Close(_)) {
                return;
            }
            continue;
        };
        match channel::incoming(protocol, &data) {
            Incoming::Stdin(bytes) => {
                if let Some(tx) = &stdin_tx
                    && tx.send(bytes.to_vec()).await.is_err()
                {
                    stdin_tx = None;
                }
            }
            // Dropping the sender closes the command's stdin.
            Incoming::StdinClosed => stdin_tx = None,
            Incoming::Ignored => {}
        }
    }
}

async fn write_stdin(mut stdin: tokio::process::ChildStdin, mut rx: mpsc::Receiver<Vec<u8>>) {
    while let Some(bytes) = rx.recv().await {
        if stdin.write_all(&bytes).await.is_err() || stdin.flush().await.is_err() {
            return;
        }
    }
}

/// Copies one output of the command to its channel.
async fn pump<R: AsyncRead + Unpin>(mut output: R, channel: u8, out_tx: mpsc::Sender<Vec<u8>>) {
    let mut buf = vec![0u8; 32 * 1024];
    loop {
        match output.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => {
                if out_tx
                    .send(channel::frame(channel, &buf[..n]))
                    .await
                    .is_err()
                {
                    return;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::ExitStatusExt;

    #[test]
    fn exit_codes_follow_the_runtime_convention() {
        assert_eq!(exit_code(std::process::ExitStatus::from_raw(3 << 8)), 3);
        // Killed by SIGKILL (9).
        assert_eq!(exit_code(std::process::ExitStatus::from_raw(9)), 137);
    }
}
