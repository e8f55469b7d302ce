//! What a certificate says: [`read_certificate`], [`read_bundle`], and
//! whether one was signed by a CA ([`signed_by`]).

use chrono::{DateTime, Utc};
use sha2::{Digest as _, Sha256};
use std::net::IpAddr;
use x509_parser::certificate::X509Certificate;
use x509_parser::error::X509Error;
use x509_parser::extensions::GeneralName;
use x509_parser::prelude::FromDer as _;

use super::{TlsError, pem, validity};

/// What a certificate says, for status reports and renewal decisions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CertificateFacts {
    /// The subject's common name, if it has one.
    pub common_name: Option<String>,
    /// The DNS names of the subjectAltName extension, in order.
    pub dns_names: Vec<String>,
    /// The IP addresses of the subjectAltName extension, in order.
    pub ip_addresses: Vec<IpAddr>,
    /// Start of validity.
    pub not_before: DateTime<Utc>,
    /// End of validity (the last valid second).
    pub not_after: DateTime<Utc>,
    /// Whether basicConstraints says `CA:true`.
    pub is_ca: bool,
    /// Whether extendedKeyUsage names `serverAuth`.
    pub server_auth: bool,
    /// Whether extendedKeyUsage names `clientAuth`.
    pub client_auth: bool,
    /// SHA-256 of the DER certificate, lowercase hex (what `openssl x509
    /// -fingerprint -sha256` prints, without the colons).
    pub fingerprint_sha256: String,
    /// The serial number, lowercase hex.
    pub serial: String,
    /// The issuer's common name, if it has one.
    pub issuer_common_name: Option<String>,
}

/// What the first certificate of `cert_pem` says (in a chain, the leaf).
pub fn read_certificate(cert_pem: &str) -> Result<CertificateFacts, TlsError> {
    let der = pem::first_certificate(cert_pem)?;
    facts_of_der(&der)
}

/// What every certificate of a PEM bundle says, in the bundle's order (a
/// trust bundle holds one or more CAs); a bundle without any certificate is
/// refused.
pub fn read_bundle(bundle_pem: &str) -> Result<Vec<CertificateFacts>, TlsError> {
    let ders = pem::certificates(bundle_pem)?;
    if ders.is_empty() {
        return Err(TlsError::NoCertificate);
    }
    ders.iter().map(|der| facts_of_der(der)).collect()
}

/// Whether the first certificate of `leaf_pem` was issued by the first
/// certificate of `ca_pem`: its issuer name is the CA's subject name and its
/// signature verifies under the CA's public key. A wrong signature is
/// `Ok(false)`; a signature that cannot be checked at all (an algorithm
/// without support, a malformed key) is an error.
pub fn signed_by(leaf_pem: &str, ca_pem: &str) -> Result<bool, TlsError> {
    let leaf_der = pem::first_certificate(leaf_pem)?;
    let ca_der = pem::first_certificate(ca_pem)?;
    let leaf = parse(&leaf_der)?;
    let ca = parse(&ca_der)?;
    if leaf.issuer().as_raw() != ca.subject().as_raw() {
        return Ok(false);
    }
    match leaf.verify_signature(Some(ca.public_key())) {
        Ok(()) => Ok(true),
        Err(X509Error::SignatureVerificationError) => Ok(false),
        Err(e) => Err(TlsError::Verification(e.to_string())),
    }
}

/// A DER certificate parsed, with nothing left over.
pub(super) fn parse(der: &[u8]) -> Result<X509Certificate<'_>, TlsError> {
    let (rest, cert) =
        X509Certificate::from_der(der).map_err(|e| TlsError::Certificate(e.to_string()))?;
    if !rest.is_empty() {
        return Err(TlsError::Certificate(format!(
            "{} bytes after the certificate",
            rest.len()
        )));
    }
    Ok(cert)
}

/// What a DER certificate says.
pub(super) fn facts_of_der(der: &[u8]) -> Result<CertificateFacts, TlsError> {
    let cert = parse(der)?;
    facts_of(&cert, der)
}

/// What a parsed certificate says; `der` is its encoding, for the
/// fingerprint.
pub(super) fn facts_of(
    cert: &X509Certificate<'_>,
    der: &[u8],
) -> Result<CertificateFacts, TlsError> {
    let bad = |e: X509Error| TlsError::Certificate(e.to_string());
    let mut dns_names = Vec::new();
    let mut ip_addresses = Vec::new();
    if let Some(san) = cert.subject_alternative_name().map_err(bad)? {
        for name in &san.value.general_names {
            match name {
                GeneralName::DNSName(dns) => dns_names.push((*dns).to_owned()),
                GeneralName::IPAddress(bytes) => ip_addresses.push(ip_of(bytes)?),
                _ => {}
            }
        }
    }
    let eku = cert.extended_key_usage().map_err(bad)?;
    let validity = cert.validity();
    Ok(CertificateFacts {
        common_name: common_name(cert.subject()),
        dns_names,
        ip_addresses,
        not_before: validity::whole_seconds(validity.not_before.timestamp())?,
        not_after: validity::whole_seconds(validity.not_after.timestamp())?,
        is_ca: cert.is_ca(),
        server_auth: eku.as_ref().is_some_and(|e| e.value.server_auth),
        client_auth: eku.as_ref().is_some_and(|e| e.value.client_auth),
        fingerprint_sha256: hex::encode(Sha256::digest(der)),
        serial: hex::encode(cert.raw_serial()),
        issuer_common_name: common_name(cert.issuer()),
    })
}

fn common_name(name: &x509_parser::x509::X509Name<'_>) -> Option<String> {
    name.iter_common_name()
        .next()
        .and_then(|cn| cn.as_str().ok())
        .map(str::to_owned)
}

fn ip_of(bytes: &[u8]) -> Result<IpAddr, TlsError> {
    if let Ok(v4) = <[u8; 4]>::try_from(bytes) {
        return Ok(IpAddr::from(v4));
    }
    if let Ok(v6) = <[u8; 16]>::try_from(bytes) {
        return Ok(IpAddr::from(v6));
    }
    Err(TlsError::Certificate(format!(
        "subjectAltName IP address of {} bytes",
        bytes.len()
    )))
}
