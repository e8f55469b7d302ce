//! How each of the operator's watches retries after an error: 250 ms,
//! doubling, at most 2 s, back to 250 ms once the watch works again.
//!
//! kube's default (client-go's) grows to 30 s and resets only after two
//! minutes, kind to a struggling API server; after an API server outage of
//! a few seconds it kept the operator's copies stale for tens of seconds.
//! One operator's dozen watches retrying every 2 s while the API server is
//! down cost it little. The pause is a timer armed in the poll that saw the
//! error, so it wakes the watch's task when it ends
//! ([`super::watch_task`]).

use std::time::Duration;

use futures::{Stream, StreamExt};
use kube::runtime::utils::Backoff;

/// The first wait after an error.
const FIRST: Duration = Duration::from_millis(250);
/// The longest wait.
const LONGEST: Duration = Duration::from_secs(2);

/// The retry policy of the operator's watches.
#[derive(Debug, Clone)]
pub struct WatchBackoff {
    next: Duration,
}

impl Default for WatchBackoff {
    fn default() -> Self {
        Self { next: FIRST }
    }
}

impl Iterator for WatchBackoff {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        let wait = self.next;
        self.next = (self.next * 2).min(LONGEST);
        Some(wait)
    }
}

impl Backoff for WatchBackoff {
    fn reset(&mut self) {
        self.next = FIRST;
    }
}

/// `events` with a [`WatchBackoff`] pause after each error, taken before
/// the error is passed on (so that the task wakes when the pause ends).
pub fn paused_after_errors<S, T, E>(events: S) -> impl Stream<Item = Result<T, E>>
where
    S: Stream<Item = Result<T, E>>,
{
    let mut backoff = WatchBackoff::default();
    events.then(move |event| {
        let pause = match &event {
            Ok(_) => {
                backoff.reset();
                None
            }
            Err(_) => backoff.next(),
        };
        async move {
            if let Some(pause) = pause {
                tokio::time::sleep(pause).await;
            }
            event
        }
    })
}

#[cfg(test)]
mod tests {
    use futures::{StreamExt, stream};

    use super::*;

    #[tokio::test(start_paused = true)]
    async fn errors_pass_after_their_pause_and_a_success_starts_over() {
        // Tokio's clock is paused: it moves only by the pauses themselves.
        let started = tokio::time::Instant::now();
        let items: Vec<Result<u8, &str>> = vec![Err("a"), Err("b"), Ok(1), Err("c")];
        let seen: Vec<Result<u8, &str>> = paused_after_errors(stream::iter(items.clone()))
            .collect()
            .await;
        assert_eq!(seen, items);
        // 250 + 500 ms, then (after the success) 250 ms again.
        assert_eq!(started.elapsed(), Duration::from_millis(1000));
    }

    #[test]
    fn doubles_up_to_two_seconds_and_starts_over_after_a_success() {
        let mut backoff = WatchBackoff::default();
        let waits: Vec<u64> = backoff
            .by_ref()
            .take(6)
            .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
            .collect();
        assert_eq!(waits, [250, 500, 1000, 2000, 2000, 2000]);
        backoff.reset();
        assert_eq!(backoff.next(), Some(FIRST));
    }
}
