//! A seeded chaos campaign on the lab (`make chaos`, `etcd-chaos`).
//!
//! One seed names a schedule of faults ([`schedule::plan`]) drawn from the
//! lab's menu ([`fault::Fault`]): pod kills (the leader's too), pod
//! deletions, node reboots and freezes, partitions (peers, API server,
//! everything; one node or a majority), majority power loss, a member's
//! volume wiped or full, the operator killed, the API server stopped; a
//! quarter of the lasting ones overlapped by a second fault; some hitting
//! a rollout or a backup under way ([`operations`]). Each step is injected,
//! healed after its time, and its recovery awaited (a cluster serving from
//! every member) before the next.
//!
//! Meanwhile clients ([`workload`]) put, compare-and-swap, delete and read
//! through the members, recording every operation with its invocation and
//! return times; a watcher ([`watcher`]) follows every change; a monitor
//! ([`processes`]) counts each member's etcd processes on the machine. At
//! the end ([`oracle`]): the history, with a final read of every key, must
//! be linearizable (so no acknowledged write is lost and no read went back
//! in time); the watch streams must have missed no acknowledged change and
//! never gone backwards; the members' `hashkv` must agree; the cluster ID
//! must not have changed, and a member's ID only when its data was wiped;
//! no member may have run as two processes. The [`report`] says what ran,
//! how long each kind of fault took to recover from, and every finding
//! with the smallest history that shows it.

pub mod campaign;
pub mod clock;
pub mod endpoints;
pub mod fault;
pub mod hosted;
pub mod inject;
pub mod operations;
pub mod oracle;
pub mod processes;
pub mod recovery;
pub mod report;
pub mod schedule;
pub mod seed;
pub mod watcher;
pub mod workload;
