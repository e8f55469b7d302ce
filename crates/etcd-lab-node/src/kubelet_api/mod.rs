//! The kubelet API on `node_ip:10250` over TLS: what `kubectl logs` and
//! `kubectl exec` reach through the API server.
//!
//! - `GET /containerLogs/{ns}/{pod}/{container}?follow=&tailLines=`
//!   ([`logs`]);
//! - `/exec/{ns}/{pod}/{container}?command=..` over WebSocket
//!   (`v5.channel.k8s.io`, `v4.channel.k8s.io`; [`exec`]). The Node declares
//!   [`DECLARED_FEATURES`], so the API server proxies kubectl's WebSocket
//!   here as it is rather than translating it to SPDY, which is not served.
//!
//! Authentication is TLS only (the API server presents its client
//! certificate; it is not verified against the CA here).

mod exec;
mod http;
mod logs;
mod running_container;

use std::sync::Arc;

use etcd_lab_common::{IoContext, IoError};
use tokio::io::{AsyncRead, AsyncWrite, BufReader};
use tokio::net::TcpListener;

use crate::node_context::NodeContext;
use http::{RequestHead, respond};

/// The kubelet port.
pub const KUBELET_PORT: i32 = 10250;

/// The features the Node declares in `status.declaredFeatures` (sorted, as
/// the API server requires): `ExtendWebSocketsToKubelet` says this kubelet
/// API serves exec over WebSocket itself (Kubernetes 1.36+:
/// `pkg/registry/core/pod/rest/subresources.go` then proxies instead of
/// translating).
pub const DECLARED_FEATURES: &[&str] = &["ExtendWebSocketsToKubelet"];

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

/// Reads the request head and serves the request.
async fn handle<S>(ctx: Arc<NodeContext>, stream: S) -> std::io::Result<()>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let mut reader = BufReader::new(stream);
    let Some(head) = RequestHead::read(&mut reader).await? else {
        return Ok(());
    };
    if let Some(request) = logs::parse_log_request(&head) {
        return logs::serve(&ctx, request, reader.get_mut()).await;
    }
    if let Some(request) = exec::parse_exec_request(&head) {
        return exec::serve(ctx, head, request, reader).await;
    }
    if let Some(what) = not_served(head.path()) {
        let body = format!("{what} is not served by etcd-lab's node agent");
        return respond(reader.get_mut(), 400, "Bad Request", &body).await;
    }
    respond(reader.get_mut(), 404, "Not Found", "").await
}

/// The kubelet streaming endpoints the lab does not serve, named so that
/// kubectl says which: port-forward speaks SPDY (tunnelled over WebSocket
/// in 1.37), and attach would join the main process's stdio, which here is
/// the container's log file.
fn not_served(path: &str) -> Option<&'static str> {
    let first = path.trim_start_matches('/').split('/').next()?;
    match first {
        "portForward" => Some("port-forward (SPDY)"),
        "attach" => Some("attach"),
        _ => None,
    }
}
