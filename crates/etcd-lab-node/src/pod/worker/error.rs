//! Why a pod's sandbox or one of its containers could not be set up.

use etcd_lab_common::IoError;

use crate::image::ImageError;
use crate::pod::env::EnvError;
use crate::pod::sandbox::SandboxError;
use crate::volume::VolumeError;

/// The sandbox or volumes are not ready (tried again).
#[derive(Debug, thiserror::Error)]
pub(super) enum PrepareError {
    #[error(transparent)]
    Volume(#[from] VolumeError),
    #[error(transparent)]
    Sandbox(#[from] SandboxError),
    #[error("sandbox setup did not finish: {0}")]
    Interrupted(#[from] tokio::task::JoinError),
}

/// A container's environment, mounts or command are not valid
/// (`CreateContainerConfigError`).
#[derive(Debug, thiserror::Error)]
pub(super) enum ConfigError {
    #[error(transparent)]
    Env(#[from] EnvError),
    #[error("volume {0:?} is not defined in the pod")]
    UndefinedVolume(String),
    #[error("the container has no command and its image no entrypoint")]
    NoCommand,
    #[error("the pod has no sandbox")]
    NoSandbox,
    #[error(transparent)]
    Io(#[from] IoError),
}

/// A container's process could not be spawned (`RunContainerError`).
#[derive(Debug, thiserror::Error)]
pub(super) enum SpawnError {
    #[error(transparent)]
    Io(#[from] IoError),
    #[error("container spec: {0}")]
    Spec(#[from] serde_json::Error),
    #[error("the container process has no pid")]
    NoPid,
    #[error("the pod has no such container")]
    UnknownContainer,
}

/// Why a container did not start.
#[derive(Debug, thiserror::Error)]
pub(super) enum StartError {
    #[error(transparent)]
    Image(#[from] ImageError),
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Spawn(#[from] SpawnError),
}
