//! The node agent: registers the Node, renews its Lease, runs the pods bound
//! to it and reports their status, like a kubelet.

mod config;
pub(crate) mod context;

pub use config::{AgentConfig, ConfigError, NodeCapacity};

/// Errors that stop the agent.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    #[error("kubeconfig {path}: {message}")]
    Kubeconfig {
        path: std::path::PathBuf,
        message: String,
    },
    #[error("kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    #[error("{context}: {source}")]
    Io {
        context: String,
        source: std::io::Error,
    },
}

/// Runs the agent until SIGTERM (or SIGINT).
pub async fn run(config: AgentConfig) -> Result<(), AgentError> {
    let _ = config;
    Ok(())
}
