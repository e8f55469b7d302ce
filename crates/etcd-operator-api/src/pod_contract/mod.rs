//! What the operator and the programs its binary runs inside member and
//! restore Pods ([`crate::pod_programs`]) agree on, in one leaf module
//! that both sides import and that imports neither:
//!
//! - [`report`]: how each program ends — the versioned [`Report`] it
//!   leaves as its container's termination message (a line for people,
//!   then one JSON line), the refusal kinds of the member guard, and the
//!   one reader of those messages on the operator's side;
//! - [`restore_volume`]: the command line of the restore Pod's steps and
//!   where they keep their files on the member's volume, which the restore
//!   Pod's builder needs without knowing the steps themselves;
//! - [`volume_usage`]: the versioned document of how full a member's volume
//!   is, which the `volume-usage` sidecar serves and the operator reads;
//! - [`wal_tail`]: the versioned document of what a member's write-ahead
//!   log holds, which the same sidecar serves on request (survivor ranking);
//! - [`backup_store`]: the store a `persistentVolumeClaim` backup
//!   destination is reached through: its port, names, token and protocol.

pub mod backup_store;
pub mod report;
pub mod restore_volume;
pub mod volume_usage;
pub mod wal_tail;

pub use report::{
    LEGACY_REFUSAL_PREFIX, Outcome, Program, REFUSAL_EXIT_CODE, REPORT_VERSION, Reading, Refusal,
    Report, TERMINATION_MESSAGE_PATH, TERMINATION_MESSAGE_POLICY, Unknown, UnrecognisedReport,
};
pub use restore_volume::{REVISION_BUMP, RestoreLayout, RestoreStep};
pub use volume_usage::{
    VOLUME_USAGE_PATH, VOLUME_USAGE_PORT, VOLUME_USAGE_VERSION, VolumeUsage, VolumeUsageParseError,
};
pub use wal_tail::{WAL_TAIL_PATH, WAL_TAIL_VERSION, WalTailParseError, WalTailReport};
