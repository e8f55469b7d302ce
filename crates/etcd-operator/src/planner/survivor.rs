//! Rule 11: which survivor a restore starts from — the newest one, a
//! complete reading, or the one a person approved.

use super::context::Context;
use super::membership::{KnownMember, Source};
use super::observed::LogTail;
use crate::api::RecoveryPolicy;

/// A member whose data survived the loss of a majority.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Survivor {
    /// Its ordinal.
    pub ordinal: u32,
    /// Its member name.
    pub name: String,
    /// Its etcd member ID.
    pub id: u64,
    /// Its store revision, read from it in this pass.
    pub revision: Option<i64>,
    /// Its committed raft index, read from it in this pass.
    pub raft_index: Option<u64>,
    /// The revision it last reported (status), for a person choosing a
    /// survivor that cannot be read now.
    pub last_seen_revision: Option<i64>,
    /// What its write-ahead log holds, read from its volume in this pass
    /// (also when its etcd does not answer).
    pub log: Option<LogTail>,
}

/// Which survivor a restore starts from (rule 11): the one whose log is the
/// most up to date (last entry's term, then index) among every survivor
/// whose volume exists, or, while a log cannot be read, the highest
/// committed raft index.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SurvivorChoice {
    /// Every survivor answered; this one holds the newest data.
    Newest(Survivor),
    /// Some survivors keep their volumes but cannot be read now, so the
    /// newest is not known: wait for them, or a person chooses.
    Unreadable {
        /// The newest of those that answered, if any.
        newest_readable: Option<Survivor>,
        /// The member names that did not answer.
        unreadable: Vec<String>,
        /// What each of them last reported ("<name> last at revision N").
        last_seen: Vec<String>,
    },
    /// No voter kept its data.
    NoSurvivor,
}

impl SurvivorChoice {
    /// The survivor a restore would start from without a person's choice.
    pub fn newest(&self) -> Option<&Survivor> {
        match self {
            Self::Newest(s) => Some(s),
            _ => None,
        }
    }

    /// One line for status: what is known of the survivors.
    pub fn describe(&self) -> String {
        match self {
            Self::Newest(s) => format!(
                "newest survivor {} at revision {} (raft index {}){}",
                s.name,
                s.revision.map_or("unknown".to_string(), |r| r.to_string()),
                s.raft_index.map_or("unknown".to_string(), |r| r.to_string()),
                s.log.map_or(String::new(), |l| format!(
                    ", its log holding entries to index {} of term {}",
                    l.last_index, l.last_term
                )),
            ),
            Self::Unreadable {
                newest_readable,
                unreadable,
                last_seen,
            } => format!(
                "survivors {} keep their volumes but cannot be read (an etcd restarted without quorum does not answer), so the newest data is not known: waiting for them ({}){}",
                unreadable.join(", "),
                last_seen.join(", "),
                newest_readable.as_ref().map_or(String::new(), |s| format!(
                    " (of those that answered, {} is newest at revision {}; a person may choose it explicitly)",
                    s.name,
                    s.revision.map_or("unknown".to_string(), |r| r.to_string())
                )),
            ),
            Self::NoSurvivor => "no member kept its data".to_string(),
        }
    }
}

/// The voters whose data was not lost, with what they said in this pass.
fn survivors<'c>(
    cx: &'c Context<'_>,
    lost: &[(&KnownMember, String)],
) -> Vec<(&'c KnownMember, u32)> {
    cx.membership
        .voters()
        .filter(|m| !lost.iter().any(|(l, _)| l.id == m.id))
        .filter_map(|m| Some((m, m.ordinal?)))
        .collect()
}

fn survivor_of(cx: &Context<'_>, member: &KnownMember, ordinal: u32) -> Survivor {
    let live = cx.membership.source == Source::Live;
    Survivor {
        ordinal,
        name: cx.name(ordinal),
        id: member.id,
        revision: member.revision.filter(|_| live),
        raft_index: member.raft_index.filter(|_| live),
        last_seen_revision: cx
            .o
            .status
            .members
            .iter()
            .find(|m| m.name == cx.name(ordinal))
            .and_then(|m| m.revision),
        log: cx.o.log_tails.get(&ordinal).copied(),
    }
}

/// Every voter whose data was not lost, with what it answered in this pass
/// and what it last reported.
pub fn survivor_readings(cx: &Context<'_>, lost: &[(&KnownMember, String)]) -> Vec<Survivor> {
    survivors(cx, lost)
        .into_iter()
        .map(|(m, ordinal)| survivor_of(cx, m, ordinal))
        .collect()
}

/// The members whose data etcd found damaged: named by a CORRUPT alarm, or
/// refused at their start by etcd's initial corruption check.
fn damaged_members(cx: &Context<'_>) -> Vec<u64> {
    let alarmed = cx
        .alarms
        .iter()
        .filter(|a| a.kind == crate::etcd::AlarmKind::Corrupt)
        .map(|a| a.member_id);
    let refused = cx
        .membership
        .members
        .iter()
        .filter_map(|m| cx.damage(m.ordinal?).map(|_| m.id));
    alarmed.chain(refused).collect()
}

/// Rule 11: the newest survivor is the one whose write-ahead log is the most
/// up to date (its last entry's term, then index: raft's own comparison)
/// among *all* voters whose data was not lost, each log read from its
/// volume in this pass. A log may hold entries acknowledged to clients that
/// the member had not yet learnt were committed (etcd persists the commit
/// index lazily), so the committed index alone can rank a survivor that
/// holds less above one that holds more; the restore then commits the
/// chosen survivor's log tail. While a log cannot be read, the highest
/// committed raft index (then revision) of members that answer ranks them;
/// while one of them answers neither, the newest is unknown. What status
/// recorded earlier is not a reading: only what was read in this pass.
pub fn choose_survivor(cx: &Context<'_>, lost: &[(&KnownMember, String)]) -> SurvivorChoice {
    let all = survivor_readings(cx, lost);
    let newest = |list: &[&Survivor]| -> Option<Survivor> {
        list.iter()
            .max_by_key(|s| (s.raft_index, s.revision, std::cmp::Reverse(s.ordinal)))
            .map(|s| (*s).clone())
    };
    // Rule 15: data etcd found damaged (CORRUPT, or refused at start by the
    // initial corruption check) never seeds a restore on its own.
    let damaged = damaged_members(cx);
    let all: Vec<Survivor> = all
        .into_iter()
        .filter(|s| !damaged.contains(&s.id))
        .collect();
    if !all.is_empty() && all.iter().all(|s| s.log.is_some()) {
        return all
            .iter()
            .max_by_key(|s| {
                // Equal logs (raft's log matching: the same entries) are
                // told apart by how much of it the member knew committed:
                // what it answers, else what its log persisted.
                let knew_committed = s.raft_index.max(s.log.map(|l| l.persisted_commit));
                (
                    s.log.map(|l| (l.last_term, l.last_index)),
                    knew_committed,
                    s.revision,
                    std::cmp::Reverse(s.ordinal),
                )
            })
            .map_or(SurvivorChoice::NoSurvivor, |s| {
                SurvivorChoice::Newest(s.clone())
            });
    }
    let readable: Vec<&Survivor> = all.iter().filter(|s| s.raft_index.is_some()).collect();
    let unreadable: Vec<String> = all
        .iter()
        .filter(|s| s.raft_index.is_none())
        .map(|s| s.name.clone())
        .collect();
    if all.is_empty() {
        SurvivorChoice::NoSurvivor
    } else if unreadable.is_empty() {
        newest(&readable).map_or(SurvivorChoice::NoSurvivor, SurvivorChoice::Newest)
    } else {
        SurvivorChoice::Unreadable {
            newest_readable: newest(&readable),
            last_seen: all
                .iter()
                .filter(|s| s.raft_index.is_none())
                .map(|s| {
                    format!(
                        "{} last at revision {}",
                        s.name,
                        s.last_seen_revision
                            .map_or("unknown".to_string(), |r| r.to_string())
                    )
                })
                .collect(),
            unreadable,
        }
    }
}

/// The survivor a restore from a survivor may start from now, if the
/// recovery policy allows one: by `NewestSurvivor`, only the newest of a
/// complete reading; by a person, the survivor they named at the revision
/// they named, which must be what it answers now.
pub(super) fn approved_survivor(
    cx: &Context<'_>,
    lost: &[(&KnownMember, String)],
    choice: &SurvivorChoice,
) -> Option<Survivor> {
    let recovery = &cx.o.spec.recovery;
    if recovery.policy == RecoveryPolicy::NewestSurvivor {
        return choice.newest().cloned();
    }
    if recovery.approved_incarnation.as_deref() != Some(cx.token.as_str()) {
        return None;
    }
    let named = recovery.approved_survivor.as_deref()?;
    let survivor = survivors(cx, lost)
        .into_iter()
        .map(|(m, ordinal)| survivor_of(cx, m, ordinal))
        .find(|s| s.name == named)?;
    match survivor.revision {
        // It answers: the approval must name what it holds now.
        Some(revision) => (Some(revision) == recovery.approved_revision).then_some(survivor),
        // It cannot be read (an etcd restarted without quorum does not serve
        // its client port): a person may still choose it explicitly, at the
        // revision it last reported; the other survivors' volumes are kept.
        None => (survivor.last_seen_revision.is_some()
            && survivor.last_seen_revision == recovery.approved_revision)
            .then_some(Survivor {
                revision: survivor.last_seen_revision,
                ..survivor
            }),
    }
}
