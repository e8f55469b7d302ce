//! The reconciler: observe (API server + etcd) -> plan (pure) -> act (at
//! most one action) -> status -> Event -> requeue.
//!
//! - [`controller`]: the kube-rs `Controller` and its watches;
//! - `context`: what every pass shares (client, recorder, settings);
//! - `observe`: reads of the cluster's objects and of etcd;
//! - `watched`: watch-fed copies of those objects, what an idle pass plans
//!   from (a pass that would change anything plans again from fresh reads);
//! - `tls_memory`: the certificates as the last full read found them;
//! - `plan`: the seam to the pure planner;
//! - `act`: the one step, by server-side apply, deletion or etcd call;
//! - `network_policy`: the cluster's NetworkPolicy, kept current each pass;
//! - `status`: the status write, skipped when nothing changed;
//! - `transport`: the transport stage a cluster runs, read before a pass
//!   connects;
//! - [`volume_usage`]: the read of a member's volume usage from its Pod's
//!   sidecar.
//!
//! The pieces every controller shares (untyped watches, unreadable objects,
//! conditions, the status writer, Events, error categories) are in
//! [`crate::controller_kit`].

mod act;
mod backup_health;
mod cert_manager;
mod context;
mod controller;
mod delete;
mod error;
pub mod facts;
mod leadership;
mod missing_ca;
mod network_policy;
mod node_changes;
mod node_index;
mod observe;
mod pipeline;
mod plan;
pub(crate) mod status;
pub(crate) mod tls_material;
mod tls_memory;
pub(crate) mod transport;
mod vanished;
mod volume_aside;
pub mod volume_usage;
mod watch_backoff;
mod watch_task;
mod watched;

pub use act::{Child, Step};
pub use context::{Context, ControllerConfig, DEFAULT_OPERATOR_IMAGE};
pub use controller::{ControllerError, run};
pub use error::{ActError, Category, ObserveError, ReconcileError, StatusError};
pub use leadership::{LEASE_NAME, Leadership, LeadershipError};
pub use node_index::{ClusterKey, NodeIndex};
pub use observe::{CLIENT_PORT, Snapshot, cluster_selector};
pub use plan::{PassPlan, PlanEvent, observed};

/// Field manager of every server-side apply the operator makes.
pub const FIELD_MANAGER: &str = "etcd-operator";
