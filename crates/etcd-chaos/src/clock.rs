//! One monotonic clock for every client of a campaign: the times of a
//! history are nanoseconds since the campaign started.

use std::time::Instant;

use linearizability::Nanos;

/// The campaign's clock.
#[derive(Clone, Copy, Debug)]
pub struct Clock {
    started: Instant,
}

impl Clock {
    /// A clock that starts now.
    pub fn start() -> Self {
        Self {
            started: Instant::now(),
        }
    }

    /// Nanoseconds since the start.
    pub fn now(&self) -> Nanos {
        u64::try_from(self.started.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }
}
