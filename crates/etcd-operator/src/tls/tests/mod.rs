//! Tests of the tls module: issuance, reading, renewal, trust bundles, and a
//! real mutual-TLS handshake with rustls.

mod bundle;
mod handshake;
mod issue;
mod renewal;

use chrono::{DateTime, TimeZone as _, Utc};
use std::net::IpAddr;
use std::time::Duration;

use super::{CertificateAuthority, IssuedCertificate, LeafRequest, LeafUsage};

/// A fixed "now" for certificates whose dates the tests check.
fn now() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 3, 1, 12, 0, 0)
        .single()
        .expect("valid date")
}

/// The real clock, for certificates a TLS library checks against it.
fn wall_clock() -> DateTime<Utc> {
    Utc::now()
}

fn days(n: u64) -> Duration {
    Duration::from_secs(n * 24 * 60 * 60)
}

fn ca(common_name: &str, at: DateTime<Utc>) -> CertificateAuthority {
    CertificateAuthority::generate(common_name, days(3650), at).expect("generate CA")
}

fn request(usage: LeafUsage, dns: &[&str], ips: &[&str]) -> LeafRequest {
    LeafRequest {
        common_name: "etcd-0".to_owned(),
        dns_names: dns.iter().map(|d| (*d).to_owned()).collect(),
        ip_addresses: ips.iter().map(|ip| ip.parse().expect("IP")).collect(),
        usage,
        lifetime: days(90),
    }
}

fn issue(ca: &CertificateAuthority, usage: LeafUsage, at: DateTime<Utc>) -> IssuedCertificate {
    ca.issue(
        &request(
            usage,
            &["etcd-0.etcd.db.svc", "localhost"],
            &["127.0.0.1", "::1"],
        ),
        at,
    )
    .expect("issue")
}

fn ips(list: &[&str]) -> Vec<IpAddr> {
    list.iter().map(|ip| ip.parse().expect("IP")).collect()
}
