//! The checks run on what a campaign recorded: the history for
//! linearizability (final reads included, so every acknowledged write
//! must be there), the watch streams against the acknowledged changes, the
//! members' `hashkv` at one revision, and the cluster's identity.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use etcd_client::ConnectOptions;
use linearizability::{
    Call, History, Limits, Operation, Output, Verdict, WatchStream, check, check_watch_stream,
};
use test_kit::e2e::{Harness, Identity};

use crate::report::Finding;

/// The outcome of the history check.
pub struct HistoryCheck {
    /// What was found (nothing: linearizable).
    pub findings: Vec<Finding>,
    /// Operations checked.
    pub checked: usize,
    /// How long the check took.
    pub took: Duration,
}

/// Checks `operations` with a final read of every key appended: `finals`
/// (key -> value, absent keys left out) read between `read_from` and
/// `read_to`, after every client had stopped.
pub fn check_history(
    mut operations: Vec<Operation>,
    finals: &BTreeMap<String, String>,
    read_from: u64,
    read_to: u64,
) -> HistoryCheck {
    let keys: BTreeSet<String> = operations.iter().map(|o| o.key().to_owned()).collect();
    for key in keys {
        let value = finals.get(&key).cloned();
        operations.push(Operation::returned(
            u64::MAX,
            Call::get(key),
            read_from,
            read_to,
            Output::Read(value),
        ));
    }
    let checked = operations.len();
    let started = Instant::now();
    let findings = match History::new(operations) {
        Err(error) => vec![Finding {
            check: "history-invalid".into(),
            step: 0,
            detail: error.to_string(),
        }],
        Ok(history) => match check(&history, &Limits::default()) {
            Verdict::Linearizable => Vec::new(),
            Verdict::NotLinearizable(anomaly) => vec![Finding {
                check: "not-linearizable".into(),
                step: 0,
                detail: format!("{anomaly}\n(client {} is the final read)", u64::MAX),
            }],
            Verdict::Unknown { key, reason } => vec![Finding {
                check: "check-unknown".into(),
                step: 0,
                detail: format!("key {key}: {reason}"),
            }],
        },
    };
    HistoryCheck {
        findings,
        checked,
        took: started.elapsed(),
    }
}

/// Checks every watch stream against the acknowledged changes.
pub fn check_watch(streams: &[WatchStream], committed: &[u64], caught_up: bool) -> Vec<Finding> {
    let mut findings = Vec::new();
    if !caught_up {
        findings.push(Finding {
            check: "watch".into(),
            step: 0,
            detail: "the watcher did not see the campaign's last write within its time".into(),
        });
    }
    for (index, stream) in streams.iter().enumerate() {
        for violation in check_watch_stream(stream, committed) {
            findings.push(Finding {
                check: "watch".into(),
                step: 0,
                detail: format!(
                    "stream {index} (from revision {:?}, {} events, {:?}): {violation}",
                    stream.start_revision,
                    stream.revisions.len(),
                    stream.end
                ),
            });
        }
    }
    findings
}

/// Every member's `hashkv` at `revision` must agree (retried for a while:
/// a member may still be applying it).
pub async fn check_hashkv(h: &Harness, revision: u64, step: usize) -> Vec<Finding> {
    let Ok(endpoints) = h.endpoints().await else {
        return vec![Finding {
            check: "hashkv-disagrees".into(),
            step,
            detail: "no member endpoints to ask".into(),
        }];
    };
    let revision = i64::try_from(revision).unwrap_or(i64::MAX);
    let mut last = String::new();
    for _ in 0..20 {
        let mut hashes = BTreeMap::new();
        for url in &endpoints {
            let options = ConnectOptions::new()
                .with_connect_timeout(Duration::from_secs(2))
                .with_timeout(Duration::from_secs(5));
            let answer = match etcd_client::Client::connect([url.clone()], Some(options)).await {
                Ok(mut etcd) => etcd
                    .hash_kv(revision)
                    .await
                    .map(|r| {
                        format!(
                            "hash {:08x} (compacted at {})",
                            r.hash(),
                            r.compact_version()
                        )
                    })
                    .map_err(|e| e.to_string()),
                Err(e) => Err(e.to_string()),
            };
            hashes.insert(url.clone(), answer);
        }
        let answers: BTreeSet<&Result<String, String>> = hashes.values().collect();
        if answers.len() == 1 && answers.iter().all(|a| a.is_ok()) && hashes.len() > 1 {
            return Vec::new();
        }
        last = format!("{hashes:?}");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    vec![Finding {
        check: "hashkv-disagrees".into(),
        step,
        detail: format!("at revision {revision}: {last}"),
    }]
}

/// The identity after a step against the one before: same cluster ID, same
/// member names, and a member's ID changed only when its data was wiped.
pub fn check_identity(
    before: &Identity,
    now: &Identity,
    wiped: &BTreeSet<String>,
    step: usize,
) -> Vec<Finding> {
    let mut findings = Vec::new();
    if now.cluster_id != before.cluster_id {
        findings.push(Finding {
            check: "cluster-id-changed".into(),
            step,
            detail: format!(
                "cluster ID {:x} became {:x} with no restore asked for",
                before.cluster_id, now.cluster_id
            ),
        });
    }
    let names_before: BTreeSet<&String> = before.members.keys().collect();
    let names_now: BTreeSet<&String> = now.members.keys().collect();
    if names_before != names_now {
        findings.push(Finding {
            check: "member-id-changed".into(),
            step,
            detail: format!("members {names_before:?} became {names_now:?}"),
        });
    }
    for (name, (id, _)) in &now.members {
        if let Some((old, _)) = before.members.get(name)
            && old != id
            && !wiped.contains(name)
        {
            findings.push(Finding {
                check: "member-id-changed".into(),
                step,
                detail: format!("{name} had ID {old:x}, now {id:x}, and its data was not wiped"),
            });
        }
    }
    findings
}

#[cfg(test)]
mod tests {
    use super::*;

    fn identity(cluster: u64, members: &[(&str, u64)]) -> Identity {
        Identity {
            cluster_id: cluster,
            members: members
                .iter()
                .map(|(n, id)| ((*n).to_owned(), (*id, false)))
                .collect(),
        }
    }

    #[test]
    fn only_a_wiped_member_may_change_id() {
        let before = identity(1, &[("c-0", 10), ("c-1", 11), ("c-2", 12)]);
        let replaced = identity(1, &[("c-0", 10), ("c-1", 21), ("c-2", 12)]);
        let wiped: BTreeSet<String> = ["c-1".to_owned()].into();
        assert!(check_identity(&before, &replaced, &wiped, 3).is_empty());
        let findings = check_identity(&before, &replaced, &BTreeSet::new(), 3);
        assert_eq!(findings.len(), 1);
        assert_eq!(findings[0].check, "member-id-changed");
    }

    #[test]
    fn a_new_cluster_id_is_found() {
        let before = identity(1, &[("c-0", 10)]);
        let after = identity(2, &[("c-0", 10)]);
        let findings = check_identity(&before, &after, &BTreeSet::new(), 1);
        assert_eq!(findings[0].check, "cluster-id-changed");
    }

    #[test]
    fn a_lost_acknowledged_write_is_found_by_the_final_read() {
        let operations = vec![Operation::returned(
            1,
            Call::put("/chaos/e00001/k0", "c1-1"),
            10,
            20,
            Output::Ok,
        )];
        let lost = check_history(operations.clone(), &BTreeMap::new(), 100, 110);
        assert_eq!(lost.findings.len(), 1, "the put is gone at the end");
        assert_eq!(lost.findings[0].check, "not-linearizable");
        let kept: BTreeMap<String, String> =
            [("/chaos/e00001/k0".to_owned(), "c1-1".to_owned())].into();
        assert!(
            check_history(operations, &kept, 100, 110)
                .findings
                .is_empty()
        );
    }

    #[test]
    fn a_missed_acknowledged_change_is_found() {
        let stream = WatchStream {
            start_revision: Some(5),
            revisions: vec![5, 7],
            end: linearizability::WatchEnd::CaughtUp,
        };
        assert_eq!(
            check_watch(std::slice::from_ref(&stream), &[5, 7], true).len(),
            0
        );
        assert_eq!(check_watch(&[stream], &[5, 6, 7], true).len(), 1);
    }
}
