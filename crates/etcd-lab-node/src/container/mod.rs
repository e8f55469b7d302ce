//! The container runner behind `etcd-lab run-container --spec FILE`.

use etcd_lab_common::IoError;

mod pid_namespace;
mod runner;
mod spec;

pub use runner::{exec_container, run_container, run_container_init};
pub use spec::{BindMount, ContainerSpec, DEFAULT_PATH, ImageFile, resolve_executable};

/// Errors of the container runner (printed to the container log before exit).
#[derive(Debug, thiserror::Error)]
pub enum ContainerError {
    #[error("invalid container spec: {0}")]
    Spec(String),
    #[error(transparent)]
    Io(#[from] IoError),
    #[error("{context}: {source}")]
    Sys { context: String, source: nix::Error },
    #[error("executable {0:?} not found in the container")]
    NotFound(String),
}
