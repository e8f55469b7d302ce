//! A campaign's report: the seed and the cluster, every step with its
//! recovery time, the operations checked and every finding. Written as
//! JSON (`report.json`, the whole record) and as Markdown (the summary
//! quoted in `docs/reliability.md`).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::schedule::Step;

/// Everything a campaign did and found.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Report {
    /// The seed that names the schedule.
    pub seed: u64,
    /// When it started (UTC, RFC 3339).
    pub started_at: String,
    /// How long it took, in seconds.
    pub took_seconds: u64,
    /// The cluster it ran against.
    pub cluster: ClusterShape,
    /// The steps planned.
    pub planned_steps: usize,
    /// Whether the time limit ended the campaign before its last step.
    #[serde(default)]
    pub stopped_by_time_limit: bool,
    /// Every step run, in order.
    pub steps: Vec<StepRecord>,
    /// What the clients did and what the checks read.
    pub operations: OperationsSummary,
    /// Every violation found (none: the campaign passed).
    pub findings: Vec<Finding>,
    /// Load average (1 minute) at the start and at the end.
    pub load_average: (f64, f64),
}

/// The cluster a campaign ran against.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ClusterShape {
    /// Voting members.
    pub members: usize,
    /// The storage class of its volumes.
    pub storage_class: String,
    /// The etcd version the members run.
    pub etcd_version: String,
}

/// One step as it ran.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct StepRecord {
    /// The step as planned.
    pub step: Step,
    /// Each fault as injected (targets resolved), or why it could not be.
    pub notes: Vec<String>,
    /// Whether its first fault was injected.
    pub injected: bool,
    /// From the last heal to a cluster serving from every member, in
    /// milliseconds (`None`: not within the budget).
    pub recovery_ms: Option<u64>,
    /// How the operator's work started before the fault ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub operation: Option<OperationRecord>,
}

/// The end of the work a step's fault hit (see [`crate::operations`]).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct OperationRecord {
    /// `rollout` or `backup`.
    pub kind: String,
    /// `completed`, `succeeded`, `failed`, `unfinished` or `not-started`.
    pub result: String,
    /// What happened, in a line.
    pub note: String,
}

/// What the clients did and what was checked.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct OperationsSummary {
    /// Operations in the history checked (final reads included).
    pub checked: usize,
    /// Acknowledged writes (puts, compare-and-swaps, deletes).
    pub acknowledged_writes: usize,
    /// Acknowledged reads.
    pub acknowledged_reads: usize,
    /// Writes whose outcome is unknown (timeouts, broken connections).
    pub indeterminate_writes: u64,
    /// Reads that failed (not in the history).
    pub failed_reads: u64,
    /// Keys written.
    pub keys: usize,
    /// Watch events received, over how many streams.
    pub watch_events: usize,
    /// Watch streams (a new one after each break).
    pub watch_streams: usize,
    /// The linearizability check's time, in milliseconds.
    pub check_ms: u64,
}

/// A violation of what the campaign checks.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Finding {
    /// Which check: `not-linearizable`, `check-unknown`, `watch`,
    /// `cluster-id-changed`, `member-id-changed`, `member-twice`,
    /// `hashkv-disagrees`, `not-recovered`.
    pub check: String,
    /// The step after which it was seen (0: at the end).
    pub step: usize,
    /// What was seen, with the smallest history that shows it where there
    /// is one.
    pub detail: String,
}

impl Report {
    /// Recovery times by fault kind (a step counts under its first fault's
    /// kind, and under `overlapping` too when it has a second fault).
    pub fn recovery_by_kind(&self) -> BTreeMap<String, Vec<Duration>> {
        let mut by_kind: BTreeMap<String, Vec<Duration>> = BTreeMap::new();
        for record in self.steps.iter().filter(|r| r.injected) {
            let Some(ms) = record.recovery_ms else {
                continue;
            };
            let took = Duration::from_millis(ms);
            by_kind
                .entry(record.step.fault.kind().to_owned())
                .or_default()
                .push(took);
            if record.step.overlapping.is_some() {
                by_kind
                    .entry("overlapping".to_owned())
                    .or_default()
                    .push(took);
            }
        }
        by_kind
    }

    /// The Markdown summary.
    pub fn markdown(&self) -> String {
        let mut out = String::new();
        let injected = self.steps.iter().filter(|r| r.injected).count();
        let faults: usize = self
            .steps
            .iter()
            .filter(|r| r.injected)
            .map(|r| {
                1 + usize::from(
                    r.step.overlapping.is_some()
                        && r.notes.iter().any(|n| n.starts_with("overlapping: ")),
                )
            })
            .sum();
        let _ = writeln!(
            out,
            "Seed {} · {} steps run of {} planned{} ({} faults injected) · {} members on `{}` (etcd {}) · started {} · {} min · load average {:.2} → {:.2}\n",
            self.seed,
            injected,
            self.planned_steps,
            if self.stopped_by_time_limit {
                ", stopped by its time limit"
            } else {
                ""
            },
            faults,
            self.cluster.members,
            self.cluster.storage_class,
            self.cluster.etcd_version,
            self.started_at,
            self.took_seconds / 60,
            self.load_average.0,
            self.load_average.1,
        );
        let _ = writeln!(
            out,
            "| fault | steps | recovery median | recovery max |\n| --- | ---: | ---: | ---: |"
        );
        let by_kind = self.recovery_by_kind();
        let mut kinds: Vec<&str> = crate::fault::Fault::KINDS.to_vec();
        kinds.push("overlapping");
        for kind in kinds {
            let steps = if kind == "overlapping" {
                self.steps
                    .iter()
                    .filter(|r| r.injected && r.step.overlapping.is_some())
                    .count()
            } else {
                self.steps
                    .iter()
                    .filter(|r| r.injected && r.step.fault.kind() == kind)
                    .count()
            };
            if steps == 0 {
                continue;
            }
            let times = by_kind.get(kind).cloned().unwrap_or_default();
            let _ = writeln!(
                out,
                "| {kind} | {steps} | {} | {} |",
                seconds(median(&times)),
                seconds(times.iter().max().copied())
            );
        }
        let work = self.operation_summary();
        if !work.is_empty() {
            let _ = writeln!(out, "\nOperator work hit by the step's faults: {work}.");
        }
        let o = &self.operations;
        let _ = writeln!(
            out,
            "\nOperations checked for linearizability: {} ({} acknowledged writes, {} reads, {} writes of unknown outcome; {} reads failed and are not counted) over {} keys, in {} ms. Watch: {} events over {} streams.\n",
            o.checked,
            o.acknowledged_writes,
            o.acknowledged_reads,
            o.indeterminate_writes,
            o.failed_reads,
            o.keys,
            o.check_ms,
            o.watch_events,
            o.watch_streams,
        );
        if self.findings.is_empty() {
            let _ = writeln!(
                out,
                "Findings: none. The history is linearizable (final reads included: every acknowledged write is there), the watch streams missed no acknowledged change and never went backwards, the members' `hashkv` agree, the cluster ID never changed, member IDs changed only for wiped members, no member ever ran as two etcd processes, and every step recovered within its budget{}.",
                if work.is_empty() {
                    ""
                } else {
                    "; every rollout a fault hit reached every member, and every backup ended, a successful one covering every write acknowledged before it was asked for"
                }
            );
        } else {
            let _ = writeln!(out, "Findings: {}.\n", self.findings.len());
            for finding in &self.findings {
                let _ = writeln!(
                    out,
                    "- **{}** (after step {}):\n\n```text\n{}\n```\n",
                    finding.check, finding.step, finding.detail
                );
            }
        }
        out
    }
}

impl Report {
    /// `kind: n result, …` per kind of operator work the faults hit.
    pub fn operation_summary(&self) -> String {
        let mut counts: BTreeMap<(&str, &str), usize> = BTreeMap::new();
        for record in self.steps.iter().filter_map(|r| r.operation.as_ref()) {
            *counts
                .entry((record.kind.as_str(), record.result.as_str()))
                .or_default() += 1;
        }
        let mut kinds: BTreeMap<&str, Vec<String>> = BTreeMap::new();
        for ((kind, result), n) in counts {
            kinds.entry(kind).or_default().push(format!("{n} {result}"));
        }
        kinds
            .into_iter()
            .map(|(kind, results)| format!("{kind}s: {}", results.join(", ")))
            .collect::<Vec<_>>()
            .join("; ")
    }
}

fn median(times: &[Duration]) -> Option<Duration> {
    let mut sorted = times.to_vec();
    sorted.sort_unstable();
    let middle = sorted.len() / 2;
    match sorted.len() {
        0 => None,
        n if n % 2 == 1 => Some(sorted[middle]),
        _ => Some((sorted[middle - 1] + sorted[middle]) / 2),
    }
}

fn seconds(time: Option<Duration>) -> String {
    time.map_or_else(|| "–".to_owned(), |t| format!("{:.1} s", t.as_secs_f64()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fault::{Fault, Target};

    fn record(fault: Fault, recovery_ms: Option<u64>) -> StepRecord {
        StepRecord {
            step: Step {
                number: 1,
                fault,
                overlapping: None,
                during: None,
            },
            notes: vec![],
            injected: true,
            recovery_ms,
            operation: None,
        }
    }

    fn report(steps: Vec<StepRecord>, findings: Vec<Finding>) -> Report {
        Report {
            seed: 5,
            started_at: "2026-12-03T00:00:00Z".into(),
            took_seconds: 120,
            cluster: ClusterShape {
                members: 3,
                storage_class: "lab-network".into(),
                etcd_version: "3.6.0".into(),
            },
            planned_steps: steps.len(),
            stopped_by_time_limit: false,
            steps,
            operations: OperationsSummary::default(),
            findings,
            load_average: (1.0, 2.0),
        }
    }

    #[test]
    fn recovery_is_summed_up_by_kind() {
        let kill = Fault::PodKill {
            target: Target::Member(0),
        };
        let r = report(
            vec![
                record(kill.clone(), Some(1000)),
                record(kill.clone(), Some(3000)),
                record(kill, Some(2000)),
                record(Fault::OperatorKill { down_seconds: 1 }, None),
            ],
            vec![],
        );
        let text = r.markdown();
        assert!(text.contains("| pod-kill | 3 | 2.0 s | 3.0 s |"), "{text}");
        assert!(text.contains("| operator-kill | 1 | – | – |"), "{text}");
        assert_eq!(
            median(&[Duration::from_secs(1), Duration::from_secs(4)]),
            Some(Duration::from_millis(2500))
        );
        assert!(text.contains("Findings: none."), "{text}");
    }

    #[test]
    fn findings_are_listed() {
        let r = report(
            vec![],
            vec![Finding {
                check: "not-linearizable".into(),
                step: 0,
                detail: "key \"k\": ...".into(),
            }],
        );
        let text = r.markdown();
        assert!(text.contains("Findings: 1."), "{text}");
        assert!(text.contains("**not-linearizable**"), "{text}");
        assert!(!text.contains("Findings: none"), "{text}");
    }
}

/// Where the summary goes in a Markdown file.
pub const SUMMARY_BEGIN: &str = "<!-- chaos-summary:begin -->";
/// Where it ends.
pub const SUMMARY_END: &str = "<!-- chaos-summary:end -->";

/// `text` with its section between [`SUMMARY_BEGIN`] and [`SUMMARY_END`]
/// replaced by `summary` (`None`: no such section).
pub fn replace_summary(text: &str, summary: &str) -> Option<String> {
    let begin = text.find(SUMMARY_BEGIN)? + SUMMARY_BEGIN.len();
    let end = begin + text[begin..].find(SUMMARY_END)?;
    Some(format!(
        "{}\n{}\n{}",
        &text[..begin],
        summary.trim_end(),
        &text[end..]
    ))
}

#[cfg(test)]
mod summary_tests {
    use super::*;

    #[test]
    fn the_section_is_replaced_and_the_rest_kept() {
        let text = format!("# R\n\nbefore\n{SUMMARY_BEGIN}\nold\n{SUMMARY_END}\nafter\n");
        let updated = replace_summary(&text, "new\n").expect("markers");
        assert_eq!(
            updated,
            format!("# R\n\nbefore\n{SUMMARY_BEGIN}\nnew\n{SUMMARY_END}\nafter\n")
        );
        assert_eq!(replace_summary("no markers", "x"), None);
    }
}
