//! PersistentVolumeClaims: `local` PVs and lab-network CSI PVs, each a
//! disk image mounted for the pods that use it ([`super::disk`]).

use std::path::{Component, Path, PathBuf};

use k8s_openapi::api::core::v1::{
    CSIPersistentVolumeSource, PersistentVolume, PersistentVolumeClaim, Pod,
};
use k8s_openapi::api::storage::v1::VolumeAttachment;
use kube::Api;
use kube::api::{Patch, PatchParams};

use super::disk::{self, DiskError, ext4::FilesystemStep};
use super::{VolumeContext, VolumeError, expansion};

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

/// The claim `claim` of the pod's namespace and the volume bound to it.
async fn bound_claim(
    ctx: &VolumeContext<'_>,
    namespace: &str,
    claim: &str,
) -> Result<(PersistentVolumeClaim, PersistentVolume), VolumeError> {
    let pvc = match Api::<PersistentVolumeClaim>::namespaced(ctx.client.clone(), namespace)
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
    let pv = Api::<PersistentVolume>::all(ctx.client.clone())
        .get_opt(&pv_name)
        .await?
        .ok_or_else(|| VolumeError::NotReady(format!("persistentvolume {pv_name:?} not found")))?;
    Ok((pvc, pv))
}

fn namespace_of(pod: &Pod) -> &str {
    pod.metadata.namespace.as_deref().unwrap_or("default")
}

pub(super) async fn csi_unique_name(
    ctx: &VolumeContext<'_>,
    pod: &Pod,
    claim: &str,
) -> Result<Option<String>, VolumeError> {
    let (_, pv) = bound_claim(ctx, namespace_of(pod), claim).await?;
    Ok(pv
        .spec
        .as_ref()
        .and_then(|s| s.csi.as_ref())
        .filter(|c| c.driver == CSI_DRIVER)
        .map(|c| unique_volume_name(&c.driver, &c.volume_handle)))
}

/// Mounts the claim's volume for the pod (for CSI volumes, once the
/// VolumeAttachment for this node is attached) and returns the pod's bind
/// of it, `<pod dir>/volumes/pvc/<volume>`, with the unique name of an
/// attachable volume.
pub(super) async fn prepare_claim(
    ctx: &VolumeContext<'_>,
    pod: &Pod,
    volume: &str,
    claim: &str,
) -> Result<(PathBuf, Option<String>), VolumeError> {
    let namespace = namespace_of(pod);
    let (_, pv) = bound_claim(ctx, namespace, claim).await?;
    let pv_name = pv.metadata.name.clone().unwrap_or_default();
    let spec = pv.spec.unwrap_or_default();
    let (dir, unique) = if let Some(local) = &spec.local {
        let dir =
            local_volume_path(ctx.lab_dir, &local.path).ok_or_else(|| VolumeError::Invalid {
                volume: pv_name.clone(),
                message: format!(
                    "local path {:?} is not a volume directory under {}/nodes",
                    local.path,
                    ctx.lab_dir.display()
                ),
            })?;
        (dir, None)
    } else if let Some(csi) = &spec.csi {
        (
            attached_network_volume(ctx, &pv_name, csi).await?,
            Some(unique_volume_name(&csi.driver, &csi.volume_handle)),
        )
    } else {
        return Err(VolumeError::Invalid {
            volume: pv_name,
            message: "only local and CSI (network.etcd-lab.dev) volumes are supported".into(),
        });
    };
    let target = super::claims_dir(ctx.pod_dir).join(volume);
    let mounted = {
        let (dir, target) = (dir.clone(), target.clone());
        tokio::task::spawn_blocking(move || disk::mount_for_pod(&dir, &target))
            .await
            .map_err(|e| VolumeError::NotReady(format!("mounting {pv_name} stopped: {e}")))?
    };
    let mounted = match mounted {
        Ok(mounted) => mounted,
        Err(e @ DiskError::Busy { .. }) => return Err(VolumeError::NotReady(e.to_string())),
        Err(e) => return Err(e.into()),
    };
    match mounted.step {
        FilesystemStep::Format => {
            tracing::info!(volume = %pv_name, bytes = mounted.filesystem_bytes, "filesystem made");
        }
        FilesystemStep::Grow { from, to } => {
            tracing::info!(volume = %pv_name, from, to, "filesystem grown before mounting");
        }
        FilesystemStep::Ready => {}
    }
    finish_expansion(ctx, namespace, claim, mounted.filesystem_bytes).await;
    Ok((target, unique))
}

/// The directory of a CSI volume once it is attached to this node.
async fn attached_network_volume(
    ctx: &VolumeContext<'_>,
    pv_name: &str,
    csi: &CSIPersistentVolumeSource,
) -> Result<PathBuf, VolumeError> {
    if csi.driver != CSI_DRIVER {
        return Err(VolumeError::Invalid {
            volume: pv_name.to_owned(),
            message: format!("unknown CSI driver {:?}", csi.driver),
        });
    }
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
    network_volume_path(ctx.network_volumes_dir, &csi.volume_handle).ok_or_else(|| {
        VolumeError::Invalid {
            volume: pv_name.to_owned(),
            message: format!(
                "volumeHandle {:?} is not a directory under {}",
                csi.volume_handle,
                ctx.network_volumes_dir.display()
            ),
        }
    })
}

/// Reports a finished offline expansion on the claim, as the kubelet does
/// after growing a filesystem: the node agent is the one that saw the
/// filesystem grow, at the moment it grew, while the controller would have
/// to read the filesystem of a disk that may be in use, with no event to
/// tell it when. Claim and volume are read again after the mount, so that
/// a resize the controller marked meanwhile is seen. A failure is logged:
/// the next mount of the volume finishes it.
async fn finish_expansion(
    ctx: &VolumeContext<'_>,
    namespace: &str,
    claim: &str,
    filesystem_bytes: u64,
) {
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(ctx.client.clone(), namespace);
    for _ in 0..3 {
        let (pvc, pv) = match bound_claim(ctx, namespace, claim).await {
            Ok(found) => found,
            Err(e) => {
                tracing::warn!(%namespace, %claim, "cannot read the claim to finish its expansion: {e}");
                return;
            }
        };
        let Some(capacity) = expansion::finished_capacity(&pvc, &pv, filesystem_bytes) else {
            return;
        };
        let patch = expansion::resize_finished(&pvc, &capacity);
        match claims
            .patch_status(claim, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => {
                tracing::info!(%namespace, %claim, capacity = %capacity.0, "volume expansion finished");
                return;
            }
            Err(kube::Error::Api(status)) if status.code == 409 => continue,
            Err(e) => {
                tracing::warn!(%namespace, %claim, "cannot finish the expansion: {e}");
                return;
            }
        }
    }
}

/// The directory of a local volume: `LAB_DIR/nodes/<node>/volumes/<name>`.
pub(crate) fn local_volume_path(lab_dir: &Path, path: &str) -> Option<PathBuf> {
    let path = PathBuf::from(path);
    let relative = path.strip_prefix(lab_dir.join("nodes")).ok()?;
    let parts: Vec<Component> = relative.components().collect();
    match parts.as_slice() {
        [
            Component::Normal(_),
            Component::Normal(volumes),
            Component::Normal(_),
        ] if *volumes == "volumes" => Some(path),
        _ => None,
    }
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

    #[test]
    fn local_volume_paths_are_volume_directories_of_a_node() {
        let lab = Path::new("/lab");
        assert_eq!(
            local_volume_path(lab, "/lab/nodes/n1/volumes/pvc-1"),
            Some(PathBuf::from("/lab/nodes/n1/volumes/pvc-1"))
        );
        assert_eq!(local_volume_path(lab, "/lab/nodes/n1/pods/pvc-1"), None);
        assert_eq!(local_volume_path(lab, "/lab/nodes/n1/volumes/../x"), None);
        assert_eq!(local_volume_path(lab, "/etc/volumes/x"), None);
        assert_eq!(local_volume_path(lab, "/lab/nodes/n1/volumes/a/b"), None);
    }
}
