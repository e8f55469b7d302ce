//! The API of the durable etcd operator, with no Kubernetes client: the
//! custom resources (types, schema rules, CEL, the CRDs), the names and
//! addresses of a cluster's objects, the transport stages, and the contract
//! between the operator and the programs it runs inside Pods (their
//! arguments, reports and documents).
//!
//! The operator, the `kubectl etcd` plugin and the test kit build on it;
//! it depends on none of them.
#![forbid(unsafe_code)]
pub mod addressing;
pub mod api;
pub mod pod_contract;
pub mod transport;
