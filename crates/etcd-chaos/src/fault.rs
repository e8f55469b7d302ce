//! The faults a campaign draws from: what real clusters meet, as the lab
//! injects them. Targets are members by index, resolved to a Pod and its
//! node when the fault is injected (the leader too: whoever leads then).

use std::fmt;

use serde::{Deserialize, Serialize};

/// Which member a fault hits.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Target {
    /// Member `<cluster>-<n>`.
    Member(usize),
    /// The member that leads when the fault is injected.
    Leader,
}

/// What a node partition cuts (the lab's partition kinds).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Cut {
    /// The node and its pods from the other nodes, their pods and clients.
    Peers,
    /// The node from the API server (its heartbeats and watches).
    ApiServer,
    /// Everything.
    All,
}

/// One fault, with how long it lasts where it lasts.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "fault")]
pub enum Fault {
    /// SIGKILL of the member's etcd container (an OOM kill); the kubelet
    /// restarts it.
    PodKill { target: Target },
    /// The member's Pod deleted through the API; the operator recreates it.
    PodDelete { target: Target },
    /// Power loss of the member's node, back after `down_seconds`.
    NodeReboot { target: Target, down_seconds: u64 },
    /// Every process of the member's node stopped (a hung machine) for
    /// `seconds`, then resumed.
    NodeFreeze { target: Target, seconds: u64 },
    /// The member's node cut off for `seconds`, then healed.
    Partition {
        target: Target,
        cut: Cut,
        seconds: u64,
    },
    /// The nodes of these members (a majority) powered off together for
    /// `seconds`: quorum is lost, the operator must wait.
    MajorityNodesDown { members: Vec<usize>, seconds: u64 },
    /// The nodes of these members (a majority) each cut from everything for
    /// `seconds`: no side has quorum.
    MajorityPartition { members: Vec<usize>, seconds: u64 },
    /// The member's volume emptied under it, then its etcd killed: its data
    /// is truly gone, the operator replaces it learner-first.
    VolumeWipe { member: usize },
    /// The member's volume filled to the last block (every write of etcd
    /// that needs a block fails with `ENOSPC`) for `seconds`, then emptied
    /// of the filler: a full disk, its data intact.
    VolumeFull { member: usize, seconds: u64 },
    /// The operator killed, started again after `down_seconds`.
    OperatorKill { down_seconds: u64 },
    /// The API server stopped for `seconds`, then started again.
    ApiServerOutage { seconds: u64 },
}

impl Fault {
    /// The kind's name in reports (`leader-kill` for a pod kill of the
    /// leader).
    pub fn kind(&self) -> &'static str {
        match self {
            Fault::PodKill {
                target: Target::Leader,
            } => "leader-kill",
            Fault::PodKill { .. } => "pod-kill",
            Fault::PodDelete { .. } => "pod-delete",
            Fault::NodeReboot { .. } => "node-reboot",
            Fault::NodeFreeze { .. } => "node-freeze",
            Fault::Partition {
                cut: Cut::Peers, ..
            } => "partition-peers",
            Fault::Partition {
                cut: Cut::ApiServer,
                ..
            } => "partition-apiserver",
            Fault::Partition { cut: Cut::All, .. } => "partition-all",
            Fault::MajorityNodesDown { .. } => "majority-nodes-down",
            Fault::MajorityPartition { .. } => "majority-partition",
            Fault::VolumeWipe { .. } => "volume-wipe",
            Fault::VolumeFull { .. } => "volume-full",
            Fault::OperatorKill { .. } => "operator-kill",
            Fault::ApiServerOutage { .. } => "apiserver-outage",
        }
    }

    /// Whether the fault destroys a member's data (the only faults after
    /// which a member may have a new ID).
    pub fn wipes(&self) -> Option<usize> {
        match self {
            Fault::VolumeWipe { member } => Some(*member),
            _ => None,
        }
    }

    /// How long the fault lasts before it is healed (0: it is one event).
    pub fn lasts_seconds(&self) -> u64 {
        match self {
            Fault::NodeReboot { down_seconds, .. } | Fault::OperatorKill { down_seconds } => {
                *down_seconds
            }
            Fault::NodeFreeze { seconds, .. }
            | Fault::Partition { seconds, .. }
            | Fault::MajorityNodesDown { seconds, .. }
            | Fault::MajorityPartition { seconds, .. }
            | Fault::VolumeFull { seconds, .. }
            | Fault::ApiServerOutage { seconds } => *seconds,
            Fault::PodKill { .. } | Fault::PodDelete { .. } | Fault::VolumeWipe { .. } => 0,
        }
    }

    /// Every kind a campaign can draw, in report order.
    pub const KINDS: [&'static str; 14] = [
        "pod-kill",
        "leader-kill",
        "pod-delete",
        "node-reboot",
        "node-freeze",
        "partition-peers",
        "partition-apiserver",
        "partition-all",
        "majority-nodes-down",
        "majority-partition",
        "volume-wipe",
        "volume-full",
        "operator-kill",
        "apiserver-outage",
    ];
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Target::Member(n) => write!(f, "member {n}"),
            Target::Leader => write!(f, "the leader"),
        }
    }
}

impl fmt::Display for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = self.kind();
        match self {
            Fault::PodKill { target } | Fault::PodDelete { target } => {
                write!(f, "{kind} of {target}")
            }
            Fault::NodeReboot {
                target,
                down_seconds,
            } => write!(f, "{kind}: node of {target} down {down_seconds} s"),
            Fault::NodeFreeze { target, seconds }
            | Fault::Partition {
                target, seconds, ..
            } => write!(f, "{kind}: node of {target} for {seconds} s"),
            Fault::MajorityNodesDown { members, seconds }
            | Fault::MajorityPartition { members, seconds } => {
                write!(f, "{kind}: nodes of members {members:?} for {seconds} s")
            }
            Fault::VolumeWipe { member } => write!(f, "{kind} of member {member}"),
            Fault::VolumeFull { member, seconds } => {
                write!(f, "{kind}: volume of member {member} for {seconds} s")
            }
            Fault::OperatorKill { down_seconds } => {
                write!(f, "{kind}: down {down_seconds} s")
            }
            Fault::ApiServerOutage { seconds } => write!(f, "{kind}: {seconds} s"),
        }
    }
}
