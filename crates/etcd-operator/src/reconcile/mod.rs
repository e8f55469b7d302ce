//! The reconciler: observe (API server + etcd) -> plan (pure) -> act (at
//! most one action) -> status -> Event -> requeue.

mod endpoints;
mod error;
mod leadership;
mod node_index;

pub use endpoints::{client_url, pod_endpoints};
pub use error::{ActError, Category, ObserveError, ReconcileError, StatusError};
pub use leadership::{LEASE_NAME, Leadership, LeadershipError};
pub use node_index::{ClusterKey, NodeIndex};

/// Field manager of every server-side apply the operator makes.
pub const FIELD_MANAGER: &str = "etcd-operator";
