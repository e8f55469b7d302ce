//! The etcd operator library: API types, pure planner, etcd layer, reconciler.
#![forbid(unsafe_code)]
pub mod addressing;
pub mod api;
pub mod backup;
pub mod controller_kit;
pub mod etcd;
pub mod member_guard;
pub mod planner;
pub mod reconcile;
pub mod resources;
pub mod restore_backup;
mod restore_replay;
pub mod restore_volume;
pub mod telemetry;
