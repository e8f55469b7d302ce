//! Pod volumes: PVC (local PV or lab-network CSI PV), emptyDir, configMap,
//! secret, downwardAPI and projected (service-account token, ca.crt,
//! namespace). Files are written under the pod's directory and bound into
//! containers by the runner; a claim's volume is a disk image mounted for
//! the pod ([`disk`]), its size and expansion in [`size`] and
//! [`expansion`].

pub mod disk;
pub mod expansion;
mod files;
mod persistent;
pub mod size;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use etcd_lab_common::IoError;
use k8s_openapi::api::core::v1::{Pod, Volume};
use kube::Client;

pub use files::FileSet;
pub use persistent::{CSI_DRIVER, attachment_name, unique_volume_name};

/// Errors while preparing volumes.
#[derive(Debug, thiserror::Error)]
pub enum VolumeError {
    /// Not ready yet (unbound PVC, not yet attached...): retried.
    #[error("{0}")]
    NotReady(String),
    #[error("volume {volume}: {message}")]
    Invalid { volume: String, message: String },
    #[error(transparent)]
    Io(#[from] IoError),
    #[error("kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    #[error("volume disk: {0}")]
    Disk(#[from] disk::DiskError),
}

/// Prepared volumes of a pod.
#[derive(Debug, Clone, Default)]
pub struct PreparedVolumes {
    /// Volume name -> host directory.
    pub paths: BTreeMap<String, PathBuf>,
    /// Unique names of attachable volumes, for `node.status.volumesInUse`.
    pub in_use: Vec<String>,
}

/// What volume preparation needs from the node.
#[derive(Clone)]
pub struct VolumeContext<'a> {
    pub client: &'a Client,
    pub node_name: &'a str,
    pub pod_dir: &'a Path,
    /// `$ETCD_LAB_DIR`: local volumes live under its `nodes/`.
    pub lab_dir: &'a Path,
    pub network_volumes_dir: &'a Path,
    pub ca_cert: &'a Path,
}

/// Names of the attachable (CSI) volumes the pod uses, resolved without waiting.
pub async fn attachable_volumes(ctx: &VolumeContext<'_>, pod: &Pod) -> Vec<String> {
    let mut out = Vec::new();
    for v in pod_volumes(pod) {
        if let Some(pvc) = &v.persistent_volume_claim
            && let Ok(Some(name)) = persistent::csi_unique_name(ctx, pod, &pvc.claim_name).await
        {
            out.push(name);
        }
    }
    out
}

fn pod_volumes(pod: &Pod) -> impl Iterator<Item = &Volume> {
    pod.spec.iter().flat_map(|s| s.volumes.iter().flatten())
}

/// Prepares every volume of `pod`. `fs_group` chowns writable volumes.
pub async fn prepare(ctx: &VolumeContext<'_>, pod: &Pod) -> Result<PreparedVolumes, VolumeError> {
    let fs_group = fs_group(pod);
    let mut out = PreparedVolumes::default();
    for volume in pod_volumes(pod) {
        let path = if let Some(pvc) = &volume.persistent_volume_claim {
            let (path, unique) =
                persistent::prepare_claim(ctx, pod, &volume.name, &pvc.claim_name).await?;
            out.in_use.extend(unique);
            path
        } else if volume.empty_dir.is_some() {
            let dir = ctx.pod_dir.join("volumes/empty-dir").join(&volume.name);
            files::mkdir(&dir)?;
            dir
        } else if volume.host_path.is_some() {
            return Err(VolumeError::Invalid {
                volume: volume.name.clone(),
                message: "hostPath volumes are not supported by etcd-lab nodes".into(),
            });
        } else {
            write_file_volume(ctx, pod, volume).await?
        };
        if let Some(gid) = fs_group {
            files::apply_fs_group(&path, gid)?;
        }
        out.paths.insert(volume.name.clone(), path);
    }
    Ok(out)
}

/// Writes the file volumes of `pod` (Secrets, ConfigMaps, downward API,
/// projected) again from their sources, as the kubelet's periodic sync
/// does; claims and emptyDirs are left as they are.
pub async fn refresh_files(ctx: &VolumeContext<'_>, pod: &Pod) -> Result<(), VolumeError> {
    let fs_group = fs_group(pod);
    for volume in pod_volumes(pod) {
        if volume.persistent_volume_claim.is_some()
            || volume.empty_dir.is_some()
            || volume.host_path.is_some()
        {
            continue;
        }
        let dir = write_file_volume(ctx, pod, volume).await?;
        if let Some(gid) = fs_group {
            files::apply_fs_group(&dir, gid)?;
        }
    }
    Ok(())
}

/// Writes a file volume (Secret, ConfigMap, downward API, projected) from
/// its sources into the pod's directory; returns where.
async fn write_file_volume(
    ctx: &VolumeContext<'_>,
    pod: &Pod,
    volume: &Volume,
) -> Result<PathBuf, VolumeError> {
    let set = files::file_volume(ctx, pod, volume).await?;
    let dir = ctx.pod_dir.join("volumes/files").join(&volume.name);
    set.write_to(&dir)?;
    Ok(dir)
}

/// The pod's `securityContext.fsGroup`.
fn fs_group(pod: &Pod) -> Option<u32> {
    pod.spec
        .as_ref()
        .and_then(|s| s.security_context.as_ref())
        .and_then(|s| s.fs_group)
        .and_then(|g| u32::try_from(g).ok())
}

/// Where a pod's claims are bound: `<pod dir>/volumes/pvc`, one directory
/// per volume of the pod.
pub fn claims_dir(pod_dir: &Path) -> PathBuf {
    pod_dir.join("volumes/pvc")
}

/// Unmounts the claims bound for the pods under `dir` (one pod's
/// directory, or the node's whole `pods/` when the agent starts and every
/// container of the node is gone), and the volumes' own mounts that no
/// other pod uses any more.
pub async fn unmount_claims(dir: &Path) -> Result<(), VolumeError> {
    let dir = dir.to_owned();
    tokio::task::spawn_blocking(move || disk::unmount_pod_volumes(&dir))
        .await
        .map_err(|e| VolumeError::NotReady(format!("unmounting stopped: {e}")))??;
    Ok(())
}
