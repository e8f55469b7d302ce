//! The etcd operator library: API types, pure planner, etcd layer, reconciler.
#![forbid(unsafe_code)]
pub mod addressing;
pub mod api;
pub mod backup;
pub mod controller_kit;
pub mod cron_schedule;
pub mod etcd;
pub mod planner;
pub mod pod_contract;
pub mod pod_programs;
pub mod reconcile;
pub mod resources;
pub mod telemetry;
pub mod tls;
pub mod transport;
