//! Container restart back-off, as the kubelet does it: the first restart is
//! immediate, then 10 s doubling up to 5 min; reset after 10 min of running.

use std::time::Duration;

/// Initial back-off.
pub const INITIAL: Duration = Duration::from_secs(10);
/// Maximum back-off.
pub const MAX: Duration = Duration::from_secs(300);
/// A container that ran this long resets its back-off.
pub const RESET_AFTER: Duration = Duration::from_secs(600);

/// Back-off state of one container.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Backoff {
    current: Option<Duration>,
}

impl Backoff {
    /// Delay before the next restart, given how long the last run lasted.
    pub fn next_delay(&mut self, ran_for: Duration) -> Duration {
        if ran_for >= RESET_AFTER {
            self.current = None;
        }
        let delay = self.current.unwrap_or(Duration::ZERO);
        self.current = Some(match self.current {
            None => INITIAL,
            Some(d) => (d * 2).min(MAX),
        });
        delay
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_from_ten_seconds_to_five_minutes() {
        let mut b = Backoff::default();
        let short = Duration::from_secs(1);
        let delays: Vec<u64> = (0..8).map(|_| b.next_delay(short).as_secs()).collect();
        assert_eq!(delays, vec![0, 10, 20, 40, 80, 160, 300, 300]);
    }

    #[test]
    fn resets_after_a_long_run() {
        let mut b = Backoff::default();
        b.next_delay(Duration::from_secs(1));
        b.next_delay(Duration::from_secs(1));
        assert_eq!(b.next_delay(Duration::from_secs(700)), Duration::ZERO);
        assert_eq!(b.next_delay(Duration::from_secs(1)), INITIAL);
    }
}
