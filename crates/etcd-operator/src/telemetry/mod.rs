//! What the operator tells about itself: Prometheus metrics on `/metrics`,
//! liveness on `/healthz` and readiness on `/readyz`.
//!
//! Liveness only says the process serves HTTP: it never depends on the API
//! server or on any etcd cluster, so a partition never restarts the operator.
//! Readiness says the operator reached the API server and its controller runs.

mod health;
mod metrics;
mod server;

pub use health::Health;
pub use metrics::{
    ClusterGauges, ErrorLabels, IncrementalGauges, MetricDescription, Metrics, ScheduleGauges,
};
pub use server::{ServeError, serve};
