//! What a leaf certificate is asked for and what issuing one gives back, and
//! the rcgen parameters in between.

use chrono::{DateTime, Utc};
use rcgen::{
    CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa, KeyUsagePurpose,
    SanType, SerialNumber,
};
use std::fmt;
use std::net::IpAddr;
use std::time::Duration;

use super::TlsError;
use super::validity::Window;

/// What a leaf certificate is for: the extendedKeyUsage it carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LeafUsage {
    /// A TLS server (etcd's client port): `serverAuth` only.
    Server,
    /// A TLS client (the operator, backup jobs, users): `clientAuth` only.
    Client,
    /// An etcd peer, server of the members that dial it and client of the
    /// members it dials: `serverAuth` and `clientAuth`.
    Peer,
}

impl LeafUsage {
    fn extended_key_usages(self) -> Vec<ExtendedKeyUsagePurpose> {
        match self {
            Self::Server => vec![ExtendedKeyUsagePurpose::ServerAuth],
            Self::Client => vec![ExtendedKeyUsagePurpose::ClientAuth],
            Self::Peer => vec![
                ExtendedKeyUsagePurpose::ServerAuth,
                ExtendedKeyUsagePurpose::ClientAuth,
            ],
        }
    }
}

/// A leaf certificate to issue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeafRequest {
    /// The subject's common name (etcd takes a client certificate's CN as
    /// its user name); 1 to 64 characters.
    pub common_name: String,
    /// subjectAltName DNS names, in order, duplicates dropped; a leading
    /// `*.` label is a wildcard.
    pub dns_names: Vec<String>,
    /// subjectAltName IP addresses, in order, duplicates dropped.
    pub ip_addresses: Vec<IpAddr>,
    /// What the certificate is for.
    pub usage: LeafUsage,
    /// How long it is valid from the moment of issuance (whole seconds).
    pub lifetime: Duration,
}

/// A leaf certificate and its new private key, PEM.
#[derive(Clone, PartialEq, Eq)]
pub struct IssuedCertificate {
    /// The certificate, one PEM `CERTIFICATE` block.
    pub cert_pem: String,
    /// Its private key, PEM PKCS#8 (`PRIVATE KEY`).
    pub key_pem: String,
    /// Start of validity: issuance less the clock-skew backdate.
    pub not_before: DateTime<Utc>,
    /// End of validity: issuance plus the lifetime, or the CA's own end if
    /// that comes first.
    pub not_after: DateTime<Utc>,
}

impl fmt::Debug for IssuedCertificate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("IssuedCertificate")
            .field("cert_pem", &self.cert_pem)
            .field("key_pem", &"<redacted>")
            .field("not_before", &self.not_before)
            .field("not_after", &self.not_after)
            .finish()
    }
}

/// The rcgen parameters of the leaf `request` asks for, valid over `window`.
pub(super) fn params(request: &LeafRequest, window: Window) -> Result<CertificateParams, TlsError> {
    let mut params = CertificateParams::default();
    params.distinguished_name = subject(&request.common_name)?;
    params.subject_alt_names = alt_names(request)?;
    params.is_ca = IsCa::ExplicitNoCa;
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.extended_key_usages = request.usage.extended_key_usages();
    params.use_authority_key_identifier_extension = true;
    params.serial_number = Some(random_serial()?);
    (params.not_before, params.not_after) = window.for_rcgen()?;
    Ok(params)
}

/// A distinguished name holding only the common name `common_name`.
pub(super) fn subject(common_name: &str) -> Result<DistinguishedName, TlsError> {
    // X.520 ub-common-name.
    let length = common_name.chars().count();
    if !(1..=64).contains(&length) {
        return Err(TlsError::InvalidName {
            name: common_name.to_owned(),
            reason: "a common name has 1 to 64 characters".to_owned(),
        });
    }
    let mut name = DistinguishedName::new();
    name.push(DnType::CommonName, common_name);
    Ok(name)
}

/// 16 random bytes, positive: 126 bits of randomness, always 16 bytes long
/// in DER (RFC 5280 allows up to 20).
pub(super) fn random_serial() -> Result<SerialNumber, TlsError> {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes).map_err(|e| TlsError::Random(e.to_string()))?;
    bytes[0] = (bytes[0] & 0x7f) | 0x40;
    Ok(SerialNumber::from_slice(&bytes))
}

fn alt_names(request: &LeafRequest) -> Result<Vec<SanType>, TlsError> {
    let mut names: Vec<SanType> = Vec::new();
    for dns in &request.dns_names {
        check_dns_name(dns)?;
        let ia5 = dns
            .as_str()
            .try_into()
            .map_err(|e: rcgen::Error| TlsError::InvalidName {
                name: dns.clone(),
                reason: e.to_string(),
            })?;
        let san = SanType::DnsName(ia5);
        if !names.contains(&san) {
            names.push(san);
        }
    }
    for ip in &request.ip_addresses {
        let san = SanType::IpAddress(*ip);
        if !names.contains(&san) {
            names.push(san);
        }
    }
    Ok(names)
}

/// A DNS name as certificates hold it: dot-separated labels of letters,
/// digits, `-` and `_`, 1 to 63 characters each, 253 in all, the first one
/// possibly `*`; no trailing dot.
fn check_dns_name(name: &str) -> Result<(), TlsError> {
    let refuse = |reason: &str| {
        Err(TlsError::InvalidName {
            name: name.to_owned(),
            reason: reason.to_owned(),
        })
    };
    if name.is_empty() || name.len() > 253 {
        return refuse("a DNS name has 1 to 253 characters");
    }
    for (i, label) in name.split('.').enumerate() {
        if i == 0 && label == "*" && name.len() > 2 {
            continue;
        }
        if label.is_empty() || label.len() > 63 {
            return refuse("each label of a DNS name has 1 to 63 characters");
        }
        let allowed = |c: char| c.is_ascii_alphanumeric() || c == '-' || c == '_';
        if !label.chars().all(allowed) {
            return refuse("a DNS name holds only letters, digits, '-', '_' and dots");
        }
    }
    Ok(())
}
