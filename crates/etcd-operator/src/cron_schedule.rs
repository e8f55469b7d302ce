//! Pure decisions of a cron schedule (backups, defragmentation): when the
//! next run is due, and whether the newest backup is fresh enough for
//! `BackupReady`. A leaf: the planner and the backup code both use it.

use chrono::{DateTime, Duration, Utc};
use croner::Cron;
use croner::parser::{CronParser, Seconds, Year};

/// A cron expression that cannot schedule backups.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid cron schedule {expression:?}: {why}")]
pub struct InvalidSchedule {
    /// The expression as written.
    pub expression: String,
    /// What is wrong with it.
    pub why: String,
}

/// Whether the newest backup is recent enough, with the sentence that
/// says so.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Freshness {
    /// Recent enough.
    Fresh(String),
    /// Too old, or none yet.
    Stale(String),
}

/// A parsed cron schedule (UTC).
#[derive(Debug, Clone)]
pub struct CronSchedule {
    cron: Cron,
}

impl CronSchedule {
    /// Parses five fields (`minute hour day-of-month month day-of-week`)
    /// or a nickname (`@hourly`, ...), as admission lets through. Seconds
    /// and years are refused (a schedule stored before admission checked
    /// its shape may hold them); so is an expression that never fires
    /// (`0 0 30 2 *`).
    pub fn parse(expression: &str) -> Result<Self, InvalidSchedule> {
        let invalid = |why: String| InvalidSchedule {
            expression: expression.to_owned(),
            why,
        };
        let cron = CronParser::builder()
            .seconds(Seconds::Disallowed)
            .year(Year::Disallowed)
            .build()
            .parse(expression)
            .map_err(|e| invalid(e.to_string()))?;
        let schedule = Self { cron };
        if schedule.next_after(Utc::now()).is_none() {
            return Err(invalid("it never fires".to_string()));
        }
        Ok(schedule)
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
/// schedule's period.
pub fn freshness(
    last_success: Option<DateTime<Utc>>,
    period: Duration,
    now: DateTime<Utc>,
) -> Freshness {
    match last_success {
        None => Freshness::Stale("no successful backup yet".to_string()),
        Some(at) => {
            let age = now - at;
            let limit = period * 2;
            if age <= limit {
                Freshness::Fresh(format!("newest backup is {} old", human(age)))
            } else {
                Freshness::Stale(format!(
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
    fn five_fields_or_a_nickname_and_nothing_else() {
        let cron = CronSchedule::parse("@daily").expect("nickname");
        assert_eq!(cron.period_at(at(1, 0, 3)), Some(Duration::days(1)));
        let cron = CronSchedule::parse("*/15 9-17 * JAN-MAR MON-FRI").expect("names");
        assert!(cron.next_after(at(1, 0, 0)).is_some());
        for (expression, why) in [
            ("every hour", "invalid cron schedule"),
            ("*/10 * * * * *", "5 fields"),
            ("0 0 * * * * 2030", "invalid cron schedule"),
            ("61 * * * *", "invalid cron schedule"),
            ("0 0 30 2 *", "never fires"),
            ("", "invalid cron schedule"),
        ] {
            let error = CronSchedule::parse(expression)
                .expect_err(expression)
                .to_string();
            assert!(error.contains(why), "{expression}: {error}");
        }
    }

    #[test]
    fn stale_after_twice_the_period() {
        let hour = Duration::hours(1);
        assert!(matches!(
            freshness(Some(at(10, 0, 0)), hour, at(11, 30, 0)),
            Freshness::Fresh(_)
        ));
        let Freshness::Stale(stale) = freshness(Some(at(8, 0, 0)), hour, at(11, 30, 0)) else {
            panic!("stale");
        };
        assert!(stale.contains("3h30m old"), "{stale}");
        assert!(matches!(
            freshness(None, hour, at(11, 0, 0)),
            Freshness::Stale(_)
        ));
    }
}
