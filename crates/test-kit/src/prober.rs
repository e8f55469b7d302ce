//! A Pod that opens connections from where it runs, on the test's request:
//! what another Pod of its namespace would reach. It serves on :8080
//! (asked from the host, which reaches every Pod):
//!
//! - `/reach?host=H&port=P`: a TCP connection to `H:P` within 3 s, as
//!   `open`, `timeout` (nothing answered: dropped), `refused` or
//!   `error: ...`;
//! - `/put?url=U&key=K&value=V` and `/get?url=U&key=K`: a write and a read
//!   through etcd's JSON gateway at `U`, with the client certificate of the
//!   Secret mounted at `/var/run/etcd-client` (`ca.crt`, `tls.crt`, `tls.key`).

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::PostParams;
use kube::{Api, Client};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::TestResult;
use crate::conditions::pod_ready;
use crate::poll::wait_for;

/// Where the client Secret is mounted.
pub const CLIENT_TLS_DIR: &str = "/var/run/etcd-client";
const PORT: u16 = 8080;

/// The network namespace where `etcd-lab exec` runs commands: the lab's
/// client, outside the Pod network (`10.244.250.2`).
pub const CLIENT_NETNS: &str = "etcdlab-client";

/// How the prober judges a connection attempt.
const REACH: &str = r#"
import socket
def reach(host, port):
    try:
        socket.create_connection((host, int(port)), timeout=3).close()
        return "open"
    except TimeoutError:
        return "timeout"
    except ConnectionRefusedError:
        return "refused"
    except OSError as e:
        return "error: %s" % e
"#;

/// The prober's server, after [`REACH`].
const SERVER: &str = r#"
import base64, http.server, json, ssl, urllib.parse, urllib.request
TLS = "/var/run/etcd-client"
def etcd(url, path, body):
    context = ssl.create_default_context(cafile=TLS + "/ca.crt")
    context.load_cert_chain(TLS + "/tls.crt", TLS + "/tls.key")
    request = urllib.request.Request(url + path, data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=5, context=context) as response:
        return json.loads(response.read().decode())
def b64(text):
    return base64.b64encode(text.encode()).decode()
class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        url = urllib.parse.urlparse(self.path)
        q = dict(urllib.parse.parse_qsl(url.query))
        try:
            if url.path == "/reach":
                body = reach(q["host"], q["port"])
            elif url.path == "/put":
                etcd(q["url"], "/v3/kv/put", {"key": b64(q["key"]), "value": b64(q["value"])})
                body = "ok"
            elif url.path == "/get":
                kvs = etcd(q["url"], "/v3/kv/range", {"key": b64(q["key"])}).get("kvs", [])
                body = base64.b64decode(kvs[0]["value"]).decode() if kvs else ""
            else:
                body = "ready"
            code = 200
        except Exception as e:
            body, code = "error: %r" % e, 500
        data = body.encode()
        self.send_response(code)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
    def log_message(self, *args):
        pass
http.server.ThreadingHTTPServer(("", 8080), Handler).serve_forever()
"#;

/// Opens a connection to `host:port` from [`CLIENT_NETNS`], as a client
/// outside the Pod network would.
pub async fn reach_from_client_namespace(host: &str, port: u16) -> TestResult<Reach> {
    let program = format!("{REACH}\nimport sys\nprint(reach(sys.argv[1], sys.argv[2]))");
    let output = tokio::process::Command::new("ip")
        .args(["netns", "exec", CLIENT_NETNS, "/usr/bin/python3", "-c"])
        .arg(program)
        .arg(host)
        .arg(port.to_string())
        .output()
        .await?;
    if !output.status.success() {
        return Err(format!(
            "reach from {CLIENT_NETNS}: {}",
            String::from_utf8_lossy(&output.stderr)
        )
        .into());
    }
    Ok(Reach::of(String::from_utf8_lossy(&output.stdout).trim()))
}

/// What a connection attempt from the prober met.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reach {
    /// The connection was accepted.
    Open,
    /// Nothing answered within 3 s: the packets were dropped.
    TimedOut,
    /// The destination refused it (nothing listens there).
    Refused,
    /// Anything else, as the prober said it.
    Other(String),
}

impl Reach {
    /// The prober's word for it.
    fn of(answer: &str) -> Self {
        match answer {
            "open" => Self::Open,
            "timeout" => Self::TimedOut,
            "refused" => Self::Refused,
            other => Self::Other(other.to_owned()),
        }
    }
}

/// A prober Pod, by its address.
pub struct Prober {
    /// `namespace/name`.
    pub id: String,
    ip: String,
}

impl Prober {
    /// Creates prober `name` in `namespace` (with the Secret
    /// `client_secret` mounted at [`CLIENT_TLS_DIR`] when given) and waits
    /// until it is Ready.
    pub async fn start(
        client: &Client,
        namespace: &str,
        name: &str,
        client_secret: Option<&str>,
    ) -> TestResult<Self> {
        let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
        let (volumes, mounts) = match client_secret {
            Some(secret) => (
                json!([{"name": "etcd-client", "secret": {"secretName": secret}}]),
                json!([{"name": "etcd-client", "mountPath": CLIENT_TLS_DIR, "readOnly": true}]),
            ),
            None => (json!([]), json!([])),
        };
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": name, "labels": {"app": "prober"}},
            "spec": {
                "terminationGracePeriodSeconds": 1,
                "containers": [{
                    "name": "prober",
                    "image": "lab.local/host",
                    "command": ["/usr/bin/python3", "-u", "-c", format!("{REACH}{SERVER}")],
                    "ports": [{"name": "http", "containerPort": PORT}],
                    "readinessProbe": {"tcpSocket": {"port": PORT}, "periodSeconds": 1},
                    "volumeMounts": mounts,
                }],
                "volumes": volumes,
            }
        }))?;
        pods.create(&PostParams::default(), &pod).await?;
        wait_for(
            &format!("prober {namespace}/{name} to be Ready"),
            Duration::from_secs(90),
            || async { Ok(pod_ready(&pods.get(name).await?)) },
        )
        .await?;
        let ip = pods
            .get(name)
            .await?
            .status
            .and_then(|s| s.pod_ip)
            .ok_or_else(|| format!("prober {namespace}/{name} has no address"))?;
        Ok(Self {
            id: format!("{namespace}/{name}"),
            ip,
        })
    }

    /// Opens a connection to `host:port` from the prober.
    pub async fn reach(&self, host: &str, port: u16) -> TestResult<Reach> {
        let answer = self
            .ask(&format!("/reach?host={}&port={port}", query(host)))
            .await?;
        Ok(Reach::of(&answer))
    }

    /// Writes `key` = `value` through etcd's gateway at `url`.
    pub async fn put(&self, url: &str, key: &str, value: &str) -> TestResult {
        match self
            .ask(&format!(
                "/put?url={}&key={}&value={}",
                query(url),
                query(key),
                query(value)
            ))
            .await?
            .as_str()
        {
            "ok" => Ok(()),
            other => Err(format!("{} could not write {key}: {other}", self.id).into()),
        }
    }

    /// Reads `key` through etcd's gateway at `url` (empty: no such key).
    pub async fn get(&self, url: &str, key: &str) -> TestResult<String> {
        let answer = self
            .ask(&format!("/get?url={}&key={}", query(url), query(key)))
            .await?;
        if answer.starts_with("error: ") {
            return Err(format!("{} could not read {key}: {answer}", self.id).into());
        }
        Ok(answer)
    }

    /// GETs `path` from the prober; its body.
    async fn ask(&self, path: &str) -> TestResult<String> {
        let mut stream = tokio::time::timeout(
            Duration::from_secs(5),
            TcpStream::connect((self.ip.as_str(), PORT)),
        )
        .await??;
        stream
            .write_all(format!("GET {path} HTTP/1.0\r\n\r\n").as_bytes())
            .await?;
        let mut response = String::new();
        tokio::time::timeout(
            Duration::from_secs(15),
            stream.read_to_string(&mut response),
        )
        .await??;
        let body = response
            .split_once("\r\n\r\n")
            .map(|(_, body)| body.to_owned())
            .ok_or_else(|| format!("{}: no answer to {path}: {response:?}", self.id))?;
        Ok(body)
    }
}

/// `text` as a query value: everything but unreserved characters and `:`,
/// `/` percent-encoded.
fn query(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' | b':' | b'/' => {
                char::from(b).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_values_keep_urls_readable_and_escape_the_rest() {
        assert_eq!(
            query("https://demo-client.ns.svc.cluster.local:2379"),
            "https://demo-client.ns.svc.cluster.local:2379"
        );
        assert_eq!(query("a b&c=d"), "a%20b%26c%3Dd");
    }
}
