//! Pure decisions of a backup schedule: when the next backup is due and
//! whether the newest backup is fresh enough for `BackupReady`.

use std::str::FromStr;

use chrono::{DateTime, Duration, Utc};
use croner::Cron;

/// A parsed cron schedule (UTC).
#[derive(Debug, Clone)]
pub struct CronSchedule {
    cron: Cron,
}

impl CronSchedule {
    /// Parses five fields, or six with seconds first.
    pub fn parse(expression: &str) -> Result<Self, String> {
        Cron::from_str(expression)
            .map(|cron| Self { cron })
            .map_err(|e| format!("invalid cron schedule {expression:?}: {e}"))
    }

    /// The first fire time strictly after `after`.
    pub fn next_after(&self, after: DateTime<Utc>) -> Option<DateTime<Utc>> {
        self.cron.find_next_occurrence(&after, false).ok()
    }

    /// The period around `at`: the gap between the next two fire times.
    pub fn period_at(&self, at: DateTime<Utc>) -> Option<Duration> {
        let first = self.next_after(at)?;
        let second = self.next_after(first)?;
        Some(second - first)
    }

    /// Whether a backup is due at `now`: a fire time has passed since the
    /// last backup started (or since `since`, the schedule's creation).
    pub fn is_due(
        &self,
        last_started: Option<DateTime<Utc>>,
        since: DateTime<Utc>,
        now: DateTime<Utc>,
    ) -> bool {
        let from = last_started.unwrap_or(since);
        self.next_after(from).is_some_and(|due| due <= now)
    }
}

/// Whether the newest successful backup is fresh: no older than twice the
/// schedule's period. `Err` carries the message for a stale condition.
pub fn freshness(
    last_success: Option<DateTime<Utc>>,
    period: Duration,
    now: DateTime<Utc>,
) -> Result<String, String> {
    match last_success {
        None => Err("no successful backup yet".to_string()),
        Some(at) => {
            let age = now - at;
            let limit = period * 2;
            if age <= limit {
                Ok(format!("newest backup is {} old", human(age)))
            } else {
                Err(format!(
                    "newest backup is {} old, more than twice the schedule's period ({})",
                    human(age),
                    human(period)
                ))
            }
        }
    }
}

fn human(duration: Duration) -> String {
    let seconds = duration.num_seconds().max(0);
    match seconds {
        s if s < 120 => format!("{s}s"),
        s if s < 7200 => format!("{}m", s / 60),
        s => format!("{}h{}m", s / 3600, (s % 3600) / 60),
    }
}

#[cfg(test)]
mod tests {
    use chrono::TimeZone;

    use super::*;

    fn at(h: u32, m: u32, s: u32) -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 3, 1, h, m, s)
            .single()
            .expect("time")
    }

    #[test]
    fn hourly_schedule_is_due_after_the_hour() {
        let cron = CronSchedule::parse("0 * * * *").expect("cron");
        assert_eq!(cron.next_after(at(10, 0, 0)), Some(at(11, 0, 0)));
        assert_eq!(cron.period_at(at(10, 30, 0)), Some(Duration::hours(1)));
        assert!(!cron.is_due(Some(at(10, 0, 5)), at(9, 0, 0), at(10, 59, 0)));
        assert!(cron.is_due(Some(at(10, 0, 5)), at(9, 0, 0), at(11, 0, 1)));
        assert!(cron.is_due(None, at(10, 30, 0), at(11, 0, 0)));
    }

    #[test]
    fn seconds_are_optional_and_garbage_is_refused() {
        let cron = CronSchedule::parse("*/10 * * * * *").expect("six fields");
        assert_eq!(cron.period_at(at(1, 0, 3)), Some(Duration::seconds(10)));
        let error = CronSchedule::parse("every hour").expect_err("invalid");
        assert!(error.contains("invalid cron schedule"), "{error}");
    }

    #[test]
    fn stale_after_twice_the_period() {
        let hour = Duration::hours(1);
        assert!(freshness(Some(at(10, 0, 0)), hour, at(11, 30, 0)).is_ok());
        let stale = freshness(Some(at(8, 0, 0)), hour, at(11, 30, 0)).expect_err("stale");
        assert!(stale.contains("3h30m old"), "{stale}");
        assert!(freshness(None, hour, at(11, 0, 0)).is_err());
    }
}
