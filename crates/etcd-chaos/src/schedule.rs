//! The campaign's schedule: which faults, in which order, how long, and
//! which overlap, drawn from a seed. Pure: a seed and the cluster's size
//! name one schedule, so that any finding reproduces from its seed.

use serde::{Deserialize, Serialize};

use crate::fault::{Cut, Fault, Target};
use crate::seed::SeededRng;

/// One step of a campaign: a fault, and possibly a second one injected
/// while the first lasts.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Step {
    /// 1-based position in the campaign.
    pub number: usize,
    /// The fault.
    pub fault: Fault,
    /// A fault injected `overlap_after_ms` into the first one's duration.
    pub overlapping: Option<Overlap>,
    /// Work the operator is given just before the fault: the fault hits
    /// it while it runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub during: Option<Operation>,
}

/// Work the operator is given just before a step's fault (see
/// [`crate::operations`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Operation {
    /// A change of `spec.etcd.snapshotCount`, which restarts every member,
    /// one at a time.
    Rollout,
    /// A full backup to a claim.
    Backup,
}

impl Operation {
    /// Its name in reports.
    pub fn kind(self) -> &'static str {
        match self {
            Operation::Rollout => "rollout",
            Operation::Backup => "backup",
        }
    }
}

/// A second fault injected while a step's first one lasts.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Overlap {
    /// The fault.
    pub fault: Fault,
    /// When, after the first fault was injected.
    pub after_ms: u64,
}

impl Step {
    /// Every fault of the step.
    pub fn faults(&self) -> impl Iterator<Item = &Fault> {
        std::iter::once(&self.fault).chain(self.overlapping.as_ref().map(|o| &o.fault))
    }
}

/// Weights of the kinds drawn (out of their sum): frequent faults often,
/// quorum-losing and data-destroying ones regularly.
const WEIGHTS: [(&str, u64); 14] = [
    ("pod-kill", 12),
    ("leader-kill", 10),
    ("pod-delete", 10),
    ("node-reboot", 9),
    ("node-freeze", 8),
    ("partition-peers", 9),
    ("partition-apiserver", 5),
    ("partition-all", 7),
    ("majority-nodes-down", 6),
    ("majority-partition", 5),
    ("volume-wipe", 6),
    ("volume-full", 5),
    ("operator-kill", 8),
    ("apiserver-outage", 5),
];

/// Percentage of steps with a lasting fault that get an overlapping one.
const OVERLAP_PERCENT: u64 = 25;

/// Percentages of steps whose fault hits a rollout, and a backup.
const ROLLOUT_PERCENT: u64 = 6;
const BACKUP_PERCENT: u64 = 8;

/// The operations are drawn from a stream of their own, so that adding
/// them left every seed's faults as they were.
const OPERATIONS_STREAM: u64 = 0x6f70_6572_6174_696f;

/// The schedule of `faults` steps for a cluster of `members` members
/// (at least 3), from `seed`.
pub fn plan(seed: u64, faults: usize, members: usize) -> Vec<Step> {
    let mut rng = SeededRng::new(seed);
    let mut operations = SeededRng::new(seed ^ OPERATIONS_STREAM);
    (1..=faults)
        .map(|number| {
            let fault = draw(&mut rng, members);
            let overlapping =
                (fault.lasts_seconds() >= 4 && rng.percent(OVERLAP_PERCENT)).then(|| Overlap {
                    fault: draw_overlap(&mut rng, members, &fault),
                    after_ms: rng.between(500, fault.lasts_seconds() * 1000 / 2),
                });
            let draw = operations.below(100);
            let during = if draw < ROLLOUT_PERCENT {
                Some(Operation::Rollout)
            } else if draw < ROLLOUT_PERCENT + BACKUP_PERCENT {
                Some(Operation::Backup)
            } else {
                None
            };
            Step {
                number,
                fault,
                overlapping,
                during,
            }
        })
        .collect()
}

fn draw(rng: &mut SeededRng, members: usize) -> Fault {
    let total: u64 = WEIGHTS.iter().map(|(_, w)| w).sum();
    let mut pick = rng.below(total);
    let mut kind = WEIGHTS[0].0;
    for (name, weight) in WEIGHTS {
        if pick < weight {
            kind = name;
            break;
        }
        pick -= weight;
    }
    let member = Target::Member(rng.index(members));
    match kind {
        "leader-kill" => Fault::PodKill {
            target: Target::Leader,
        },
        "pod-delete" => Fault::PodDelete { target: member },
        "node-reboot" => Fault::NodeReboot {
            target: member,
            down_seconds: rng.between(2, 10),
        },
        "node-freeze" => Fault::NodeFreeze {
            target: member,
            seconds: rng.between(3, 15),
        },
        "partition-peers" | "partition-apiserver" | "partition-all" => Fault::Partition {
            target: if rng.percent(30) {
                Target::Leader
            } else {
                member
            },
            cut: match kind {
                "partition-peers" => Cut::Peers,
                "partition-apiserver" => Cut::ApiServer,
                _ => Cut::All,
            },
            seconds: rng.between(4, 20),
        },
        "majority-nodes-down" => Fault::MajorityNodesDown {
            members: majority(rng, members),
            seconds: rng.between(4, 18),
        },
        "majority-partition" => Fault::MajorityPartition {
            members: majority(rng, members),
            seconds: rng.between(4, 18),
        },
        "volume-wipe" => Fault::VolumeWipe {
            member: rng.index(members),
        },
        "volume-full" => Fault::VolumeFull {
            member: rng.index(members),
            seconds: rng.between(5, 20),
        },
        "operator-kill" => Fault::OperatorKill {
            down_seconds: rng.between(1, 10),
        },
        "apiserver-outage" => Fault::ApiServerOutage {
            seconds: rng.between(4, 15),
        },
        _ => Fault::PodKill { target: member },
    }
}

/// A short fault on another member than the first fault's (or on the
/// operator), to overlap it.
fn draw_overlap(rng: &mut SeededRng, members: usize, first: &Fault) -> Fault {
    let hit = match first {
        Fault::PodKill {
            target: Target::Member(n),
        }
        | Fault::PodDelete {
            target: Target::Member(n),
        }
        | Fault::NodeReboot {
            target: Target::Member(n),
            ..
        }
        | Fault::NodeFreeze {
            target: Target::Member(n),
            ..
        }
        | Fault::Partition {
            target: Target::Member(n),
            ..
        } => Some(*n),
        _ => None,
    };
    let other = match hit {
        Some(n) => (n + 1 + rng.index(members - 1)) % members,
        None => rng.index(members),
    };
    match rng.below(3) {
        0 => Fault::PodKill {
            target: Target::Member(other),
        },
        1 => Fault::PodDelete {
            target: Target::Member(other),
        },
        _ => Fault::OperatorKill {
            down_seconds: rng.between(1, 5),
        },
    }
}

/// A majority of `members` distinct members, in increasing order.
fn majority(rng: &mut SeededRng, members: usize) -> Vec<usize> {
    let mut all: Vec<usize> = (0..members).collect();
    // Fisher–Yates, then the first members / 2 + 1.
    for i in (1..all.len()).rev() {
        let j = rng.index(i + 1);
        all.swap(i, j);
    }
    let mut chosen: Vec<usize> = all.into_iter().take(members / 2 + 1).collect();
    chosen.sort_unstable();
    chosen
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use proptest::prelude::*;

    use super::*;

    #[test]
    fn a_seed_names_one_schedule() {
        assert_eq!(plan(11, 50, 3), plan(11, 50, 3));
        assert_ne!(plan(11, 50, 3), plan(12, 50, 3));
    }

    #[test]
    fn seed_98_names_the_short_campaign_of_the_test_command() {
        // `crates/etcd-chaos/tests/chaos_short.rs` and docs/reliability.md
        // describe these steps.
        let steps = plan(98, 14, 3);
        let kinds: Vec<&str> = steps.iter().map(|s| s.fault.kind()).collect();
        assert_eq!(
            kinds,
            [
                "operator-kill",
                "partition-apiserver",
                "majority-nodes-down",
                "volume-wipe",
                "majority-partition",
                "majority-partition",
                "pod-kill",
                "majority-partition",
                "partition-peers",
                "volume-full",
                "node-freeze",
                "partition-peers",
                "volume-full",
                "pod-delete",
            ]
        );
        let during: Vec<(usize, Operation)> = steps
            .iter()
            .filter_map(|s| s.during.map(|o| (s.number, o)))
            .collect();
        assert_eq!(
            during,
            [
                (3, Operation::Backup),
                (5, Operation::Rollout),
                (12, Operation::Rollout),
                (14, Operation::Backup),
            ]
        );
    }

    #[test]
    fn a_long_campaign_draws_every_kind_and_overlaps() {
        let steps = plan(1, 500, 3);
        let kinds: BTreeSet<&str> = steps.iter().map(|s| s.fault.kind()).collect();
        for kind in Fault::KINDS {
            assert!(kinds.contains(kind), "{kind} never drawn in 500 steps");
        }
        let overlapping = steps.iter().filter(|s| s.overlapping.is_some()).count();
        assert!(overlapping > 20, "{overlapping} overlapping steps");
    }

    proptest! {
        #[test]
        fn every_step_is_well_formed(seed in any::<u64>(), members in prop::sample::select(vec![3usize, 5])) {
            for (i, step) in plan(seed, 40, members).iter().enumerate() {
                prop_assert_eq!(step.number, i + 1);
                for fault in step.faults() {
                    match fault {
                        Fault::MajorityNodesDown { members: m, .. }
                        | Fault::MajorityPartition { members: m, .. } => {
                            prop_assert_eq!(m.len(), members / 2 + 1);
                            prop_assert!(m.windows(2).all(|w| w[0] < w[1]));
                            prop_assert!(m.iter().all(|n| *n < members));
                        }
                        Fault::VolumeWipe { member } => prop_assert!(*member < members),
                        _ => {}
                    }
                }
                if let Some(overlap) = &step.overlapping {
                    // Only short, recoverable faults overlap, never a wipe,
                    // and within the first fault's duration.
                    prop_assert!(overlap.fault.wipes().is_none());
                    prop_assert!(overlap.after_ms < step.fault.lasts_seconds() * 1000);
                    if let (
                        Fault::NodeFreeze { target: Target::Member(a), .. }
                        | Fault::Partition { target: Target::Member(a), .. }
                        | Fault::NodeReboot { target: Target::Member(a), .. },
                        Fault::PodKill { target: Target::Member(b) }
                        | Fault::PodDelete { target: Target::Member(b) },
                    ) = (&step.fault, &overlap.fault)
                    {
                        prop_assert_ne!(a, b, "the overlap hits another member");
                    }
                }
            }
        }
    }
}
