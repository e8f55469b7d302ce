//! The hosted control plane scenario (`make demo-hosted`, `etcd-hosted`):
//! the use our users care most about, a Kubernetes API server whose store
//! is a cluster this operator manages, through the faults that matter.

pub mod objects;
pub mod scenario;
pub mod tenant;
