//! The lab's image registry: `crane registry serve` on the lab's host
//! address (reachable from every node through the router, like the API
//! server), holding the images of `make image` under their own names, as
//! a mirror of every registry (`gcr.io/x/y:t` is `<registry>/gcr.io/x/y:t`).
//! The nodes pull from it (`etcd_lab_node::image`).
//!
//! `make image` writes the images as OCI layouts under `target/images/`
//! and lists them in `images.tsv`: one `<reference>\t<layout dir>` per
//! line. `etcd-lab up` pushes every listed reference. The registry keeps
//! blobs on disk and manifests in memory, so `up` pushes again whenever it
//! starts the registry.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use etcd_lab_common::IoContext;
use etcd_lab_node::config::RegistryConfig;
use etcd_lab_node::network::addressing::HOST_IP;

use crate::cgroup::LabCgroups;
use crate::error::{LabError, Result};
use crate::paths::LabPaths;
use crate::process::{self, ProcessSpec};

/// Process name, log and pid file name, and cgroup of the registry.
pub const NAME: &str = "registry";
/// Its port on the lab's host address.
pub const PORT: u16 = 5000;
/// The list of images in an images directory.
pub const IMAGE_LIST: &str = "images.tsv";

/// `HOST:PORT` of the registry.
pub fn address() -> String {
    format!("{HOST_IP}:{PORT}")
}

/// One image of `images.tsv`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListedImage {
    pub reference: String,
    /// The OCI layout directory.
    pub layout: PathBuf,
}

/// The images listed in `<dir>/images.tsv`; `None` when there is no list.
pub fn read_image_list(dir: &Path) -> Result<Option<Vec<ListedImage>>> {
    let list = dir.join(IMAGE_LIST);
    let text = match std::fs::read_to_string(&list) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(LabError::Invalid(format!("read {}: {e}", list.display()))),
    };
    parse_image_list(&text, dir).map(Some)
}

fn parse_image_list(text: &str, dir: &Path) -> Result<Vec<ListedImage>> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|line| {
            let Some((reference, layout)) = line.split_once('\t') else {
                return Err(LabError::Invalid(format!(
                    "{IMAGE_LIST}: expected `<reference>\\t<layout dir>`, got {line:?}"
                )));
            };
            Ok(ListedImage {
                reference: reference.trim().to_owned(),
                layout: dir.join(layout.trim()),
            })
        })
        .collect()
}

/// The images directory of `make image` beside the build of `etcd_lab_binary`
/// (`target/<profile>/etcd-lab` → `target/images`), or `$ETCD_LAB_IMAGES`.
pub fn default_images_dir(etcd_lab_binary: &Path) -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os("ETCD_LAB_IMAGES").filter(|d| !d.is_empty()) {
        return Some(PathBuf::from(dir));
    }
    Some(etcd_lab_binary.parent()?.parent()?.join("images"))
}

/// Starts the registry, waits for it and pushes every listed image.
/// Returns what the nodes need to pull.
pub async fn start(
    paths: &LabPaths,
    cgroups: &LabCgroups,
    crane: &Path,
    images: &[ListedImage],
) -> Result<RegistryConfig> {
    let storage = paths.root().join("registry");
    let store = paths.root().join("images");
    for dir in [&storage, &store] {
        std::fs::create_dir_all(dir).context(|| format!("create {}", dir.display()))?;
    }
    let spec = ProcessSpec {
        name: NAME.to_owned(),
        program: crane.to_owned(),
        args: vec![
            "registry".into(),
            "serve".into(),
            "--address".into(),
            address().into(),
            "--disk".into(),
            storage.into(),
        ],
        log: paths.log(NAME),
        pid_file: paths.pid_file(NAME),
        cgroup: NAME.to_owned(),
        netns: None,
        restart_on_exit: false,
    };
    process::spawn(&spec, cgroups)?;
    wait_listening(Duration::from_secs(30)).await?;
    for image in images {
        push(crane, image).await?;
    }
    Ok(RegistryConfig {
        address: address(),
        crane: crane.to_owned(),
        store,
    })
}

async fn wait_listening(timeout: Duration) -> Result<()> {
    let started = Instant::now();
    loop {
        if tokio::net::TcpStream::connect((HOST_IP, PORT))
            .await
            .is_ok()
        {
            return Ok(());
        }
        if started.elapsed() > timeout {
            return Err(LabError::Invalid(format!(
                "the image registry did not listen on {} within {timeout:?}",
                address()
            )));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn push(crane: &Path, image: &ListedImage) -> Result<()> {
    let target = format!("{}/{}", address(), image.reference);
    let output = tokio::process::Command::new(crane)
        .arg("push")
        .arg("--insecure")
        .arg(&image.layout)
        .arg(&target)
        .output()
        .await
        .context(|| format!("spawn {}", crane.display()))?;
    if !output.status.success() {
        return Err(LabError::Invalid(format!(
            "pushing {} to the lab's registry: {}",
            image.layout.display(),
            String::from_utf8_lossy(&output.stderr).trim()
        )));
    }
    tracing::info!(image = %image.reference, "image in the lab's registry");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_image_list() {
        let list = "# made by make image\nghcr.io/x/op:dev\tetcd-operator\n\nquay.io/coreos/etcd:v3.6.16\tetcd-v3.6.16\n";
        let images = parse_image_list(list, Path::new("/t/images")).expect("list");
        assert_eq!(images.len(), 2);
        assert_eq!(images[1].reference, "quay.io/coreos/etcd:v3.6.16");
        assert_eq!(images[1].layout, PathBuf::from("/t/images/etcd-v3.6.16"));
        assert!(parse_image_list("no tab here", Path::new("/t")).is_err());
    }

    #[test]
    fn images_sit_beside_the_build() {
        // The variable, when set, overrides the default.
        if std::env::var_os("ETCD_LAB_IMAGES").is_none() {
            assert_eq!(
                default_images_dir(Path::new("/repo/target/debug/etcd-lab")),
                Some(PathBuf::from("/repo/target/images"))
            );
        }
    }
}
