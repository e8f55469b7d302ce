//! What every etcd-lab process shares: the CLI and control plane
//! (`etcd-lab`), the node agent (`etcd-lab-node`) and the cluster services
//! (`etcd-lab-services`).
//!
//! - [`io_error`]: an I/O error that says what was being done;
//! - [`cgroup`]: the cgroup2 hierarchy, the lab's subtree and each node's
//!   groups in it;
//! - [`kube_client`]: a Kubernetes client from a kubeconfig file.
#![forbid(unsafe_code)]

pub mod cgroup;
pub mod io_error;
pub mod kube_client;

pub use io_error::{IoContext, IoError};
