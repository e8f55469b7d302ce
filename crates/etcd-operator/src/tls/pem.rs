//! PEM in and out: the `CERTIFICATE` blocks of a text, and one DER
//! certificate back as a PEM block.

use base64::Engine as _;
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject as _;

use super::TlsError;

/// The DER of every `CERTIFICATE` block of `text`, in order; other blocks
/// (keys, parameters) and text around the blocks are skipped.
pub(super) fn certificates(text: &str) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    CertificateDer::pem_slice_iter(text.as_bytes())
        .map(|block| block.map_err(|e| TlsError::Pem(e.to_string())))
        .collect()
}

/// The DER of the first `CERTIFICATE` block of `text`.
pub(super) fn first_certificate(text: &str) -> Result<CertificateDer<'static>, TlsError> {
    CertificateDer::pem_slice_iter(text.as_bytes())
        .next()
        .ok_or(TlsError::NoCertificate)?
        .map_err(|e| TlsError::Pem(e.to_string()))
}

/// One DER certificate as a PEM `CERTIFICATE` block, 64 base64 characters a
/// line, ending with a newline.
pub(super) fn encode_certificate(der: &[u8]) -> String {
    let body = base64::engine::general_purpose::STANDARD.encode(der);
    let mut pem = String::with_capacity(body.len() + body.len() / 64 + 64);
    pem.push_str("-----BEGIN CERTIFICATE-----\n");
    // Base64 is ASCII, so every 64-byte chunk is whole characters.
    for line in body.as_bytes().chunks(64) {
        pem.push_str(&String::from_utf8_lossy(line));
        pem.push('\n');
    }
    pem.push_str("-----END CERTIFICATE-----\n");
    pem
}
