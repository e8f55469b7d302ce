//! Whether members' data agree (rule 15): every member asked hashes its
//! keyspace at one revision (etcd's `HashKV`), and a member whose hash
//! differs from the one a majority holds disagrees.
//!
//! Two uses: backups are streamed only from a member that agrees (this
//! covers the time before etcd's own checks, a follower whose data was
//! damaged since the last compaction); and a member etcd's `CORRUPT` alarm
//! names is rebuilt only once its hash is seen to differ from its agreeing
//! peers'. Hashes are compared only between members that report the same
//! compaction revision (etcd's hash covers the history from there), as
//! etcd's own check does.

/// One member's hash of its keyspace at the revision asked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KeyspaceHash {
    /// The hash (`HashKV.hash`).
    pub hash: u32,
    /// The compaction revision it covers from (`HashKV.compact_revision`).
    pub compact_revision: i64,
}

/// What the comparison says of one member.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Agreement {
    /// Its hash is the one more than half of the members asked hold.
    Agrees,
    /// Its hash differs from the majority's, at the same compaction
    /// revision: its data differs from its peers'.
    Disagrees {
        /// Its hash.
        hash: u32,
        /// The majority's.
        majority: u32,
    },
    /// Its hash could not be compared: not read, a compaction revision of
    /// its own, or no hash is held by a majority.
    Unknown(String),
}

/// The voters' keyspace hashes at one revision, compared.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyspaceComparison {
    /// The revision every voter was asked to hash at.
    pub revision: i64,
    /// What the comparison says of each voter, by member ID.
    pub members: Vec<(u64, Agreement)>,
}

impl KeyspaceComparison {
    /// What the comparison says of member `id`, if it was asked.
    pub fn of(&self, id: u64) -> Option<&Agreement> {
        self.members
            .iter()
            .find(|(member, _)| *member == id)
            .map(|(_, agreement)| agreement)
    }
}

/// Compares the hashes of the members asked (by member ID), all taken at
/// one revision.
pub fn compare(hashes: &[(u64, Result<KeyspaceHash, String>)]) -> Vec<(u64, Agreement)> {
    compare_with_learners(hashes, &[])
}

/// Compares the hashes of voters and learners taken at one revision: the
/// majority is the voters' alone (a learner does not vote), and each
/// learner is judged against it too.
pub fn compare_with_learners(
    voters: &[(u64, Result<KeyspaceHash, String>)],
    learners: &[(u64, Result<KeyspaceHash, String>)],
) -> Vec<(u64, Agreement)> {
    let answered: Vec<KeyspaceHash> = voters.iter().filter_map(|(_, h)| h.clone().ok()).collect();
    // More than half of the members asked, not of those that answered: a
    // member alone cannot outvote peers whose hash was not read.
    let majority = answered
        .iter()
        .copied()
        .find(|candidate| answered.iter().filter(|h| *h == candidate).count() * 2 > voters.len());
    voters
        .iter()
        .chain(learners)
        .map(|(id, hash)| (*id, judge(hash, majority)))
        .collect()
}

/// One member's hash against the majority's.
fn judge(hash: &Result<KeyspaceHash, String>, majority: Option<KeyspaceHash>) -> Agreement {
    match (hash, majority) {
        (Err(e), _) => Agreement::Unknown(format!("its hash could not be read: {e}")),
        (Ok(_), None) => Agreement::Unknown(
            "no keyspace hash is held by a majority of the members (a compaction under way, or data that differs)".to_string(),
        ),
        (Ok(h), Some(m)) if *h == m => Agreement::Agrees,
        (Ok(h), Some(m)) if h.compact_revision == m.compact_revision => Agreement::Disagrees {
            hash: h.hash,
            majority: m.hash,
        },
        (Ok(h), Some(m)) => Agreement::Unknown(format!(
            "compacted at revision {} where the majority is at {}",
            h.compact_revision, m.compact_revision
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hash(hash: u32, compact_revision: i64) -> Result<KeyspaceHash, String> {
        Ok(KeyspaceHash {
            hash,
            compact_revision,
        })
    }

    #[test]
    fn a_member_whose_hash_differs_from_the_majoritys_disagrees() {
        let compared = compare(&[(1, hash(7, 10)), (2, hash(9, 10)), (3, hash(7, 10))]);
        assert_eq!(
            compared,
            [
                (1, Agreement::Agrees),
                (
                    2,
                    Agreement::Disagrees {
                        hash: 9,
                        majority: 7
                    }
                ),
                (3, Agreement::Agrees),
            ]
        );
    }

    #[test]
    fn a_learner_is_judged_against_the_voters_majority_and_does_not_vote() {
        let compared = compare_with_learners(
            &[(1, hash(7, 10)), (2, hash(7, 10)), (3, hash(9, 10))],
            &[(4, hash(9, 10))],
        );
        assert_eq!(
            compared[2].1,
            Agreement::Disagrees {
                hash: 9,
                majority: 7
            }
        );
        assert_eq!(
            compared[3].1,
            Agreement::Disagrees {
                hash: 9,
                majority: 7
            }
        );
        let no_majority =
            compare_with_learners(&[(1, hash(7, 10)), (2, hash(9, 10))], &[(3, hash(9, 10))]);
        assert!(
            no_majority
                .iter()
                .all(|(_, a)| matches!(a, Agreement::Unknown(_))),
            "{no_majority:?}"
        );
    }

    #[test]
    fn two_members_that_differ_leave_no_majority_and_neither_serves() {
        let compared = compare(&[(1, hash(7, 10)), (2, hash(9, 10))]);
        assert!(
            compared
                .iter()
                .all(|(_, a)| matches!(a, Agreement::Unknown(_))),
            "{compared:?}"
        );
    }

    #[test]
    fn another_compaction_revision_is_not_taken_for_damage() {
        let compared = compare(&[(1, hash(7, 10)), (2, hash(9, 12)), (3, hash(7, 10))]);
        assert!(
            matches!(compared[1].1, Agreement::Unknown(_)),
            "{compared:?}"
        );
    }

    #[test]
    fn a_single_member_agrees_with_itself_and_an_unread_hash_outvotes_nobody() {
        assert_eq!(compare(&[(1, hash(7, 10))]), [(1, Agreement::Agrees)]);
        let compared = compare(&[
            (1, hash(7, 10)),
            (2, Err("timed out".into())),
            (3, hash(7, 10)),
        ]);
        assert_eq!(compared[0].1, Agreement::Agrees);
        assert!(matches!(compared[1].1, Agreement::Unknown(_)));
        // One answer of three is no majority.
        let compared = compare(&[
            (1, hash(7, 10)),
            (2, Err("timed out".into())),
            (3, Err("timed out".into())),
        ]);
        assert!(
            matches!(compared[0].1, Agreement::Unknown(_)),
            "{compared:?}"
        );
    }
}
