//! One observation of an etcd cluster, for the planner. It never fails on
//! a partial or total outage: whatever did not answer is recorded as such.

use futures::future::join_all;

use super::admin::{EtcdAdmin, preference_order};
use super::client::ConnectSettings;
use super::error::EtcdError;
use super::types::{
    EndpointObservation, EndpointStatus, MemberHealth, MemberList, ObservedEtcd, ObservedMember,
};

/// Why no quorum served a linearizable read during an observation.
#[derive(Debug, thiserror::Error)]
pub enum QuorumError {
    /// No member that answered its status knows a leader.
    #[error("no reachable member knows a leader")]
    LeaderUnknown,
    /// No endpoint answered its status, so none was tried.
    #[error("no endpoint to try")]
    NoEndpoint,
    /// The read failed: etcd's refusal, or the last endpoint's error when
    /// none could be reached.
    #[error(transparent)]
    Read(#[from] EtcdError),
}

/// Observes the etcd cluster behind `endpoints`. See [`EtcdAdmin::observe`].
pub async fn observe(
    endpoints: impl IntoIterator<Item = impl Into<String>>,
    settings: ConnectSettings,
) -> ObservedEtcd {
    match EtcdAdmin::new(endpoints, settings) {
        Ok(admin) => admin.observe().await,
        Err(_) => ObservedEtcd::nothing_observed(),
    }
}

impl ObservedEtcd {
    /// The observation of a cluster of which nothing answered.
    pub fn nothing_observed() -> Self {
        Self {
            cluster_id: None,
            members: Vec::new(),
            members_reported_by: None,
            leader: None,
            quorum_reachable: false,
            quorum_error: Some("no endpoint answered".to_string()),
            max_revision: None,
            endpoints: Vec::new(),
        }
    }
}

impl EtcdAdmin {
    /// Observes the cluster: the status and local health of every endpoint
    /// (concurrently), the member list (from the leader if it answers, else
    /// the most up-to-date member), the leader, and whether a quorum serves
    /// linearizable reads. Takes about one request timeout at worst.
    ///
    /// Members that none of the endpoints belongs to are reported as
    /// [`MemberHealth::NotObserved`]; endpoints are not discovered from the
    /// member list.
    pub async fn observe(&self) -> ObservedEtcd {
        let probes = self.endpoints().iter().map(|endpoint| async move {
            let (status, health) = self.clients.local_health(endpoint).await;
            let (status, error) = match status {
                Ok(status) => (Some(status), None),
                Err(error) => (None, Some(error.to_string())),
            };
            EndpointObservation {
                endpoint: endpoint.clone(),
                status,
                health,
                error,
            }
        });
        let endpoints: Vec<EndpointObservation> = join_all(probes).await;
        let statuses: Vec<EndpointStatus> =
            endpoints.iter().filter_map(|e| e.status.clone()).collect();
        if statuses.is_empty() {
            return ObservedEtcd {
                endpoints,
                ..ObservedEtcd::nothing_observed()
            };
        }

        let leader = statuses
            .iter()
            .filter(|s| s.leader_id.is_some())
            .max_by_key(|s| s.raft_term)
            .and_then(|s| s.leader_id);
        let max_revision = statuses.iter().map(|s| s.revision).max();
        let order = preference_order(&statuses);

        let (list, quorum) = futures::join!(
            self.member_list_from("member list", order.clone()),
            self.quorum_check(&order, leader.is_some())
        );
        let (quorum_reachable, quorum_error) = match quorum {
            Ok(()) => (true, None),
            Err(error) => (false, Some(error.to_string())),
        };

        let (cluster_id, members, members_reported_by) = match list {
            Ok(list) => (
                Some(list.cluster_id),
                observed_members(&list, &endpoints),
                Some(list.reported_by),
            ),
            Err(_) => {
                let first = &statuses[0];
                (Some(first.cluster_id), Vec::new(), None)
            }
        };

        ObservedEtcd {
            cluster_id,
            members,
            members_reported_by,
            leader,
            quorum_reachable,
            quorum_error,
            max_revision,
            endpoints,
        }
    }

    /// A linearizable read through the best endpoint that answers.
    async fn quorum_check(&self, order: &[String], leader_known: bool) -> Result<(), QuorumError> {
        if !leader_known {
            return Err(QuorumError::LeaderUnknown);
        }
        let mut last_error = QuorumError::NoEndpoint;
        for endpoint in order {
            match self.clients.quorum_read(endpoint).await {
                Ok(_) => return Ok(()),
                Err(error) if error.is_unreachable() => last_error = error.into(),
                Err(error) => return Err(error.into()),
            }
        }
        Err(last_error)
    }
}

/// Joins the member list with what each endpoint said about itself.
fn observed_members(list: &MemberList, endpoints: &[EndpointObservation]) -> Vec<ObservedMember> {
    list.members
        .iter()
        .map(|member| {
            let answered = endpoints.iter().find(|e| {
                e.status
                    .as_ref()
                    .is_some_and(|s| s.member_id == member.id && s.cluster_id == list.cluster_id)
            });
            // An endpoint that did not answer belongs to this member if it
            // is one of the member's advertised client URLs.
            let silent = || {
                endpoints.iter().find(|e| {
                    e.status.is_none()
                        && member
                            .client_urls
                            .iter()
                            .any(|url| same_endpoint(url, &e.endpoint))
                })
            };
            let (endpoint, status, health) = match answered.or_else(silent) {
                Some(e) => (Some(e.endpoint.clone()), e.status.clone(), e.health.clone()),
                None => (None, None, MemberHealth::NotObserved),
            };
            ObservedMember {
                id: member.id,
                name: member.name.clone(),
                peer_urls: member.peer_urls.clone(),
                client_urls: member.client_urls.clone(),
                is_learner: member.is_learner,
                endpoint,
                status,
                health,
            }
        })
        .collect()
}

fn same_endpoint(a: &str, b: &str) -> bool {
    fn strip(url: &str) -> &str {
        url.trim_start_matches("http://")
            .trim_start_matches("https://")
            .trim_end_matches('/')
    }
    strip(a) == strip(b)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    /// An endpoint nothing listens on: a port bound, then released.
    fn closed_endpoint() -> String {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = listener.local_addr().expect("address").port();
        format!("http://127.0.0.1:{port}")
    }

    fn admin(endpoint: &str) -> EtcdAdmin {
        let settings = ConnectSettings {
            connect_timeout: Duration::from_millis(500),
            request_timeout: Duration::from_secs(2),
            quorum_read_timeout: Duration::from_secs(2),
            tls: None,
        };
        EtcdAdmin::new([endpoint], settings).expect("admin")
    }

    #[tokio::test]
    async fn a_quorum_check_says_why_no_read_was_served() {
        let endpoint = closed_endpoint();
        let admin = admin(&endpoint);
        let order = vec![endpoint.clone()];

        let error = admin.quorum_check(&order, false).await.expect_err("leader");
        assert!(matches!(error, QuorumError::LeaderUnknown), "{error}");
        assert_eq!(error.to_string(), "no reachable member knows a leader");

        let error = admin
            .quorum_check(&[], true)
            .await
            .expect_err("no endpoint");
        assert!(matches!(error, QuorumError::NoEndpoint), "{error}");
        assert_eq!(error.to_string(), "no endpoint to try");

        let error = admin.quorum_check(&order, true).await.expect_err("refused");
        match &error {
            QuorumError::Read(read) => {
                assert!(read.is_unreachable(), "{read}");
                assert_eq!(error.to_string(), read.to_string());
            }
            other => panic!("expected the read's error, got {other:?}"),
        }
        assert!(error.to_string().contains(&endpoint), "{error}");
    }
}
