//! The gRPC probe as the kubelet makes it: the standard health service
//! (`grpc.health.v1.Health/Check`) over plaintext HTTP/2 to the pod IP,
//! with the probe's `service` (empty by default); only `SERVING` passes.
//! Like the kubelet's, it speaks no TLS.

use bytes::{Bytes, BytesMut};
use tokio::net::TcpStream;

use etcd_lab_common::IoContext;

use super::ProbeFailure;

/// The health service's method.
const CHECK_PATH: &str = "/grpc.health.v1.Health/Check";

/// `HealthCheckResponse.ServingStatus` values.
const SERVING: u64 = 1;

/// Checks the health of `service` on `host:port`.
pub async fn health_check(host: &str, port: u16, service: &str) -> Result<(), ProbeFailure> {
    let failed = |what: &str, e: &dyn std::fmt::Display| {
        ProbeFailure::Grpc(format!("{what} {host}:{port}: {e}"))
    };
    let tcp = TcpStream::connect((host, port))
        .await
        .context(|| format!("dial tcp {host}:{port}"))?;
    let (client, connection) = h2::client::handshake(tcp)
        .await
        .map_err(|e| failed("HTTP/2 handshake with", &e))?;
    let driver = tokio::spawn(async move {
        let _ = connection.await;
    });
    let outcome = check(client, host, port, service).await;
    driver.abort();
    outcome
}

async fn check(
    client: h2::client::SendRequest<Bytes>,
    host: &str,
    port: u16,
    service: &str,
) -> Result<(), ProbeFailure> {
    let failed = |what: &str, e: &dyn std::fmt::Display| {
        ProbeFailure::Grpc(format!("{what} {host}:{port}: {e}"))
    };
    let mut client = client
        .ready()
        .await
        .map_err(|e| failed("connection to", &e))?;
    let request = http::Request::builder()
        .method(http::Method::POST)
        .uri(format!("http://{host}:{port}{CHECK_PATH}"))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(())
        .map_err(|e| failed("request to", &e))?;
    let (response, mut body) = client
        .send_request(request, false)
        .map_err(|e| failed("request to", &e))?;
    body.send_data(frame(&check_request(service)), true)
        .map_err(|e| failed("request to", &e))?;
    let response = response.await.map_err(|e| failed("response of", &e))?;
    if response.status() != http::StatusCode::OK {
        return Err(ProbeFailure::Grpc(format!(
            "{host}:{port} answered HTTP {}",
            response.status()
        )));
    }
    // A trailers-only answer carries grpc-status in its headers.
    let headers_status = grpc_status(response.headers());
    let mut stream = response.into_body();
    let mut received = BytesMut::new();
    while let Some(chunk) = stream.data().await {
        let chunk = chunk.map_err(|e| failed("response body of", &e))?;
        let _ = stream.flow_control().release_capacity(chunk.len());
        received.extend_from_slice(&chunk);
    }
    let trailers = stream
        .trailers()
        .await
        .map_err(|e| failed("response trailers of", &e))?;
    let status = trailers
        .as_ref()
        .and_then(grpc_status)
        .or(headers_status)
        .ok_or_else(|| ProbeFailure::Grpc(format!("{host}:{port} sent no grpc-status")))?;
    if status.0 != "0" {
        return Err(ProbeFailure::Grpc(format!(
            "rpc error: code = {}, desc = {}",
            status.0, status.1
        )));
    }
    match serving_status(&received) {
        Some(SERVING) => Ok(()),
        other => Err(ProbeFailure::Grpc(format!(
            "service unhealthy (responded with {:?})",
            status_name(other)
        ))),
    }
}

/// `grpc-status` and `grpc-message` of a header map.
fn grpc_status(headers: &http::HeaderMap) -> Option<(String, String)> {
    let text = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    Some((
        text("grpc-status")?,
        text("grpc-message").unwrap_or_default(),
    ))
}

/// The protobuf `HealthCheckRequest { string service = 1; }`.
fn check_request(service: &str) -> Vec<u8> {
    let mut message = Vec::new();
    if !service.is_empty() {
        message.push(0x0a); // field 1, length-delimited
        put_varint(&mut message, service.len() as u64);
        message.extend_from_slice(service.as_bytes());
    }
    message
}

/// A gRPC message frame: not compressed, 4-byte big-endian length.
fn frame(message: &[u8]) -> Bytes {
    let mut framed = BytesMut::with_capacity(5 + message.len());
    framed.extend_from_slice(&[0]);
    framed.extend_from_slice(
        &u32::try_from(message.len())
            .unwrap_or(u32::MAX)
            .to_be_bytes(),
    );
    framed.extend_from_slice(message);
    framed.freeze()
}

/// The `status` (field 1, varint) of the `HealthCheckResponse` in the
/// first frame of `received`; 0 (`UNKNOWN`) when the field is absent.
fn serving_status(received: &[u8]) -> Option<u64> {
    let (header, rest) = received.split_at_checked(5)?;
    let length = usize::try_from(u32::from_be_bytes(header.get(1..5)?.try_into().ok()?)).ok()?;
    let mut message = rest.get(..length)?;
    let mut status = 0;
    while let Some((&key, after)) = message.split_first() {
        let (value, after) = read_varint(after)?;
        match key {
            0x08 => status = value,
            // Only varint fields are expected; anything else ends the read.
            _ => return None,
        }
        message = after;
    }
    Some(status)
}

fn status_name(status: Option<u64>) -> &'static str {
    match status {
        Some(0) => "UNKNOWN",
        Some(1) => "SERVING",
        Some(2) => "NOT_SERVING",
        Some(3) => "SERVICE_UNKNOWN",
        _ => "an unreadable answer",
    }
}

fn put_varint(out: &mut Vec<u8>, mut value: u64) {
    while value >= 0x80 {
        out.push((value as u8) | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

fn read_varint(mut input: &[u8]) -> Option<(u64, &[u8])> {
    let mut value = 0u64;
    for shift in (0..64).step_by(7) {
        let (&byte, rest) = input.split_first()?;
        input = rest;
        value |= u64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return Some((value, input));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_request_names_the_service_as_protobuf_field_one() {
        assert!(check_request("").is_empty());
        assert_eq!(check_request("etcd"), b"\x0a\x04etcd");
        let long = "s".repeat(200);
        let encoded = check_request(&long);
        assert_eq!(&encoded[..3], &[0x0a, 0xc8, 0x01]);
        assert_eq!(encoded.len(), 203);
    }

    #[test]
    fn a_frame_is_flag_length_and_message() {
        assert_eq!(&frame(b"ab")[..], b"\x00\x00\x00\x00\x02ab");
    }

    #[test]
    fn the_serving_status_is_read_from_the_first_frame() {
        assert_eq!(
            serving_status(b"\x00\x00\x00\x00\x02\x08\x01"),
            Some(SERVING)
        );
        assert_eq!(serving_status(b"\x00\x00\x00\x00\x02\x08\x02"), Some(2));
        // An empty message: the field's default, UNKNOWN.
        assert_eq!(serving_status(b"\x00\x00\x00\x00\x00"), Some(0));
        // Truncated or foreign.
        assert_eq!(serving_status(b"\x00\x00\x00\x00\x05\x08"), None);
        assert_eq!(serving_status(b"\x00\x00"), None);
        assert_eq!(serving_status(b"\x00\x00\x00\x00\x02\x12\x00"), None);
    }
}
