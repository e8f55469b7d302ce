//! When a certificate is due for renewal.

use chrono::{DateTime, TimeDelta, Utc};
use std::fmt;
use std::net::IpAddr;
use std::time::Duration;

use super::facts::{self, CertificateFacts};

/// Lifetime of a leaf certificate: 90 days, renewed after 60 (at
/// [`DEFAULT_RENEW_AT`]), which leaves a month to notice and fix a renewal
/// that keeps failing before anything expires.
pub const DEFAULT_LEAF_LIFETIME: Duration = Duration::from_secs(90 * 24 * 60 * 60);

/// Lifetime of a cluster's CA: 10 years (3,650 days), rotated after about
/// 6 years 8 months (at [`DEFAULT_RENEW_AT`]); the old CA stays in the trust
/// bundle until every leaf it signed has been replaced.
pub const DEFAULT_CA_LIFETIME: Duration = Duration::from_secs(3650 * 24 * 60 * 60);

/// The fraction of its lifetime after which a certificate is renewed: two
/// thirds.
pub const DEFAULT_RENEW_AT: f64 = 2.0 / 3.0;

/// How long certificates live and when they are renewed.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RenewalPolicy {
    /// The lifetime certificates are issued with.
    pub lifetime: Duration,
    /// The fraction of a certificate's validity (from its not-before to its
    /// not-after) after which it is renewed, in (0, 1); a value outside, or
    /// NaN, counts as [`DEFAULT_RENEW_AT`].
    pub renew_at: f64,
}

impl RenewalPolicy {
    /// Leaves: [`DEFAULT_LEAF_LIFETIME`], renewed at [`DEFAULT_RENEW_AT`].
    pub const LEAF: Self = Self {
        lifetime: DEFAULT_LEAF_LIFETIME,
        renew_at: DEFAULT_RENEW_AT,
    };

    /// CAs: [`DEFAULT_CA_LIFETIME`], rotated at [`DEFAULT_RENEW_AT`].
    pub const CA: Self = Self {
        lifetime: DEFAULT_CA_LIFETIME,
        renew_at: DEFAULT_RENEW_AT,
    };

    /// The moment `renew_at` of the validity of a certificate has passed.
    pub fn renewal_point(&self, facts: &CertificateFacts) -> DateTime<Utc> {
        let fraction = if self.renew_at > 0.0 && self.renew_at < 1.0 {
            self.renew_at
        } else {
            DEFAULT_RENEW_AT
        };
        let span = (facts.not_after - facts.not_before).num_seconds().max(0);
        // Exact to the second for any span below 2^53 seconds.
        let elapsed = (span as f64 * fraction).floor() as i64;
        facts.not_before + TimeDelta::seconds(elapsed)
    }
}

impl Default for RenewalPolicy {
    /// [`RenewalPolicy::LEAF`].
    fn default() -> Self {
        Self::LEAF
    }
}

/// Whether to keep a certificate or to replace it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RenewalDecision {
    /// Keep it; look again at `renew_after` (sooner if the wanted names
    /// change).
    Keep {
        /// When it becomes due.
        renew_after: DateTime<Utc>,
    },
    /// Issue a new one.
    Renew {
        /// Why.
        reason: RenewalReason,
    },
}

/// Why a certificate is due for renewal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RenewalReason {
    /// Its validity has ended.
    Expired,
    /// The renewal fraction of its validity has passed.
    PastRenewalPoint,
    /// It lacks these wanted subjectAltNames (DNS names, then IPs as text).
    MissingNames(Vec<String>),
    /// It was not signed by the current CA (a CA rotation, or a stray
    /// certificate).
    SignedByAnotherCa,
    /// It cannot be read (the text says why).
    Unreadable(String),
}

impl fmt::Display for RenewalReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Expired => write!(f, "expired"),
            Self::PastRenewalPoint => write!(f, "past its renewal point"),
            Self::MissingNames(names) => write!(f, "missing names {}", names.join(", ")),
            Self::SignedByAnotherCa => write!(f, "not signed by the current CA"),
            Self::Unreadable(why) => write!(f, "unreadable: {why}"),
        }
    }
}

/// Whether the certificate `facts` describes is due at `now` under `policy`,
/// given the DNS names and IPs it must hold: renew when it has expired, when
/// it lacks any of them (DNS names compare ignoring ASCII case; a wildcard
/// does not stand for a wanted name), or once the policy's fraction of its
/// validity has passed; otherwise keep it until that point.
pub fn renewal(
    facts: &CertificateFacts,
    policy: &RenewalPolicy,
    wanted_dns: &[String],
    wanted_ips: &[IpAddr],
    now: DateTime<Utc>,
) -> RenewalDecision {
    let renew = |reason| RenewalDecision::Renew { reason };
    if now > facts.not_after {
        return renew(RenewalReason::Expired);
    }
    let missing: Vec<String> = wanted_dns
        .iter()
        .filter(|w| !facts.dns_names.iter().any(|d| d.eq_ignore_ascii_case(w)))
        .cloned()
        .chain(
            wanted_ips
                .iter()
                .filter(|w| !facts.ip_addresses.contains(w))
                .map(IpAddr::to_string),
        )
        .collect();
    if !missing.is_empty() {
        return renew(RenewalReason::MissingNames(missing));
    }
    let renew_after = policy.renewal_point(facts);
    if now >= renew_after {
        return renew(RenewalReason::PastRenewalPoint);
    }
    RenewalDecision::Keep { renew_after }
}

/// [`renewal`] of a certificate as stored, PEM, that must have been signed
/// by the CA `ca_pem`: renew when it cannot be read or was not signed by
/// that CA, then as [`renewal`] says. For a self-signed CA, pass its own
/// certificate as `ca_pem`.
pub fn renewal_of(
    cert_pem: &str,
    ca_pem: &str,
    policy: &RenewalPolicy,
    wanted_dns: &[String],
    wanted_ips: &[IpAddr],
    now: DateTime<Utc>,
) -> RenewalDecision {
    let renew = |reason| RenewalDecision::Renew { reason };
    let facts = match facts::read_certificate(cert_pem) {
        Ok(facts) => facts,
        Err(e) => return renew(RenewalReason::Unreadable(e.to_string())),
    };
    match facts::signed_by(cert_pem, ca_pem) {
        Ok(true) => renewal(&facts, policy, wanted_dns, wanted_ips, now),
        Ok(false) => renew(RenewalReason::SignedByAnotherCa),
        Err(e) => renew(RenewalReason::Unreadable(e.to_string())),
    }
}
