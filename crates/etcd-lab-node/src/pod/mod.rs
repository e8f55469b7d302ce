//! Running one pod: sandbox, containers, probes, restarts, status, deletion.

pub mod dns;
pub mod env;
pub mod lifecycle;
pub mod sandbox;
pub mod status;
pub(crate) mod worker;
