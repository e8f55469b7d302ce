//! How a controller reacts to a failed pass: every error of a pass has a
//! [`Category`], which decides when the object is looked at again, the
//! metric label, and whether an Event is warranted.

use std::time::Duration;

use kube::runtime::controller::Action;

/// How the controller reacts to a failed pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Category {
    /// Worth retrying soon: API server hiccup, timeout, leader election.
    Transient,
    /// Someone else changed the object first: re-observe and retry at once.
    Conflict,
    /// Nothing could be reached (API server or every etcd member). Keep
    /// observing at a calm pace; never a reason for a destructive step.
    Unreachable,
    /// etcd or the API server refused the step as given; re-plan from a new
    /// observation rather than repeating it.
    Refused,
    /// The spec cannot be acted on; wait for the next change instead of
    /// hot-looping.
    InvalidSpec,
    /// The operator lacks a permission (RBAC); a person must fix it.
    Forbidden,
}

impl Category {
    /// Stable name used as the metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            Category::Transient => "transient",
            Category::Conflict => "conflict",
            Category::Unreachable => "unreachable",
            Category::Refused => "refused",
            Category::InvalidSpec => "invalid_spec",
            Category::Forbidden => "forbidden",
        }
    }

    /// Delay before the next attempt after an error of this category.
    pub fn retry_after(self) -> Duration {
        match self {
            Category::Conflict => Duration::from_secs(1),
            Category::Transient => Duration::from_secs(5),
            Category::Refused => Duration::from_secs(10),
            Category::Unreachable => Duration::from_secs(15),
            Category::Forbidden => Duration::from_secs(60),
            // A spec change triggers a reconcile by itself; this is only a
            // slow safety net.
            Category::InvalidSpec => Duration::from_secs(300),
        }
    }

    /// The requeue after an error of this category, never sooner than
    /// `at_least` (a controller whose passes are expensive, such as one
    /// that takes a snapshot, sets a floor).
    pub fn requeue(self, at_least: Duration) -> Action {
        Action::requeue(self.retry_after().max(at_least))
    }

    /// Category of a Kubernetes API error.
    pub fn of_kube(error: &kube::Error) -> Self {
        match error {
            kube::Error::Api(status) => match status.code {
                409 => Category::Conflict,
                401 | 403 => Category::Forbidden,
                400 | 422 => Category::InvalidSpec,
                _ => Category::Transient,
            },
            _ => Category::Transient,
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// An error the API server answered with `code`.
    pub(crate) fn api_error(code: u16) -> kube::Error {
        kube::Error::Api(Box::new(kube::core::Status {
            code,
            ..Default::default()
        }))
    }

    #[test]
    fn kube_errors_map_to_categories() {
        assert_eq!(Category::of_kube(&api_error(409)), Category::Conflict);
        assert_eq!(Category::of_kube(&api_error(403)), Category::Forbidden);
        assert_eq!(Category::of_kube(&api_error(422)), Category::InvalidSpec);
        assert_eq!(Category::of_kube(&api_error(500)), Category::Transient);
        assert_eq!(Category::of_kube(&api_error(503)), Category::Transient);
    }

    #[test]
    fn invalid_specs_do_not_hot_loop() {
        assert!(Category::InvalidSpec.retry_after() >= Duration::from_secs(60));
        assert!(Category::Conflict.retry_after() < Category::Transient.retry_after());
    }

    #[test]
    fn a_floor_slows_quick_retries_only() {
        let floor = Duration::from_secs(30);
        assert_eq!(
            Category::Transient.requeue(floor),
            Action::requeue(Duration::from_secs(30))
        );
        assert_eq!(
            Category::InvalidSpec.requeue(floor),
            Action::requeue(Duration::from_secs(300))
        );
    }
}
