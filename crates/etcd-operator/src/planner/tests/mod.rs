//! Planner tests: lifecycle scenarios and property tests, both driven
//! through a small pure simulator of Pods, Nodes, PVCs and etcd membership.
//! The simulator is a model, not Kubernetes: it exists because the planner
//! is pure; the real thing is exercised by the end-to-end tests on the lab.

mod certificates;
mod evidence;
mod lifecycle;
mod maintenance;
mod properties;
mod rollout;
pub(crate) mod sim;
mod transport;
