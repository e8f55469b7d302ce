//! The lab's error type.

use std::path::PathBuf;

/// Errors of the lab library.
#[derive(Debug, thiserror::Error)]
pub enum LabError {
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: std::io::Error,
    },
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
    #[error("no cgroup2 hierarchy found (looked at /sys/fs/cgroup and /sys/fs/cgroup/unified)")]
    NoCgroup2,
    #[error("kubeconfig {path}: {message}")]
    Kubeconfig { path: PathBuf, message: String },
    #[error("kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    #[error("lab network: {0}")]
    Network(String),
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

impl LabError {
    /// An I/O error with the action and path that failed.
    pub fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        Self::Io {
            context: context.into(),
            source,
        }
    }
}

/// Result of the lab library.
pub type Result<T, E = LabError> = std::result::Result<T, E>;

/// Extension for attaching context to I/O results.
pub(crate) trait IoContext<T> {
    fn context(self, context: impl FnOnce() -> String) -> Result<T>;
}

impl<T> IoContext<T> for std::io::Result<T> {
    fn context(self, context: impl FnOnce() -> String) -> Result<T> {
        self.map_err(|source| LabError::io(context(), source))
    }
}
