//! Probes executed for real: exec (a process in the container's view, via
//! the runner), httpGet (HTTP, or HTTPS with a TLS handshake that, like
//! the kubelet's, does not verify the server's certificate) and tcpSocket
//! against the pod IP (as the kubelet does from its node), and grpc with
//! the standard health service over plaintext HTTP/2 ([`grpc`]).

pub mod grpc;

use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Container, Probe};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::mpsc;

use etcd_lab_common::{IoContext, IoError};

use crate::container::ContainerSpec;

/// Why one probe attempt failed.
#[derive(Debug, thiserror::Error)]
pub enum ProbeFailure {
    #[error("invalid port {0}")]
    InvalidPort(i32),
    #[error("named port {0:?} not found")]
    NamedPortNotFound(String),
    #[error("probe has no handler")]
    NoHandler,
    #[error("timeout after {}s", .0.as_secs())]
    Timeout(Duration),
    #[error(transparent)]
    Io(#[from] IoError),
    #[error("bad HTTP response {0:?}")]
    BadResponse(String),
    #[error("HTTP probe failed with statuscode: {0}")]
    HttpStatus(u16),
    #[error("TLS: {0}")]
    Tls(String),
    #[error("gRPC health check: {0}")]
    Grpc(String),
    #[error("exec probe without command")]
    NoCommand,
    #[error("exec probe spec: {0}")]
    Spec(#[from] serde_json::Error),
    #[error("command failed ({status}): {output}")]
    CommandFailed { status: String, output: String },
}

/// Which probe.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProbeKind {
    Startup,
    Liveness,
    Readiness,
}

/// What a container's probe loop reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProbeEvent {
    /// Startup probe succeeded (or there is none).
    Started,
    /// Readiness changed.
    Ready(bool),
    /// Liveness or startup probe failed `failureThreshold` times: restart.
    Unhealthy(ProbeKind, String),
}

/// How to run exec probes: the runner binary and a spec to copy.
#[derive(Debug, Clone)]
pub struct ExecTarget {
    pub lab_binary: PathBuf,
    pub spec: ContainerSpec,
    pub spec_path: PathBuf,
}

/// Everything a container's probe loop needs.
#[derive(Debug, Clone)]
pub struct ProbeTarget {
    pub pod_ip: Ipv4Addr,
    pub container: Container,
    pub exec: ExecTarget,
}

fn seconds(v: Option<i32>, default: i32) -> Duration {
    Duration::from_secs(u64::try_from(v.unwrap_or(default).max(0)).unwrap_or(0))
}

/// Runs the probes of one container until the receiver is dropped.
pub async fn run_probes(target: ProbeTarget, events: mpsc::Sender<ProbeEvent>) {
    let c = target.container.clone();
    if let Some(startup) = &c.startup_probe
        && !probe_loop(&target, startup, ProbeKind::Startup, &events).await
    {
        return;
    }
    if events.send(ProbeEvent::Started).await.is_err() {
        return;
    }
    let liveness = c.liveness_probe.clone().map(|p| {
        let target = target.clone();
        let events = events.clone();
        tokio::spawn(async move {
            probe_loop(&target, &p, ProbeKind::Liveness, &events).await;
        })
    });
    match &c.readiness_probe {
        Some(p) => {
            probe_loop(&target, p, ProbeKind::Readiness, &events).await;
        }
        None => {
            if events.send(ProbeEvent::Ready(true)).await.is_ok() {
                events.closed().await;
            }
        }
    }
    if let Some(l) = liveness {
        l.abort();
    }
}

/// Runs one probe periodically. For startup, returns true once it succeeds;
/// returns false when the container must restart or the receiver is gone.
async fn probe_loop(
    target: &ProbeTarget,
    probe: &Probe,
    kind: ProbeKind,
    events: &mpsc::Sender<ProbeEvent>,
) -> bool {
    let period = seconds(probe.period_seconds, 10).max(Duration::from_secs(1));
    let timeout = seconds(probe.timeout_seconds, 1).max(Duration::from_secs(1));
    let failure_threshold = probe.failure_threshold.unwrap_or(3).max(1);
    let success_threshold = probe.success_threshold.unwrap_or(1).max(1);
    tokio::time::sleep(seconds(probe.initial_delay_seconds, 0)).await;
    let (mut successes, mut failures) = (0, 0);
    let mut ready: Option<bool> = None;
    loop {
        if events.is_closed() {
            return false;
        }
        let result = tokio::time::timeout(timeout, probe_once(target, probe))
            .await
            .unwrap_or(Err(ProbeFailure::Timeout(timeout)));
        match result {
            Ok(()) => {
                successes += 1;
                failures = 0;
                match kind {
                    ProbeKind::Startup => return true,
                    ProbeKind::Readiness
                        if successes >= success_threshold && ready != Some(true) =>
                    {
                        ready = Some(true);
                        if events.send(ProbeEvent::Ready(true)).await.is_err() {
                            return false;
                        }
                    }
                    _ => {}
                }
            }
            Err(message) => {
                failures += 1;
                successes = 0;
                tracing::debug!(container = %target.container.name, ?kind, "probe failed: {message}");
                if failures >= failure_threshold {
                    match kind {
                        ProbeKind::Readiness => {
                            if ready != Some(false) {
                                ready = Some(false);
                                if events.send(ProbeEvent::Ready(false)).await.is_err() {
                                    return false;
                                }
                            }
                        }
                        ProbeKind::Liveness | ProbeKind::Startup => {
                            let _ = events
                                .send(ProbeEvent::Unhealthy(kind, message.to_string()))
                                .await;
                            return false;
                        }
                    }
                }
            }
        }
        tokio::time::sleep(period).await;
    }
}

fn resolve_port(container: &Container, port: &IntOrString) -> Result<u16, ProbeFailure> {
    match port {
        IntOrString::Int(p) => u16::try_from(*p).map_err(|_| ProbeFailure::InvalidPort(*p)),
        IntOrString::String(name) => container
            .ports
            .iter()
            .flatten()
            .find(|p| p.name.as_deref() == Some(name.as_str()))
            .and_then(|p| u16::try_from(p.container_port).ok())
            .ok_or_else(|| ProbeFailure::NamedPortNotFound(name.clone())),
    }
}

/// Runs a probe once: `Ok` on success, `Err(reason)` on failure.
pub async fn probe_once(target: &ProbeTarget, probe: &Probe) -> Result<(), ProbeFailure> {
    let host = |h: Option<&String>| h.cloned().unwrap_or_else(|| target.pod_ip.to_string());
    if let Some(exec) = &probe.exec {
        return exec_probe(&target.exec, exec.command.clone().unwrap_or_default()).await;
    }
    if let Some(http) = &probe.http_get {
        let port = resolve_port(&target.container, &http.port)?;
        let path = http.path.clone().unwrap_or_else(|| "/".into());
        let headers: Vec<(String, String)> = http
            .http_headers
            .iter()
            .flatten()
            .map(|h| (h.name.clone(), h.value.clone()))
            .collect();
        let host = host(http.host.as_ref());
        if http.scheme.as_deref() == Some("HTTPS") {
            return https_probe(&host, port, &path, &headers).await;
        }
        return http_probe(&host, port, &path, &headers).await;
    }
    if let Some(tcp) = &probe.tcp_socket {
        let port = resolve_port(&target.container, &tcp.port)?;
        return tcp_probe(&host(tcp.host.as_ref()), port).await;
    }
    if let Some(probe) = &probe.grpc {
        let port = u16::try_from(probe.port).map_err(|_| ProbeFailure::InvalidPort(probe.port))?;
        let service = probe.service.as_deref().unwrap_or_default();
        return grpc::health_check(&target.pod_ip.to_string(), port, service).await;
    }
    Err(ProbeFailure::NoHandler)
}

async fn tcp_probe(host: &str, port: u16) -> Result<(), ProbeFailure> {
    TcpStream::connect((host, port))
        .await
        .context(|| format!("dial tcp {host}:{port}"))?;
    Ok(())
}

async fn http_probe(
    host: &str,
    port: u16,
    path: &str,
    headers: &[(String, String)],
) -> Result<(), ProbeFailure> {
    let stream = TcpStream::connect((host, port))
        .await
        .context(|| format!("dial tcp {host}:{port}"))?;
    http_get(stream, host, port, path, headers).await
}

/// An HTTPS probe as the kubelet makes it: TLS without checking the
/// server's certificate (the kubelet sets `InsecureSkipVerify`), no client
/// certificate, then the same GET as over HTTP.
async fn https_probe(
    host: &str,
    port: u16,
    path: &str,
    headers: &[(String, String)],
) -> Result<(), ProbeFailure> {
    let tcp = TcpStream::connect((host, port))
        .await
        .context(|| format!("dial tcp {host}:{port}"))?;
    let config = rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|e| ProbeFailure::Tls(e.to_string()))?
    .dangerous()
    .with_custom_certificate_verifier(std::sync::Arc::new(AnyServerCertificate::new()))
    .with_no_client_auth();
    let name = rustls::pki_types::ServerName::try_from(host.to_owned())
        .map_err(|e| ProbeFailure::Tls(e.to_string()))?;
    let stream = tokio_rustls::TlsConnector::from(std::sync::Arc::new(config))
        .connect(name, tcp)
        .await
        .map_err(|e| ProbeFailure::Tls(format!("handshake with {host}:{port}: {e}")))?;
    http_get(stream, host, port, path, headers).await
}

/// Accepts any server certificate, checking only that the handshake's
/// signatures are made with the key it presents (what the kubelet's
/// `InsecureSkipVerify` leaves of TLS).
#[derive(Debug)]
struct AnyServerCertificate(rustls::crypto::WebPkiSupportedAlgorithms);

impl AnyServerCertificate {
    fn new() -> Self {
        Self(rustls::crypto::ring::default_provider().signature_verification_algorithms)
    }
}

impl rustls::client::danger::ServerCertVerifier for AnyServerCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &rustls::pki_types::CertificateDer<'_>,
        _intermediates: &[rustls::pki_types::CertificateDer<'_>],
        _server_name: &rustls::pki_types::ServerName<'_>,
        _ocsp_response: &[u8],
        _now: rustls::pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.0)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.0)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.supported_schemes()
    }
}

/// Sends the probe's GET on `stream` and reads the status: 2xx and 3xx
/// succeed.
async fn http_get<S>(
    mut stream: S,
    host: &str,
    port: u16,
    path: &str,
    headers: &[(String, String)],
) -> Result<(), ProbeFailure>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    let mut request = format!(
        "GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\nUser-Agent: kube-probe/etcd-lab\r\nAccept: */*\r\nConnection: close\r\n"
    );
    for (k, v) in headers {
        request.push_str(&format!("{k}: {v}\r\n"));
    }
    request.push_str("\r\n");
    stream
        .write_all(request.as_bytes())
        .await
        .context(|| format!("send GET {path} to {host}:{port}"))?;
    let mut buf = vec![0u8; 1024];
    let n = stream
        .read(&mut buf)
        .await
        .context(|| format!("read the answer of {host}:{port}"))?;
    let head = String::from_utf8_lossy(&buf[..n]);
    let code = http_status(&head).ok_or_else(|| ProbeFailure::BadResponse(head.to_string()))?;
    if (200..400).contains(&code) {
        Ok(())
    } else {
        Err(ProbeFailure::HttpStatus(code))
    }
}

/// Status code of an HTTP response head.
pub fn http_status(head: &str) -> Option<u16> {
    let line = head.lines().next()?;
    let mut parts = line.split_whitespace();
    if !parts.next()?.starts_with("HTTP/") {
        return None;
    }
    parts.next()?.parse().ok()
}

async fn exec_probe(target: &ExecTarget, command: Vec<String>) -> Result<(), ProbeFailure> {
    if command.is_empty() {
        return Err(ProbeFailure::NoCommand);
    }
    let mut spec = target.spec.clone();
    spec.argv = command;
    let json = serde_json::to_string(&spec)?;
    tokio::fs::write(&target.spec_path, json)
        .await
        .context(|| format!("write {}", target.spec_path.display()))?;
    let output = tokio::process::Command::new(&target.lab_binary)
        .arg("run-container")
        .arg("--spec")
        .arg(&target.spec_path)
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true)
        .output()
        .await
        .context(|| "spawn exec probe".into())?;
    if output.status.success() {
        Ok(())
    } else {
        let mut text = String::from_utf8_lossy(&output.stdout).into_owned();
        text.push_str(&String::from_utf8_lossy(&output.stderr));
        Err(ProbeFailure::CommandFailed {
            status: output.status.to_string(),
            output: text.trim().to_owned(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_status_line() {
        assert_eq!(http_status("HTTP/1.1 200 OK\r\n"), Some(200));
        assert_eq!(http_status("HTTP/1.0 503 Service Unavailable"), Some(503));
        assert_eq!(http_status("garbage"), None);
    }

    #[tokio::test]
    async fn tcp_and_http_probes_against_a_real_listener() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let port = listener.local_addr().expect("addr").port();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = listener.accept().await {
                let mut buf = [0u8; 512];
                let n = s.read(&mut buf).await.unwrap_or(0);
                let req = String::from_utf8_lossy(&buf[..n]).to_string();
                let body = if req.starts_with("GET /ok") {
                    "HTTP/1.1 200 OK\r\n\r\n"
                } else {
                    "HTTP/1.1 500 Oops\r\n\r\n"
                };
                let _ = s.write_all(body.as_bytes()).await;
            }
        });
        assert!(tcp_probe("127.0.0.1", port).await.is_ok());
        assert!(http_probe("127.0.0.1", port, "/ok", &[]).await.is_ok());
        assert!(http_probe("127.0.0.1", port, "/bad", &[]).await.is_err());
        // Plain HTTP is not TLS: an HTTPS probe of it fails.
        assert!(matches!(
            https_probe("127.0.0.1", port, "/ok", &[]).await,
            Err(ProbeFailure::Tls(_))
        ));
    }

    #[tokio::test]
    async fn an_https_probe_shakes_hands_with_any_certificate_and_reads_the_status() {
        let certified =
            rcgen::generate_simple_self_signed(vec!["not-the-pod-ip.example".to_owned()])
                .expect("certificate");
        let key =
            rustls::pki_types::PrivateKeyDer::Pkcs8(certified.signing_key.serialize_der().into());
        let config = rustls::ServerConfig::builder_with_provider(std::sync::Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_no_client_auth()
        .with_single_cert(vec![certified.cert.der().clone()], key)
        .expect("server config");
        let acceptor = tokio_rustls::TlsAcceptor::from(std::sync::Arc::new(config));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let port = listener.local_addr().expect("addr").port();
        tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let Ok(mut s) = acceptor.accept(tcp).await else {
                    continue;
                };
                let mut buf = [0u8; 512];
                let n = s.read(&mut buf).await.unwrap_or(0);
                let req = String::from_utf8_lossy(&buf[..n]).to_string();
                let body = if req.starts_with("GET /readyz") {
                    "HTTP/1.1 200 OK\r\n\r\nok"
                } else {
                    "HTTP/1.1 503 Service Unavailable\r\n\r\n"
                };
                let _ = s.write_all(body.as_bytes()).await;
                let _ = s.shutdown().await;
            }
        });
        // A self-signed certificate for another name: accepted, as by the
        // kubelet; the status decides.
        assert!(https_probe("127.0.0.1", port, "/readyz", &[]).await.is_ok());
        assert!(matches!(
            https_probe("127.0.0.1", port, "/other", &[]).await,
            Err(ProbeFailure::HttpStatus(503))
        ));
        // TLS is not plain HTTP: an HTTP probe of it fails.
        assert!(http_probe("127.0.0.1", port, "/readyz", &[]).await.is_err());
    }
}
