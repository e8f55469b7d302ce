//! Mutual TLS for etcd clusters from a built-in certificate authority per
//! cluster: the pure certificate logic, with no Kubernetes and no I/O.
//!
//! Each cluster gets its own self-signed CA ([`CertificateAuthority`]:
//! basicConstraints `CA:true, pathlen:0`, keyUsage `keyCertSign, cRLSign`,
//! [`DEFAULT_CA_LIFETIME`] by default) that issues the leaves etcd and its
//! clients present ([`CertificateAuthority::issue`]): server certificates
//! (extendedKeyUsage `serverAuth`), client certificates (`clientAuth`) and
//! peer certificates (both, since an etcd member is the server of the peers
//! that dial it and the client of those it dials), each with a fresh key,
//! exactly the requested subjectAltNames, a random serial number and
//! [`DEFAULT_LEAF_LIFETIME`] by default. Every key is ECDSA P-256 and every
//! signature ECDSA with SHA-256: the one algorithm every party handles
//! (etcd's Go `crypto/tls`, rustls, OpenSSL, Java, browsers), with small keys,
//! fast signatures and keys generated in microseconds where RSA takes
//! seconds; Ed25519 would be as fast but is not accepted everywhere.
//! Every certificate is valid from [`CLOCK_SKEW_BACKDATE`] before the moment
//! it is issued, so a node whose clock lags the operator's a little does not
//! refuse a brand new certificate as not yet valid; it ends `lifetime` after
//! that moment. Times are whole seconds, as X.509 stores them.
//!
//! Around issuance: [`read_certificate`] and [`read_bundle`] say what a PEM
//! certificate holds ([`CertificateFacts`]), [`signed_by`] verifies a
//! signature against a CA, [`renewal`] and [`renewal_of`] decide when a
//! certificate is due ([`RenewalPolicy`]: at two thirds of its lifetime by
//! default, at once when expired, missing a wanted name or issued by another
//! CA), and [`trust_bundle`] and [`without_expired`] keep the trust bundle of
//! a CA rotation: old and new CA side by side, newest first, until the old
//! one expires. [`CaSet`] holds a cluster's CAs through the three steps of
//! a rotation ([`CaRotationStep`]).

mod authority;
mod bundle;
mod facts;
mod leaf;
mod pem;
mod renewal;
mod rotation;
mod validity;

#[cfg(test)]
mod tests;

pub use authority::CertificateAuthority;
pub use bundle::{trust_bundle, without_expired};
pub use facts::{CertificateFacts, read_bundle, read_certificate, signed_by};
pub use leaf::{IssuedCertificate, LeafRequest, LeafUsage};
pub use renewal::{
    DEFAULT_CA_LIFETIME, DEFAULT_LEAF_LIFETIME, DEFAULT_RENEW_AT, RenewalDecision, RenewalPolicy,
    RenewalReason, renewal, renewal_of,
};
pub use rotation::{
    AUTOMATIC_REQUEST_PREFIX, CaRotationStep, CaSet, RotationError, automatic_request,
};
pub use validity::CLOCK_SKEW_BACKDATE;

/// Why a certificate could not be issued, read or checked.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// The text holds no `CERTIFICATE` PEM block.
    #[error("no PEM CERTIFICATE block found")]
    NoCertificate,
    /// A PEM block is malformed (bad armor or base64).
    #[error("malformed PEM: {0}")]
    Pem(String),
    /// A `CERTIFICATE` block is not a readable X.509 certificate.
    #[error("unreadable X.509 certificate: {0}")]
    Certificate(String),
    /// The private key PEM is not a readable PKCS#8 key (`PRIVATE KEY`) of
    /// a supported algorithm (ECDSA P-256 or P-384, Ed25519, RSA).
    #[error("unreadable private key: {0}")]
    Key(String),
    /// The private key is not the one of the certificate's public key.
    #[error("the private key does not match the certificate's public key")]
    KeyMismatch,
    /// A certificate used as a CA does not say it is one.
    #[error("certificate {subject:?} is not a CA (basicConstraints CA:true is missing)")]
    NotCa {
        /// The subject of the certificate, as text.
        subject: String,
    },
    /// A CA certificate that this module cannot sign with as it stands.
    #[error("CA certificate {subject:?} cannot issue certificates: {reason}")]
    UnusableCa {
        /// The subject of the certificate, as text.
        subject: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A lifetime that is zero or does not fit a certificate's validity.
    #[error("certificate lifetime {0:?} is out of range (at least one second, at most until 9999)")]
    Lifetime(std::time::Duration),
    /// A requested subject or DNS name that a certificate cannot hold.
    #[error("name {name:?} cannot go in a certificate: {reason}")]
    InvalidName {
        /// The name as requested.
        name: String,
        /// Why it was refused.
        reason: String,
    },
    /// Signature verification failed for a reason other than a wrong
    /// signature (an unsupported algorithm, a malformed key).
    #[error("signature verification could not run: {0}")]
    Verification(String),
    /// The system's random source failed (for serial numbers).
    #[error("random source failed: {0}")]
    Random(String),
    /// Key generation, encoding or signing failed.
    #[error("certificate generation failed: {0}")]
    Generation(#[from] rcgen::Error),
}
