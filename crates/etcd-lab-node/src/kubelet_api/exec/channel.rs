//! The remote command channel protocol over WebSocket, as kubectl speaks it
//! since Kubernetes 1.30 (client-go `tools/remotecommand/websocket.go`) and
//! the kubelet serves it when it declares `ExtendWebSocketsToKubelet`
//! (k8s.io/streaming `httpstream/wsstream/conn.go`).
//!
//! Every message is binary; its first byte names the channel: 0 stdin,
//! 1 stdout, 2 stderr, 3 error (one `metav1.Status` in JSON, then the
//! connection closes), 4 terminal resize. `v5.channel.k8s.io` adds 255, the
//! half-close of a channel (`[255, channel]`), with which kubectl says
//! stdin reached its end; `v4.channel.k8s.io` has no such signal.

use serde_json::json;

/// Stdin (client to container).
pub const STDIN: u8 = 0;
/// Stdout (container to client).
pub const STDOUT: u8 = 1;
/// Stderr (container to client).
pub const STDERR: u8 = 2;
/// The outcome, as a `metav1.Status`.
pub const ERROR: u8 = 3;
/// Terminal size changes (only with a TTY).
pub const RESIZE: u8 = 4;
/// v5: `[CLOSE, channel]` half-closes `channel`.
pub const CLOSE: u8 = 255;

/// The subprotocols served, most preferred first.
pub const SERVED: [&str; 2] = [V5, V4];
const V5: &str = "v5.channel.k8s.io";
const V4: &str = "v4.channel.k8s.io";

/// A negotiated subprotocol.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    V4,
    V5,
}

impl Protocol {
    /// The name sent back in `Sec-WebSocket-Protocol`.
    pub fn name(self) -> &'static str {
        match self {
            Self::V4 => V4,
            Self::V5 => V5,
        }
    }
}

/// The first protocol of the client's `Sec-WebSocket-Protocol` list that is
/// served (the client's order decides, as in wsstream's handshake).
pub fn negotiate(offered: &str) -> Option<Protocol> {
    offered.split(',').map(str::trim).find_map(|p| match p {
        V5 => Some(Protocol::V5),
        V4 => Some(Protocol::V4),
        _ => None,
    })
}

/// What one client message means.
#[derive(Debug, PartialEq, Eq)]
pub enum Incoming<'a> {
    Stdin(&'a [u8]),
    /// v5: the client's stdin ended.
    StdinClosed,
    /// A terminal resize, or anything else the exec has no use for.
    Ignored,
}

/// Reads one binary message from the client.
pub fn incoming(protocol: Protocol, message: &[u8]) -> Incoming<'_> {
    match message {
        [STDIN, data @ ..] => Incoming::Stdin(data),
        [CLOSE, STDIN] if protocol == Protocol::V5 => Incoming::StdinClosed,
        // No TTY is allocated, so there is nothing to resize.
        [RESIZE, ..] => Incoming::Ignored,
        _ => Incoming::Ignored,
    }
}

/// One message on `channel`.
pub fn frame(channel: u8, data: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(data.len() + 1);
    out.push(channel);
    out.extend_from_slice(data);
    out
}

/// How an exec ended, as told on the error channel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The command exited with this code (a signal as 128 + its number).
    Exited(i32),
    /// The command could not run in the container.
    Failed(String),
    /// The request asks for what is not served.
    Refused(String),
}

/// The `metav1.Status` the kubelet writes on the error channel: `Success`;
/// `NonZeroExitCode` with the code in an `ExitCode` cause (kubectl exits
/// with it); an internal error; or a bad request.
pub fn status(outcome: &Outcome) -> serde_json::Value {
    match outcome {
        Outcome::Exited(0) => json!({"metadata": {}, "status": "Success"}),
        Outcome::Exited(code) => json!({
            "metadata": {},
            "status": "Failure",
            "message": format!("command terminated with non-zero exit code: exit status {code}"),
            "reason": "NonZeroExitCode",
            "details": {"causes": [{"reason": "ExitCode", "message": code.to_string()}]}
        }),
        Outcome::Failed(message) => json!({
            "metadata": {},
            "status": "Failure",
            "message": format!("Internal error occurred: error executing command in container: {message}"),
            "reason": "InternalError",
            "details": {"causes": [{"message": format!("error executing command in container: {message}")}]},
            "code": 500
        }),
        Outcome::Refused(message) => json!({
            "metadata": {},
            "status": "Failure",
            "message": message,
            "reason": "BadRequest",
            "code": 400
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn negotiates_in_the_clients_order() {
        assert_eq!(negotiate("v5.channel.k8s.io"), Some(Protocol::V5));
        assert_eq!(
            negotiate("v4.channel.k8s.io, v5.channel.k8s.io"),
            Some(Protocol::V4)
        );
        assert_eq!(
            negotiate("channel.k8s.io,v5.channel.k8s.io"),
            Some(Protocol::V5)
        );
        assert_eq!(negotiate("SPDY/3.1+portforward.k8s.io"), None);
        assert_eq!(negotiate(""), None);
    }

    #[test]
    fn reads_stdin_and_its_close_only_in_v5() {
        assert_eq!(
            incoming(Protocol::V5, &[STDIN, b'h', b'i']),
            Incoming::Stdin(b"hi")
        );
        assert_eq!(
            incoming(Protocol::V5, &[CLOSE, STDIN]),
            Incoming::StdinClosed
        );
        assert_eq!(incoming(Protocol::V4, &[CLOSE, STDIN]), Incoming::Ignored);
        assert_eq!(incoming(Protocol::V5, &[RESIZE, b'{']), Incoming::Ignored);
        assert_eq!(incoming(Protocol::V5, &[]), Incoming::Ignored);
        assert_eq!(frame(STDERR, b"x"), [STDERR, b'x']);
    }

    /// The fields client-go's `errorDecoderV4` reads: `status`, `reason`
    /// and the `ExitCode` cause whose message parses as a byte.
    #[test]
    fn exit_codes_are_told_as_kubectl_reads_them() {
        assert_eq!(status(&Outcome::Exited(0))["status"], "Success");
        let failed = status(&Outcome::Exited(3));
        assert_eq!(failed["status"], "Failure");
        assert_eq!(failed["reason"], "NonZeroExitCode");
        assert_eq!(failed["details"]["causes"][0]["reason"], "ExitCode");
        assert_eq!(failed["details"]["causes"][0]["message"], "3");
        let internal = status(&Outcome::Failed("no such container".into()));
        assert_eq!(internal["code"], 500);
        assert!(
            internal["message"]
                .as_str()
                .is_some_and(|m| m.ends_with("no such container"))
        );
        assert_eq!(status(&Outcome::Refused("no".into()))["message"], "no");
    }
}
