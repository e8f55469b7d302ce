//! Validity windows: the clock-skew backdate, whole seconds, and the
//! conversions between chrono (the operator's clock) and X.509 times.

use chrono::{DateTime, TimeDelta, Utc};
use std::time::Duration;

use super::TlsError;

/// How long before the moment of issuance a certificate becomes valid: a
/// node whose clock lags the operator's by up to this much still accepts a
/// certificate issued a moment ago.
pub const CLOCK_SKEW_BACKDATE: Duration = Duration::from_secs(5 * 60);

/// The validity window of a certificate issued at `now` for `lifetime`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Window {
    /// `now`, to the second, less [`CLOCK_SKEW_BACKDATE`].
    pub(super) not_before: DateTime<Utc>,
    /// `now`, to the second, plus `lifetime`, to the second.
    pub(super) not_after: DateTime<Utc>,
}

impl Window {
    /// The window of a certificate issued at `now` for `lifetime`; refuses a
    /// lifetime under one second or one that ends past year 9999.
    pub(super) fn starting(now: DateTime<Utc>, lifetime: Duration) -> Result<Self, TlsError> {
        let out_of_range = || TlsError::Lifetime(lifetime);
        if lifetime.as_secs() == 0 {
            return Err(out_of_range());
        }
        let now = whole_seconds(now.timestamp())?;
        let span = TimeDelta::from_std(Duration::from_secs(lifetime.as_secs()))
            .map_err(|_| out_of_range())?;
        let backdate = TimeDelta::from_std(CLOCK_SKEW_BACKDATE).map_err(|_| out_of_range())?;
        let not_before = now.checked_sub_signed(backdate).ok_or_else(out_of_range)?;
        let not_after = now.checked_add_signed(span).ok_or_else(out_of_range)?;
        // X.509 GeneralizedTime stops at 9999-12-31T23:59:59Z.
        if not_after.timestamp() > LAST_X509_SECOND {
            return Err(out_of_range());
        }
        Ok(Self {
            not_before,
            not_after,
        })
    }

    /// The window as rcgen's `(not_before, not_after)`.
    pub(super) fn for_rcgen(
        &self,
    ) -> Result<(time::OffsetDateTime, time::OffsetDateTime), TlsError> {
        Ok((to_offset(self.not_before)?, to_offset(self.not_after)?))
    }
}

/// 9999-12-31T23:59:59Z, the last second X.509 can express.
const LAST_X509_SECOND: i64 = 253_402_300_799;

/// A Unix time in seconds as a chrono time.
pub(super) fn whole_seconds(unix_seconds: i64) -> Result<DateTime<Utc>, TlsError> {
    DateTime::from_timestamp(unix_seconds, 0).ok_or_else(|| {
        TlsError::Certificate(format!(
            "time {unix_seconds} (Unix seconds) is out of range"
        ))
    })
}

fn to_offset(at: DateTime<Utc>) -> Result<time::OffsetDateTime, TlsError> {
    time::OffsetDateTime::from_unix_timestamp(at.timestamp())
        .map_err(|e| TlsError::Certificate(format!("time {at} is out of range: {e}")))
}
