//! The etcd operator library: API types, pure planner, etcd layer, reconciler.
#![forbid(unsafe_code)]
pub mod telemetry;
