//! Issuance: names, usages, signatures, lifetimes, reading back.

use chrono::TimeDelta;
use x509_parser::certificate::X509Certificate;
use x509_parser::prelude::FromDer as _;

use super::super::{
    CLOCK_SKEW_BACKDATE, CertificateAuthority, LeafUsage, TlsError, read_certificate, signed_by,
};
use super::{ca, days, ips, issue, now, request};

#[test]
fn issued_server_and_peer_certificates_hold_exactly_the_requested_names() {
    let authority = ca("etcd-ca", now());
    for usage in [LeafUsage::Server, LeafUsage::Peer] {
        let wanted = request(
            usage,
            &["etcd-0.etcd.db.svc", "*.etcd.db.svc", "localhost"],
            &["127.0.0.1", "10.0.0.7", "fd00::7"],
        );
        let issued = authority.issue(&wanted, now()).expect("issue");
        let facts = read_certificate(&issued.cert_pem).expect("read");
        assert_eq!(facts.dns_names, wanted.dns_names, "{usage:?}");
        assert_eq!(facts.ip_addresses, wanted.ip_addresses, "{usage:?}");
        assert_eq!(facts.common_name.as_deref(), Some("etcd-0"));
        assert_eq!(facts.issuer_common_name.as_deref(), Some("etcd-ca"));
        assert!(!facts.is_ca);
    }
}

#[test]
fn duplicate_names_are_written_once() {
    let authority = ca("etcd-ca", now());
    let wanted = request(
        LeafUsage::Server,
        &["a.b", "a.b"],
        &["127.0.0.1", "127.0.0.1"],
    );
    let issued = authority.issue(&wanted, now()).expect("issue");
    let facts = read_certificate(&issued.cert_pem).expect("read");
    assert_eq!(facts.dns_names, vec!["a.b".to_owned()]);
    assert_eq!(facts.ip_addresses, ips(&["127.0.0.1"]));
}

#[test]
fn malformed_names_are_refused() {
    let authority = ca("etcd-ca", now());
    for bad in [
        "",
        "a..b",
        "a b",
        "é.example",
        "*",
        "a.*.b",
        "trailing.dot.",
    ] {
        let wanted = request(LeafUsage::Server, &[bad], &[]);
        assert!(
            matches!(
                authority.issue(&wanted, now()),
                Err(TlsError::InvalidName { .. })
            ),
            "{bad:?}"
        );
    }
    let mut wanted = request(LeafUsage::Client, &[], &[]);
    wanted.common_name = String::new();
    assert!(matches!(
        authority.issue(&wanted, now()),
        Err(TlsError::InvalidName { .. })
    ));
}

#[test]
fn extended_key_usage_follows_the_leaf_usage() {
    let authority = ca("etcd-ca", now());
    for (usage, server, client) in [
        (LeafUsage::Server, true, false),
        (LeafUsage::Client, false, true),
        (LeafUsage::Peer, true, true),
    ] {
        let issued = issue(&authority, usage, now());
        let facts = read_certificate(&issued.cert_pem).expect("read");
        assert_eq!(
            (facts.server_auth, facts.client_auth),
            (server, client),
            "{usage:?}"
        );
        // Nothing else: no anyExtendedKeyUsage, no other purpose.
        let der = super::super::pem::first_certificate(&issued.cert_pem).expect("pem");
        let (_, cert) = X509Certificate::from_der(&der).expect("parse");
        let eku = cert
            .extended_key_usage()
            .expect("eku")
            .expect("present")
            .value;
        assert!(
            !eku.any && !eku.code_signing && !eku.email_protection,
            "{usage:?}"
        );
        assert!(!eku.time_stamping && !eku.ocsp_signing && eku.other.is_empty());
        let key_usage = cert.key_usage().expect("ku").expect("present").value;
        assert!(key_usage.digital_signature() && !key_usage.key_cert_sign());
        let constraints = cert
            .basic_constraints()
            .expect("bc")
            .expect("present")
            .value;
        assert!(!constraints.ca);
    }
}

#[test]
fn the_ca_is_a_ca_limited_to_leaves() {
    let authority = ca("etcd-ca", now());
    let facts = authority.facts();
    assert!(facts.is_ca);
    assert_eq!(facts.common_name.as_deref(), Some("etcd-ca"));
    assert_eq!(facts.issuer_common_name.as_deref(), Some("etcd-ca"));
    let der = super::super::pem::first_certificate(authority.cert_pem()).expect("pem");
    let (_, cert) = X509Certificate::from_der(&der).expect("parse");
    let constraints = cert.basic_constraints().expect("bc").expect("present");
    assert!(constraints.critical);
    assert!(constraints.value.ca);
    assert_eq!(constraints.value.path_len_constraint, Some(0));
    let key_usage = cert.key_usage().expect("ku").expect("present").value;
    assert!(key_usage.key_cert_sign() && key_usage.crl_sign());
    assert!(!key_usage.digital_signature());
    assert!(signed_by(authority.cert_pem(), authority.cert_pem()).expect("verify"));
}

#[test]
fn a_leaf_verifies_under_its_ca_and_not_under_another() {
    let authority = ca("etcd-ca", now());
    let other = ca("etcd-ca", now());
    let issued = issue(&authority, LeafUsage::Peer, now());
    assert!(signed_by(&issued.cert_pem, authority.cert_pem()).expect("verify"));
    // Same subject name, other key: only the signature tells them apart.
    assert!(!signed_by(&issued.cert_pem, other.cert_pem()).expect("verify"));
    let stranger = ca("other-ca", now());
    assert!(!signed_by(&issued.cert_pem, stranger.cert_pem()).expect("verify"));
}

#[test]
fn serial_numbers_are_random() {
    let authority = ca("etcd-ca", now());
    let a = read_certificate(&issue(&authority, LeafUsage::Client, now()).cert_pem).expect("a");
    let b = read_certificate(&issue(&authority, LeafUsage::Client, now()).cert_pem).expect("b");
    assert_ne!(a.serial, b.serial);
    assert_eq!(a.serial.len(), 32);
    assert_ne!(a.fingerprint_sha256, b.fingerprint_sha256);
}

#[test]
fn lifetimes_are_the_requested_ones_plus_the_backdate() {
    let backdate = TimeDelta::from_std(CLOCK_SKEW_BACKDATE).expect("backdate");
    let at = now() + TimeDelta::milliseconds(750);
    let authority = ca("etcd-ca", at);
    let ca_facts = authority.facts();
    assert_eq!(ca_facts.not_before, now() - backdate);
    assert_eq!(
        ca_facts.not_after - ca_facts.not_before,
        TimeDelta::days(3650) + backdate
    );

    let issued = issue(&authority, LeafUsage::Server, at);
    let facts = read_certificate(&issued.cert_pem).expect("read");
    assert_eq!(facts.not_before, issued.not_before);
    assert_eq!(facts.not_after, issued.not_after);
    assert_eq!(facts.not_before, now() - backdate);
    assert_eq!(
        facts.not_after - facts.not_before,
        TimeDelta::days(90) + backdate
    );
}

#[test]
fn a_leaf_never_outlives_its_ca_and_an_expired_ca_issues_nothing() {
    let authority =
        CertificateAuthority::generate("short-ca", days(30), now()).expect("generate CA");
    let issued = issue(&authority, LeafUsage::Server, now());
    assert_eq!(issued.not_after, authority.facts().not_after);
    let later = authority.facts().not_after + TimeDelta::seconds(1);
    let refused = authority.issue(&request(LeafUsage::Server, &["a"], &[]), later);
    assert!(
        matches!(refused, Err(TlsError::UnusableCa { .. })),
        "{refused:?}"
    );
}

#[test]
fn zero_and_absurd_lifetimes_are_refused() {
    let zero = CertificateAuthority::generate("ca", std::time::Duration::ZERO, now());
    assert!(matches!(zero, Err(TlsError::Lifetime(_))));
    let absurd = CertificateAuthority::generate("ca", days(10_000 * 365), now());
    assert!(matches!(absurd, Err(TlsError::Lifetime(_))));
}

#[test]
fn a_ca_reads_back_from_its_pem() {
    let authority = ca("etcd-ca", now());
    let again =
        CertificateAuthority::from_pem(authority.cert_pem(), authority.key_pem()).expect("read");
    assert_eq!(again.cert_pem(), authority.cert_pem());
    assert_eq!(again.key_pem(), authority.key_pem());
    assert_eq!(again.facts(), authority.facts());
    // The CA read back issues leaves that verify under the original.
    let issued = issue(&again, LeafUsage::Client, now());
    assert!(signed_by(&issued.cert_pem, authority.cert_pem()).expect("verify"));
    // Its Debug output keeps the key out of logs.
    assert!(!format!("{again:?}").contains("PRIVATE KEY"));
    assert!(!format!("{issued:?}").contains("PRIVATE KEY"));
}

#[test]
fn a_key_of_another_certificate_is_refused() {
    let authority = ca("etcd-ca", now());
    let other = ca("etcd-ca", now());
    let mismatched = CertificateAuthority::from_pem(authority.cert_pem(), other.key_pem());
    assert!(
        matches!(mismatched, Err(TlsError::KeyMismatch)),
        "{mismatched:?}"
    );
}

#[test]
fn a_leaf_is_not_accepted_as_a_ca() {
    let authority = ca("etcd-ca", now());
    let issued = issue(&authority, LeafUsage::Server, now());
    let refused = CertificateAuthority::from_pem(&issued.cert_pem, &issued.key_pem);
    assert!(
        matches!(refused, Err(TlsError::NotCa { .. })),
        "{refused:?}"
    );
}

#[test]
fn garbage_is_refused_with_clear_errors() {
    let authority = ca("etcd-ca", now());
    assert!(matches!(
        read_certificate("hello"),
        Err(TlsError::NoCertificate)
    ));
    let broken = "-----BEGIN CERTIFICATE-----\n!!!\n-----END CERTIFICATE-----\n";
    assert!(matches!(read_certificate(broken), Err(TlsError::Pem(_))));
    let not_x509 = "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n";
    assert!(matches!(
        read_certificate(not_x509),
        Err(TlsError::Certificate(_))
    ));
    let no_key = CertificateAuthority::from_pem(authority.cert_pem(), "not a key");
    assert!(matches!(no_key, Err(TlsError::Key(_))), "{no_key:?}");
}
