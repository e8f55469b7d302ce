//! Running one pod: sandbox, containers, probes, restarts, status, deletion.

pub mod backoff;
pub mod dns;
pub mod env;
pub mod sandbox;
pub mod status;
pub(crate) mod worker;
