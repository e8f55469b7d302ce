//! The etcd membership as the planner reasons about it: the live member list
//! when a member answered, otherwise the last one recorded in status.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::{SignedDuration, Timestamp};

use super::observed::Observed;
use crate::addressing::{ordinal_of_member, ordinal_of_peer_url};
use crate::api::identity::parse_id;
use crate::api::{MemberRole, MemberStatus};
use crate::etcd::MemberId;

/// How long every voter must have been healthy before a membership change
/// (etcd's own health interval).
pub const HEALTH_STABILITY: SignedDuration = SignedDuration::from_secs(5);

/// How long a caught-up learner must have served before its promotion.
/// Replacing a member takes an even number of voters to an odd one, where a
/// voter that fails at once after its promotion leaves the same number of
/// failures tolerated as before it; the window only keeps a learner that
/// exits right after its first answer from becoming a voter
/// (docs/durability.md, "Promoting a learner").
pub const LEARNER_SETTLE: SignedDuration = SignedDuration::from_secs(1);

/// One member of the membership.
#[derive(Clone, Debug, PartialEq)]
pub struct KnownMember {
    /// etcd member ID.
    pub id: MemberId,
    /// The ordinal it belongs to, from its name or peer URL.
    pub ordinal: Option<u32>,
    /// A non-voting learner.
    pub learner: bool,
    /// It has started (published its name).
    pub started: bool,
    /// Healthy by its own endpoint.
    pub healthy: bool,
    /// Since when `healthy` has had its value.
    pub healthy_since: Timestamp,
    /// The raft leader.
    pub leader: bool,
    /// Its store revision.
    pub revision: Option<i64>,
    /// Its raft index.
    pub raft_index: Option<u64>,
    /// What its endpoint said when unhealthy.
    pub health_detail: Option<String>,
    /// The etcd release it runs, as it reports it.
    pub version: Option<String>,
    /// The release of its data (`3.6.0`), as it reports it.
    pub storage_version: Option<String>,
    /// Its database file, as its endpoint reports it; `None` when its
    /// endpoint did not answer.
    pub db: Option<DbSpace>,
    /// Its peer URLs as etcd's member list holds them (empty when only the
    /// status is known).
    pub peer_urls: Vec<String>,
}

/// The space of a member's database file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DbSpace {
    /// The file's size, free pages included.
    pub size: i64,
    /// The bytes that hold data.
    pub in_use: i64,
    /// The backend quota it runs with (0 when it does not say).
    pub quota: i64,
}

impl DbSpace {
    /// The bytes a defragmentation gives back.
    pub fn reclaimable(&self) -> i64 {
        (self.size - self.in_use).max(0)
    }

    /// The share of the file that is free pages, in percent.
    pub fn fragmented_percent(&self) -> i32 {
        if self.size <= 0 {
            return 0;
        }
        i32::try_from(self.reclaimable().saturating_mul(100) / self.size).unwrap_or(100)
    }
}

/// Where the membership came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    /// A member answered with its member list.
    Live,
    /// Nothing answered; the list recorded in status.
    LastKnown,
}

/// The membership at this observation.
#[derive(Clone, Debug)]
pub struct Membership {
    /// Where the list came from.
    pub source: Source,
    /// The members.
    pub members: Vec<KnownMember>,
    /// A quorum of voters works (a linearizable read succeeded).
    pub quorum: bool,
    now: Timestamp,
}

impl Membership {
    /// Builds the membership of an observation.
    pub fn from_observed(observed: &Observed) -> Self {
        let now = observed.now;
        let previous = &observed.status.members;
        let since = |id: MemberId, healthy: bool| -> Timestamp {
            previous
                .iter()
                .find(|m| m.id.as_deref().and_then(parse_id) == Some(id))
                .filter(|m| m.healthy == healthy)
                .and_then(|m| m.healthy_since.as_ref())
                .map_or(now, |t| t.0)
        };
        if !observed.etcd.members.is_empty() {
            let members = observed
                .etcd
                .members
                .iter()
                .map(|m| {
                    let healthy = m.health.is_healthy();
                    let ordinal = ordinal_of_member(&observed.name, &m.name).or_else(|| {
                        m.peer_urls
                            .iter()
                            .find_map(|u| ordinal_of_peer_url(&observed.name, u))
                    });
                    KnownMember {
                        id: m.id,
                        ordinal,
                        learner: m.is_learner,
                        started: m.has_started(),
                        healthy,
                        healthy_since: since(m.id, healthy),
                        leader: observed.etcd.leader == Some(m.id),
                        revision: m.status.as_ref().map(|s| s.revision),
                        raft_index: m.status.as_ref().map(|s| s.raft_index),
                        health_detail: health_detail(&m.health),
                        version: m.status.as_ref().map(|s| s.version.clone()),
                        storage_version: m
                            .status
                            .as_ref()
                            .map(|s| s.storage_version.clone())
                            .filter(|v| !v.is_empty()),
                        db: m.status.as_ref().map(|s| DbSpace {
                            size: s.db_size,
                            in_use: s.db_size_in_use,
                            quota: s.db_size_quota,
                        }),
                        peer_urls: m.peer_urls.clone(),
                    }
                })
                .collect();
            return Self {
                source: Source::Live,
                members,
                quorum: observed.etcd.quorum_reachable,
                now,
            };
        }
        let members = previous
            .iter()
            .filter_map(|m| last_known(&observed.name, m, now))
            .collect();
        Self {
            source: Source::LastKnown,
            members,
            quorum: false,
            now,
        }
    }

    /// The voters.
    pub fn voters(&self) -> impl Iterator<Item = &KnownMember> {
        self.members.iter().filter(|m| !m.learner)
    }

    /// The learners.
    pub fn learners(&self) -> impl Iterator<Item = &KnownMember> {
        self.members.iter().filter(|m| m.learner)
    }

    /// The member of an ordinal.
    pub fn of_ordinal(&self, ordinal: u32) -> Option<&KnownMember> {
        self.members.iter().find(|m| m.ordinal == Some(ordinal))
    }

    /// Number of voters.
    pub fn voter_count(&self) -> usize {
        self.voters().count()
    }

    /// Whether a member has been healthy for [`HEALTH_STABILITY`].
    pub fn stably_healthy(&self, member: &KnownMember) -> bool {
        member.healthy && self.now.duration_since(member.healthy_since) >= HEALTH_STABILITY
    }

    /// Whether a learner has been healthy for [`LEARNER_SETTLE`].
    pub fn settled_learner(&self, learner: &KnownMember) -> bool {
        learner.healthy && self.now.duration_since(learner.healthy_since) >= LEARNER_SETTLE
    }

    /// How long until a learner that serves has done so for
    /// [`LEARNER_SETTLE`] (zero once it has); `None` while it does not
    /// serve.
    pub fn until_settled(&self, learner: &KnownMember) -> Option<SignedDuration> {
        learner.healthy.then(|| {
            (LEARNER_SETTLE - self.now.duration_since(learner.healthy_since))
                .max(SignedDuration::ZERO)
        })
    }

    /// How long until every voter healthy now (except those in `except`) has
    /// been so for [`HEALTH_STABILITY`]; `None` while one of them is not
    /// healthy at all.
    pub fn until_voters_stable(&self, except: &[MemberId]) -> Option<SignedDuration> {
        let mut longest = SignedDuration::ZERO;
        for member in self.voters().filter(|m| !except.contains(&m.id)) {
            if !member.healthy {
                return None;
            }
            let left = HEALTH_STABILITY - self.now.duration_since(member.healthy_since);
            longest = longest.max(left);
        }
        Some(longest)
    }

    /// Rule 3: a membership change may happen now — quorum works and every
    /// voter (except those in `except`: members whose data is gone, to be
    /// replaced) has been healthy for etcd's health interval.
    pub fn change_allowed(&self, except: &[MemberId]) -> bool {
        self.source == Source::Live
            && self.quorum
            && self
                .voters()
                .filter(|m| !except.contains(&m.id))
                .all(|m| self.stably_healthy(m))
    }

    /// Whether a quorum of healthy voters stays while voter `id` is out of
    /// service for a while (replaced by the rollout, defragmenting).
    pub fn quorum_stays_without(&self, id: MemberId) -> bool {
        let voters = self.voter_count();
        voters <= 1 || self.voters().filter(|m| m.id != id && m.healthy).count() >= quorum(voters)
    }

    /// Whether removing voter `id` leaves a membership whose healthy voters
    /// still make a quorum of it (and leaves a membership at all).
    pub fn removal_keeps_quorum(&self, id: MemberId) -> bool {
        let remaining = self.voter_count().saturating_sub(1);
        let healthy_remaining = self.voters().filter(|m| m.id != id && m.healthy).count();
        remaining > 0 && healthy_remaining >= quorum(remaining)
    }

    /// The ordinals of the membership, sorted.
    pub fn ordinals(&self) -> Vec<u32> {
        let mut ordinals: Vec<u32> = self.members.iter().filter_map(|m| m.ordinal).collect();
        ordinals.sort_unstable();
        ordinals.dedup();
        ordinals
    }

    /// The newest revision any member reported.
    pub fn newest_revision(&self) -> Option<i64> {
        self.members.iter().filter_map(|m| m.revision).max()
    }
}

/// The majority of `voters`.
pub fn quorum(voters: usize) -> usize {
    voters / 2 + 1
}

fn health_detail(health: &crate::etcd::MemberHealth) -> Option<String> {
    use crate::etcd::MemberHealth;
    match health {
        MemberHealth::Healthy => None,
        MemberHealth::Unhealthy(reason) => Some(format!("unhealthy: {reason}")),
        MemberHealth::Unreachable(reason) => Some(format!("unreachable: {reason}")),
        MemberHealth::NotObserved => Some("not observed".to_string()),
    }
}

fn last_known(cluster: &str, m: &MemberStatus, now: Timestamp) -> Option<KnownMember> {
    let id = m.id.as_deref().and_then(parse_id)?;
    let role = m.role?;
    Some(KnownMember {
        id,
        ordinal: ordinal_of_member(cluster, &m.name),
        learner: role == MemberRole::Learner,
        started: true,
        // Nothing answered: nobody is known healthy now.
        healthy: false,
        healthy_since: if m.healthy {
            now
        } else {
            m.healthy_since.as_ref().map_or(now, |t: &Time| t.0)
        },
        leader: false,
        revision: m.revision,
        raft_index: m.raft_index.and_then(|i| u64::try_from(i).ok()),
        health_detail: Some("no member answered".to_string()),
        version: m.version.clone(),
        storage_version: None,
        db: None,
        peer_urls: Vec::new(),
    })
}
