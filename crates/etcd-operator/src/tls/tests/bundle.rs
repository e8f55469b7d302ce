//! Trust bundles through a CA rotation.

use chrono::TimeDelta;

use super::super::{LeafUsage, TlsError, read_bundle, trust_bundle, without_expired};
use super::{ca, days, issue, now};
use crate::tls::CertificateAuthority;

#[test]
fn old_and_new_ca_are_both_listed_newest_first_once_each() {
    let old = ca("etcd-ca", now());
    let new = ca("etcd-ca", now() + TimeDelta::days(2400));
    // The current bundle holds the old CA; the rotation adds the new one,
    // and the old one twice more by mistake.
    let current = trust_bundle(&[old.cert_pem()]).expect("bundle");
    let rotated =
        trust_bundle(&[current.as_str(), new.cert_pem(), old.cert_pem()]).expect("rotated bundle");
    let facts = read_bundle(&rotated).expect("read");
    let fingerprints: Vec<_> = facts
        .iter()
        .map(|f| f.fingerprint_sha256.as_str())
        .collect();
    assert_eq!(
        fingerprints,
        vec![
            new.facts().fingerprint_sha256.as_str(),
            old.facts().fingerprint_sha256.as_str()
        ]
    );
    // The bundle is stable: building it again gives the same text.
    assert_eq!(trust_bundle(&[&rotated]).expect("again"), rotated);
    assert_eq!(
        trust_bundle(&[old.cert_pem(), new.cert_pem()]).expect("swap"),
        rotated
    );
}

#[test]
fn expired_cas_are_dropped() {
    let old = CertificateAuthority::generate("etcd-ca", days(30), now()).expect("old CA");
    let new = ca("etcd-ca", now() + TimeDelta::days(20));
    let bundle = trust_bundle(&[old.cert_pem(), new.cert_pem()]).expect("bundle");
    let before = without_expired(&bundle, now() + TimeDelta::days(25)).expect("before");
    assert_eq!(before, bundle);
    let after = without_expired(&bundle, now() + TimeDelta::days(31)).expect("after");
    assert_eq!(after, new.cert_pem());
    let none = without_expired(&bundle, now() + TimeDelta::days(40_000)).expect("none");
    assert_eq!(none, "");
}

#[test]
fn only_cas_go_in_a_bundle() {
    let authority = ca("etcd-ca", now());
    let leaf = issue(&authority, LeafUsage::Server, now());
    let refused = trust_bundle(&[authority.cert_pem(), &leaf.cert_pem]);
    assert!(
        matches!(refused, Err(TlsError::NotCa { .. })),
        "{refused:?}"
    );
    assert!(matches!(trust_bundle(&[]), Err(TlsError::NoCertificate)));
    assert!(matches!(read_bundle(""), Err(TlsError::NoCertificate)));
}
