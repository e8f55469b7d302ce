//! Plain data reported by the etcd layer. No etcd-client types leak out, so
//! the pure planner can consume (and tests can build) these values directly.

use serde::{Deserialize, Serialize};

/// etcd's member and cluster IDs are 64-bit numbers, usually shown in hex.
pub type MemberId = u64;

/// One entry of etcd's member list.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Member {
    pub id: MemberId,
    /// Empty until the member has started and published its name.
    pub name: String,
    pub peer_urls: Vec<String>,
    /// Empty until the member has started and published its client URLs.
    pub client_urls: Vec<String>,
    pub is_learner: bool,
}

impl Member {
    /// A member that was added but never started has neither a name nor
    /// client URLs yet.
    pub fn has_started(&self) -> bool {
        !self.name.is_empty() || !self.client_urls.is_empty()
    }
}

/// The member list as one member saw it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemberList {
    pub cluster_id: u64,
    /// The member that answered. Without quorum, its list may be stale.
    pub reported_by: MemberId,
    pub members: Vec<Member>,
}

/// What one endpoint said about itself (etcd's Maintenance.Status).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EndpointStatus {
    pub endpoint: String,
    pub member_id: MemberId,
    pub cluster_id: u64,
    /// The leader this member follows; `None` while it knows no leader.
    pub leader_id: Option<MemberId>,
    /// The store revision of this member (response header).
    pub revision: i64,
    pub raft_term: u64,
    pub raft_index: u64,
    pub raft_applied_index: u64,
    pub db_size: i64,
    pub db_size_in_use: i64,
    pub db_size_quota: i64,
    /// etcd server version, e.g. "3.6.16".
    pub version: String,
    /// The minor release of the member's data, e.g. "3.6.0": a release
    /// older than it refuses to start on this data.
    pub storage_version: String,
    /// The target version of etcd's downgrade in progress, as this member
    /// knows it (e.g. "3.6.0"); `None` when no downgrade is enabled.
    pub downgrade_target: Option<String>,
    pub is_learner: bool,
    /// Errors the member reports about itself, e.g. active alarms
    /// (`memberID:... alarm:NOSPACE`).
    pub errors: Vec<String>,
}

impl EndpointStatus {
    pub fn is_leader(&self) -> bool {
        self.leader_id == Some(self.member_id)
    }
}

/// Health of a member as seen through its own endpoint, without quorum:
/// a serializable (member-local) read plus the alarms it reports.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "state", content = "reason")]
pub enum MemberHealth {
    /// Serves local reads and reports no errors or alarms.
    Healthy,
    /// Answers, but a local read failed or it reports errors or alarms.
    Unhealthy(String),
    /// Its endpoint could not be reached.
    Unreachable(String),
    /// None of the observed endpoints belongs to this member (for example
    /// a learner that has not started yet).
    NotObserved,
}

impl MemberHealth {
    pub fn is_healthy(&self) -> bool {
        matches!(self, MemberHealth::Healthy)
    }
}

/// What was learnt through one endpoint.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EndpointObservation {
    pub endpoint: String,
    /// `None` when the endpoint did not answer; see `error`.
    pub status: Option<EndpointStatus>,
    pub health: MemberHealth,
    /// Why the status could not be read, if it could not.
    pub error: Option<String>,
}

/// A member of the member list with what its endpoint said, if anything.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ObservedMember {
    pub id: MemberId,
    pub name: String,
    pub peer_urls: Vec<String>,
    pub client_urls: Vec<String>,
    pub is_learner: bool,
    /// The observed endpoint that answered as this member.
    pub endpoint: Option<String>,
    pub status: Option<EndpointStatus>,
    pub health: MemberHealth,
}

impl ObservedMember {
    pub fn has_started(&self) -> bool {
        !self.name.is_empty() || !self.client_urls.is_empty()
    }
}

/// Everything the etcd layer could see of one cluster at one moment.
/// Unreachable members are data here, never errors.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ObservedEtcd {
    /// The cluster ID, from the member that reported the member list (or
    /// from any answering endpoint). `None` when nothing answered.
    pub cluster_id: Option<u64>,
    /// The member list, from the leader when it answered, otherwise from
    /// the most up-to-date reachable member. Empty when nothing answered.
    pub members: Vec<ObservedMember>,
    /// The member that reported `members`.
    pub members_reported_by: Option<MemberId>,
    /// The leader known to the member with the highest raft term.
    pub leader: Option<MemberId>,
    /// A linearizable read succeeded: a quorum of voters is working.
    pub quorum_reachable: bool,
    /// Why the linearizable read failed, when it did.
    pub quorum_error: Option<String>,
    /// The highest store revision reported by any reachable member.
    pub max_revision: Option<i64>,
    /// One entry per observed endpoint, in the order given.
    pub endpoints: Vec<EndpointObservation>,
}

impl ObservedEtcd {
    pub fn member(&self, id: MemberId) -> Option<&ObservedMember> {
        self.members.iter().find(|m| m.id == id)
    }

    pub fn member_named(&self, name: &str) -> Option<&ObservedMember> {
        self.members.iter().find(|m| m.name == name)
    }

    pub fn voters(&self) -> impl Iterator<Item = &ObservedMember> {
        self.members.iter().filter(|m| !m.is_learner)
    }

    pub fn learners(&self) -> impl Iterator<Item = &ObservedMember> {
        self.members.iter().filter(|m| m.is_learner)
    }

    /// Voters that are healthy by their local view.
    pub fn healthy_voters(&self) -> usize {
        self.voters().filter(|m| m.health.is_healthy()).count()
    }

    /// Endpoints that answered with a member ID absent from the member list
    /// (a removed member still running, or another cluster's member), or
    /// with a different cluster ID.
    pub fn foreign_endpoints(&self) -> impl Iterator<Item = &EndpointObservation> {
        self.endpoints.iter().filter(|e| match &e.status {
            Some(status) => {
                self.member(status.member_id).is_none()
                    || self.cluster_id.is_some_and(|id| id != status.cluster_id)
            }
            None => false,
        })
    }
}

pub use crate::addressing::{format_id, parse_id};
