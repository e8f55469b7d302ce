//! The trust bundle of a CA rotation: every CA still trusted, newest first.

use chrono::{DateTime, Utc};
use std::cmp::Reverse;
use std::collections::HashSet;

use super::facts::{self, CertificateFacts};
use super::{TlsError, pem};

/// One PEM bundle of the distinct CA certificates of `cas` (each one PEM
/// certificate or bundle, say the current bundle and a new CA): newest
/// (latest not-before) first, a CA met twice (same SHA-256 fingerprint)
/// written once. Refuses a certificate that is not a CA, and an input
/// without any certificate.
pub fn trust_bundle(cas: &[&str]) -> Result<String, TlsError> {
    let mut all = Vec::new();
    for ca in cas {
        all.extend(pem::certificates(ca)?);
    }
    if all.is_empty() {
        return Err(TlsError::NoCertificate);
    }
    let mut read = Vec::with_capacity(all.len());
    for der in all {
        let facts = facts::facts_of_der(&der)?;
        if !facts.is_ca {
            let cert = facts::parse(&der)?;
            return Err(TlsError::NotCa {
                subject: cert.subject().to_string(),
            });
        }
        read.push((facts, der));
    }
    Ok(assemble(read))
}

/// `bundle_pem` without the CAs that have expired at `now`, newest first as
/// [`trust_bundle`] writes it; empty when every CA has expired.
pub fn without_expired(bundle_pem: &str, now: DateTime<Utc>) -> Result<String, TlsError> {
    let mut kept = Vec::new();
    for der in pem::certificates(bundle_pem)? {
        let facts = facts::facts_of_der(&der)?;
        if now <= facts.not_after {
            kept.push((facts, der));
        }
    }
    Ok(assemble(kept))
}

/// The certificates deduplicated by fingerprint (first kept), newest first
/// (ties keep their order), as PEM.
fn assemble<D: AsRef<[u8]>>(certs: Vec<(CertificateFacts, D)>) -> String {
    let mut seen = HashSet::new();
    let mut distinct: Vec<_> = certs
        .into_iter()
        .filter(|(facts, _)| seen.insert(facts.fingerprint_sha256.clone()))
        .collect();
    distinct.sort_by_key(|(facts, _)| Reverse(facts.not_before));
    distinct
        .iter()
        .map(|(_, der)| pem::encode_certificate(der.as_ref()))
        .collect()
}
