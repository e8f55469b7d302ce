//! The client side of a cluster's mutual TLS: the CA the operator trusts
//! and the certificate it presents. Every connection the operator opens to
//! a member of a TLS cluster goes through [`with_tls`].

use std::fmt;

use etcd_client::{Certificate, ConnectOptions, Identity, TlsOptions};

/// What the operator trusts in, and presents to, one cluster's members.
#[derive(Clone, PartialEq, Eq)]
pub struct ClientTls {
    /// The CA bundle (PEM) the members' certificates must verify under.
    pub ca_pem: String,
    /// The operator's client certificate (PEM).
    pub cert_pem: String,
    /// Its key (PEM).
    pub key_pem: String,
    /// The name the members' server certificates are checked against.
    /// Members are dialled by Pod IP; every member's certificate carries
    /// the cluster's client Service name, so that name is verified instead
    /// of the address.
    pub server_name: String,
}

impl fmt::Debug for ClientTls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClientTls")
            .field("server_name", &self.server_name)
            .field("key_pem", &"<redacted>")
            .finish_non_exhaustive()
    }
}

/// `options` with TLS to the members when `tls` is given (endpoints must
/// then be `https://`).
pub fn with_tls(options: ConnectOptions, tls: Option<&ClientTls>) -> ConnectOptions {
    match tls {
        None => options,
        Some(tls) => options.with_tls(
            TlsOptions::new()
                .ca_certificate(Certificate::from_pem(tls.ca_pem.as_bytes()))
                .identity(Identity::from_pem(
                    tls.cert_pem.as_bytes(),
                    tls.key_pem.as_bytes(),
                ))
                .domain_name(tls.server_name.clone()),
        ),
    }
}

/// The scheme of the members' client URLs.
pub fn scheme(tls: Option<&ClientTls>) -> &'static str {
    if tls.is_some() { "https" } else { "http" }
}
