//! Just enough HTTP/1.1 for the kubelet API: the request head as the API
//! server sends it (one request per connection), its query, and plain
//! answers written straight to the TLS stream.

use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncWrite, AsyncWriteExt};

/// A request head larger than this is refused (the API server's are a few
/// hundred bytes; an exec command travels in the query).
const MAX_HEAD_BYTES: usize = 64 * 1024;

/// The request line and headers of one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestHead {
    pub method: String,
    /// Path and query, as sent.
    pub target: String,
    headers: Vec<(String, String)>,
}

impl RequestHead {
    /// Reads the head up to its empty line; `None` when the peer sent
    /// nothing usable.
    pub async fn read<R: AsyncBufRead + Unpin>(reader: &mut R) -> std::io::Result<Option<Self>> {
        let mut total = 0;
        let mut line = String::new();
        total += reader.read_line(&mut line).await?;
        let mut parts = line.split_whitespace();
        let (Some(method), Some(target)) = (parts.next(), parts.next()) else {
            return Ok(None);
        };
        let mut head = Self {
            method: method.to_owned(),
            target: target.to_owned(),
            headers: Vec::new(),
        };
        loop {
            let mut header = String::new();
            let n = reader.read_line(&mut header).await?;
            total += n;
            if n == 0 || header.trim().is_empty() {
                break;
            }
            if total > MAX_HEAD_BYTES {
                return Ok(None);
            }
            if let Some((name, value)) = header.split_once(':') {
                head.headers
                    .push((name.trim().to_ascii_lowercase(), value.trim().to_owned()));
            }
        }
        Ok(Some(head))
    }

    /// The value of header `name` (case-insensitive); the first one.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The path, without the query.
    pub fn path(&self) -> &str {
        self.target.split_once('?').map_or(&self.target, |(p, _)| p)
    }

    /// The query's pairs, decoded, in order (repeated keys kept).
    pub fn query(&self) -> Vec<(String, String)> {
        let query = self.target.split_once('?').map_or("", |(_, q)| q);
        query
            .split('&')
            .filter(|pair| !pair.is_empty())
            .map(|pair| {
                let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
                (decode_query_component(k), decode_query_component(v))
            })
            .collect()
    }

    /// Whether the client asks to switch to WebSocket (`Upgrade: websocket`).
    pub fn is_websocket_upgrade(&self) -> bool {
        self.header("upgrade").is_some_and(|u| {
            u.split(',')
                .any(|p| p.trim().eq_ignore_ascii_case("websocket"))
        })
    }
}

/// Decodes one `application/x-www-form-urlencoded` component as Go's
/// `url.Values.Encode` writes it: `+` is a space, `%XX` a byte.
pub fn decode_query_component(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' => match (
                bytes.get(i + 1).and_then(hex),
                bytes.get(i + 2).and_then(hex),
            ) {
                (Some(high), Some(low)) => {
                    out.push(high << 4 | low);
                    i += 2;
                }
                _ => out.push(b'%'),
            },
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn hex(digit: &u8) -> Option<u8> {
    char::from(*digit)
        .to_digit(16)
        .and_then(|d| u8::try_from(d).ok())
}

/// Whether a query value means true (`true` or `1`, as the kubelet parses
/// its boolean parameters).
pub fn is_true(value: &str) -> bool {
    value == "true" || value == "1"
}

/// Writes a complete text answer and closes the connection.
pub async fn respond<W: AsyncWrite + Unpin>(
    stream: &mut W,
    status: u16,
    reason: &str,
    body: &str,
) -> std::io::Result<()> {
    let head = format!(
        "HTTP/1.1 {status} {reason}\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).await?;
    stream.write_all(body.as_bytes()).await?;
    stream.shutdown().await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn reads_the_head_the_api_server_sends_for_exec() {
        let raw = "GET /exec/ns1/etcd-0/etcd?command=sh&command=-c&command=echo+out%3B+exit+3&stdout=true HTTP/1.1\r\nHost: 10.244.1.2:10250\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Protocol: v5.channel.k8s.io\r\n\r\nrest";
        let mut reader = tokio::io::BufReader::new(raw.as_bytes());
        let head = RequestHead::read(&mut reader)
            .await
            .expect("read")
            .expect("head");
        assert_eq!(head.method, "GET");
        assert_eq!(head.path(), "/exec/ns1/etcd-0/etcd");
        assert!(head.is_websocket_upgrade());
        assert_eq!(
            head.header("SEC-WEBSOCKET-PROTOCOL"),
            Some("v5.channel.k8s.io")
        );
        let query = head.query();
        let commands: Vec<&str> = query
            .iter()
            .filter(|(k, _)| k == "command")
            .map(|(_, v)| v.as_str())
            .collect();
        assert_eq!(commands, ["sh", "-c", "echo out; exit 3"]);
    }

    #[test]
    fn decodes_query_components() {
        assert_eq!(decode_query_component("a+b%2Fc"), "a b/c");
        assert_eq!(decode_query_component("100%"), "100%");
        assert_eq!(decode_query_component("%zz"), "%zz");
        assert_eq!(decode_query_component("%C3%A9"), "é");
    }
}
