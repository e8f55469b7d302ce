//! The HTTP server of `/metrics`, `/healthz` and `/readyz`.

use std::net::SocketAddr;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;

use super::{Health, Metrics};

/// The server could not start.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The address could not be bound.
    #[error("cannot listen on {address}: {source}")]
    Bind {
        /// Address asked for.
        address: SocketAddr,
        /// Cause.
        source: std::io::Error,
    },
    /// The server stopped with an I/O error.
    #[error("metrics and health server failed: {0}")]
    Serve(#[source] std::io::Error),
}

#[derive(Clone)]
struct AppState {
    metrics: Metrics,
    health: Health,
}

fn router(metrics: Metrics, health: Health) -> Router {
    Router::new()
        .route("/metrics", get(metrics_handler))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .with_state(AppState { metrics, health })
}

/// Serves the endpoints on `address` until the future is dropped.
pub async fn serve(
    address: SocketAddr,
    metrics: Metrics,
    health: Health,
) -> Result<(), ServeError> {
    let listener = tokio::net::TcpListener::bind(address)
        .await
        .map_err(|source| ServeError::Bind { address, source })?;
    // The address bound (a port 0 asked for is a free port chosen now).
    let address = listener.local_addr().unwrap_or(address);
    tracing::info!(%address, "serving /metrics, /healthz and /readyz");
    axum::serve(listener, router(metrics, health))
        .await
        .map_err(ServeError::Serve)
}

async fn metrics_handler(State(state): State<AppState>) -> impl IntoResponse {
    match state.metrics.encode() {
        Ok(body) => (
            StatusCode::OK,
            [(
                header::CONTENT_TYPE,
                "application/openmetrics-text; version=1.0.0; charset=utf-8",
            )],
            body,
        ),
        Err(_) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
            "metrics encoding failed\n".to_owned(),
        ),
    }
}

/// Liveness: answering is enough. Never depends on the API server or etcd.
async fn healthz() -> &'static str {
    "ok\n"
}

async fn readyz(State(state): State<AppState>) -> (StatusCode, &'static str) {
    if state.health.is_ready() {
        (StatusCode::OK, "ready\n")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "not ready\n")
    }
}
