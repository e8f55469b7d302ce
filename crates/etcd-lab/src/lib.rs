//! etcd-lab: a real Kubernetes control plane with process-backed nodes,
//! storage and DNS on one machine.
//!
//! [`Lab::up`] starts the backing etcd, the upstream kube-apiserver,
//! kube-controller-manager and kube-scheduler, the lab network, the cluster
//! services process and one node agent per node; [`Lab::down`] removes all
//! of it. See docs/architecture.md for the layout.
#![forbid(unsafe_code)]

pub mod client;
pub mod config;
pub mod controlplane;
pub mod current;
pub mod disk_full;
pub mod error;
pub mod exec;
pub mod faults;
pub mod kubeconfig;
pub mod lab;
pub mod logs;
pub mod nodes;
pub mod paths;
pub mod pki;
pub mod process;
pub mod registry;
pub mod services;
pub mod teardown;
pub mod upstream;

pub use config::{LabConfig, NodeConfig};
pub use error::{LabError, Result};
/// The lab's cgroup2 subtree (shared with the node agent).
pub use etcd_lab_common::cgroup;
pub use lab::{Lab, LabOptions, LabStatus};
pub use paths::LabPaths;
