//! What the tests and benches of this workspace share, one copy of each:
//!
//! - [`lab_lock`]: the machine-wide lock every test or bench on the lab
//!   holds, one at a time per machine;
//! - [`e2e`]: the operator's end-to-end harness on the lab (a lab, the CRDs,
//!   one namespace, the operator binary run outside the cluster), with
//!   [`writer`] (a continuous writer and its ledger of acknowledged writes)
//!   and [`survivor`] (the `MajorityDataLost` condition as a person reads it);
//! - [`lab_test`] and [`web`]: the lab's own tests (a lab of their own, a
//!   stateful workload, checks that nothing is left behind);
//! - [`volume_fill`]: a full disk, a claim's volume filled from outside;
//! - [`conditions`] and [`poll`]: conditions on objects, and waiting for them;
//! - [`prober`]: a Pod that opens connections from where it runs, to see
//!   what a NetworkPolicy lets through;
//! - [`etcd_process`], [`etcd_data`], [`upstream`], [`loopback`] and
//!   [`object_store_server`]: real etcd processes and object-store servers
//!   of the pinned builds on loopback, and data written to them;
//! - [`backup_scenarios`], [`restore_pod`] and [`restore_checks`]: what the
//!   backup and restore tests check with them;
//! - [`figures`]: settings, medians and the JSON figures of the benches;
//! - [`tls_client`]: a TLS cluster as its users reach it (the client
//!   Secret, a client, the certificate a member serves);
//! - [`member_pods`]: which Pods of a namespace are a cluster's members.
//!
//! The operator's parts (`e2e`, `writer`, `survivor`, `backup_scenarios`)
//! come with the feature `operator`, so that the lab's own tests build
//! without the operator. Binaries of the crate under test (`CARGO_BIN_EXE_*`) are known only to
//! that crate's own tests: they pass the paths in.

#[cfg(feature = "operator")]
pub mod backup_scenarios;
pub mod conditions;
#[cfg(feature = "operator")]
pub mod e2e;
pub mod etcd_data;
pub mod etcd_process;
pub mod figures;
pub mod lab_lock;
pub mod lab_test;
pub mod loopback;
pub mod member_pods;
pub mod object_store_server;
pub mod poll;
pub mod prober;
pub mod restore_checks;
pub mod restore_pod;
#[cfg(feature = "operator")]
pub mod survivor;
#[cfg(feature = "operator")]
pub mod tls_client;
pub mod upstream;
pub mod volume_fill;
pub mod web;
#[cfg(feature = "operator")]
pub mod writer;

/// The outcome of a scenario or a step: any error, with its message.
pub type TestResult<T = ()> = Result<T, Box<dyn std::error::Error + Send + Sync>>;
