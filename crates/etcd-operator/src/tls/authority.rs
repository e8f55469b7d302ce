//! The certificate authority of a cluster: generated, read back from its
//! Secret, and issuing leaves.

use chrono::{DateTime, Utc};
use rcgen::{
    BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair, KeyUsagePurpose,
    PKCS_ECDSA_P256_SHA256,
};
use std::fmt;
use std::time::Duration;

use super::facts::{self, CertificateFacts};
use super::leaf::{self, IssuedCertificate, LeafRequest};
use super::validity::Window;
use super::{TlsError, pem};

/// A CA: its certificate and private key, PEM, ready to issue leaves.
pub struct CertificateAuthority {
    cert_pem: String,
    key_pem: String,
    facts: CertificateFacts,
    issuer: Issuer<'static, KeyPair>,
}

impl CertificateAuthority {
    /// A new self-signed CA with a new ECDSA P-256 key: subject CN
    /// `common_name`, valid from `now` less [`super::CLOCK_SKEW_BACKDATE`]
    /// until `now` plus `lifetime`, basicConstraints `CA:true, pathlen:0`
    /// (it issues leaves only), keyUsage `keyCertSign, cRLSign`.
    pub fn generate(
        common_name: &str,
        lifetime: Duration,
        now: DateTime<Utc>,
    ) -> Result<Self, TlsError> {
        let window = Window::starting(now, lifetime)?;
        let mut params = CertificateParams::default();
        params.distinguished_name = leaf::subject(common_name)?;
        params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        params.serial_number = Some(leaf::random_serial()?);
        (params.not_before, params.not_after) = window.for_rcgen()?;
        let key = KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256)?;
        let cert = params.self_signed(&key)?;
        Self::from_pem(&cert.pem(), &key.serialize_pem())
    }

    /// The CA read back from PEM, as stored in a Secret: the first
    /// certificate of `cert_pem` and the PKCS#8 key of `key_pem`. Refuses a
    /// certificate that is not a CA (no basicConstraints `CA:true`, or a
    /// keyUsage without `keyCertSign`) and a key that is not the
    /// certificate's. An expired CA is read all the same: whether to rotate
    /// it is for [`super::renewal`] to say.
    pub fn from_pem(cert_pem: &str, key_pem: &str) -> Result<Self, TlsError> {
        let der = pem::first_certificate(cert_pem)?;
        let cert = facts::parse(&der)?;
        let unusable = |reason: String| TlsError::UnusableCa {
            subject: cert.subject().to_string(),
            reason,
        };
        if !cert.is_ca() {
            return Err(TlsError::NotCa {
                subject: cert.subject().to_string(),
            });
        }
        let key_usage = cert
            .key_usage()
            .map_err(|e| TlsError::Certificate(e.to_string()))?;
        if key_usage.is_some_and(|usage| !usage.value.key_cert_sign()) {
            return Err(unusable("its keyUsage lacks keyCertSign".to_owned()));
        }
        // rcgen copies the subject into each leaf's issuer one attribute per
        // relative distinguished name; anything else would not round-trip.
        if cert.subject().iter().any(|rdn| rdn.iter().count() != 1) {
            return Err(unusable(
                "its subject has a multi-valued relative distinguished name".to_owned(),
            ));
        }
        let key = KeyPair::from_pem(key_pem).map_err(|e| TlsError::Key(e.to_string()))?;
        if key.public_key_raw() != cert.public_key().subject_public_key.data.as_ref() {
            return Err(TlsError::KeyMismatch);
        }
        let key_pem = key.serialize_pem();
        let issuer = Issuer::from_ca_cert_der(&der, key).map_err(|e| unusable(e.to_string()))?;
        Ok(Self {
            cert_pem: pem::encode_certificate(&der),
            key_pem,
            facts: facts::facts_of(&cert, &der)?,
            issuer,
        })
    }

    /// The CA certificate, one PEM `CERTIFICATE` block.
    pub fn cert_pem(&self) -> &str {
        &self.cert_pem
    }

    /// The CA's private key, PEM PKCS#8 (`PRIVATE KEY`).
    pub fn key_pem(&self) -> &str {
        &self.key_pem
    }

    /// What the CA certificate says.
    pub fn facts(&self) -> &CertificateFacts {
        &self.facts
    }

    /// A leaf with a new ECDSA P-256 key, signed by this CA: subject CN,
    /// subjectAltNames and extendedKeyUsage from `request`, keyUsage
    /// `digitalSignature`, basicConstraints `CA:false`, a random serial
    /// number; valid from `now` less [`super::CLOCK_SKEW_BACKDATE`] until
    /// `now` plus the requested lifetime, but never past the CA's own end.
    /// An expired CA issues nothing.
    pub fn issue(
        &self,
        request: &LeafRequest,
        now: DateTime<Utc>,
    ) -> Result<IssuedCertificate, TlsError> {
        if now > self.facts.not_after {
            return Err(TlsError::UnusableCa {
                subject: self.facts.common_name.clone().unwrap_or_default(),
                reason: format!("it expired at {}", self.facts.not_after),
            });
        }
        let mut window = Window::starting(now, request.lifetime)?;
        window.not_after = window.not_after.min(self.facts.not_after);
        let params = leaf::params(request, window)?;
        let key = KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256)?;
        let cert = params.signed_by(&key, &self.issuer)?;
        Ok(IssuedCertificate {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
            not_before: window.not_before,
            not_after: window.not_after,
        })
    }
}

impl fmt::Debug for CertificateAuthority {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CertificateAuthority")
            .field("facts", &self.facts)
            .field("key_pem", &"<redacted>")
            .finish_non_exhaustive()
    }
}
