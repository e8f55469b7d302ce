//! Continuous incremental backup: after a full snapshot at revision `R`,
//! every later change of the whole keyspace is written, in revision order,
//! to small segment objects beside the full backups, so that a restore
//! loses at most about one segment interval of acknowledged writes.
//!
//! - [`crate::backup::segment_format`]: the versioned binary encoding of
//!   events in a segment (beside this module: the errors of the backup
//!   engine name its errors).
//! - [`segment`]: segment objects and metadata at the destination.
//! - [`buffer`]: the segment being filled.
//! - [`chain`]: the segments after a full backup, linked in order, and the
//!   first gap ([`segment_chain`], [`fetch_segments`]).
//! - [`watcher`]: the task that watches etcd and writes segments after the
//!   full backups of its own schedule, reports gaps and takes a new full
//!   backup when the chain breaks ([`spawn`]).
//! - [`leases`]: the granted TTL of each lease the chain's puts use, asked
//!   from etcd and recorded in the segments.
//! - [`progress`]: what a watcher reports, for status and `BackupReady`.
//! - [`supervisor`]: one watcher per `EtcdBackupSchedule`.
//! - [`replay`]: applying a chain on a restored etcd with the original
//!   revision numbers ([`replay_segments`]).
//! - [`replay_leases`]: the leases replayed puts are written with, granted
//!   again with their ID and recorded TTL when the restored etcd lacks
//!   them.
//! - [`lease_keeper`]: keeping a restored etcd's leases alive meanwhile.

pub mod buffer;
pub mod chain;
pub mod lease_keeper;
pub mod leases;
pub mod progress;
pub mod replay;
pub mod replay_leases;
pub mod segment;
pub mod supervisor;
pub mod watcher;

pub use super::segment_format::{EventKind, SegmentContents, SegmentEvent, SegmentLease};
pub use chain::{
    ChainGap, FetchedSegments, GapKind, SegmentChain, delete_chain, fetch_segments, link_segments,
    linked_chain, named_reach, segment_chain, segment_metadata_paths,
};
pub use progress::IncrementalProgress;
pub use replay::{ReplayOutcome, replay_segments};
pub use segment::{SegmentMetadata, load_segment, load_segment_contents};
pub use watcher::{
    EndpointsFn, IncrementalHandle, IncrementalNotice, IncrementalOptions, MemberEndpoints,
    fixed_endpoints, spawn,
};
