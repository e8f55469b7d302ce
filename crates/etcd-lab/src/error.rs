//! The lab's error type.

use std::path::PathBuf;

use etcd_lab_common::IoError;
use etcd_lab_common::cgroup::CgroupError;
use etcd_lab_common::kube_client::KubeClientError;

/// Errors of the lab library.
#[derive(Debug, thiserror::Error)]
pub enum LabError {
    /// A file, process or socket operation failed; added with
    /// [`etcd_lab_common::IoContext::context`].
    #[error(transparent)]
    Io(#[from] IoError),
    #[error("certificate {name}: {source}")]
    Certificate {
        name: String,
        #[source]
        source: rcgen::Error,
    },
    #[error("{path}: {source}")]
    Json {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
    #[error(
        "upstream binaries {set} not built: {dir} is incomplete; run `bash tools/build-upstream.sh`"
    )]
    UpstreamMissing { set: String, dir: PathBuf },
    #[error(
        "{component} did not become ready within {seconds}s: {reason}\n--- last lines of {log} ---\n{tail}"
    )]
    NotReady {
        component: String,
        seconds: u64,
        reason: String,
        log: PathBuf,
        tail: String,
    },
    #[error("{component} exited ({status}) right after start\n--- last lines of {log} ---\n{tail}")]
    Exited {
        component: String,
        status: String,
        log: PathBuf,
        tail: String,
    },
    #[error("command `{command}` failed: {message}")]
    Command { command: String, message: String },
    #[error("cgroups: {0}")]
    Cgroup(#[from] CgroupError),
    #[error(transparent)]
    KubeClient(#[from] KubeClientError),
    #[error("kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    #[error("lab network: {0}")]
    Network(String),
    /// Mounting, unmounting or detaching a volume disk failed.
    #[error("volume disk: {0}")]
    Disk(#[from] etcd_lab_node::volume::disk::DiskError),
    #[error("{0}")]
    Timeout(String),
    #[error("the lab is not up (no {0})")]
    NotUp(PathBuf),
    #[error("{0}")]
    Invalid(String),
    #[error(
        "a lab with state directory {0} is running (one lab per machine); take it down first: ETCD_LAB_DIR={0} etcd-lab down"
    )]
    OtherLabRunning(PathBuf),
}

/// Result of the lab library.
pub type Result<T, E = LabError> = std::result::Result<T, E>;
