//! [`EtcdAdmin`]: the operator's administrative view of one etcd cluster
//! through a list of client endpoints. Endpoint selection lives here: ask
//! every endpoint for its status at once, then send each request to the
//! leader when it is known (or to the most up-to-date member answering).

use futures::future::join_all;

use super::client::{ConnectSettings, EndpointClients, LeaderRequirement, all_unreachable};
use super::error::{EtcdError, RequestSubject};
use super::types::{EndpointStatus, Member, MemberHealth, MemberId, MemberList};

/// Administrative client of one etcd cluster: membership, status, health
/// and leadership, through the given client endpoints.
pub struct EtcdAdmin {
    pub(crate) clients: EndpointClients,
}

/// The leader and the endpoint it answers on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaderEndpoint {
    pub member_id: MemberId,
    pub endpoint: String,
    pub status: EndpointStatus,
}

impl EtcdAdmin {
    /// An admin client over `endpoints` (e.g. `http://127.0.0.1:2379`).
    /// No connection is made yet; fails only when no endpoint is given.
    pub fn new(
        endpoints: impl IntoIterator<Item = impl Into<String>>,
        settings: ConnectSettings,
    ) -> Result<Self, EtcdError> {
        Ok(Self {
            clients: EndpointClients::new(endpoints, settings)?,
        })
    }

    pub fn endpoints(&self) -> &[String] {
        self.clients.endpoints()
    }

    pub fn settings(&self) -> ConnectSettings {
        self.clients.settings()
    }

    /// The status of one endpoint (which need not be in the list).
    pub async fn status(&self, endpoint: &str) -> Result<EndpointStatus, EtcdError> {
        self.clients.status(endpoint).await
    }

    /// The status of every endpoint, asked concurrently, in endpoint order.
    pub async fn statuses(&self) -> Vec<(String, Result<EndpointStatus, EtcdError>)> {
        let requests = self
            .endpoints()
            .iter()
            .map(|endpoint| async move { (endpoint.clone(), self.clients.status(endpoint).await) });
        join_all(requests).await
    }

    /// Health of one member through its own endpoint, without quorum: a
    /// serializable read plus the alarms it reports. Suitable where quorum
    /// must not matter (durability rule 9).
    pub async fn local_health(&self, endpoint: &str) -> MemberHealth {
        self.clients.local_health(endpoint).await.1
    }

    /// Cluster health: a linearizable read through the leader (or any
    /// member that knows one). Succeeds only while a quorum works; returns
    /// the current revision.
    pub async fn cluster_health(&self) -> Result<i64, EtcdError> {
        let operation = "cluster health check";
        let candidates = self.request_order(operation).await?;
        let mut last_error = None;
        for endpoint in &candidates {
            match self.clients.quorum_read(endpoint).await {
                Ok(revision) => return Ok(revision),
                Err(error) if error.is_unreachable() => last_error = Some(error),
                Err(error) => return Err(error),
            }
        }
        Err(all_unreachable(operation, candidates, last_error))
    }

    /// The leader as its own endpoint reports it. Fails when no reachable
    /// member knows a leader, or the leader's endpoint is not in the list.
    pub async fn find_leader(&self) -> Result<LeaderEndpoint, EtcdError> {
        let operation = "find leader";
        let statuses = self.reachable_statuses(operation).await?;
        statuses
            .into_iter()
            .find(|status| status.is_leader())
            .map(|status| LeaderEndpoint {
                member_id: status.member_id,
                endpoint: status.endpoint.clone(),
                status,
            })
            .ok_or(EtcdError::LeaderUnknown { operation })
    }

    /// The cluster ID, from the first endpoint that answers.
    pub async fn cluster_id(&self) -> Result<u64, EtcdError> {
        let statuses = self.reachable_statuses("cluster id").await?;
        let best = statuses
            .iter()
            .find(|status| status.is_leader())
            .or_else(|| statuses.first());
        best.map(|status| status.cluster_id)
            .ok_or(EtcdError::LeaderUnknown {
                operation: "cluster id",
            })
    }

    /// The member list, from the leader when it answers, otherwise from the
    /// most up-to-date reachable member. Works without quorum (the list of
    /// a member cut off from the leader may be stale).
    pub async fn member_list(&self) -> Result<MemberList, EtcdError> {
        let operation = "member list";
        let statuses = self.reachable_statuses(operation).await?;
        let candidates = preference_order(&statuses);
        self.member_list_from(operation, candidates).await
    }

    pub(crate) async fn member_list_from(
        &self,
        operation: &'static str,
        candidates: Vec<String>,
    ) -> Result<MemberList, EtcdError> {
        let response = self
            .clients
            .first_answer(
                &candidates,
                LeaderRequirement::Local,
                operation,
                RequestSubject::None,
                |mut client| async move { client.member_list().await },
                // Any member's answer will do: try the next on any error.
                |_| true,
            )
            .await?;
        let (cluster_id, reported_by) = response
            .header()
            .map(|h| (h.cluster_id(), h.member_id()))
            .unwrap_or_default();
        Ok(MemberList {
            cluster_id,
            reported_by,
            members: response.members().iter().map(to_member).collect(),
        })
    }

    /// Appends two entries to the raft log (a lease granted and revoked at
    /// once) without touching the keyspace. On the lab, a member that joined
    /// from a snapshot on a cluster with no writes was seen to retry its own
    /// publish request without end and never serve, until something was
    /// committed after its snapshot. A direct reproduction (10,500 writes,
    /// then a learner, on loopback) did not stall, so the exact condition
    /// is not pinned down; the two entries are harmless either way.
    pub async fn append_log_entries(&self) -> Result<(), EtcdError> {
        let leader = self.find_leader().await?;
        self.clients
            .call(
                &leader.endpoint,
                LeaderRequirement::RequireLeader,
                "append to the raft log",
                RequestSubject::None,
                |mut client| async move {
                    let lease = client.lease_grant(5, None).await?;
                    client.lease_revoke(lease.id()).await.map(|_| ())
                },
            )
            .await
    }

    /// Starts etcd's downgrade of the cluster version to `target` (a minor
    /// release such as `3.6`): etcd validates it first (one minor step
    /// down, no downgrade already in progress), then lowers the cluster
    /// version and each member's storage version, so that members of the
    /// older release can start on their data. Sent to the leader.
    pub async fn enable_downgrade(&self, target: &str) -> Result<(), EtcdError> {
        let leader = self.find_leader().await?;
        let version = downgrade_version(target);
        self.clients
            .call(
                &leader.endpoint,
                LeaderRequirement::RequireLeader,
                "enable downgrade",
                RequestSubject::None,
                |client| async move {
                    client
                        .maintenance_client()
                        .downgrade(etcd_client::DowngradeOptions::Enable(version))
                        .await
                        .map(|_| ())
                },
            )
            .await
    }

    /// Cancels the downgrade in progress: the cluster version goes back up
    /// once every member runs the newer release again.
    pub async fn cancel_downgrade(&self) -> Result<(), EtcdError> {
        let leader = self.find_leader().await?;
        self.clients
            .call(
                &leader.endpoint,
                LeaderRequirement::RequireLeader,
                "cancel downgrade",
                RequestSubject::None,
                |client| async move {
                    client
                        .maintenance_client()
                        .downgrade(etcd_client::DowngradeOptions::Cancel)
                        .await
                        .map(|_| ())
                },
            )
            .await
    }

    /// Transfers leadership to `target` (a started voter). Sent to the
    /// current leader, as etcd requires. A no-op when `target` already leads.
    pub async fn move_leader(&self, target: MemberId) -> Result<(), EtcdError> {
        let leader = self.find_leader().await?;
        if leader.member_id == target {
            return Ok(());
        }
        self.clients
            .call(
                &leader.endpoint,
                LeaderRequirement::RequireLeader,
                "move leader",
                RequestSubject::Member(target),
                |mut client| async move { client.move_leader(target).await },
            )
            .await
            .map(|_| ())
    }

    /// Statuses of the endpoints that answered; `AllUnreachable` if none.
    pub(crate) async fn reachable_statuses(
        &self,
        operation: &'static str,
    ) -> Result<Vec<EndpointStatus>, EtcdError> {
        let mut reachable = Vec::new();
        let mut last_error = None;
        for (_, result) in self.statuses().await {
            match result {
                Ok(status) => reachable.push(status),
                Err(error) => last_error = Some(error),
            }
        }
        if reachable.is_empty() {
            return Err(all_unreachable(
                operation,
                self.endpoints().to_vec(),
                last_error,
            ));
        }
        Ok(reachable)
    }

    /// Endpoints to send a request to, best first: the leader, then the
    /// members that know a leader, then the rest; each group by raft index.
    pub(crate) async fn request_order(
        &self,
        operation: &'static str,
    ) -> Result<Vec<String>, EtcdError> {
        let statuses = self.reachable_statuses(operation).await?;
        Ok(preference_order(&statuses))
    }
}

/// Endpoints ordered leader first, then members that follow a leader,
/// then the others, each group most up-to-date (raft index) first.
pub(crate) fn preference_order(statuses: &[EndpointStatus]) -> Vec<String> {
    let mut ranked: Vec<&EndpointStatus> = statuses.iter().collect();
    ranked.sort_by_key(|status| {
        let rank = if status.is_leader() {
            0
        } else if status.leader_id.is_some() {
            1
        } else {
            2
        };
        (rank, std::cmp::Reverse(status.raft_index))
    });
    ranked.into_iter().map(|s| s.endpoint.clone()).collect()
}

pub(crate) fn to_member(member: &etcd_client::Member) -> Member {
    Member {
        id: member.id(),
        name: member.name().to_string(),
        peer_urls: member.peer_urls().to_vec(),
        client_urls: member.client_urls().to_vec(),
        is_learner: member.is_learner(),
    }
}

/// The version etcd's downgrade API takes: `major.minor.0` (etcd parses a
/// full semantic version and keeps its minor release).
fn downgrade_version(target: &str) -> String {
    let mut parts = target.split('.');
    match (parts.next(), parts.next()) {
        (Some(major), Some(minor)) => format!("{major}.{minor}.0"),
        _ => target.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(endpoint: &str, member_id: u64, leader: Option<u64>, index: u64) -> EndpointStatus {
        EndpointStatus {
            endpoint: endpoint.into(),
            member_id,
            cluster_id: 7,
            leader_id: leader,
            revision: 1,
            raft_term: 2,
            raft_index: index,
            raft_applied_index: index,
            db_size: 0,
            db_size_in_use: 0,
            db_size_quota: 0,
            version: "3.6.0".into(),
            storage_version: "3.6.0".into(),
            downgrade_target: None,
            is_learner: false,
            errors: vec![],
        }
    }

    #[test]
    fn leader_first_then_followers_then_leaderless_by_raft_index() {
        let statuses = vec![
            status("a", 1, None, 50),
            status("b", 2, Some(3), 10),
            status("c", 3, Some(3), 5),
            status("d", 4, Some(3), 20),
        ];
        assert_eq!(preference_order(&statuses), vec!["c", "d", "b", "a"]);
    }
}
