//! The etcd operator library: API types, pure planner, etcd layer, reconciler.
#![forbid(unsafe_code)]
// The API crate's modules, under the paths the operator has always used.
pub use etcd_operator_api::{addressing, api, pod_contract, transport};
pub mod backup;
pub mod controller_kit;
pub mod cron_schedule;
pub mod etcd;
pub mod planner;
pub mod pod_programs;
pub mod reconcile;
pub mod resources;
pub mod telemetry;
pub mod tls;
