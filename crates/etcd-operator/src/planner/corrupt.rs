//! Rule 15 while members run: a member that etcd's CORRUPT alarm names is
//! rebuilt from its agreeing peers once the operator has seen its keyspace
//! hash differ from theirs at one revision.
//!
//! Under CORRUPT etcd refuses every write, but each member still answers
//! reads from its own data, so the named member serves what its disk
//! damaged until it is out of the cluster. In order: its volume is set
//! aside (its PersistentVolume kept under `Retain`, with the evidence), the
//! member is removed (etcd then stops it), and the alarm is disarmed once
//! no member it names is left in the cluster. The member is then added
//! again on a new volume, learner first, as any removed member is.
//!
//! etcd's compaction hash check names only the members outside a majority
//! that agrees, but its periodic check trusts the leader's hash; so the
//! operator acts only when its own comparison says the same: every named
//! member's hash differs from the one a majority of all voters holds, and
//! no other member's differs (a learner is judged against the voters'
//! majority and does not vote). An alarm for the whole cluster (member 0)
//! or hashes that do not settle it are left to a person, with what was
//! compared.

use super::Action;
use super::context::Context;
use super::maintenance::name_of;
use super::membership::{KnownMember, Source, quorum};
use super::step::{Step, Waiting};
use crate::etcd::agreement::Agreement;
use crate::etcd::{AlarmKind, MemberId, format_id};

/// The step for a raised CORRUPT alarm, if one is.
pub(super) fn corrupt_alarm(cx: &Context<'_>) -> Option<Step> {
    let named: Vec<MemberId> = cx
        .alarms
        .iter()
        .filter(|a| a.kind == AlarmKind::Corrupt)
        .map(|a| a.member_id)
        .collect();
    if named.is_empty() {
        return None;
    }
    let in_cluster: Vec<&KnownMember> = cx
        .membership
        .members
        .iter()
        .filter(|m| named.contains(&m.id))
        .collect();
    let whole_cluster = named.contains(&0);
    if in_cluster.is_empty() && !whole_cluster {
        if cx.membership.source != Source::Live || !cx.membership.quorum {
            return Some(Step::Wait(Waiting::NeedsAttention(format!(
                "etcd raised CORRUPT for {}, no longer in the cluster; it is disarmed once a quorum answers",
                ids(&named)
            ))));
        }
        return Some(Step::Act(Action::DisarmCorrupt { members: named }));
    }
    let names: Vec<String> = named.iter().map(|&id| name_of(cx, id)).collect();
    let confirmation = match confirmed(cx, &named) {
        Ok(confirmation) => confirmation,
        Err(why) => {
            return Some(Step::Wait(Waiting::NeedsAttention(format!(
                "etcd raised CORRUPT for {}: its data differs from the other members' and etcd refuses writes. The operator rebuilds a member only once its own comparison names it too, and {why}. Compare the members (etcdctl endpoint hashkv --cluster), remove the member whose data differs with etcdctl member remove (its volume is kept), then etcdctl alarm disarm; its replacement then follows the data-loss rules",
                names.join(", ")
            ))));
        }
    };
    let member = in_cluster.first()?;
    Some(rebuild(cx, member, confirmation.evidence(member.id)))
}

/// The next step of one confirmed member's rebuild: its volume set aside,
/// then its removal.
fn rebuild(cx: &Context<'_>, member: &KnownMember, evidence: String) -> Step {
    let name = name_of(cx, member.id);
    let Some(ordinal) = member.ordinal else {
        return Step::Wait(Waiting::NeedsAttention(format!(
            "{name}'s data differs from its peers' ({evidence}) but it is no member of this cluster's Pods; remove it with etcdctl member remove"
        )));
    };
    let remove = Step::Act(Action::RemoveMember {
        id: member.id,
        ordinal: Some(ordinal),
        reason: evidence.clone(),
    });
    // Data already gone (or set aside) has nothing left to keep.
    if cx.data_gone(ordinal).is_some() {
        return remove;
    }
    let Some(pvc) = cx.o.objects(ordinal).pvc else {
        return Step::Wait(Waiting::NeedsAttention(format!(
            "{name}'s data differs from its peers' ({evidence}) but it has no PVC the operator can keep; nothing is done to it"
        )));
    };
    if pvc.set_aside || pvc.released || pvc.deleting {
        return remove;
    }
    match pvc.volume_name.clone() {
        Some(volume) => Step::Act(Action::SetVolumeAside {
            ordinal,
            volume,
            evidence,
        }),
        None => Step::Wait(Waiting::NeedsAttention(format!(
            "{name}'s data differs from its peers' ({evidence}) but its PVC is bound to no PersistentVolume the operator can keep; nothing is done to it"
        ))),
    }
}

/// What the operator's own comparison said of the members CORRUPT names.
struct Confirmation {
    revision: i64,
    agreeing: usize,
    /// What was seen of each named voter's data, in words.
    differing: Vec<(MemberId, String)>,
}

impl Confirmation {
    /// The evidence against one named member, in words.
    fn evidence(&self, id: MemberId) -> String {
        let seen = self
            .differing
            .iter()
            .find(|(member, _)| *member == id)
            .map(|(_, seen)| seen.as_str())
            .unwrap_or_default();
        format!(
            "etcd raised CORRUPT for it, and {seen}; {} voters agree at revision {}",
            self.agreeing, self.revision
        )
    }
}

/// Whether the operator's own comparison names the same members as the
/// alarm, or why it does not.
fn confirmed(cx: &Context<'_>, named: &[MemberId]) -> Result<Confirmation, String> {
    if named.contains(&0) {
        return Err(
            "etcd itself could not tell whose data differs (no majority of the members agreed)"
                .to_string(),
        );
    }
    if cx.membership.source != Source::Live || !cx.membership.quorum {
        return Err("no quorum answers".to_string());
    }
    let Some(compared) = &cx.o.keyspaces else {
        return Err("the members' keyspace hashes could not be read".to_string());
    };
    let revision = compared.revision;
    let mut agreeing = 0;
    let mut differing = Vec::new();
    for voter in &cx.membership.members {
        let name = name_of(cx, voter.id);
        match (compared.of(voter.id), named.contains(&voter.id)) {
            (Some(Agreement::Agrees), false) => agreeing += usize::from(!voter.learner),
            (Some(Agreement::Disagrees { hash, majority }), true) => {
                differing.push((
                    voter.id,
                    format!(
                        "its keyspace hash at revision {revision} is {hash:08x} where the majority holds {majority:08x}"
                    ),
                ));
            }
            (Some(Agreement::Unknown(_)) | None, false) => {}
            (Some(Agreement::Disagrees { hash, .. }), false) => {
                return Err(format!(
                    "{name}, which the alarm does not name, also differs at revision {revision} (hash {hash:08x})"
                ));
            }
            (Some(Agreement::Agrees), true) => {
                return Err(format!(
                    "{name}'s keyspace hash at revision {revision} is the majority's"
                ));
            }
            (unknown @ (Some(Agreement::Unknown(_)) | None), true) => {
                let Some(seen) = down_since(cx, voter) else {
                    let why = match unknown {
                        Some(Agreement::Unknown(why)) => why.as_str(),
                        _ => "it was not asked",
                    };
                    return Err(format!(
                        "{name}'s keyspace hash at revision {revision} could not be compared: {why}"
                    ));
                };
                differing.push((voter.id, seen));
            }
        }
    }
    let voters = cx.membership.voter_count();
    let named_voters = cx
        .membership
        .voters()
        .filter(|m| named.contains(&m.id))
        .count();
    let remaining = voters.saturating_sub(named_voters);
    if agreeing < quorum(voters) || remaining == 0 || agreeing < quorum(remaining) {
        return Err(format!(
            "only {agreeing} of {voters} voters were seen to agree at revision {revision}"
        ));
    }
    Ok(Confirmation {
        revision,
        agreeing,
        differing,
    })
}

/// Why a named member whose hash could not be read is down, when that
/// settles it: etcd's initial check refused its data at its restart, or its
/// data is gone.
fn down_since(cx: &Context<'_>, member: &KnownMember) -> Option<String> {
    let ordinal = member.ordinal?;
    if let Some(refused) = cx.damage(ordinal) {
        return Some(format!(
            "its initial corruption check refused its data at its restart ({refused})"
        ));
    }
    cx.data_gone(ordinal)
        .map(|gone| format!("its data is gone ({gone})"))
}

fn ids(members: &[MemberId]) -> String {
    members
        .iter()
        .map(|m| format_id(*m))
        .collect::<Vec<_>>()
        .join(", ")
}
