//! Backups: full snapshots streamed from a member, verified, compressed and
//! uploaded to an object store, with metadata beside them; retention; and
//! the verified download a restore starts from.
//!
//! - [`BackupStore`]: a destination (local path, S3, GCS, Azure) opened
//!   for one cluster's folder.
//! - [`take_backup`]: member choice (a follower first), snapshot stream,
//!   etcd's SHA-256 trailer checked, zstd, multipart upload, metadata.
//! - [`list_backups`], [`verify_backup`], [`download_backup`]: reading
//!   back, refusing corrupt or truncated backups with a clear error.
//! - [`apply_retention`]: by count and age, of one writer's backups only.
//! - [`encryption`]: optional client-side encryption of stored objects
//!   (XChaCha20-Poly1305 STREAM), keyed by [`BackupStore::with_encryption`].
//! - [`incremental`]: continuous incremental backup (watch segments after
//!   each full backup), gap detection, and the replay a restore uses
//!   ([`segment_chain`], [`replay_segments`]).
//! - [`volume_store`]: the store Pod of a `persistentVolumeClaim`
//!   destination, made to exist before each use.
//! - [`controller`]: the `EtcdBackup` and `EtcdBackupSchedule` controllers.
//! - `kube_time`: Kubernetes timestamps of the backup code's times.

pub mod controller;
mod destination;
pub mod encryption;
mod error;
pub mod incremental;
mod kube_time;
pub(crate) mod local_volume;
mod metadata;
mod part_upload;
mod restore;
pub mod restore_choice;
mod retention;
pub mod segment_check;
pub mod segment_format;
/// Cron schedules and freshness (shared with the planner's maintenance).
pub use crate::cron_schedule as schedule;
mod snapshot;
mod source;
mod source_refusal;
mod verify;
pub mod volume_store;

pub use destination::{BackupStore, Credentials, keys};
pub use encryption::{EncryptionError, EncryptionInfo, EncryptionKey};
pub use error::{BackupError, BackupErrorCategory, Corruption};
pub use incremental::{
    ChainGap, FetchedSegments, ReplayOutcome, SegmentChain, fetch_segments, replay_segments,
    segment_chain,
};
pub use metadata::{
    BackupMetadata, BackupWriter, METADATA_SUFFIX, SNAPSHOT_SUFFIX, metadata_name_for,
};
pub use restore::{download_backup, list_backups, newest_backup, verify_backup};
pub use restore_choice::backup_for_restore;
pub use retention::{RetentionOutcome, Selection, apply_retention, select};
pub use schedule::{CronSchedule, Freshness, InvalidSchedule, freshness};
pub use snapshot::{PART_SIZE, SnapshotOptions, TakenBackup, take_backup};
pub use source::{SnapshotSource, choose_source, prefer_follower};
pub use source_refusal::{ProbeError, SourceRefusal, SourceRefusals};
pub use verify::{SnapshotCheckError, SnapshotVerifier, TRAILER_LEN, VerifiedSnapshot};
