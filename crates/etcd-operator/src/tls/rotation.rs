//! Rotating a cluster's CA without a failed handshake: the CAs a cluster
//! holds ([`CaSet`]) and the three steps between one CA and the next
//! ([`CaRotationStep`]).
//!
//! etcd reads its certificate and key at every handshake but its trusted
//! CAs only when it starts, so every change of what the members trust
//! needs a rolling restart, and no member may present a certificate that
//! a peer does not trust yet:
//!
//! 1. [`CaRotationStep::TrustNewCa`]: a new CA is generated and trusted
//!    beside the current one (the bundle holds both); it signs nothing yet.
//!    The members restart one at a time onto the bundle.
//! 2. [`CaRotationStep::SignWithNewCa`]: the new CA signs; every
//!    certificate is issued again from it; the old CA stays trusted. The
//!    members restart onto their new certificates.
//! 3. [`CaRotationStep::RetireOldCa`]: the old CA is no longer trusted. The
//!    members restart onto the bundle of the new CA alone.
//!
//! Between two steps every member runs what the step before asked for, so
//! at every moment each certificate presented is trusted by every party.
//! Clients that use `<cluster>-client-tls` reload it between the steps
//! (a Pod mounting the Secret sees the new files within a minute).

use sha2::{Digest as _, Sha256};

use chrono::{DateTime, Utc};

pub use crate::api::CaRotationStep;

use super::facts::CertificateFacts;
use super::{CertificateAuthority, RenewalPolicy, TlsError, trust_bundle};

/// The CAs of a cluster: the one that signs, and during a rotation the
/// one coming in (trusted, not signing yet) or the one going out (trusted,
/// no longer signing).
pub struct CaSet {
    /// Signs every certificate.
    pub signer: CertificateAuthority,
    /// Trusted, signs nothing yet (after [`CaRotationStep::TrustNewCa`]).
    pub incoming: Option<CertificateAuthority>,
    /// Trusted, signs nothing any more (after
    /// [`CaRotationStep::SignWithNewCa`]); the certificate only.
    pub retiring: Option<String>,
}

impl CaSet {
    /// A set of one CA, as a cluster starts.
    pub fn of(signer: CertificateAuthority) -> Self {
        Self {
            signer,
            incoming: None,
            retiring: None,
        }
    }

    /// Every CA the members and clients trust, one PEM bundle, newest first.
    pub fn trust_bundle(&self) -> Result<String, TlsError> {
        let mut cas = vec![self.signer.cert_pem()];
        if let Some(incoming) = &self.incoming {
            cas.push(incoming.cert_pem());
        }
        if let Some(retiring) = &self.retiring {
            cas.push(retiring);
        }
        trust_bundle(&cas)
    }

    /// What the member Pods must have loaded: the trust bundle and the CA
    /// their certificates come from, as 16 hex digits. It changes at each
    /// step of a rotation (so the members restart onto it) and never with
    /// a leaf's renewal.
    pub fn revision(&self) -> Result<String, TlsError> {
        let mut digest = Sha256::new();
        digest.update(self.trust_bundle()?.as_bytes());
        digest.update(b"\nsigner\n");
        digest.update(self.signer.cert_pem().as_bytes());
        Ok(digest
            .finalize()
            .iter()
            .take(8)
            .map(|byte| format!("{byte:02x}"))
            .collect())
    }

    /// The step a rotation in progress takes next, once every member runs
    /// the current revision; `None` when no rotation is in progress.
    pub fn step_in_progress(&self) -> Option<CaRotationStep> {
        if self.incoming.is_some() {
            Some(CaRotationStep::SignWithNewCa)
        } else if self.retiring.is_some() {
            Some(CaRotationStep::RetireOldCa)
        } else {
            None
        }
    }

    /// The set after `step`; `new_ca` makes the incoming CA of
    /// [`CaRotationStep::TrustNewCa`]. A step that does not follow from
    /// this set is refused (another pass took it already).
    pub fn advance(
        self,
        step: CaRotationStep,
        new_ca: impl FnOnce() -> Result<CertificateAuthority, TlsError>,
    ) -> Result<Self, RotationError> {
        let expected = self.step_in_progress();
        match (step, self) {
            (
                CaRotationStep::TrustNewCa,
                Self {
                    signer,
                    incoming: None,
                    retiring: None,
                },
            ) => Ok(Self {
                signer,
                incoming: Some(new_ca()?),
                retiring: None,
            }),
            (
                CaRotationStep::SignWithNewCa,
                Self {
                    signer,
                    incoming: Some(incoming),
                    retiring: None,
                },
            ) => Ok(Self {
                retiring: Some(signer.cert_pem().to_string()),
                signer: incoming,
                incoming: None,
            }),
            (
                CaRotationStep::RetireOldCa,
                Self {
                    signer,
                    incoming: None,
                    retiring: Some(_),
                },
            ) => Ok(Self::of(signer)),
            (step, _) => Err(RotationError::OutOfOrder { step, expected }),
        }
    }
}

/// The prefix of the request value of a rotation the operator starts by
/// itself; the rest is the serial number of the CA it replaces.
pub const AUTOMATIC_REQUEST_PREFIX: &str = "automatic-";

/// The request of the rotation the operator starts by itself for the CA
/// `ca` describes, once `now` has passed the CA's renewal point (two thirds
/// of its validity, [`RenewalPolicy::CA`]); `None` before. The value names
/// the CA replaced, so a finished rotation (whose new CA is young) is
/// never asked for again.
pub fn automatic_request(ca: &CertificateFacts, now: DateTime<Utc>) -> Option<String> {
    (now >= RenewalPolicy::CA.renewal_point(ca))
        .then(|| format!("{AUTOMATIC_REQUEST_PREFIX}{}", ca.serial))
}

/// A rotation step could not be taken.
#[derive(Debug, thiserror::Error)]
pub enum RotationError {
    /// The CAs are not where the step starts from.
    #[error("CA rotation step {step} does not follow from the CAs held (next: {})", expected.map_or("none".to_string(), |s| s.to_string()))]
    OutOfOrder {
        /// The step asked for.
        step: CaRotationStep,
        /// The step the CAs held lead to.
        expected: Option<CaRotationStep>,
    },
    /// The new CA could not be made.
    #[error(transparent)]
    Tls(#[from] TlsError),
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tls::read_bundle;
    use chrono::{TimeDelta, TimeZone as _};

    fn ca(name: &str) -> CertificateAuthority {
        let now = Utc
            .with_ymd_and_hms(2026, 1, 1, 0, 0, 0)
            .single()
            .expect("time");
        CertificateAuthority::generate(name, RenewalPolicy::CA.lifetime, now).expect("CA")
    }

    fn subjects(set: &CaSet) -> Vec<String> {
        read_bundle(&set.trust_bundle().expect("bundle"))
            .expect("read")
            .into_iter()
            .filter_map(|f| f.common_name)
            .collect()
    }

    #[test]
    fn a_rotation_trusts_both_then_signs_with_the_new_then_drops_the_old() {
        let start = CaSet::of(ca("old"));
        assert_eq!(start.step_in_progress(), None);
        assert_eq!(subjects(&start), ["old"]);
        let r0 = start.revision().expect("revision");

        let trusting = start
            .advance(CaRotationStep::TrustNewCa, || Ok(ca("new")))
            .expect("trust");
        assert_eq!(trusting.signer.facts().common_name.as_deref(), Some("old"));
        assert_eq!(
            trusting.step_in_progress(),
            Some(CaRotationStep::SignWithNewCa)
        );
        let mut trusted = subjects(&trusting);
        trusted.sort();
        assert_eq!(trusted, ["new", "old"]);
        let r1 = trusting.revision().expect("revision");

        let signing = trusting
            .advance(CaRotationStep::SignWithNewCa, || unreachable!())
            .expect("sign");
        assert_eq!(signing.signer.facts().common_name.as_deref(), Some("new"));
        assert_eq!(
            signing.step_in_progress(),
            Some(CaRotationStep::RetireOldCa)
        );
        let mut trusted = subjects(&signing);
        trusted.sort();
        assert_eq!(trusted, ["new", "old"], "the old CA is still trusted");
        let r2 = signing.revision().expect("revision");

        let done = signing
            .advance(CaRotationStep::RetireOldCa, || unreachable!())
            .expect("retire");
        assert_eq!(done.step_in_progress(), None);
        assert_eq!(subjects(&done), ["new"]);
        let r3 = done.revision().expect("revision");

        let revisions = std::collections::BTreeSet::from([&r0, &r1, &r2, &r3]);
        assert_eq!(
            revisions.len(),
            4,
            "each step restarts the members: {revisions:?}"
        );
    }

    #[test]
    fn the_revision_depends_on_the_cas_only() {
        let set = CaSet::of(ca("one"));
        assert_eq!(set.revision().expect("a"), set.revision().expect("b"));
        assert_eq!(set.revision().expect("a").len(), 16);
        assert_ne!(
            set.revision().expect("a"),
            CaSet::of(ca("one")).revision().expect("b"),
            "another CA with the same name"
        );
    }

    #[test]
    fn a_step_out_of_order_is_refused() {
        let refused = CaSet::of(ca("old")).advance(CaRotationStep::SignWithNewCa, || Ok(ca("x")));
        assert!(matches!(
            refused,
            Err(RotationError::OutOfOrder {
                step: CaRotationStep::SignWithNewCa,
                expected: None
            })
        ));
        let trusting = CaSet::of(ca("old"))
            .advance(CaRotationStep::TrustNewCa, || Ok(ca("new")))
            .expect("trust");
        let again = trusting.advance(CaRotationStep::TrustNewCa, || Ok(ca("newer")));
        assert!(matches!(
            again,
            Err(RotationError::OutOfOrder {
                expected: Some(CaRotationStep::SignWithNewCa),
                ..
            })
        ));
    }

    #[test]
    fn the_operator_asks_for_a_rotation_once_the_ca_is_two_thirds_through_its_life() {
        let ca = ca("old");
        let facts = ca.facts();
        let born = Utc
            .with_ymd_and_hms(2026, 1, 1, 0, 0, 0)
            .single()
            .expect("time");
        let due = RenewalPolicy::CA.renewal_point(facts);
        // About 6 years 8 months into a 10-year CA.
        assert!(due > born + TimeDelta::days(6 * 365) && due < born + TimeDelta::days(7 * 365));
        assert_eq!(automatic_request(facts, born + TimeDelta::days(365)), None);
        assert_eq!(automatic_request(facts, due - TimeDelta::seconds(1)), None);
        let asked = automatic_request(facts, due).expect("due");
        assert_eq!(asked, format!("automatic-{}", facts.serial));
        // Past expiry it is still asked for (and the same request).
        assert_eq!(
            automatic_request(facts, facts.not_after + TimeDelta::days(1)),
            Some(asked.clone())
        );
        // The CA that replaces it is young: nothing is asked for.
        let next =
            CertificateAuthority::generate("new", RenewalPolicy::CA.lifetime, due).expect("CA");
        assert_eq!(automatic_request(next.facts(), due), None);
        assert_ne!(
            automatic_request(next.facts(), due + TimeDelta::days(3650)),
            Some(asked)
        );
    }
}
