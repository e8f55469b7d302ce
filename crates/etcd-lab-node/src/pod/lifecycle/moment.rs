//! The time an input happens at.

use std::time::Instant;

use k8s_openapi::jiff::Timestamp;

/// When an input happens: the monotonic instant drives timers and back-off,
/// the wall-clock time is what the status reports. The lifecycle never
/// reads a clock itself; the worker stamps each input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Moment {
    pub instant: Instant,
    pub wall: Timestamp,
}

impl Moment {
    /// The current time.
    pub fn now() -> Self {
        Self {
            instant: Instant::now(),
            wall: Timestamp::now(),
        }
    }
}
