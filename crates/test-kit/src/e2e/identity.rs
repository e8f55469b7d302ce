//! Who a cluster is, as etcd says: its cluster ID and its members' IDs by
//! name; and the numbered keys the scenarios write.

use std::collections::BTreeMap;

/// Cluster ID and members (name -> (ID, learner)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    pub cluster_id: u64,
    pub members: BTreeMap<String, (u64, bool)>,
}

impl Identity {
    /// The member ID of `name`.
    pub fn id_of(&self, name: &str) -> Option<u64> {
        self.members.get(name).map(|(id, _)| *id)
    }

    /// How many members are voters (not learners).
    pub fn voters(&self) -> usize {
        self.members
            .values()
            .filter(|(_, learner)| !learner)
            .count()
    }
}

/// Key `i` under `prefix`: `<prefix>key-<i, five digits>`.
pub fn key(prefix: &str, i: usize) -> String {
    format!("{prefix}key-{i:05}")
}

/// The value of key `i`.
pub fn value(i: usize) -> String {
    format!("value-{i}")
}
