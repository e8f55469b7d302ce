//! Storage of the lab, as a CSI driver and its sidecars would provide it:
//!
//! - [`classes`]: StorageClasses `lab-network` (default) and `lab-local`, and
//!   the `CSIDriver` object of `network.etcd-lab.dev`;
//! - [`provisioner`]: dynamic provisioning of PersistentVolumes for claims
//!   and the controller side of offline volume expansion
//!   (external-provisioner and external-resizer);
//! - [`reclaim`]: deletion of released volumes and their data;
//! - [`attacher`]: VolumeAttachments of `network.etcd-lab.dev`
//!   (external-attacher);
//!
//! A deleted Node object takes no volume with it: the machine and its
//! disks may live on (its agent registers the Node again). A machine gone
//! for good (`etcd-lab node delete`) destroys its local volumes itself.
//!
//! Every volume is a disk image holding an ext4 filesystem of the claim's
//! size (`etcd_lab_node::volume::disk`): this process creates, grows and
//! removes images; node agents mount them for pods and grow their
//! filesystems. The decisions are pure functions in [`volume`] and
//! [`layout`]; the controllers only read, call them and write, and run
//! with one retry rule (`controller`).

pub mod attacher;
pub mod classes;
mod controller;
pub mod layout;
pub mod provisioner;
pub mod reclaim;
pub mod volume;

use std::path::PathBuf;
use std::sync::Arc;

use etcd_lab_common::IoError;
use etcd_lab_node::volume::disk::DiskError;

/// Name of the default StorageClass: volumes attachable from any node.
pub const NETWORK_CLASS: &str = "lab-network";
/// Name of the StorageClass of node-local volumes.
pub const LOCAL_CLASS: &str = "lab-local";
/// Provisioner and CSI driver of network volumes.
pub const NETWORK_DRIVER: &str = "network.etcd-lab.dev";
/// Provisioner of local volumes.
pub const LOCAL_PROVISIONER: &str = "local.etcd-lab.dev";
/// Field manager of every write of this process.
pub const FIELD_MANAGER: &str = "etcd-lab-services";

/// Set on PVs by the provisioner that created them.
pub const ANN_PROVISIONED_BY: &str = "pv.kubernetes.io/provisioned-by";
/// Set on PVCs by the PV controller: which provisioner must act.
pub const ANN_STORAGE_PROVISIONER: &str = "volume.kubernetes.io/storage-provisioner";
/// The deprecated form of [`ANN_STORAGE_PROVISIONER`], still set by the PV
/// controller.
pub const ANN_BETA_STORAGE_PROVISIONER: &str = "volume.beta.kubernetes.io/storage-provisioner";
/// Set on PVCs by the scheduler for `WaitForFirstConsumer` classes.
pub const ANN_SELECTED_NODE: &str = "volume.kubernetes.io/selected-node";
/// Finalizer the external-attacher puts on VolumeAttachments it attached.
pub const ATTACHER_FINALIZER: &str = "external-attacher/network-etcd-lab-dev";
/// Finalizer the external-provisioner puts on PVs whose reclaim it owns.
pub const PROVISIONER_FINALIZER: &str = "external-provisioner.volume.kubernetes.io/finalizer";

/// Why a storage step failed.
#[derive(Debug, thiserror::Error)]
pub enum StorageError {
    #[error("kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    /// Creating or removing a volume's data directory failed.
    #[error(transparent)]
    Io(#[from] IoError),
    /// Creating, growing or removing a volume's disk failed, or the volume
    /// is still mounted for pods.
    #[error("volume disk: {0}")]
    Disk(#[from] DiskError),
    /// A blocking disk step did not finish (its task was cancelled).
    #[error("volume disk step stopped: {0}")]
    Stopped(#[from] tokio::task::JoinError),
}

impl StorageError {
    /// A write lost a race with another writer: retried, not worth a warning.
    pub fn is_conflict(&self) -> bool {
        matches!(self, Self::Kube(kube::Error::Api(status)) if status.code == 409)
    }
}

/// What the storage controllers share.
pub struct Context {
    pub client: kube::Client,
    pub lab_dir: PathBuf,
}

/// Ensures the StorageClasses and the CSIDriver, then provisions, attaches,
/// expands and reclaims volumes. Runs until a watch ends for good.
pub async fn run(client: kube::Client, lab_dir: PathBuf) -> Result<(), StorageError> {
    classes::ensure(&client).await?;
    let ctx = Arc::new(Context { client, lab_dir });
    tokio::join!(
        provisioner::run(ctx.clone()),
        reclaim::run(ctx.clone()),
        attacher::run(ctx),
    );
    Ok(())
}

/// Whether an API error means "the object is already gone".
pub(crate) fn is_not_found(error: &kube::Error) -> bool {
    matches!(error, kube::Error::Api(status) if status.code == 404)
}

/// Whether an API error means "the object already exists".
pub(crate) fn is_already_exists(error: &kube::Error) -> bool {
    matches!(error, kube::Error::Api(status) if status.code == 409)
}
