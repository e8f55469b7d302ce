//! A TLS cluster's certificates: a warning in `Degraded` when one comes
//! close to expiring, which means its renewal (due at two-thirds of its
//! life, a month before a 90-day certificate expires) keeps failing; and
//! the steps of a CA rotation, each taken once every member runs what the
//! step before asked for.

use k8s_openapi::jiff::SignedDuration;

use k8s_openapi::jiff::Timestamp;

use super::action::Action;
use super::context::Context;
use super::rollout::{first_unsettled, up_to_date};
use super::step::{Step, Waiting};
use crate::api::{CaRotationStatus, TlsStatus};
use crate::planner::TlsObservation;

/// The reason of `Degraded` (and of the Warning Event) while a certificate
/// is close to expiry and no member is unhealthy.
pub const EXPIRING_REASON: &str = "CertificatesExpiring";

/// A leaf certificate this close to expiring is reported.
pub const LEAF_EXPIRY_WARNING: SignedDuration = SignedDuration::from_hours(7 * 24);
/// The CA this close to expiring is reported: under the `Automatic`
/// policy it was due for rotation years before, so a CA this old means
/// rotations are left to a person (`Manual`) or keep failing.
pub const CA_EXPIRY_WARNING: SignedDuration = SignedDuration::from_hours(90 * 24);

/// One sentence per certificate of cluster `name` that expires soon or
/// has expired at `now`.
pub fn expiry_warnings(name: &str, tls: Option<&TlsStatus>, now: Timestamp) -> Vec<String> {
    let Some(tls) = tls else {
        return Vec::new();
    };
    let mut warnings = Vec::new();
    let mut check = |what: String, not_after: Timestamp, warn: SignedDuration| {
        let left = not_after.duration_since(now);
        if left <= SignedDuration::ZERO {
            warnings.push(format!("{what} expired at {not_after}"));
        } else if left <= warn {
            warnings.push(format!(
                "{what} expires at {not_after}, in {} h",
                left.as_secs() / 3600
            ));
        }
    };
    if let Some(ca) = &tls.ca_not_after {
        let what = if tls.issuer == "BuiltIn" {
            format!(
                "the cluster's CA (Secret {})",
                crate::addressing::ca_secret_name(name)
            )
        } else {
            "the CA of the cert-manager issuer (its ca.crt)".to_string()
        };
        check(what, ca.0, CA_EXPIRY_WARNING);
    }
    for certificate in &tls.certificates {
        check(
            format!(
                "the certificate in Secret {} (renewal is failing: see the operator's log)",
                certificate.secret
            ),
            certificate.not_after.0,
            LEAF_EXPIRY_WARNING,
        );
    }
    warnings
}

/// The next step of a CA rotation, once every member's Pod runs the
/// current template (which covers what the members must have loaded) and
/// every voter is settled. Comes after the rollout: the restarts a step
/// causes are a rollout of their own.
pub(super) fn rotate_ca(cx: &Context<'_>) -> Option<Step> {
    let (step, request) = cx.o.tls.as_ref()?.rotation.clone()?;
    let waits = |why: String| {
        Some(Step::Wait(Waiting::Rollout(format!(
            "the CA rotation {request:?} ({}) waits: {why}",
            step.describe()
        ))))
    };
    if let Some(ordinal) = (0..cx.replicas).find(|&o| !up_to_date(cx, o)) {
        return waits(format!(
            "{} does not run Pod template {} yet",
            cx.name(ordinal),
            cx.desired_template
        ));
    }
    if let Some(unsettled) = first_unsettled(cx) {
        return waits(super::maintenance::describe(&unsettled));
    }
    Some(Step::Act(Action::RotateCa { step, request }))
}

/// `status.tls`: as the certificates' Secrets say, except that a CA
/// rotation whose last step is taken stays in progress until every member
/// runs it (restarted onto the new CA alone); only then is it done.
pub(super) fn status(cx: &Context<'_>, tls: &TlsObservation) -> TlsStatus {
    let mut status = tls.status.clone();
    let all_updated = (0..cx.replicas).all(|o| up_to_date(cx, o));
    let reported = cx.o.status.tls.as_ref();
    if status.ca_rotation.is_none()
        && !all_updated
        && status.ca_rotated_for.is_some()
        && status.ca_rotated_for != reported.and_then(|t| t.ca_rotated_for.clone())
    {
        status.ca_rotation = Some(CaRotationStatus {
            requested_for: status.ca_rotated_for.clone().unwrap_or_default(),
            next_step: None,
            message: "every step taken: the members restart onto the new CA alone".to_string(),
        });
        status.ca_rotated_for = reported.and_then(|t| t.ca_rotated_for.clone());
    }
    status
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::CertificateStatus;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    fn warnings(now: i64, ca: i64, leaf: i64) -> Vec<String> {
        let at = |s: i64| Time(Timestamp::from_second(s).expect("time"));
        let tls = TlsStatus {
            issuer: "BuiltIn".into(),
            ca_not_after: Some(at(ca)),
            certificates: vec![CertificateStatus {
                secret: "c-server-tls".into(),
                serial: "01".into(),
                not_before: at(0),
                not_after: at(leaf),
            }],
            renewed_for: None,
            ca_rotation: None,
            ca_rotated_for: None,
        };
        expiry_warnings("c", Some(&tls), Timestamp::from_second(now).expect("time"))
    }

    const DAY: i64 = 24 * 3600;

    #[test]
    fn certificates_far_from_expiry_are_not_reported() {
        assert!(warnings(0, 3650 * DAY, 60 * DAY).is_empty());
        assert!(
            expiry_warnings("c", None, Timestamp::UNIX_EPOCH).is_empty(),
            "plaintext"
        );
    }

    #[test]
    fn a_leaf_within_a_week_and_a_ca_within_ninety_days_are_reported() {
        let warnings = warnings(0, 80 * DAY, 6 * DAY);
        assert_eq!(warnings.len(), 2, "{warnings:?}");
        assert!(warnings[0].contains("Secret c-ca") && warnings[0].contains("in 1920 h"));
        assert!(warnings[1].contains("c-server-tls") && warnings[1].contains("in 144 h"));
    }

    #[test]
    fn an_expired_certificate_says_so() {
        let warnings = warnings(10 * DAY, 3650 * DAY, DAY);
        assert_eq!(warnings.len(), 1);
        assert!(warnings[0].contains("expired at"), "{}", warnings[0]);
    }
}
