//! What a container's image resolves to on a lab node.
//!
//! With the lab's registry configured (`etcd-lab up` found the images of
//! `make image`), every image but `lab.local/host` is pulled from it and
//! the container runs in the image's own root filesystem
//! ([`registry`]). Without it, and always for `lab.local/host`, the fast
//! path maps images to files of this machine ([`host_files`]).

mod config;
mod host_files;
mod registry;

use std::path::PathBuf;

pub use config::ImageConfig;
pub use host_files::{HostImage, HostImageError, resolve_image as resolve_host_image};
pub use registry::{PullError, PulledImage, mirror_reference};

use crate::config::AgentConfig;
use crate::container::ImageFile;

/// The image `lab.local/host`: the host's own root, never pulled.
pub const HOST_IMAGE: &str = "lab.local/host";

/// What an image resolved to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolvedImage {
    /// Fast path: files bound into `/usr/local/bin` over the host's root.
    pub files: Vec<ImageFile>,
    /// The image's own root filesystem, when it was pulled.
    pub root: Option<PathBuf>,
    /// How the image says to run it (empty on the fast path).
    pub config: ImageConfig,
    /// Reported as the container's `imageID`.
    pub image_id: String,
}

/// Why an image cannot be run.
#[derive(Debug, thiserror::Error)]
pub enum ImageError {
    #[error(transparent)]
    Host(#[from] HostImageError),
    #[error(transparent)]
    Pull(#[from] PullError),
}

/// Resolves `image`; `always` is `imagePullPolicy: Always`.
pub async fn resolve_image(
    image: &str,
    always: bool,
    config: &AgentConfig,
) -> Result<ResolvedImage, ImageError> {
    let pulls = image.split(['@', ':']).next() != Some(HOST_IMAGE);
    match &config.registry {
        Some(registry) if pulls => {
            let pulled = registry::pull(registry, image, always).await?;
            let name = image
                .split('@')
                .next()
                .map(|n| match n.rsplit_once(':') {
                    Some((name, tag)) if !tag.contains('/') => name,
                    _ => n,
                })
                .unwrap_or(image);
            Ok(ResolvedImage {
                files: Vec::new(),
                root: Some(pulled.root),
                config: pulled.config,
                image_id: format!("{name}@{}", pulled.digest),
            })
        }
        _ => {
            let host =
                resolve_host_image(image, &config.etcd_images, &config.etcd_operator_binary)?;
            Ok(ResolvedImage {
                files: host.files,
                root: None,
                config: ImageConfig::default(),
                image_id: host.image_id,
            })
        }
    }
}
