//! Work the operator does while a fault hits: a rolling change of every
//! member, or a full backup. Started just before a step's fault, finished
//! after the step has recovered, and checked:
//!
//! - a rollout must reach every member (each Pod on the new template, the
//!   cluster Available) — the campaign's identity check after the step
//!   already says no member changed its ID on the way;
//! - a backup must end (Succeeded, or Failed with its reason), and one that
//!   succeeded must report a revision at least that of a write acknowledged
//!   just before it was asked for: its snapshot covers every write
//!   acknowledged before it started.

use std::time::Duration;

use etcd_operator::api::{BackupPhase, EtcdBackup, EtcdCluster};
use kube::Api;
use kube::api::{Patch, PatchParams};
use serde_json::json;
use test_kit::TestResult;
use test_kit::conditions::condition_true;
use test_kit::e2e::Harness;

use crate::report::Finding;
use crate::schedule::Operation;

/// The claim the campaign's backups go to.
pub const BACKUP_CLAIM: &str = "chaos-backups";

/// A key outside the clients' prefix, written just before a backup is
/// asked for.
const BACKUP_MARKER: &str = "chaos-backup-marker";

/// The two `snapshotCount` values rollouts alternate between.
const SNAPSHOT_COUNTS: [i64; 2] = [20_000, 20_001];

/// An operation under way.
#[derive(Clone, Debug)]
pub enum Started {
    /// A rollout to the spec of `generation`.
    Rollout { generation: i64 },
    /// Backup `name`, asked for after a write acknowledged at `marker`.
    Backup { name: String, marker: i64 },
}

/// How an operation ended: a line for the report, and a finding if it
/// broke its promise.
#[derive(Clone, Debug)]
pub struct Outcome {
    /// `completed` (a rollout), `succeeded` or `failed` (a backup), or
    /// `unfinished`.
    pub result: &'static str,
    pub note: String,
    pub finding: Option<Finding>,
}

/// Starts `operation` for step `step` on cluster `cluster`.
pub async fn start(
    h: &Harness,
    cluster: &str,
    step: usize,
    operation: Operation,
) -> TestResult<Started> {
    match operation {
        Operation::Rollout => {
            let clusters: Api<EtcdCluster> = Api::namespaced(h.client.clone(), &h.namespace);
            let before = clusters.get(cluster).await?;
            // The value it does not have now: every rollout changes the spec.
            let count = if before.spec.etcd.snapshot_count == SNAPSHOT_COUNTS[0] {
                SNAPSHOT_COUNTS[1]
            } else {
                SNAPSHOT_COUNTS[0]
            };
            let patched = clusters
                .patch(
                    cluster,
                    &PatchParams::default(),
                    &Patch::Merge(&json!({ "spec": { "etcd": { "snapshotCount": count } } })),
                )
                .await?;
            let generation = patched.metadata.generation.unwrap_or_default();
            if generation <= before.metadata.generation.unwrap_or_default() {
                return Err(format!(
                    "the patch of snapshotCount to {count} left generation {generation}: no rollout"
                )
                .into());
            }
            Ok(Started::Rollout { generation })
        }
        Operation::Backup => {
            let mut etcd = h.etcd().await?;
            let marker = etcd
                .put(BACKUP_MARKER, step.to_string(), None)
                .await?
                .header()
                .map_or(0, |header| header.revision());
            let name = format!("{cluster}-step-{step}");
            h.create_backup_to_claim(&name, cluster, BACKUP_CLAIM, Some(&format!("step-{step}")))
                .await?;
            Ok(Started::Backup { name, marker })
        }
    }
}

/// Waits, at most `budget`, for `started` to end on cluster `cluster` of
/// `members` members, and checks what it promised.
pub async fn finish(
    h: &Harness,
    cluster: &str,
    members: usize,
    step: usize,
    started: &Started,
    budget: Duration,
) -> Outcome {
    let deadline = tokio::time::Instant::now() + budget;
    loop {
        let last = match observe(h, cluster, members, step, started).await {
            Ok(State::Done(outcome)) => return outcome,
            Ok(State::Going(now)) => now,
            Err(error) => format!("not observed: {error}"),
        };
        if tokio::time::Instant::now() > deadline {
            return Outcome {
                result: "unfinished",
                note: format!("did not end within {} s", budget.as_secs()),
                finding: Some(Finding {
                    check: "operation-unfinished".into(),
                    step,
                    detail: format!(
                        "{} of step {step} had not ended {} s after the step recovered: {last}",
                        describe(started),
                        budget.as_secs()
                    ),
                }),
            };
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

enum State {
    Done(Outcome),
    Going(String),
}

fn describe(started: &Started) -> String {
    match started {
        Started::Rollout { generation } => format!("the rollout to generation {generation}"),
        Started::Backup { name, .. } => format!("backup {name}"),
    }
}

async fn observe(
    h: &Harness,
    cluster: &str,
    members: usize,
    step: usize,
    started: &Started,
) -> TestResult<State> {
    match started {
        Started::Rollout { generation } => {
            let status = h.status(cluster).await?;
            let members = i32::try_from(members)?;
            let done = status.observed_generation >= Some(*generation)
                && status.updated_members == members
                && status.ready_members == members
                && condition_true(&status, "Available");
            Ok(if done {
                State::Done(Outcome {
                    result: "completed",
                    note: format!("rollout to generation {generation}: every member updated"),
                    finding: None,
                })
            } else {
                State::Going(format!(
                    "observed generation {:?}, {} of {members} members updated, {} ready",
                    status.observed_generation, status.updated_members, status.ready_members
                ))
            })
        }
        Started::Backup { name, marker } => {
            let backups: Api<EtcdBackup> = Api::namespaced(h.client.clone(), &h.namespace);
            let status = backups.get(name).await?.status.unwrap_or_default();
            Ok(match status.phase {
                Some(BackupPhase::Succeeded) => {
                    State::Done(backup_succeeded(name, *marker, status.revision, step))
                }
                Some(BackupPhase::Failed) => State::Done(Outcome {
                    result: "failed",
                    note: format!("backup {name} failed: {:?}", status.error),
                    finding: None,
                }),
                phase => State::Going(format!("phase {phase:?}")),
            })
        }
    }
}

/// The check of a backup that succeeded: its revision covers the marker
/// written just before it was asked for.
pub fn backup_succeeded(name: &str, marker: i64, revision: Option<i64>, step: usize) -> Outcome {
    let revision = revision.unwrap_or_default();
    if revision >= marker {
        Outcome {
            result: "succeeded",
            note: format!("backup {name} succeeded at revision {revision} (marker {marker})"),
            finding: None,
        }
    } else {
        Outcome {
            result: "succeeded",
            note: format!("backup {name} succeeded at revision {revision}, below {marker}"),
            finding: Some(Finding {
                check: "backup-revision".into(),
                step,
                detail: format!(
                    "backup {name} reports revision {revision}, below the revision {marker} of a write acknowledged before it was asked for: it may not hold that write"
                ),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_backup_below_a_write_acknowledged_before_it_is_a_finding() {
        let outcome = backup_succeeded("chaos-step-7", 120, Some(119), 7);
        let finding = outcome.finding.expect("a finding");
        assert_eq!(finding.check, "backup-revision");
        assert_eq!(finding.step, 7);
        assert!(
            backup_succeeded("chaos-step-7", 120, Some(120), 7)
                .finding
                .is_none()
        );
        assert!(
            backup_succeeded("chaos-step-7", 120, None, 7)
                .finding
                .is_some()
        );
    }
}
