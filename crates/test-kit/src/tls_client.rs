//! A TLS cluster (`spec.tls`) as its users reach it: the user client
//! Secret `<cluster>-client-tls`, an etcd client built from it, and the
//! certificate a member serves on a port.

use std::io::ErrorKind;
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::Duration;

use etcd_client::{Certificate, Client, ConnectOptions, Identity, TlsOptions};
use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, ServerName};
use rustls::{ClientConfig, ClientConnection, RootCertStore};

use crate::TestResult;
use crate::e2e::Harness;

/// The PEM values of a cluster's user client Secret, as a client reads
/// them from a mounted Secret.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClientMaterial {
    /// `ca.crt`: the CAs to trust.
    pub ca: String,
    /// `tls.crt`.
    pub cert: String,
    /// `tls.key`.
    pub key: String,
}

/// The user client Secret `<cluster>-client-tls` as it is now.
pub async fn client_material(h: &Harness, cluster: &str) -> TestResult<ClientMaterial> {
    read_client_material(&Api::namespaced(h.client.clone(), &h.namespace), cluster).await
}

/// The user client Secret `<cluster>-client-tls` of `secrets`' namespace,
/// as it is now (for a task that does not hold the [`Harness`]).
pub async fn read_client_material(
    secrets: &Api<Secret>,
    cluster: &str,
) -> TestResult<ClientMaterial> {
    read_secret_material(secrets, &format!("{cluster}-client-tls")).await
}

/// The PEM values of any client certificate Secret of `secrets`'
/// namespace (`ca.crt`, `tls.crt`, `tls.key`), as it is now.
pub async fn read_secret_material(
    secrets: &Api<Secret>,
    secret: &str,
) -> TestResult<ClientMaterial> {
    let secret = secrets.get(secret).await?;
    let data = secret.data.ok_or("no data in the client Secret")?;
    let text = |key: &str| -> TestResult<String> {
        Ok(String::from_utf8(
            data.get(key).ok_or(format!("no {key}"))?.0.clone(),
        )?)
    };
    Ok(ClientMaterial {
        ca: text("ca.crt")?,
        cert: text("tls.crt")?,
        key: text("tls.key")?,
    })
}

/// The name clients check member certificates against: the client
/// Service's full name.
pub fn client_service_name(h: &Harness, cluster: &str) -> String {
    format!("{cluster}-client.{}.svc.cluster.local", h.namespace)
}

/// A client of the cluster's members over TLS, trusting `ca`, presenting
/// `identity` (certificate, key) when given.
pub async fn tls_client(
    h: &Harness,
    cluster: &str,
    ca: &str,
    identity: Option<(&str, &str)>,
) -> TestResult<Client> {
    let endpoints: Vec<String> = h
        .member_ips(cluster)
        .await?
        .iter()
        .map(|ip| format!("https://{ip}:2379"))
        .collect();
    connect(
        endpoints,
        &client_service_name(h, cluster),
        ca,
        identity,
        Duration::from_secs(5),
    )
    .await
}

/// A client of `endpoints` over TLS checking their certificate against
/// `server_name` and `ca`, presenting `identity` when given; requests time
/// out after `timeout`.
pub async fn connect(
    endpoints: Vec<String>,
    server_name: &str,
    ca: &str,
    identity: Option<(&str, &str)>,
    timeout: Duration,
) -> TestResult<Client> {
    let mut tls = TlsOptions::new()
        .ca_certificate(Certificate::from_pem(ca))
        .domain_name(server_name);
    if let Some((cert, key)) = identity {
        tls = tls.identity(Identity::from_pem(cert, key));
    }
    let options = ConnectOptions::new()
        .with_connect_timeout(Duration::from_secs(3))
        .with_timeout(timeout)
        .with_tls(tls);
    Ok(Client::connect(endpoints, Some(options)).await?)
}

/// A client with the user client Secret as it is now.
pub async fn user_client(h: &Harness, cluster: &str) -> TestResult<Client> {
    let material = client_material(h, cluster).await?;
    tls_client(
        h,
        cluster,
        &material.ca,
        Some((&material.cert, &material.key)),
    )
    .await
}

/// The DER certificate (`tls.crt`) a Secret holds.
pub async fn secret_certificate(h: &Harness, secret: &str) -> TestResult<Vec<u8>> {
    let secrets: Api<Secret> = Api::namespaced(h.client.clone(), &h.namespace);
    let data = secrets.get(secret).await?.data.ok_or("no data")?;
    let pem = data.get("tls.crt").ok_or("no tls.crt")?;
    Ok(CertificateDer::from_pem_slice(&pem.0)?.to_vec())
}

/// The DER certificate a member serves at `address`, verified against
/// `ca_pem` and `server_name`. Only the server's side of the handshake is
/// needed: the member refuses this client (it has no certificate) after
/// sending its own.
pub fn served_certificate(
    address: SocketAddr,
    server_name: &str,
    ca_pem: &str,
) -> TestResult<Vec<u8>> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots.add(cert?)?;
    }
    let config = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth();
    let mut tls = ClientConnection::new(
        Arc::new(config),
        ServerName::try_from(server_name.to_string())?,
    )?;
    let mut tcp = TcpStream::connect_timeout(&address, Duration::from_secs(3))?;
    tcp.set_read_timeout(Some(Duration::from_secs(3)))?;
    loop {
        let progress = tls.complete_io(&mut tcp);
        if let Some(served) = tls.peer_certificates().and_then(|c| c.first()) {
            return Ok(served.to_vec());
        }
        match progress {
            Ok((0, 0)) => return Err("the handshake ended without a certificate".into()),
            Ok(_) => {}
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(e.into()),
        }
    }
}
