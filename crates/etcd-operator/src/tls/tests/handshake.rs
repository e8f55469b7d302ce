//! The certificates in a real mutual-TLS handshake (rustls with ring, in
//! memory): what etcd's Go TLS would check, a CA chain, names and
//! extendedKeyUsage on both sides, is checked here too.

use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::server::WebPkiClientVerifier;
use rustls::{
    CertificateError, ClientConfig, ClientConnection, Error, RootCertStore, ServerConfig,
    ServerConnection,
};
use std::io::{ErrorKind, Read as _, Write as _};
use std::sync::Arc;

use super::super::{CertificateAuthority, IssuedCertificate, LeafUsage};
use super::{ca, request, wall_clock};

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn roots(ca: &CertificateAuthority) -> Arc<RootCertStore> {
    let mut roots = RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(ca.cert_pem().as_bytes()) {
        roots
            .add(cert.expect("CA PEM"))
            .expect("CA accepted as a root");
    }
    Arc::new(roots)
}

fn chain(leaf: &IssuedCertificate) -> Vec<CertificateDer<'static>> {
    vec![CertificateDer::from_pem_slice(leaf.cert_pem.as_bytes()).expect("cert PEM")]
}

fn key(leaf: &IssuedCertificate) -> PrivateKeyDer<'static> {
    PrivateKeyDer::from_pem_slice(leaf.key_pem.as_bytes()).expect("key PEM")
}

/// A server presenting `leaf` that requires a client certificate from `ca`.
fn server_config(ca: &CertificateAuthority, leaf: &IssuedCertificate) -> Arc<ServerConfig> {
    let verifier = WebPkiClientVerifier::builder_with_provider(roots(ca), provider())
        .build()
        .expect("client verifier");
    let config = ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .expect("protocol versions")
        .with_client_cert_verifier(verifier)
        .with_single_cert(chain(leaf), key(leaf))
        .expect("server certificate accepted");
    Arc::new(config)
}

/// A client trusting `ca` only, presenting `leaf` if any.
fn client_config(ca: &CertificateAuthority, leaf: Option<&IssuedCertificate>) -> Arc<ClientConfig> {
    let builder = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .expect("protocol versions")
        .with_root_certificates(roots(ca));
    let config = match leaf {
        Some(leaf) => builder
            .with_client_auth_cert(chain(leaf), key(leaf))
            .expect("client certificate accepted"),
        None => builder.with_no_client_auth(),
    };
    Arc::new(config)
}

fn io_error(e: std::io::Error) -> Error {
    Error::General(e.to_string())
}

/// Moves every pending TLS record from one side to the other.
fn transfer<A, B>(
    from: &mut rustls::ConnectionCommon<A>,
    to: &mut rustls::ConnectionCommon<B>,
) -> Result<(), Error> {
    let mut records = Vec::new();
    while from.wants_write() {
        from.write_tls(&mut records).map_err(io_error)?;
    }
    let mut pending = &records[..];
    while !pending.is_empty() {
        to.read_tls(&mut pending).map_err(io_error)?;
        to.process_new_packets()?;
    }
    Ok(())
}

/// A handshake of `client` with `server` for `server_name`, then "ping"
/// from the client reaching the server: in TLS 1.3 the server checks the
/// client's certificate after the client is done, so only data that gets
/// through proves both sides accepted each other. The first error either
/// side raises is the result.
fn connect(
    client: Arc<ClientConfig>,
    server: Arc<ServerConfig>,
    server_name: &str,
) -> Result<(), Error> {
    let name = ServerName::try_from(server_name.to_owned()).expect("server name");
    let mut client = ClientConnection::new(client, name)?;
    let mut server = ServerConnection::new(server)?;
    client.writer().write_all(b"ping").map_err(io_error)?;
    let mut received = Vec::new();
    for _ in 0..10 {
        transfer(&mut client, &mut server)?;
        transfer(&mut server, &mut client)?;
        let mut buf = [0u8; 16];
        match server.reader().read(&mut buf) {
            Ok(n) => received.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == ErrorKind::WouldBlock => {}
            Err(e) => return Err(io_error(e)),
        }
        if received == b"ping" {
            assert!(!client.is_handshaking() && !server.is_handshaking());
            let peer = server.peer_certificates().expect("client certificate");
            assert_eq!(peer.len(), 1);
            return Ok(());
        }
    }
    Err(Error::General("handshake did not finish".to_owned()))
}

fn server_leaf(authority: &CertificateAuthority, usage: LeafUsage) -> IssuedCertificate {
    let wanted = request(usage, &["etcd-0.etcd.db.svc", "localhost"], &["127.0.0.1"]);
    authority.issue(&wanted, wall_clock()).expect("server leaf")
}

fn client_leaf(authority: &CertificateAuthority, usage: LeafUsage) -> IssuedCertificate {
    let mut wanted = request(usage, &[], &[]);
    wanted.common_name = "root".to_owned();
    authority.issue(&wanted, wall_clock()).expect("client leaf")
}

fn refused_with(result: Result<(), Error>, expected: &CertificateError) {
    match result {
        Err(Error::InvalidCertificate(got)) => assert_eq!(&got, expected),
        other => panic!("expected InvalidCertificate({expected:?}), got {other:?}"),
    }
}

#[test]
fn mutual_tls_handshake_succeeds_by_name_and_by_ip() {
    let authority = ca("etcd-ca", wall_clock());
    let server = server_config(&authority, &server_leaf(&authority, LeafUsage::Server));
    let client = client_config(
        &authority,
        Some(&client_leaf(&authority, LeafUsage::Client)),
    );
    for name in ["localhost", "127.0.0.1", "etcd-0.etcd.db.svc"] {
        connect(client.clone(), server.clone(), name).expect(name);
    }
    // The server's certificate is not good for a name it does not hold.
    let wrong = connect(client, server, "etcd-1.etcd.db.svc");
    assert!(
        matches!(
            wrong,
            Err(Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. }
            ))
        ),
        "{wrong:?}"
    );
}

#[test]
fn peers_authenticate_each_other_with_peer_certificates() {
    let authority = ca("etcd-ca", wall_clock());
    let server = server_config(&authority, &server_leaf(&authority, LeafUsage::Peer));
    let client = client_config(&authority, Some(&server_leaf(&authority, LeafUsage::Peer)));
    connect(client, server, "etcd-0.etcd.db.svc").expect("peer handshake");
}

#[test]
fn a_client_without_a_certificate_is_refused() {
    let authority = ca("etcd-ca", wall_clock());
    let server = server_config(&authority, &server_leaf(&authority, LeafUsage::Server));
    let result = connect(client_config(&authority, None), server, "localhost");
    assert!(
        matches!(result, Err(Error::NoCertificatesPresented)),
        "{result:?}"
    );
}

#[test]
fn a_client_certificate_of_another_ca_is_refused() {
    let authority = ca("etcd-ca", wall_clock());
    let stranger = ca("other-ca", wall_clock());
    let server = server_config(&authority, &server_leaf(&authority, LeafUsage::Server));
    let foreign = client_leaf(&stranger, LeafUsage::Client);
    let result = connect(
        client_config(&authority, Some(&foreign)),
        server,
        "localhost",
    );
    refused_with(result, &CertificateError::UnknownIssuer);
}

#[test]
fn usages_are_enforced_a_server_certificate_is_no_client_certificate() {
    let authority = ca("etcd-ca", wall_clock());
    let server = server_config(&authority, &server_leaf(&authority, LeafUsage::Server));
    let misused = client_leaf(&authority, LeafUsage::Server);
    let result = connect(
        client_config(&authority, Some(&misused)),
        server.clone(),
        "localhost",
    );
    assert!(
        matches!(
            result,
            Err(Error::InvalidCertificate(
                CertificateError::InvalidPurpose | CertificateError::InvalidPurposeContext { .. }
            ))
        ),
        "{result:?}"
    );
    // And a client certificate is no server certificate.
    let client_only = server_config(&authority, &server_leaf(&authority, LeafUsage::Client));
    let client = client_config(
        &authority,
        Some(&client_leaf(&authority, LeafUsage::Client)),
    );
    let result = connect(client, client_only, "localhost");
    assert!(
        matches!(
            result,
            Err(Error::InvalidCertificate(
                CertificateError::InvalidPurpose | CertificateError::InvalidPurposeContext { .. }
            ))
        ),
        "{result:?}"
    );
}
