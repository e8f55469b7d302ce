//! Waiting for something to become true, in the three forms the tests use:
//! a check that says yes or no ([`wait_for`], [`wait_for_every`]), a check
//! that answers once it can ([`eventually`]), and a check whose timeout
//! fails the test at once ([`wait_until`]).

use std::future::Future;
use std::time::{Duration, Instant};

use crate::TestResult;

/// Polls `check` every second until it says true; its errors only mean "not
/// yet", the last one is named when time runs out.
pub async fn wait_for<F, Fut>(what: &str, timeout: Duration, check: F) -> TestResult
where
    F: FnMut() -> Fut,
    Fut: Future<Output = TestResult<bool>>,
{
    wait_for_every(what, timeout, Duration::from_secs(1), check).await
}

/// [`wait_for`] polling every `interval`.
pub async fn wait_for_every<F, Fut>(
    what: &str,
    timeout: Duration,
    interval: Duration,
    mut check: F,
) -> TestResult
where
    F: FnMut() -> Fut,
    Fut: Future<Output = TestResult<bool>>,
{
    let deadline = Instant::now() + timeout;
    let mut last_error = String::new();
    loop {
        match check().await {
            Ok(true) => return Ok(()),
            Ok(false) => {}
            Err(error) => last_error = error.to_string(),
        }
        if Instant::now() > deadline {
            return Err(format!("timed out waiting for {what} ({last_error})").into());
        }
        tokio::time::sleep(interval).await;
    }
}

/// Polls `check` every 200 ms until it returns `Ok`, or fails with the last
/// error once `timeout` has passed.
pub async fn eventually<T, E, F, Fut>(
    what: &str,
    timeout: Duration,
    mut check: F,
) -> Result<T, String>
where
    E: std::fmt::Display,
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, E>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        match check().await {
            Ok(value) => return Ok(value),
            Err(error) if Instant::now() >= deadline => {
                return Err(format!("{what}: not reached within {timeout:?}: {error}"));
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
}

/// Polls `check` every 500 ms until it answers; prints how long that took,
/// and panics naming `what` once `timeout` has passed.
pub async fn wait_until<F, Fut>(what: &str, timeout: Duration, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<()>>,
{
    let started = Instant::now();
    while started.elapsed() < timeout {
        if check().await.is_some() {
            println!("{what}: after {:.1}s", started.elapsed().as_secs_f64());
            return;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    panic!("timed out after {}s waiting for {what}", timeout.as_secs());
}
