//! Renewal decisions.

use chrono::{DateTime, TimeDelta, Utc};

use super::super::{
    CertificateFacts, DEFAULT_RENEW_AT, LeafUsage, RenewalDecision, RenewalPolicy, RenewalReason,
    read_certificate, renewal, renewal_of,
};
use super::{ca, ips, issue, now};

const DNS: [&str; 2] = ["etcd-0.etcd.db.svc", "localhost"];

fn wanted_dns() -> Vec<String> {
    DNS.iter().map(|d| (*d).to_owned()).collect()
}

/// A leaf issued at [`now`] and what it says.
fn leaf() -> CertificateFacts {
    let authority = ca("etcd-ca", now());
    read_certificate(&issue(&authority, LeafUsage::Peer, now()).cert_pem).expect("read")
}

/// The moment `fraction` of the validity of `facts` has passed.
fn at_fraction(facts: &CertificateFacts, fraction: f64) -> DateTime<Utc> {
    let span = (facts.not_after - facts.not_before).num_seconds() as f64;
    facts.not_before + TimeDelta::seconds((span * fraction) as i64)
}

fn decide(facts: &CertificateFacts, at: DateTime<Utc>) -> RenewalDecision {
    renewal(
        facts,
        &RenewalPolicy::LEAF,
        &wanted_dns(),
        &ips(&["127.0.0.1"]),
        at,
    )
}

#[test]
fn the_defaults_are_ninety_days_and_ten_years_renewed_at_two_thirds() {
    assert_eq!(RenewalPolicy::LEAF.lifetime, super::days(90));
    assert_eq!(RenewalPolicy::CA.lifetime, super::days(3650));
    assert_eq!(RenewalPolicy::default(), RenewalPolicy::LEAF);
    assert!((DEFAULT_RENEW_AT - 2.0 / 3.0).abs() < f64::EPSILON);
}

#[test]
fn kept_at_half_its_lifetime_until_the_renewal_point() {
    let facts = leaf();
    let point = RenewalPolicy::LEAF.renewal_point(&facts);
    assert_eq!(
        decide(&facts, at_fraction(&facts, 0.5)),
        RenewalDecision::Keep { renew_after: point }
    );
    // Two thirds of 90 days and 5 minutes, from the backdated start.
    let span = TimeDelta::days(90) + TimeDelta::minutes(5);
    assert_eq!(point, facts.not_before + span * 2 / 3);
    assert_eq!(
        decide(&facts, point - TimeDelta::seconds(1)),
        RenewalDecision::Keep { renew_after: point }
    );
}

#[test]
fn renewed_past_two_thirds_of_its_lifetime() {
    let facts = leaf();
    let past = RenewalDecision::Renew {
        reason: RenewalReason::PastRenewalPoint,
    };
    assert_eq!(decide(&facts, at_fraction(&facts, 0.67)), past);
    assert_eq!(decide(&facts, at_fraction(&facts, 0.7)), past);
    assert_eq!(
        decide(&facts, RenewalPolicy::LEAF.renewal_point(&facts)),
        past
    );
    assert_eq!(decide(&facts, facts.not_after), past);
}

#[test]
fn renewed_once_expired() {
    let facts = leaf();
    assert_eq!(
        decide(&facts, facts.not_after + TimeDelta::seconds(1)),
        RenewalDecision::Renew {
            reason: RenewalReason::Expired
        }
    );
}

#[test]
fn renewed_at_once_when_a_wanted_name_is_missing() {
    let facts = leaf();
    let early = at_fraction(&facts, 0.1);
    let mut dns = wanted_dns();
    dns.push("etcd-0.etcd.db.svc.cluster.local".to_owned());
    let decision = renewal(
        &facts,
        &RenewalPolicy::LEAF,
        &dns,
        &ips(&["127.0.0.1", "10.0.0.9"]),
        early,
    );
    assert_eq!(
        decision,
        RenewalDecision::Renew {
            reason: RenewalReason::MissingNames(vec![
                "etcd-0.etcd.db.svc.cluster.local".to_owned(),
                "10.0.0.9".to_owned(),
            ])
        }
    );
    // DNS names compare ignoring case; fewer wanted names than held is fine.
    let upper = vec!["LOCALHOST".to_owned()];
    assert!(matches!(
        renewal(&facts, &RenewalPolicy::LEAF, &upper, &[], early),
        RenewalDecision::Keep { .. }
    ));
}

#[test]
fn a_renewal_fraction_outside_zero_to_one_counts_as_two_thirds() {
    let facts = leaf();
    let default_point = RenewalPolicy::LEAF.renewal_point(&facts);
    for renew_at in [0.0, 1.0, -1.0, 7.0, f64::NAN] {
        let policy = RenewalPolicy {
            renew_at,
            ..RenewalPolicy::LEAF
        };
        assert_eq!(policy.renewal_point(&facts), default_point, "{renew_at}");
    }
    let half = RenewalPolicy {
        renew_at: 0.5,
        ..RenewalPolicy::LEAF
    };
    assert_eq!(half.renewal_point(&facts), at_fraction(&facts, 0.5));
}

#[test]
fn renewed_when_signed_by_another_ca_or_unreadable() {
    let old = ca("etcd-ca", now());
    let new = ca("etcd-ca", now());
    let issued = issue(&old, LeafUsage::Server, now());
    let early = now() + TimeDelta::days(1);
    let decide_pem = |cert: &str, ca_pem: &str| {
        renewal_of(
            cert,
            ca_pem,
            &RenewalPolicy::LEAF,
            &wanted_dns(),
            &ips(&["127.0.0.1"]),
            early,
        )
    };
    assert!(matches!(
        decide_pem(&issued.cert_pem, old.cert_pem()),
        RenewalDecision::Keep { .. }
    ));
    assert_eq!(
        decide_pem(&issued.cert_pem, new.cert_pem()),
        RenewalDecision::Renew {
            reason: RenewalReason::SignedByAnotherCa
        }
    );
    assert!(matches!(
        decide_pem("", old.cert_pem()),
        RenewalDecision::Renew {
            reason: RenewalReason::Unreadable(_)
        }
    ));
    // A CA decides on itself, under the CA policy.
    let ca_decision = renewal_of(
        old.cert_pem(),
        old.cert_pem(),
        &RenewalPolicy::CA,
        &[],
        &[],
        now() + TimeDelta::days(7 * 365),
    );
    assert_eq!(
        ca_decision,
        RenewalDecision::Renew {
            reason: RenewalReason::PastRenewalPoint
        }
    );
}
