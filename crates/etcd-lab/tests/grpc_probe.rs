//! The lab's gRPC probe against a real etcd on loopback: etcd serves the
//! standard gRPC health service on its client port, which the probe asks
//! as the kubelet does (plaintext HTTP/2, `grpc.health.v1.Health/Check`).

use std::time::Duration;

use etcd_lab_node::probe::grpc::health_check;
use test_kit::etcd_process::LocalCluster;

/// Host and port of an `http://127.0.0.1:N` URL.
fn host_port(url: &str) -> (String, u16) {
    let address = url.trim_start_matches("http://");
    let (host, port) = address.rsplit_once(':').expect("host:port");
    (host.to_owned(), port.parse().expect("port"))
}

#[tokio::test]
async fn a_serving_etcd_passes_and_anything_else_fails() {
    let mut cluster = LocalCluster::start(1).await;
    let (host, port) = host_port(&cluster.members[0].client_url);

    // The whole server, as a probe without `service` asks.
    health_check(&host, port, "")
        .await
        .expect("a serving etcd passes");

    // A service etcd does not serve: the health service says NOT_FOUND.
    let unknown = health_check(&host, port, "no.such.Service").await;
    let text = format!("{:?}", unknown.expect_err("an unknown service fails"));
    assert!(text.contains("code = 5"), "{text}");

    // The peer port speaks no gRPC health.
    let (peer_host, peer_port) = host_port(&cluster.members[0].peer_url);
    assert!(health_check(&peer_host, peer_port, "").await.is_err());

    // Gone: the connection is refused.
    cluster.members[0].kill();
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(health_check(&host, port, "").await.is_err());
}
