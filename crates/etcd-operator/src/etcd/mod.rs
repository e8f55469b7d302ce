//! The etcd layer: talks to etcd members over their client endpoints and
//! returns plain data ([`ObservedEtcd`], [`Member`], [`EndpointStatus`]) for
//! the planner, and typed errors ([`EtcdError`] with an [`ErrorCategory`]).
//!
//! - [`observe`] / [`EtcdAdmin::observe`]: one snapshot of the cluster that
//!   never fails on an outage; unreachable members are data.
//! - [`EtcdAdmin`]: member list, add learner, promote, remove, status,
//!   local and cluster health, leadership transfer, cluster ID; compaction,
//!   defragmentation and alarms.

mod admin;
pub mod agreement;
mod client;
mod error;
mod maintenance;
mod membership;
mod observe;
mod tls;
mod types;

pub use admin::{EtcdAdmin, LeaderEndpoint};
pub use client::{ConnectSettings, quorum_read_deadline};
pub use error::{ErrorCategory, EtcdError};
pub use maintenance::{Alarm, AlarmKind, DEFRAG_TIMEOUT, parse_alarms};
pub use membership::AddedMember;
pub use observe::observe;
pub use tls::{ClientTls, scheme, with_tls};
pub use types::{
    EndpointObservation, EndpointStatus, Member, MemberHealth, MemberId, MemberList, ObservedEtcd,
    ObservedMember, format_id, parse_id,
};
