//! The fast path: maps container images to files on this machine (see
//! `docs/architecture.md`), for a lab started without images and for
//! `lab.local/host`, the host's own root.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::container::ImageFile;

/// What an image resolved to on the fast path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostImage {
    /// Files bound into `/usr/local/bin` (empty for `lab.local/host`).
    pub files: Vec<ImageFile>,
    /// Reported as the container's `imageID`.
    pub image_id: String,
}

/// Why an image cannot be run here.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HostImageError {
    #[error(
        "image {image:?} is not available in etcd-lab: etcd version {version} is not built (built: {built})"
    )]
    UnknownEtcdVersion {
        image: String,
        version: String,
        built: String,
    },
    #[error(
        "image {0:?} is not available in etcd-lab: only etcd images (registry.k8s.io/etcd, quay.io/coreos/etcd, gcr.io/etcd-development/etcd), */etcd-operator and lab.local/host can run"
    )]
    Unknown(String),
}

/// Resolves `image` against the etcd catalog and the operator binary.
pub fn resolve_image(
    image: &str,
    etcd_images: &BTreeMap<String, PathBuf>,
    operator_binary: &Path,
) -> Result<HostImage, HostImageError> {
    let (name, tag) = split_image(image);
    if name == "lab.local/host" {
        return Ok(HostImage {
            files: vec![],
            image_id: "lab://host".into(),
        });
    }
    if name.ends_with("/etcd-operator") || name == "etcd-operator" {
        return Ok(HostImage {
            files: vec![ImageFile {
                source: operator_binary.to_owned(),
                name: "etcd-operator".into(),
            }],
            image_id: format!("lab://{}", operator_binary.display()),
        });
    }
    let version = match name {
        "registry.k8s.io/etcd" | "k8s.gcr.io/etcd" => tag.map(|t| {
            let t = t.trim_start_matches('v');
            // registry.k8s.io/etcd tags are `<version>-<build>`, e.g. 3.6.5-0.
            match t.rsplit_once('-') {
                Some((v, build)) if build.chars().all(|c| c.is_ascii_digit()) => v.to_owned(),
                _ => t.to_owned(),
            }
        }),
        "quay.io/coreos/etcd" | "gcr.io/etcd-development/etcd" => {
            tag.map(|t| t.trim_start_matches('v').to_owned())
        }
        _ => return Err(HostImageError::Unknown(image.to_owned())),
    };
    let Some(version) = version else {
        return Err(HostImageError::Unknown(image.to_owned()));
    };
    let Some(dir) = etcd_images.get(&version) else {
        return Err(HostImageError::UnknownEtcdVersion {
            image: image.to_owned(),
            version,
            built: etcd_images.keys().cloned().collect::<Vec<_>>().join(", "),
        });
    };
    Ok(HostImage {
        files: ["etcd", "etcdctl", "etcdutl"]
            .into_iter()
            .map(|n| ImageFile {
                source: dir.join(n),
                name: n.into(),
            })
            .collect(),
        image_id: format!("lab://{}", dir.display()),
    })
}

/// Splits `name[:tag][@digest]` into name and tag.
fn split_image(image: &str) -> (&str, Option<&str>) {
    let image = image.split('@').next().unwrap_or(image);
    match image.rsplit_once(':') {
        Some((name, tag)) if !tag.contains('/') => (name, Some(tag)),
        _ => (image, None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn catalog() -> BTreeMap<String, PathBuf> {
        BTreeMap::from([("3.6.5".to_owned(), PathBuf::from("/cache/etcd-3.6"))])
    }

    #[test]
    fn etcd_images_of_every_registry_map_to_the_built_version() {
        for image in [
            "registry.k8s.io/etcd:3.6.5-0",
            "quay.io/coreos/etcd:v3.6.5",
            "gcr.io/etcd-development/etcd:v3.6.5",
        ] {
            let r = resolve_image(image, &catalog(), Path::new("/op")).expect(image);
            assert_eq!(r.files.len(), 3);
            assert_eq!(r.files[0].source, PathBuf::from("/cache/etcd-3.6/etcd"));
        }
    }

    #[test]
    fn operator_and_host_images() {
        let r = resolve_image("ghcr.io/x/etcd-operator:dev", &catalog(), Path::new("/op"))
            .expect("operator");
        assert_eq!(r.files[0].name, "etcd-operator");
        assert_eq!(r.files[0].source, PathBuf::from("/op"));
        let r = resolve_image("lab.local/host", &catalog(), Path::new("/op")).expect("host");
        assert!(r.files.is_empty());
    }

    #[test]
    fn unknown_images_and_versions_are_rejected_clearly() {
        let e = resolve_image("quay.io/coreos/etcd:v3.5.0", &catalog(), Path::new("/op"))
            .expect_err("missing version");
        assert!(e.to_string().contains("3.5.0"));
        assert!(e.to_string().contains("3.6.5"));
        assert!(matches!(
            resolve_image("nginx:1.27", &catalog(), Path::new("/op")),
            Err(HostImageError::Unknown(_))
        ));
    }
}
