//! A fresh cluster of etcd processes on loopback for the benches' "etcd
//! alone" side (the rollout and defragmentation benches): `size` members of
//! the pinned 3.6 release started with the flags a bench gives, their data
//! in a temporary directory removed when the cluster is dropped.

use etcd_client::StatusResponse;
use test_kit::TestResult;
use test_kit::e2e::etcd_at;
use test_kit::etcd_process::{EtcdProcess, READY_TIMEOUT, initial_cluster};

/// A fresh cluster, serving.
pub struct Cluster {
    pub token: String,
    pub members: Vec<EtcdProcess>,
    // Dropped after the processes.
    _dir: tempfile::TempDir,
}

impl Cluster {
    /// Starts `size` members named `m0`, `m1`... with cluster token `token`
    /// and `args` added to etcd's flags, and waits until each serves.
    pub async fn start(size: usize, token: &str, args: &[String]) -> TestResult<Self> {
        let dir = tempfile::tempdir()?;
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let mut members: Vec<EtcdProcess> = (0..size)
            .map(|i| EtcdProcess::new(dir.path(), &format!("m{i}")).with_args(&args))
            .collect();
        let initial = initial_cluster(&members);
        for member in &mut members {
            member.start(&initial, "new", token)?;
        }
        for member in &members {
            member.wait_serving(READY_TIMEOUT).await?;
        }
        Ok(Self {
            token: token.to_owned(),
            members,
            _dir: dir,
        })
    }

    pub fn endpoints(&self) -> Vec<String> {
        self.members.iter().map(|m| m.client_url.clone()).collect()
    }

    /// Member ID and status of each member that answers, by index.
    pub async fn statuses(&self) -> Vec<(usize, StatusResponse)> {
        let mut out = Vec::new();
        for (i, member) in self.members.iter().enumerate() {
            if let Ok(status) = status_at(&member.client_url).await {
                out.push((i, status));
            }
        }
        out
    }

    /// The index of the leader, and its applied index.
    pub async fn leader(&self) -> TestResult<(usize, u64)> {
        let statuses = self.statuses().await;
        statuses
            .iter()
            .find(|(_, s)| member_id(s) == s.leader() && s.leader() != 0)
            .map(|(i, s)| (*i, s.raft_applied_index()))
            .ok_or_else(|| "no member says it leads".into())
    }
}

/// The status of the member at `endpoint`.
pub async fn status_at(endpoint: &str) -> TestResult<StatusResponse> {
    Ok(etcd_at(vec![endpoint.to_owned()]).await?.status().await?)
}

/// The ID of the member that answered `status`.
pub fn member_id(status: &StatusResponse) -> u64 {
    status.header().map(|h| h.member_id()).unwrap_or_default()
}
