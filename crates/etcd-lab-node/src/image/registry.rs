//! Pulls images from the lab's registry, as a kubelet's container runtime
//! does: the reference is resolved to a digest there, the image's
//! filesystem is unpacked once per digest into the lab's image store
//! (shared by the nodes, written with a rename so that two nodes pulling
//! at once never see half an image), and its configuration is kept beside
//! it. The registry is a mirror of every registry: `gcr.io/x/y:t` is
//! `<registry>/gcr.io/x/y:t` there.
//!
//! `crane` (go-containerregistry, pinned in `tools/crane`) does the
//! registry protocol and flattens the layers (`crane export`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Mutex;

use etcd_lab_common::IoContext;

use super::config::ImageConfig;
use crate::config::RegistryConfig;

/// An image unpacked in the store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PulledImage {
    /// `sha256:...` of the manifest.
    pub digest: String,
    /// The image's root filesystem (read-only lower layer of containers).
    pub root: PathBuf,
    pub config: ImageConfig,
}

/// Why an image could not be pulled.
#[derive(Debug, thiserror::Error)]
pub enum PullError {
    #[error(
        "image {image:?} is not in the lab's registry (it holds the images of `make image`, see docs/images.md): {detail}"
    )]
    NotFound { image: String, detail: String },
    #[error("pulling image {image:?} from the lab's registry: {detail}")]
    Failed { image: String, detail: String },
    #[error(transparent)]
    Io(#[from] etcd_lab_common::IoError),
}

/// Images this node has pulled, by reference (`IfNotPresent`).
static PULLED: Mutex<BTreeMap<String, PulledImage>> = Mutex::new(BTreeMap::new());

/// Held while this node unpacks an image.
static UNPACKING: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The image `image` on this node, pulled when it is not here yet or when
/// `always` (`imagePullPolicy: Always`).
pub async fn pull(
    registry: &RegistryConfig,
    image: &str,
    always: bool,
) -> Result<PulledImage, PullError> {
    if !always && let Some(pulled) = pulled(image) {
        return Ok(pulled);
    }
    let mirror = mirror_reference(&registry.address, image);
    let digest = crane(registry, &["digest", &mirror])
        .await
        .map_err(|detail| {
            if detail.contains("MANIFEST_UNKNOWN") || detail.contains("NAME_UNKNOWN") {
                PullError::NotFound {
                    image: image.to_owned(),
                    detail: detail.clone(),
                }
            } else {
                PullError::Failed {
                    image: image.to_owned(),
                    detail,
                }
            }
        })?;
    let digest = digest.trim().to_owned();
    let Some(hex) = digest.strip_prefix("sha256:") else {
        return Err(PullError::Failed {
            image: image.to_owned(),
            detail: format!("unexpected digest {digest:?}"),
        });
    };
    let dir = registry.store.join(hex);
    if !dir.join("config.json").is_file() {
        unpack(registry, image, &format!("{mirror}@{digest}"), &dir).await?;
    }
    let config_path = dir.join("config.json");
    let text = tokio::fs::read(&config_path)
        .await
        .context(|| format!("read {}", config_path.display()))?;
    let config = ImageConfig::parse(&text).map_err(|e| PullError::Failed {
        image: image.to_owned(),
        detail: format!("its configuration: {e}"),
    })?;
    let pulled = PulledImage {
        digest,
        root: dir.join("root"),
        config,
    };
    if let Ok(mut map) = PULLED.lock() {
        map.insert(image.to_owned(), pulled.clone());
    }
    Ok(pulled)
}

fn pulled(image: &str) -> Option<PulledImage> {
    PULLED.lock().ok()?.get(image).cloned()
}

/// Unpacks the image at `by_digest` into `dir` (root/ and config.json),
/// through a directory of its own renamed into place at the end.
async fn unpack(
    registry: &RegistryConfig,
    image: &str,
    by_digest: &str,
    dir: &Path,
) -> Result<(), PullError> {
    let failed = |detail: String| PullError::Failed {
        image: image.to_owned(),
        detail,
    };
    // One unpack at a time on this node; other nodes use other names.
    let _one_at_a_time = UNPACKING.lock().await;
    if dir.join("config.json").is_file() {
        return Ok(());
    }
    let name = dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let partial = registry
        .store
        .join(format!(".partial-{name}-{}", std::process::id()));
    if partial.exists() {
        tokio::fs::remove_dir_all(&partial)
            .await
            .context(|| format!("remove {}", partial.display()))?;
    }
    let root = partial.join("root");
    tokio::fs::create_dir_all(&root)
        .await
        .context(|| format!("create {}", root.display()))?;
    let mut export = tokio::process::Command::new(&registry.crane)
        .args(["export", "--insecure", by_digest, "-"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .context(|| format!("spawn {}", registry.crane.display()))?;
    let stream: Stdio = export
        .stdout
        .take()
        .ok_or_else(|| failed("crane export has no output".into()))?
        .try_into()
        .context(|| "pipe crane export into tar".into())?;
    let untar = tokio::process::Command::new("tar")
        .args(["-x", "-p", "--numeric-owner", "-f", "-", "-C"])
        .arg(&root)
        .stdin(stream)
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .output();
    let (exported, untarred) = tokio::join!(export.wait_with_output(), untar);
    let exported = exported.context(|| "wait for crane export".into())?;
    let untarred = untarred.context(|| "wait for tar".into())?;
    if !exported.status.success() {
        return Err(failed(format!(
            "crane export: {}",
            String::from_utf8_lossy(&exported.stderr).trim()
        )));
    }
    if !untarred.status.success() {
        return Err(failed(format!(
            "unpacking: {}",
            String::from_utf8_lossy(&untarred.stderr).trim()
        )));
    }
    let config = crane(registry, &["config", by_digest])
        .await
        .map_err(failed)?;
    let config_path = partial.join("config.json");
    tokio::fs::write(&config_path, config)
        .await
        .context(|| format!("write {}", config_path.display()))?;
    if tokio::fs::rename(&partial, dir).await.is_err() {
        // Another node unpacked the same digest first: keep theirs.
        let _ = tokio::fs::remove_dir_all(&partial).await;
        if !dir.join("config.json").is_file() {
            return Err(failed(format!(
                "could not move the image to {}",
                dir.display()
            )));
        }
    }
    Ok(())
}

/// Runs `crane <args> --insecure` (the lab's registry speaks plain HTTP on
/// the lab's host address); its stdout, or its stderr as the error.
async fn crane(registry: &RegistryConfig, args: &[&str]) -> Result<String, String> {
    let output = tokio::process::Command::new(&registry.crane)
        .args(args)
        .arg("--insecure")
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .output()
        .await
        .map_err(|e| format!("spawn {}: {e}", registry.crane.display()))?;
    if output.status.success() {
        Ok(String::from_utf8_lossy(&output.stdout).into_owned())
    } else {
        Err(String::from_utf8_lossy(&output.stderr).trim().to_owned())
    }
}

/// `image` under the lab's registry, with the implicit registry and
/// `library/` of short names spelled out as a container runtime does.
pub fn mirror_reference(registry: &str, image: &str) -> String {
    let first = image.split('/').next().unwrap_or_default();
    let has_registry =
        image.contains('/') && (first.contains('.') || first.contains(':') || first == "localhost");
    let full = if has_registry {
        image.to_owned()
    } else if image.contains('/') {
        format!("docker.io/{image}")
    } else {
        format!("docker.io/library/{image}")
    };
    format!("{registry}/{full}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn references_keep_their_registry_under_the_mirror() {
        let r = "10.244.0.1:5000";
        assert_eq!(
            mirror_reference(r, "gcr.io/etcd-development/etcd:v3.6.16"),
            "10.244.0.1:5000/gcr.io/etcd-development/etcd:v3.6.16"
        );
        assert_eq!(
            mirror_reference(r, "ghcr.io/durable-etcd/etcd-operator:dev"),
            "10.244.0.1:5000/ghcr.io/durable-etcd/etcd-operator:dev"
        );
        assert_eq!(
            mirror_reference(r, "busybox:1"),
            "10.244.0.1:5000/docker.io/library/busybox:1"
        );
        assert_eq!(
            mirror_reference(r, "user/app"),
            "10.244.0.1:5000/docker.io/user/app"
        );
    }
}
