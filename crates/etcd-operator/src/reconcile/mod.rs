//! The reconciler: observe (API server + etcd) -> plan (pure) -> act (at
//! most one action) -> status -> Event -> requeue.
//!
//! - [`controller`]: the kube-rs `Controller` and its watches;
//! - `observe`: fresh reads of the cluster's objects and of etcd;
//! - `plan`: the seam to the pure planner;
//! - `act`: the one step, by server-side apply, deletion or etcd call;
//! - `status`: the status write, skipped when nothing changed.

mod act;
mod controller;
mod endpoints;
mod error;
pub mod facts;
mod leadership;
mod node_changes;
mod node_index;
mod observe;
mod pipeline;
mod plan;
pub(crate) mod status;
pub mod unreadable;

pub use act::{Child, Done, Step};
pub use controller::{Context, ControllerConfig, ControllerError, DEFAULT_OPERATOR_IMAGE, run};
pub use endpoints::{client_url, pod_endpoints};
pub use error::{ActError, Category, ObserveError, ReconcileError, StatusError};
pub use leadership::{LEASE_NAME, Leadership, LeadershipError};
pub use node_index::{ClusterKey, NodeIndex};
pub use observe::{CLIENT_PORT, Snapshot, cluster_selector};
pub use plan::{PassPlan, PlanEvent, observed};

/// Field manager of every server-side apply the operator makes.
pub const FIELD_MANAGER: &str = "etcd-operator";
