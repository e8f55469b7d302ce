//! At most one etcd process per member (rule 4), observed where it
//! matters: the processes of this machine, not the Pod objects (a Pod
//! deleted from the API may still run on a node that is cut off). Every
//! etcd whose command line names a member of the campaign's cluster
//! (`--name=<cluster>-<n>`) and its namespace is counted, stopped
//! (frozen) processes included: they resume.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::task::JoinHandle;

/// The etcd processes of cluster `cluster` in `namespace` on this machine,
/// by member name.
pub fn etcd_processes(cluster: &str, namespace: &str) -> BTreeMap<String, Vec<i32>> {
    let mut found: BTreeMap<String, Vec<i32>> = BTreeMap::new();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return found;
    };
    for entry in entries.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<i32>().ok())
        else {
            continue;
        };
        let Ok(raw) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        if let Some(member) = member_of(&raw, cluster, namespace) {
            found.entry(member).or_default().push(pid);
        }
    }
    found
}

/// The member an etcd command line (NUL-separated) serves, if it is one of
/// `cluster` in `namespace`.
fn member_of(cmdline: &[u8], cluster: &str, namespace: &str) -> Option<String> {
    let args: Vec<&str> = cmdline
        .split(|b| *b == 0)
        .filter(|a| !a.is_empty())
        .filter_map(|a| std::str::from_utf8(a).ok())
        .collect();
    let program = Path::new(args.first()?).file_name()?.to_str()?;
    if program != "etcd" {
        return None;
    }
    let name = args.iter().find_map(|a| a.strip_prefix("--name="))?;
    let ordinal = name.strip_prefix(cluster)?.strip_prefix('-')?;
    if ordinal.is_empty() || !ordinal.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    args.iter()
        .any(|a| a.contains(&format!(".{namespace}.")))
        .then(|| name.to_owned())
}

/// A sampler of [`etcd_processes`] every 500 ms, until stopped.
pub struct ProcessMonitor {
    stop: Arc<AtomicBool>,
    task: JoinHandle<Sampled>,
}

/// What the monitor saw.
#[derive(Debug, Default)]
pub struct Sampled {
    /// Every time a member ran as more than one process (at most 100).
    pub twice: Vec<String>,
    /// Members seen running at least once (a monitor that sees none is
    /// blind, not reassuring).
    pub seen: std::collections::BTreeSet<String>,
}

impl ProcessMonitor {
    /// Starts sampling.
    pub fn start(cluster: &str, namespace: &str) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let (cluster, namespace) = (cluster.to_owned(), namespace.to_owned());
        let flag = stop.clone();
        let task = tokio::spawn(async move {
            let mut sampled = Sampled::default();
            while !flag.load(Ordering::SeqCst) {
                for (member, pids) in etcd_processes(&cluster, &namespace) {
                    if pids.len() > 1 && sampled.twice.len() < 100 {
                        sampled.twice.push(format!(
                            "{member} ran as {} processes: {pids:?}",
                            pids.len()
                        ));
                    }
                    sampled.seen.insert(member);
                }
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            sampled
        });
        Self { stop, task }
    }

    /// Stops sampling; returns what it saw.
    pub async fn stop(self) -> Sampled {
        self.stop.store(true, Ordering::SeqCst);
        self.task.await.unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cmdline(args: &[&str]) -> Vec<u8> {
        args.iter().flat_map(|a| a.bytes().chain([0])).collect()
    }

    #[test]
    fn a_member_of_the_cluster_is_recognised() {
        let line = cmdline(&[
            "/usr/local/bin/etcd",
            "--name=chaos-1",
            "--advertise-client-urls=http://chaos-1.chaos.ns-a.svc:2379",
        ]);
        assert_eq!(
            member_of(&line, "chaos", "ns-a").as_deref(),
            Some("chaos-1")
        );
    }

    #[test]
    fn others_are_not() {
        let other_namespace = cmdline(&[
            "etcd",
            "--name=chaos-1",
            "--advertise-client-urls=http://chaos-1.chaos.ns-b.svc:2379",
        ]);
        assert_eq!(member_of(&other_namespace, "chaos", "ns-a"), None);
        let other_cluster = cmdline(&["etcd", "--name=chaos2-1", "x.ns-a.svc"]);
        assert_eq!(member_of(&other_cluster, "chaos", "ns-a"), None);
        let not_etcd = cmdline(&["etcd-guard", "--name=chaos-1", "x.ns-a.svc"]);
        assert_eq!(member_of(&not_etcd, "chaos", "ns-a"), None);
    }
}
