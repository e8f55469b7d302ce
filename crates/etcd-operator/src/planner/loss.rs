//! Rules 7 and 11 for a restore from a backup: the loss of a majority's
//! data that it answers, and whether it may run now. A backup restore is
//! held to the newest-data rule like a survivor restore: it waits while a
//! survivor that kept its volume cannot be read, and it never runs on its
//! own when a survivor holds a newer revision than the backups reach. A
//! person may approve it anyway, but only for this very loss, after it
//! happened: the approval names the lost members and when the operator
//! first saw them lost, so an approval written beforehand (kept in Git for
//! months) approves nothing.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;

use super::context::Context;
use super::membership::KnownMember;
use super::survivor::{SurvivorChoice, survivor_readings};
use crate::addressing::format_id;
use crate::api::{DataLossStatus, RecoveryPolicy, SurvivorRevision};

/// A loss of a majority's data: which members lost it, and since when.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Loss {
    /// The members whose data is known lost, by name, sorted.
    pub lost_members: Vec<String>,
    /// When the operator first saw these members lost.
    pub since: Timestamp,
}

impl Loss {
    /// The loss of the voters in `lost`, dated by the status when the
    /// operator saw the same members lost before, else now.
    pub fn of(cx: &Context<'_>, lost: &[(&KnownMember, String)]) -> Self {
        let mut lost_members: Vec<String> = lost
            .iter()
            .map(|(m, _)| m.ordinal.map_or_else(|| format_id(m.id), |o| cx.name(o)))
            .collect();
        lost_members.sort();
        let since =
            cx.o.status
                .data_loss
                .as_ref()
                .filter(|d| d.lost_members == lost_members)
                .map_or(cx.o.now, |d| d.since.0);
        Self {
            lost_members,
            since,
        }
    }

    /// The value of `spec.recovery.approvedLoss` that approves a restore of
    /// this loss: `<lost members>@<since, to the second>`.
    pub fn approval(&self) -> String {
        format!(
            "{}@{}",
            self.lost_members.join(","),
            self.since.strftime("%Y-%m-%dT%H:%M:%SZ")
        )
    }

    /// A person approved a restore of this very loss: the approval names
    /// this incarnation and this loss, as the status showed it before this
    /// pass.
    pub fn approved_by_a_person(&self, cx: &Context<'_>) -> bool {
        let recovery = &cx.o.spec.recovery;
        let shown =
            cx.o.status
                .data_loss
                .as_ref()
                .is_some_and(|d| d.approval == self.approval());
        shown
            && recovery.approved_incarnation.as_deref() == Some(cx.token.as_str())
            && recovery.approved_loss.as_deref() == Some(self.approval().as_str())
    }
}

/// How far the backups of `spec.recovery.backup` reach, as far as the
/// operator knows: the revision the source names; else the revision of the
/// full backup it names; else the newest full backup or continuous segment
/// of a schedule that writes to the same destination. `None` when unknown.
pub fn backup_reach(cx: &Context<'_>) -> Option<i64> {
    let source = cx.o.spec.recovery.backup.as_ref()?;
    if let Some(revision) = source.revision {
        return Some(revision);
    }
    if let Some(name) = &source.backup_name {
        return name.rsplit_once("-r").and_then(|(_, r)| r.parse().ok());
    }
    cx.o.backup_schedules
        .iter()
        .filter(|s| s.destination.as_ref() == Some(&source.destination))
        .flat_map(|s| [s.last_full.as_ref().and_then(|f| f.2), s.durable_revision])
        .flatten()
        .max()
}

/// Why a backup restore of `loss` may not run now, `None` when it may:
/// approved by a person for this loss, or by `policy: NewestSurvivor` once
/// every survivor has been read and the backups reach the newest one.
pub fn backup_restore_held(
    cx: &Context<'_>,
    loss: &Loss,
    choice: &SurvivorChoice,
) -> Option<String> {
    cx.o.spec.recovery.backup.as_ref()?;
    if loss.approved_by_a_person(cx) {
        return None;
    }
    let how_to_approve = format!(
        "to restore from the backups of spec.recovery.backup anyway, set spec.recovery: {{approvedIncarnation: {}, approvedLoss: {}}}",
        cx.token,
        loss.approval()
    );
    if cx.o.spec.recovery.policy != RecoveryPolicy::NewestSurvivor {
        return Some(how_to_approve);
    }
    match choice {
        SurvivorChoice::NoSurvivor => {
            damaged_survivors_beyond_backups(cx).map(|why| format!("{why}; {how_to_approve}"))
        }
        SurvivorChoice::Unreadable { unreadable, .. } => Some(format!(
            "a backup restore waits while survivors {} keep their volumes but cannot be read: their data may be newer than the backups; {how_to_approve}",
            unreadable.join(", ")
        )),
        SurvivorChoice::Newest(survivor) => {
            let reach = backup_reach(cx);
            match (survivor.revision, reach) {
                (Some(newest), Some(reach)) if reach >= newest => None,
                (newest, reach) => Some(format!(
                    "survivor {} holds revision {}, and the backups reach {}: a backup restore would lose the writes between; restore from the survivor (spec.recovery.source: Survivor) or {how_to_approve}",
                    survivor.name,
                    newest.map_or("unknown".to_string(), |r| r.to_string()),
                    reach.map_or("an unknown revision".to_string(), |r| format!(
                        "revision {r}"
                    )),
                )),
            }
        }
    }
}

/// Rule 15 with rule 11: data etcd found damaged never seeds a restore,
/// but it may still hold writes the backups lack; an automatic backup
/// restore waits for a person while a damaged survivor's revision (read
/// now, or last reported) is beyond what the backups reach or unknown.
fn damaged_survivors_beyond_backups(cx: &Context<'_>) -> Option<String> {
    let reach = backup_reach(cx);
    // Damaged data set aside counts as gone for the member's rebuild, but
    // its volume is kept and may hold the newest writes: it is weighed here
    // until a person releases or deletes it.
    let lost: Vec<(&KnownMember, String)> = lost_voters(cx)
        .into_iter()
        .filter(|(m, _)| {
            !m.ordinal.is_some_and(|o| {
                cx.damage(o).is_some()
                    && cx
                        .o
                        .objects(o)
                        .pvc
                        .is_some_and(|p| p.set_aside && !p.released && !p.deleting)
            })
        })
        .collect();
    let beyond: Vec<String> = super::survivor::survivor_readings(cx, &lost)
        .into_iter()
        .filter(|s| cx.damage(s.ordinal).is_some())
        .filter_map(|s| {
            let revision = s.revision.or(s.last_seen_revision);
            match (revision, reach) {
                (Some(revision), Some(reach)) if reach >= revision => None,
                (revision, _) => Some(format!(
                    "{} (revision {})",
                    s.name,
                    revision.map_or("unknown".to_string(), |r| r.to_string())
                )),
            }
        })
        .collect();
    (!beyond.is_empty()).then(|| {
        format!(
            "the data of survivors {} is damaged but may hold writes beyond the backups ({}): a person decides",
            beyond.join(", "),
            reach.map_or("reach an unknown revision".to_string(), |r| format!("reach revision {r}"))
        )
    })
}

/// The voters whose data is known lost, each with its evidence.
pub fn lost_voters<'c>(cx: &'c Context<'_>) -> Vec<(&'c KnownMember, String)> {
    cx.membership
        .voters()
        .filter_map(|m| Some((m, cx.data_gone(m.ordinal?)?)))
        .collect()
}

/// The status of a loss: its members and date, the approval that answers
/// it, every survivor's revision and the backups' reach.
pub fn status(cx: &Context<'_>, lost: &[(&KnownMember, String)]) -> DataLossStatus {
    let loss = Loss::of(cx, lost);
    DataLossStatus {
        approval: loss.approval(),
        lost_members: loss.lost_members,
        since: Time(loss.since),
        survivors: survivor_readings(cx, lost)
            .into_iter()
            .map(|s| SurvivorRevision {
                readable: s.raft_index.is_some(),
                revision: s.revision.or(s.last_seen_revision),
                name: s.name,
            })
            .collect(),
        backup_revision: backup_reach(cx),
    }
}
