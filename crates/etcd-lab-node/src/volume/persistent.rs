//! PersistentVolumeClaims: `local` PVs and lab-network CSI PVs.

use std::path::{Component, PathBuf};

use etcd_lab_common::IoContext;
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::api::storage::v1::VolumeAttachment;
use kube::Api;

use super::{VolumeContext, VolumeError};

/// The lab's CSI driver.
pub const CSI_DRIVER: &str = "network.etcd-lab.dev";

/// The unique volume name the attach-detach controller uses for a CSI volume.
pub fn unique_volume_name(driver: &str, handle: &str) -> String {
    format!("kubernetes.io/csi/{driver}^{handle}")
}

/// The VolumeAttachment name the CSI attacher uses: `csi-` + sha256(handle + driver + node).
pub fn attachment_name(handle: &str, driver: &str, node: &str) -> String {
    let digest = ring::digest::digest(
        &ring::digest::SHA256,
        format!("{handle}{driver}{node}").as_bytes(),
    );
    let hex: String = digest.as_ref().iter().map(|b| format!("{b:02x}")).collect();
    format!("csi-{hex}")
}

async fn bound_pv(
    ctx: &VolumeContext<'_>,
    pod: &Pod,
    claim: &str,
) -> Result<PersistentVolume, VolumeError> {
    let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
    let pvc = match Api::<PersistentVolumeClaim>::namespaced(ctx.client.clone(), ns)
        .get_opt(claim)
        .await?
    {
        Some(p) => p,
        None => {
            return Err(VolumeError::NotReady(format!(
                "persistentvolumeclaim {claim:?} not found"
            )));
        }
    };
    let phase = pvc.status.as_ref().and_then(|s| s.phase.as_deref());
    let Some(pv_name) = pvc.spec.as_ref().and_then(|s| s.volume_name.clone()) else {
        return Err(VolumeError::NotReady(format!(
            "persistentvolumeclaim {claim:?} is not bound"
        )));
    };
    if phase != Some("Bound") {
        return Err(VolumeError::NotReady(format!(
            "persistentvolumeclaim {claim:?} is {}",
            phase.unwrap_or("not bound")
        )));
    }
    Api::<PersistentVolume>::all(ctx.client.clone())
        .get_opt(&pv_name)
        .await?
        .ok_or_else(|| VolumeError::NotReady(format!("persistentvolume {pv_name:?} not found")))
}

pub(super) async fn csi_unique_name(
    ctx: &VolumeContext<'_>,
    pod: &Pod,
    claim: &str,
) -> Result<Option<String>, VolumeError> {
    let pv = bound_pv(ctx, pod, claim).await?;
    Ok(pv
        .spec
        .as_ref()
        .and_then(|s| s.csi.as_ref())
        .filter(|c| c.driver == CSI_DRIVER)
        .map(|c| unique_volume_name(&c.driver, &c.volume_handle)))
}

/// Resolves a claim to a host directory; for CSI volumes, waits until the
/// VolumeAttachment for this node is attached.
pub(super) async fn prepare_claim(
    ctx: &VolumeContext<'_>,
    pod: &Pod,
    claim: &str,
) -> Result<(PathBuf, Option<String>), VolumeError> {
    let pv = bound_pv(ctx, pod, claim).await?;
    let pv_name = pv.metadata.name.clone().unwrap_or_default();
    let spec = pv.spec.unwrap_or_default();
    if let Some(local) = &spec.local {
        let path = PathBuf::from(&local.path);
        std::fs::create_dir_all(&path)
            .context(|| format!("create local volume {}", path.display()))?;
        return Ok((path, None));
    }
    let Some(csi) = &spec.csi else {
        return Err(VolumeError::Invalid {
            volume: pv_name,
            message: "only local and CSI (network.etcd-lab.dev) volumes are supported".into(),
        });
    };
    if csi.driver != CSI_DRIVER {
        return Err(VolumeError::Invalid {
            volume: pv_name,
            message: format!("unknown CSI driver {:?}", csi.driver),
        });
    }
    let unique = unique_volume_name(&csi.driver, &csi.volume_handle);
    let va_name = attachment_name(&csi.volume_handle, &csi.driver, ctx.node_name);
    let va = Api::<VolumeAttachment>::all(ctx.client.clone())
        .get_opt(&va_name)
        .await?;
    let attached = va
        .as_ref()
        .and_then(|v| v.status.as_ref())
        .is_some_and(|s| s.attached);
    if !attached {
        return Err(VolumeError::NotReady(format!(
            "waiting for volume {pv_name} to be attached to node {} (VolumeAttachment {va_name})",
            ctx.node_name
        )));
    }
    let path =
        network_volume_path(ctx.network_volumes_dir, &csi.volume_handle).ok_or_else(|| {
            VolumeError::Invalid {
                volume: pv_name.clone(),
                message: format!(
                    "volumeHandle {:?} is not a directory under {}",
                    csi.volume_handle,
                    ctx.network_volumes_dir.display()
                ),
            }
        })?;
    std::fs::create_dir_all(&path)
        .context(|| format!("create network volume {}", path.display()))?;
    Ok((path, Some(unique)))
}

/// The directory of a network volume handle (absolute path under the
/// network-volumes directory, or a name relative to it).
pub(crate) fn network_volume_path(base: &std::path::Path, handle: &str) -> Option<PathBuf> {
    let candidate = std::path::Path::new(handle);
    let relative = if candidate.is_absolute() {
        candidate.strip_prefix(base).ok()?.to_path_buf()
    } else {
        candidate.to_path_buf()
    };
    if relative.as_os_str().is_empty()
        || relative
            .components()
            .any(|c| !matches!(c, Component::Normal(_)))
    {
        return None;
    }
    Some(base.join(relative))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    #[test]
    fn attachment_name_matches_the_csi_attacher() {
        // sha256("pv-handle" + "network.etcd-lab.dev" + "n1")
        let name = attachment_name("pv-handle", CSI_DRIVER, "n1");
        assert_eq!(
            name,
            "csi-32ff047c406c7ef9c4c9f19d497ecf4728eac2b9c5f4a0d08da507d3da2cffc7"
        );
        assert_eq!(
            unique_volume_name(CSI_DRIVER, "h"),
            "kubernetes.io/csi/network.etcd-lab.dev^h"
        );
    }

    #[test]
    fn network_volume_handles_stay_under_the_base() {
        let base = Path::new("/lab/network-volumes");
        assert_eq!(
            network_volume_path(base, "/lab/network-volumes/pvc-1"),
            Some(PathBuf::from("/lab/network-volumes/pvc-1"))
        );
        assert_eq!(
            network_volume_path(base, "pvc-1"),
            Some(PathBuf::from("/lab/network-volumes/pvc-1"))
        );
        assert_eq!(network_volume_path(base, "/etc"), None);
        assert_eq!(network_volume_path(base, "../x"), None);
    }
}
