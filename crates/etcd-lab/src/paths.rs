//! The layout of `$ETCD_LAB_DIR` (see docs/architecture.md).

use std::path::{Path, PathBuf};

/// Default state directory.
pub const DEFAULT_LAB_DIR: &str = "/var/lib/etcd-lab";

/// Paths inside the lab's state directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LabPaths {
    root: PathBuf,
}

impl LabPaths {
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self { root: root.into() }
    }

    /// `$ETCD_LAB_DIR` or the default.
    pub fn from_env() -> Self {
        match std::env::var_os("ETCD_LAB_DIR") {
            Some(dir) if !dir.is_empty() => Self::new(dir),
            _ => Self::new(DEFAULT_LAB_DIR),
        }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }
    pub fn pki(&self) -> PathBuf {
        self.root.join("pki")
    }
    pub fn kubeconfig(&self) -> PathBuf {
        self.root.join("kubeconfig")
    }
    pub fn kubeconfigs(&self) -> PathBuf {
        self.root.join("kubeconfigs")
    }
    pub fn config_json(&self) -> PathBuf {
        self.root.join("config.json")
    }
    pub fn backing_etcd(&self) -> PathBuf {
        self.root.join("backing-etcd")
    }
    pub fn logs(&self) -> PathBuf {
        self.root.join("logs")
    }
    pub fn log(&self, component: &str) -> PathBuf {
        self.logs().join(format!("{component}.log"))
    }
    pub fn run(&self) -> PathBuf {
        self.root.join("run")
    }
    pub fn pid_file(&self, component: &str) -> PathBuf {
        self.run().join(format!("{component}.pid"))
    }
    /// Configuration files written for the lab's own processes.
    pub fn configs(&self) -> PathBuf {
        self.root.join("config")
    }
    pub fn nodes(&self) -> PathBuf {
        self.root.join("nodes")
    }
    pub fn node_dir(&self, node: &str) -> PathBuf {
        self.nodes().join(node)
    }
    pub fn node_logs(&self, node: &str) -> PathBuf {
        self.logs().join("nodes").join(node)
    }
    pub fn network_volumes(&self) -> PathBuf {
        self.root.join("network-volumes")
    }
}
