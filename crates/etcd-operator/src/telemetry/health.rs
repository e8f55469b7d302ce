//! Liveness and readiness state shared between the controller and the
//! health endpoints.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// Readiness of the operator. Liveness needs no state: answering is enough.
#[derive(Clone, Debug, Default)]
pub struct Health {
    ready: Arc<AtomicBool>,
}

impl Health {
    /// Marks the operator ready (controller running) or not.
    pub fn set_ready(&self, ready: bool) {
        self.ready.store(ready, Ordering::Relaxed);
    }

    /// Whether `/readyz` answers 200.
    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn starts_unready_and_follows_the_controller() {
        let health = Health::default();
        assert!(!health.is_ready());
        let shared = health.clone();
        shared.set_ready(true);
        assert!(health.is_ready());
        shared.set_ready(false);
        assert!(!health.is_ready());
    }
}
