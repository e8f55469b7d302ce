//! Kubernetes timestamps of the times the backup code keeps.
//!
//! Backup metadata, incremental progress and cron schedules hold chrono
//! times (the time type of `croner`, the cron library); the API types hold
//! `jiff` timestamps (k8s-openapi's). This is the one place they meet, at
//! millisecond precision.

use chrono::{DateTime, Utc};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;

/// The Kubernetes timestamp of `at`.
pub fn to_kube(at: DateTime<Utc>) -> Time {
    Time(Timestamp::from_millisecond(at.timestamp_millis()).unwrap_or(Timestamp::UNIX_EPOCH))
}

/// The chrono time of a Kubernetes timestamp.
pub fn from_kube(at: &Time) -> DateTime<Utc> {
    DateTime::from_timestamp_millis(at.0.as_millisecond()).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_time_survives_the_round_trip_to_the_millisecond() {
        let at = DateTime::from_timestamp_millis(1_772_000_123_456).expect("a time");
        assert_eq!(to_kube(at).0.as_millisecond(), 1_772_000_123_456);
        assert_eq!(from_kube(&to_kube(at)), at);
        let finer = at + chrono::Duration::microseconds(789);
        assert_eq!(from_kube(&to_kube(finer)), at);
    }
}
