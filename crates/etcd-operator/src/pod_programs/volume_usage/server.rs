//! The sidecar's HTTP server: `GET /volume-usage`, measured per request,
//! and `GET /wal-tail`, the member's write-ahead log read per request.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use tokio::net::TcpListener;

use super::measure::measure;
use crate::pod_contract::{VOLUME_USAGE_PATH, WAL_TAIL_PATH, WalTailReport};

/// Pause before binding again after the address could not be bound or
/// the server stopped.
const RETRY_PAUSE: Duration = Duration::from_secs(5);

/// The sidecar's routes for the volume of `data_dir`.
pub fn router(data_dir: PathBuf) -> Router {
    Router::new()
        .route(VOLUME_USAGE_PATH, get(volume_usage))
        .route(WAL_TAIL_PATH, get(wal_tail))
        .with_state(Arc::new(data_dir))
}

/// Serves on `listener` until it fails.
pub async fn serve(listener: TcpListener, data_dir: PathBuf) -> std::io::Result<()> {
    axum::serve(listener, router(data_dir)).await
}

/// Serves on `address` for as long as the future runs: an address that
/// cannot be bound, or a server that stops, is retried after a pause, so
/// the sidecar never exits on its own (a container that exits makes the
/// member Pod unready).
pub async fn serve_forever(address: SocketAddr, data_dir: PathBuf) {
    loop {
        match TcpListener::bind(address).await {
            Ok(listener) => {
                tracing::info!(%address, data_dir = %data_dir.display(), "serving {VOLUME_USAGE_PATH}");
                if let Err(error) = serve(listener, data_dir.clone()).await {
                    tracing::warn!(%address, "server stopped: {error}");
                }
            }
            Err(error) => tracing::warn!(%address, "cannot listen: {error}"),
        }
        tokio::time::sleep(RETRY_PAUSE).await;
    }
}

async fn volume_usage(State(data_dir): State<Arc<PathBuf>>) -> Response {
    let measured = tokio::task::spawn_blocking(move || measure(&data_dir)).await;
    match measured {
        Ok(Ok(usage)) => (
            StatusCode::OK,
            [(header::CONTENT_TYPE, "application/json")],
            usage.to_json(),
        )
            .into_response(),
        Ok(Err(error)) => {
            tracing::warn!("{error}");
            failure(error.to_string())
        }
        Err(error) => failure(format!("the measurement did not finish: {error}")),
    }
}

/// Reads the log under `<data dir>/member/wal`, read-only.
async fn wal_tail(State(data_dir): State<Arc<PathBuf>>) -> Response {
    let wal_dir = data_dir.join("member").join("wal");
    let read =
        tokio::task::spawn_blocking(move || crate::pod_programs::wal::read_wal_tail(&wal_dir))
            .await;
    match read {
        Ok(Ok(tail)) => (
            StatusCode::OK,
            [(header::CONTENT_TYPE, "application/json")],
            WalTailReport {
                last_index: tail.last_index,
                last_term: tail.last_term,
                persisted_commit: tail.persisted_commit,
                torn: tail.torn,
            }
            .to_json(),
        )
            .into_response(),
        Ok(Err(error)) => {
            tracing::warn!("{error}");
            failure(error.to_string())
        }
        Err(error) => failure(format!("reading the WAL did not finish: {error}")),
    }
}

fn failure(text: String) -> Response {
    (
        StatusCode::INTERNAL_SERVER_ERROR,
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        format!("{text}\n"),
    )
        .into_response()
}
