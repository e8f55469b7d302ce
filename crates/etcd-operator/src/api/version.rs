//! The etcd versions this release of the operator can run.

/// etcd versions the project pins and tests, newest last per minor.
pub const SUPPORTED: &[&str] = &["3.6.16", "3.7.3"];

/// The version a cluster runs when `spec.version` is not set: the newest
/// pinned 3.6 release.
pub const DEFAULT: &str = "3.6.16";

/// The shape of `spec.version`: a 3.6 or 3.7 release.
pub const PATTERN: &str = "^3[.](6|7)[.](0|[1-9][0-9]*)$";

/// The admission rule of `spec.version`: [`PATTERN`].
pub fn rule() -> kube::core::Rule {
    super::rules::rule(
        format!("self.matches('{PATTERN}')"),
        "version must be an etcd 3.6 or 3.7 release such as 3.6.16",
    )
}

/// The transition rule of `spec.version`: one minor release at a time,
/// either way (3.6 → 3.7, 3.7 → 3.6), as etcd upgrades and downgrades; a
/// patch release may change freely.
pub fn one_minor_step() -> kube::core::Rule {
    super::rules::rule(
        format!(
            "!self.matches('{PATTERN}') || !oldSelf.matches('{PATTERN}') || (int(self.split('.')[1]) - int(oldSelf.split('.')[1]) <= 1 && int(oldSelf.split('.')[1]) - int(self.split('.')[1]) <= 1)"
        ),
        "version may change by one minor release at a time (e.g. 3.6 to 3.7 or 3.7 to 3.6): etcd upgrades and downgrades one minor release at a time",
    )
}

/// Whether this operator release knows how to run `version`.
pub fn is_supported(version: &str) -> bool {
    SUPPORTED.contains(&version)
}

/// The container image of an etcd release.
pub fn image(version: &str) -> String {
    format!("registry.k8s.io/etcd:{version}-0")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_is_supported_and_matches_pattern() {
        assert!(is_supported(DEFAULT));
        assert!(DEFAULT.starts_with("3.6."));
    }

    #[test]
    fn image_uses_the_official_registry() {
        assert_eq!(image("3.6.16"), "registry.k8s.io/etcd:3.6.16-0");
    }
}
