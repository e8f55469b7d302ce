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

/// The etcd project's own registry of release images.
pub const IMAGE_REPOSITORY: &str = "gcr.io/etcd-development/etcd";

/// The container image of an etcd release when `spec.image` is not set:
/// the etcd project's own release image, `gcr.io/etcd-development/etcd:v<version>`
/// (mirrored at `quay.io/coreos/etcd:v<version>`). etcd's release process
/// publishes it for every release, so every version the CRD accepts has
/// one. `registry.k8s.io/etcd:<version>-0` is Kubernetes' build, published
/// only for the releases Kubernetes ships, so a valid `spec.version` could
/// name an image that does not exist.
///
/// The Pod template hash covers `spec.image` as written, not this default
/// (`pod_revision::template_hash`): changing the default rolls no existing
/// member; a member picks it up when its Pod is replaced for another reason.
pub fn image(version: &str) -> String {
    format!("{IMAGE_REPOSITORY}:v{version}")
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
    fn image_is_the_etcd_projects_release_image() {
        assert_eq!(image("3.6.16"), "gcr.io/etcd-development/etcd:v3.6.16");
        assert_eq!(image("3.7.3"), "gcr.io/etcd-development/etcd:v3.7.3");
    }

    /// Members created before the default image changed (it was
    /// `registry.k8s.io/etcd:<version>-0`) keep their Pod template hash, so
    /// an operator upgrade that changes the default rolls nothing.
    #[test]
    fn the_default_image_is_not_part_of_the_pod_template_hash() {
        use crate::api::EtcdClusterSpec;
        use crate::api::pod_revision::template_hash;
        use crate::transport::Transport;

        let spec = EtcdClusterSpec::default();
        assert_eq!(spec.image, None);
        let hash = template_hash(
            &spec,
            spec.quota_backend_bytes(),
            Transport::Plaintext,
            None,
        );
        // The hash reads `spec.image` as written: naming the default image
        // explicitly is another template, leaving it unset is not the
        // default image hashed.
        let explicit = EtcdClusterSpec {
            image: Some(image(&spec.version)),
            ..spec.clone()
        };
        assert_ne!(
            template_hash(
                &explicit,
                explicit.quota_backend_bytes(),
                Transport::Plaintext,
                None
            ),
            hash
        );
        // The hash of a default spec, changed last by `POD_SHAPE` 4 (the
        // corruption checks). If this changes, every member of every existing
        // cluster is restarted, one at a time, when the operator is
        // upgraded: make sure that is meant (a new `POD_SHAPE`), then
        // update it here.
        assert_eq!(
            hash, "86187f6bd83a428a",
            "the Pod template hash of a default spec"
        );
    }
}
