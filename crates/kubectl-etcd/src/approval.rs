//! The approval of a restore after a majority's data is lost (pure): what
//! the cluster waits for, read from its status and its `MajorityDataLost`
//! condition, and exactly the `spec.recovery` fields that approve it (the
//! rules of `RecoverySpec`: `approvedIncarnation` always, and for a
//! survivor also `approvedSurvivor` with `approvedRevision`).

use etcd_operator_api::api::{
    BackupSource, ConditionType, EtcdCluster, RecoveryPolicy, RecoverySource,
};
use serde_json::{Value, json};

/// What `approve-recovery` would do now.
#[derive(Debug, Clone, PartialEq)]
pub enum Decision {
    /// Write this approval.
    Approve(Plan),
    /// The same approval is already set; the operator acts on it.
    AlreadyApproved(Plan),
    /// There is nothing to approve.
    Nothing { why: String, next: String },
    /// What the condition says belongs to another incarnation or spec: a
    /// fresh look is needed before anything is approved.
    Stale { why: String, next: String },
    /// Some survivors cannot be read: a person waits or chooses one.
    ChooseSurvivor {
        why: String,
        /// Survivors with the revision their status last reported.
        candidates: Vec<(String, Option<i64>)>,
    },
}

/// An approval and what it means.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    /// `status.clusterToken` of the incarnation whose majority was lost.
    pub incarnation: String,
    /// Where the restored data comes from.
    pub source: Source,
    /// The members whose data is lost; the restore deletes their volumes.
    pub lost: Vec<String>,
    /// The other survivors: their volumes are kept until a person releases
    /// them.
    pub kept: Vec<String>,
    /// The newest revision any member was seen at (`status.newestRevision`).
    pub newest_revision: Option<i64>,
    /// For a backup restore, the loss it answers (`status.dataLoss.approval`).
    pub loss: Option<String>,
}

/// The data a restore starts from.
#[derive(Debug, Clone, PartialEq)]
pub enum Source {
    Survivor {
        name: String,
        revision: i64,
        /// Chosen by the person (`--survivor`), not named by the operator.
        chosen: bool,
    },
    Backup(Box<BackupSource>),
}

/// A survivor a person chose (`--survivor`, `--revision`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Choice {
    pub survivor: String,
    pub revision: Option<i64>,
}

impl Plan {
    /// The merge patch of `spec.recovery` that approves this restore.
    pub fn recovery_patch(&self) -> Value {
        match &self.source {
            Source::Survivor { name, revision, .. } => json!({
                "approvedIncarnation": self.incarnation,
                "approvedSurvivor": name,
                "approvedRevision": revision,
            }),
            Source::Backup(_) => json!({
                "approvedIncarnation": self.incarnation,
                "approvedLoss": self.loss,
                "approvedSurvivor": null,
                "approvedRevision": null,
            }),
        }
    }

    /// What is kept and what is lost, one line each.
    pub fn consequences(&self) -> Vec<String> {
        let mut lines = Vec::new();
        match &self.source {
            Source::Survivor {
                name,
                revision,
                chosen,
            } => {
                lines.push(format!(
                    "restore from survivor {name} at revision {revision}{}",
                    if *chosen {
                        " (your choice)"
                    } else {
                        " (the newest, as the operator read it)"
                    }
                ));
                lines.push(format!(
                    "kept: every write {name} holds, up to revision {revision}; the cluster serves again as a new incarnation (watchers relist)"
                ));
                match self.newest_revision {
                    Some(newest) if newest > *revision => lines.push(format!(
                        "lost: the writes after revision {revision} (members were seen up to {newest}) that only the lost members held"
                    )),
                    Some(newest) => lines.push(format!(
                        "lost: nothing that any member was seen holding (newest revision seen: {newest})"
                    )),
                    None => lines.push(format!(
                        "lost: any write {name} did not receive (no member reported a newer revision)"
                    )),
                }
            }
            Source::Backup(backup) => {
                lines.push(format!(
                    "restore from the backups of spec.recovery.backup{}{}",
                    backup
                        .backup_name
                        .as_ref()
                        .map(|b| format!(", full backup {b}"))
                        .unwrap_or_else(|| {
                            ", the full backup whose segments reach furthest".to_string()
                        }),
                    backup
                        .revision
                        .map(|r| format!(", up to revision {r}"))
                        .unwrap_or_default()
                ));
                lines.push(format!(
                    "lost: every write after the backup's last revision{} (compare with the schedule's status.incremental.durableRevision)",
                    self.newest_revision
                        .map(|r| format!("; members were seen up to revision {r}"))
                        .unwrap_or_default()
                ));
            }
        }
        if !self.lost.is_empty() {
            lines.push(format!(
                "deleted: the volumes of {} (their data is already gone); they rejoin as new members",
                self.lost.join(", ")
            ));
        }
        if !self.kept.is_empty() {
            lines.push(format!(
                "kept aside: the volumes of {} until you annotate their PVCs durable-etcd.io/release-retained-data=true",
                self.kept.join(", ")
            ));
        }
        lines
    }
}

/// What approving `cluster`'s restore means now; `choice` is a survivor a
/// person chose instead of the one the operator names.
pub fn decide(cluster: &EtcdCluster, choice: Option<&Choice>) -> Decision {
    let name = cluster.metadata.name.as_deref().unwrap_or_default();
    let status = cluster.status.clone().unwrap_or_default();
    let follow = format!("`kubectl etcd status {name}` shows what the operator does");
    if let Some(restore) = status.restore.as_ref().filter(|r| r.in_progress()) {
        return Decision::Nothing {
            why: format!(
                "a restore into incarnation {} is in progress: {}",
                restore.incarnation, restore.step
            ),
            next: follow,
        };
    }
    let Some(condition) = status
        .condition(ConditionType::MajorityDataLost)
        .filter(|c| c.status == "True")
    else {
        return Decision::Nothing {
            why: format!(
                "no majority's data is known lost in {name} (phase {})",
                status
                    .phase
                    .map_or("unknown".to_string(), |p| format!("{p:?}"))
            ),
            next: format!("nothing to approve; {follow}"),
        };
    };
    let message = condition.message.as_str();
    let Some(token) = status.cluster_token.clone() else {
        return Decision::Stale {
            why: "the status names no incarnation (status.clusterToken)".to_string(),
            next: "wait for the operator to write status, then run again".to_string(),
        };
    };
    if let (Some(seen), Some(generation)) =
        (condition.observed_generation, cluster.metadata.generation)
        && seen < generation
    {
        return Decision::Stale {
            why: format!(
                "the spec changed (generation {generation}) since the operator wrote MajorityDataLost (generation {seen})"
            ),
            next: "wait a few seconds for the operator to look again, then run again".to_string(),
        };
    }
    let recovery = &cluster.spec.recovery;
    if recovery.policy == RecoveryPolicy::NewestSurvivor
        && recovery.source != RecoverySource::Backup
    {
        return Decision::Nothing {
            why: "spec.recovery.policy is NewestSurvivor: the operator restores without an approval once every survivor has answered".to_string(),
            next: follow,
        };
    }
    let lost = lost_members(cluster, message);
    let plan = |source: Source| {
        let survivor = match &source {
            Source::Survivor { name, .. } => Some(name.clone()),
            Source::Backup(_) => None,
        };
        Plan {
            incarnation: token.clone(),
            kept: status
                .members
                .iter()
                .filter(|m| m.pvc.is_some() && !lost.contains(&m.name))
                .filter(|m| Some(&m.name) != survivor.as_ref())
                .map(|m| m.name.clone())
                .collect(),
            lost: lost.clone(),
            newest_revision: status.newest_revision,
            loss: matches!(source, Source::Backup(_))
                .then(|| status.data_loss.as_ref().map(|d| d.approval.clone()))
                .flatten(),
            source,
        }
    };
    let already = |plan: &Plan| {
        recovery.approved_incarnation.as_deref() == Some(token.as_str())
            && match &plan.source {
                Source::Survivor { name, revision, .. } => {
                    recovery.approved_survivor.as_ref() == Some(name)
                        && recovery.approved_revision == Some(*revision)
                }
                Source::Backup(_) => recovery.approved_loss == plan.loss,
            }
    };
    let decided = |plan: Plan| {
        if already(&plan) {
            Decision::AlreadyApproved(plan)
        } else {
            Decision::Approve(plan)
        }
    };

    if recovery.source == RecoverySource::Backup {
        let Some(backup) = recovery.backup.clone() else {
            return Decision::Nothing {
                why: "spec.recovery.source is Backup but spec.recovery.backup is unset".to_string(),
                next: "set spec.recovery.backup (the destination of the backups, docs/backup.md), then run again".to_string(),
            };
        };
        if let Some(named) = between(message, "approvedIncarnation: ", ",")
            && named != token
        {
            return stale_incarnation(named, &token);
        }
        if status.data_loss.is_none() {
            return Decision::Stale {
                why: "the status does not show the loss yet (status.dataLoss): a backup restore approves one loss, as the operator recorded it".to_string(),
                next: "wait a few seconds for the operator to write status, then run again".to_string(),
            };
        }
        return decided(plan(Source::Backup(Box::new(backup))));
    }

    if let Some(choice) = choice {
        let Some(member) = status.members.iter().find(|m| m.name == choice.survivor) else {
            return Decision::Nothing {
                why: format!("{} is not a member of {name}", choice.survivor),
                next: format!(
                    "choose one of {}",
                    status
                        .members
                        .iter()
                        .map(|m| m.name.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            };
        };
        if lost.contains(&member.name) {
            return Decision::Nothing {
                why: format!(
                    "the data of {} is lost: it cannot be the survivor",
                    member.name
                ),
                next: "choose a member whose volume survived".to_string(),
            };
        }
        let Some(revision) = choice.revision.or(member.revision) else {
            return Decision::Nothing {
                why: format!("no revision of {} is known", member.name),
                next: "pass --revision with the revision it last reported".to_string(),
            };
        };
        return decided(plan(Source::Survivor {
            name: member.name.clone(),
            revision,
            chosen: true,
        }));
    }

    if let Some(asked) = asked_approval(message) {
        if asked.incarnation != token {
            return stale_incarnation(&asked.incarnation, &token);
        }
        return decided(plan(Source::Survivor {
            name: asked.survivor,
            revision: asked.revision,
            chosen: false,
        }));
    }
    if message.contains("cannot be read") {
        return Decision::ChooseSurvivor {
            why: message.to_string(),
            candidates: status
                .members
                .iter()
                .filter(|m| m.pvc.is_some() && !lost.contains(&m.name))
                .map(|m| (m.name.clone(), m.revision))
                .collect(),
        };
    }
    if message.contains("no member kept its data") {
        return Decision::Nothing {
            why: "no member kept its data: there is no survivor to restore from".to_string(),
            next: "restore from a backup: set spec.recovery.source: Backup and spec.recovery.backup (docs/backup.md), then run again".to_string(),
        };
    }
    Decision::Nothing {
        why: format!("the condition asks for no approval yet: {message}"),
        next: format!("wait until it names the survivor and its revision; {follow}"),
    }
}

/// Whether `cluster`, read again, still asks for exactly the restore of
/// `plan`: the same approval, keeping and losing the same.
pub fn same_restore(plan: &Plan, cluster: &EtcdCluster, choice: Option<&Choice>) -> bool {
    match decide(cluster, choice) {
        Decision::Approve(again) => {
            again.recovery_patch() == plan.recovery_patch()
                && again.consequences() == plan.consequences()
        }
        _ => false,
    }
}

fn stale_incarnation(named: &str, token: &str) -> Decision {
    Decision::Stale {
        why: format!(
            "the MajorityDataLost condition asks about incarnation {named}, but the cluster is incarnation {token} now"
        ),
        next: "wait for the operator to look again, then run again".to_string(),
    }
}

/// The approval the condition asks for.
#[derive(Debug)]
struct Asked {
    incarnation: String,
    survivor: String,
    revision: i64,
}

/// "set spec.recovery: {approvedIncarnation: T, approvedSurvivor: S,
/// approvedRevision: N}", as the operator writes it.
fn asked_approval(message: &str) -> Option<Asked> {
    let fields = between(message, "set spec.recovery: {", "}")?;
    Some(Asked {
        incarnation: between(fields, "approvedIncarnation: ", ", ")?.to_string(),
        survivor: between(fields, "approvedSurvivor: ", ", ")?.to_string(),
        revision: fields
            .split("approvedRevision: ")
            .nth(1)?
            .trim()
            .parse()
            .ok()?,
    })
}

/// The members the condition names as lost ("known lost: main-1 (why),
/// main-2 (why); ..."), in status order.
fn lost_members(cluster: &EtcdCluster, message: &str) -> Vec<String> {
    let Some(start) = message.find("known lost: ") else {
        return Vec::new();
    };
    let rest = &message[start..];
    let end = ["; newest survivor", "; survivors ", "; no member kept"]
        .iter()
        .filter_map(|marker| rest.find(marker))
        .min()
        .unwrap_or(rest.len());
    let listed = &rest[..end];
    cluster
        .status
        .iter()
        .flat_map(|s| &s.members)
        .filter(|m| listed.contains(&format!("{} (", m.name)))
        .map(|m| m.name.clone())
        .collect()
}

/// The text between `start` and the next `end` after it.
fn between<'a>(text: &'a str, start: &str, end: &str) -> Option<&'a str> {
    let from = text.find(start)? + start.len();
    let rest = &text[from..];
    Some(&rest[..rest.find(end)?])
}

#[cfg(test)]
mod tests {
    use super::*;

    const LOST: &str = "data of a majority is known lost: main-1 (PVC data-main-1 holds no data), main-2 (PVC data-main-2 holds no data)";

    fn cluster(spec: Value, message: &str, token: &str) -> EtcdCluster {
        serde_json::from_value(json!({
            "apiVersion": "durable-etcd.io/v1alpha1",
            "kind": "EtcdCluster",
            "metadata": { "name": "main", "namespace": "prod", "generation": 3 },
            "spec": spec,
            "status": {
                "clusterToken": token,
                "phase": "MajorityDataLost",
                "newestRevision": 4300,
                "members": [
                    { "name": "main-0", "pvc": "data-main-0", "revision": 4213 },
                    { "name": "main-1", "pvc": "data-main-1" },
                    { "name": "main-2", "pvc": "data-main-2" },
                ],
                "conditions": [{
                    "type": "MajorityDataLost", "status": "True", "reason": "MajorityDataLost",
                    "message": message, "observedGeneration": 3,
                    "lastTransitionTime": "2026-12-01T10:00:00Z",
                }],
            },
        }))
        .expect("a cluster")
    }

    fn survivor_message(token: &str) -> String {
        format!(
            "{LOST}; newest survivor main-0 at revision 4213 (raft index 4400); to restore from it set spec.recovery: {{approvedIncarnation: {token}, approvedSurvivor: main-0, approvedRevision: 4213}}"
        )
    }

    #[test]
    fn a_survivor_is_approved_with_its_incarnation_and_revision() {
        let c = cluster(json!({}), &survivor_message("tok-1"), "tok-1");
        let Decision::Approve(plan) = decide(&c, None) else {
            panic!("{:?}", decide(&c, None));
        };
        assert_eq!(
            plan.recovery_patch(),
            json!({ "approvedIncarnation": "tok-1", "approvedSurvivor": "main-0", "approvedRevision": 4213 })
        );
        assert_eq!(plan.lost, ["main-1", "main-2"]);
        assert!(plan.kept.is_empty());
        let text = plan.consequences().join("\n");
        assert!(text.contains("up to revision 4213"), "{text}");
        assert!(text.contains("seen up to 4300"), "{text}");
        assert!(text.contains("volumes of main-1, main-2"), "{text}");
    }

    #[test]
    fn a_cluster_read_again_asks_for_the_same_restore_only_if_nothing_that_matters_changed() {
        let shown = cluster(json!({}), &survivor_message("tok-1"), "tok-1");
        let Decision::Approve(plan) = decide(&shown, None) else {
            panic!("{:?}", decide(&shown, None));
        };
        // The operator wrote its status again (another resourceVersion),
        // the restore it asks for unchanged.
        let mut rewritten = shown.clone();
        rewritten.metadata.resource_version = Some("99".into());
        assert!(same_restore(&plan, &rewritten, None));
        // A newer write was seen meanwhile: what is lost changed.
        let mut newer = shown.clone();
        if let Some(status) = newer.status.as_mut() {
            status.newest_revision = Some(4400);
        }
        assert!(!same_restore(&plan, &newer, None));
        // Another incarnation: another restore.
        let other = cluster(json!({}), &survivor_message("tok-2"), "tok-2");
        assert!(!same_restore(&plan, &other, None));
    }

    #[test]
    fn an_approval_already_set_is_not_written_twice_but_a_partial_one_is_completed() {
        let message = survivor_message("tok-1");
        let full = cluster(
            json!({ "recovery": { "approvedIncarnation": "tok-1", "approvedSurvivor": "main-0", "approvedRevision": 4213 } }),
            &message,
            "tok-1",
        );
        assert!(matches!(decide(&full, None), Decision::AlreadyApproved(_)));
        let partial = cluster(
            json!({ "recovery": { "approvedIncarnation": "tok-1" } }),
            &message,
            "tok-1",
        );
        assert!(matches!(decide(&partial, None), Decision::Approve(_)));
    }

    #[test]
    fn a_backup_source_approves_the_incarnation_and_the_loss_the_status_shows() {
        let message = format!(
            "{LOST}; newest survivor main-0 at revision 4213 (raft index 4400); the backups reach revision 4000; survivor main-0 holds revision 4213, and the backups reach revision 4000: a backup restore would lose the writes between; restore from the survivor (spec.recovery.source: Survivor) or to restore from the backups of spec.recovery.backup anyway, set spec.recovery: {{approvedIncarnation: tok-1, approvedLoss: main-1,main-2@2026-12-01T10:00:00Z}}"
        );
        let mut c = cluster(
            json!({ "recovery": { "source": "Backup", "backup": { "destination": { "persistentVolumeClaim": { "claimName": "b" } } },
                                  "approvedSurvivor": "main-0", "approvedRevision": 10, "approvedIncarnation": "old" } }),
            &message,
            "tok-1",
        );
        // Before the operator recorded the loss, nothing is approved.
        assert!(
            matches!(decide(&c, None), Decision::Stale { .. }),
            "{:?}",
            decide(&c, None)
        );
        if let Some(status) = c.status.as_mut() {
            status.data_loss = serde_json::from_value(json!({
                "lostMembers": ["main-1", "main-2"],
                "since": "2026-12-01T10:00:00Z",
                "approval": "main-1,main-2@2026-12-01T10:00:00Z",
                "survivors": [{ "name": "main-0", "revision": 4213, "readable": true }],
                "backupRevision": 4000,
            }))
            .expect("a data loss");
        }
        let Decision::Approve(plan) = decide(&c, None) else {
            panic!("{:?}", decide(&c, None));
        };
        assert!(matches!(plan.source, Source::Backup(_)));
        assert_eq!(
            plan.recovery_patch(),
            json!({ "approvedIncarnation": "tok-1", "approvedLoss": "main-1,main-2@2026-12-01T10:00:00Z",
                    "approvedSurvivor": null, "approvedRevision": null })
        );
        assert_eq!(plan.kept, ["main-0"]);
    }

    #[test]
    fn nothing_to_approve_on_a_healthy_cluster_or_during_a_restore() {
        let mut c = cluster(json!({}), "no loss of data of a majority is known", "tok-1");
        if let Some(status) = c.status.as_mut() {
            status.conditions[0].status = "False".into();
            status.phase = Some(etcd_operator_api::api::Phase::Running);
        }
        let Decision::Nothing { why, .. } = decide(&c, None) else {
            panic!("{:?}", decide(&c, None));
        };
        assert!(why.contains("no majority's data is known lost"), "{why}");

        let mut restoring = cluster(json!({}), &survivor_message("tok-1"), "tok-1");
        if let Some(status) = restoring.status.as_mut() {
            status.restore = Some(
                serde_json::from_value(json!({
                    "incarnation": "tok-2", "fromIncarnation": "tok-1", "survivor": "main-0",
                    "survivorOrdinal": 0, "step": "restoring", "started": "2026-12-01T10:00:00Z",
                }))
                .expect("restore"),
            );
        }
        assert!(matches!(decide(&restoring, None), Decision::Nothing { .. }));
    }

    #[test]
    fn no_survivor_points_to_a_backup_and_a_policy_needs_no_approval() {
        let none = cluster(
            json!({}),
            &format!(
                "{LOST}; no member kept its data; no survivor to restore from: use a backup (spec.recovery.source: Backup)"
            ),
            "tok-1",
        );
        let Decision::Nothing { next, .. } = decide(&none, None) else {
            panic!("{:?}", decide(&none, None));
        };
        assert!(next.contains("spec.recovery.source: Backup"), "{next}");
        let policy = cluster(
            json!({ "recovery": { "policy": "NewestSurvivor" } }),
            &survivor_message("tok-1"),
            "tok-1",
        );
        assert!(matches!(decide(&policy, None), Decision::Nothing { .. }));
    }

    #[test]
    fn a_stale_incarnation_or_generation_approves_nothing() {
        let c = cluster(json!({}), &survivor_message("tok-0"), "tok-1");
        let Decision::Stale { why, .. } = decide(&c, None) else {
            panic!("{:?}", decide(&c, None));
        };
        assert!(why.contains("tok-0") && why.contains("tok-1"), "{why}");
        let mut newer_spec = cluster(json!({}), &survivor_message("tok-1"), "tok-1");
        newer_spec.metadata.generation = Some(4);
        assert!(matches!(decide(&newer_spec, None), Decision::Stale { .. }));
    }

    #[test]
    fn unreadable_survivors_ask_for_a_choice_which_a_person_can_make() {
        let message = format!(
            "{LOST}; survivors main-0 keep their volumes but cannot be read (an etcd restarted without quorum does not answer), so the newest data is not known: waiting for them (main-0 last seen at revision 4213); a person may choose a survivor explicitly, ... with spec.recovery: {{approvedIncarnation: tok-1, approvedSurvivor: <member>, approvedRevision: <revision>}}; the other survivors' volumes are kept"
        );
        let c = cluster(json!({}), &message, "tok-1");
        let Decision::ChooseSurvivor { candidates, .. } = decide(&c, None) else {
            panic!("{:?}", decide(&c, None));
        };
        assert_eq!(candidates, [("main-0".to_string(), Some(4213))]);
        let choice = Choice {
            survivor: "main-0".into(),
            revision: None,
        };
        let Decision::Approve(plan) = decide(&c, Some(&choice)) else {
            panic!("{:?}", decide(&c, Some(&choice)));
        };
        assert_eq!(plan.recovery_patch()["approvedRevision"], 4213);
        let lost = Choice {
            survivor: "main-1".into(),
            revision: Some(5),
        };
        assert!(matches!(decide(&c, Some(&lost)), Decision::Nothing { .. }));
    }
}
