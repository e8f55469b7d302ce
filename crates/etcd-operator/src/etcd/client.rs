//! Connections to etcd endpoints: one client per endpoint, so every answer
//! is attributed to the member that gave it, short connect timeouts so dead
//! endpoints are skipped quickly, and a deadline on every request.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use etcd_client::{Client, ConnectOptions, GetOptions};

use super::error::{EtcdError, RequestSubject, classify};
use super::tls::{ClientTls, with_tls};
use super::types::{EndpointStatus, MemberHealth, MemberId};

/// The key read by health checks, as `etcdctl endpoint health` does. It
/// need not exist: a read that answers is what counts.
const HEALTH_KEY: &str = "health";

/// Status errors that make a member unhealthy by itself: alarms such as
/// CORRUPT. NOSPACE does not: it says the cluster reached its quota, while
/// the member works (it serves reads, its raft log moves, it can be
/// defragmented and rolled); the planner recovers the space and status
/// reports the alarm. Other errors, like "etcdserver: no leader" while
/// quorum is lost, say nothing about the member alone and must not fail a
/// local check (rule 9).
fn is_alarm(error: &str) -> bool {
    error.contains("alarm:") && !error.contains("alarm:NOSPACE")
}

/// Timeouts of the etcd layer, and the TLS of the cluster's members.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectSettings {
    /// How long to wait for a TCP/HTTP2 connection to an endpoint.
    pub connect_timeout: Duration,
    /// Deadline of every request (connection included).
    pub request_timeout: Duration,
    /// Deadline of the linearizable read that tells whether a quorum
    /// serves (see [`quorum_read_deadline`]): shorter than the request
    /// timeout, so a lost majority shows in status within seconds.
    pub quorum_read_timeout: Duration,
    /// Mutual TLS to the members, when the cluster serves it.
    pub tls: Option<Arc<ClientTls>>,
}

impl Default for ConnectSettings {
    fn default() -> Self {
        Self {
            connect_timeout: Duration::from_millis(1500),
            // Below etcd's own 7 s request timeout, so a stuck proposal
            // shows up here as our timeout rather than hanging a reconcile.
            request_timeout: Duration::from_secs(5),
            quorum_read_timeout: quorum_read_deadline(1000, Duration::from_secs(5)),
            tls: None,
        }
    }
}

/// The shortest deadline of a quorum read, for election timeouts of 1 s
/// and less.
const QUORUM_READ_FLOOR: Duration = Duration::from_secs(2);

/// How long a linearizable read may wait before the check says no quorum
/// serves, for members with this election timeout: two election timeouts
/// (at least 2 s), never more than the request timeout.
///
/// A live leader answers a read index after one heartbeat round trip; a
/// leader cut off from its majority steps down within one election timeout
/// (etcd runs raft with CheckQuorum), and a follower whose leader is gone
/// starts an election within one. After that the members' status says no
/// leader and the check fails at once; a read still waiting by then waits
/// on a leader that is gone, and etcd itself would hold it for its whole
/// request timeout (5 s plus two election timeouts). A check that gives up
/// on a slow but working quorum only holds the planner back for a pass:
/// without a quorum it changes no membership (rule 3).
pub fn quorum_read_deadline(election_timeout_ms: i32, request_timeout: Duration) -> Duration {
    let election = Duration::from_millis(u64::try_from(election_timeout_ms).unwrap_or(0));
    (election * 2).max(QUORUM_READ_FLOOR).min(request_timeout)
}

/// Whether requests through a connection require the member to know a
/// leader (etcd's `hasleader` metadata), failing fast with "no leader".
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum LeaderRequirement {
    /// Member-local requests (status, serializable reads) that must work
    /// without quorum.
    Local,
    /// Requests that need a working quorum.
    RequireLeader,
}

/// A set of etcd endpoints and lazily opened clients for each of them.
pub(crate) struct EndpointClients {
    endpoints: Vec<String>,
    settings: ConnectSettings,
    clients: Mutex<HashMap<(String, LeaderRequirement), Client>>,
}

impl EndpointClients {
    pub(crate) fn new(
        endpoints: impl IntoIterator<Item = impl Into<String>>,
        settings: ConnectSettings,
    ) -> Result<Self, EtcdError> {
        let mut unique: Vec<String> = Vec::new();
        for endpoint in endpoints {
            let endpoint = endpoint.into().trim().to_string();
            if endpoint.is_empty() {
                continue;
            }
            if !unique.contains(&endpoint) {
                unique.push(endpoint);
            }
        }
        if unique.is_empty() {
            return Err(EtcdError::NoEndpoints);
        }
        Ok(Self {
            endpoints: unique,
            settings,
            clients: Mutex::new(HashMap::new()),
        })
    }

    pub(crate) fn endpoints(&self) -> &[String] {
        &self.endpoints
    }

    pub(crate) fn settings(&self) -> ConnectSettings {
        self.settings.clone()
    }

    async fn client(
        &self,
        endpoint: &str,
        requirement: LeaderRequirement,
        operation: &'static str,
    ) -> Result<Client, EtcdError> {
        let key = (endpoint.to_string(), requirement);
        if let Some(client) = self.cached(&key) {
            return Ok(client);
        }
        let options = ConnectOptions::new()
            .with_connect_timeout(self.settings.connect_timeout)
            .with_timeout(self.settings.request_timeout)
            .with_keep_alive(Duration::from_secs(10), self.settings.connect_timeout)
            .with_require_leader(requirement == LeaderRequirement::RequireLeader);
        let options = with_tls(options, self.settings.tls.as_deref());
        // Connecting is lazy: the first request opens the connection.
        let client = Client::connect([endpoint], Some(options))
            .await
            .map_err(|e| {
                classify(
                    endpoint,
                    operation,
                    RequestSubject::None,
                    self.settings.request_timeout,
                    e,
                )
            })?;
        if let Ok(mut clients) = self.clients.lock() {
            clients.insert(key, client.clone());
        }
        Ok(client)
    }

    fn cached(&self, key: &(String, LeaderRequirement)) -> Option<Client> {
        self.clients
            .lock()
            .ok()
            .and_then(|clients| clients.get(key).cloned())
    }

    /// Forgets the connection to an endpoint after a transport failure, so
    /// the next request reconnects from scratch.
    fn forget(&self, endpoint: &str) {
        if let Ok(mut clients) = self.clients.lock() {
            clients.retain(|(e, _), _| e != endpoint);
        }
    }

    /// Runs one request against one endpoint under the request deadline.
    pub(crate) async fn call<T, F, Fut>(
        &self,
        endpoint: &str,
        requirement: LeaderRequirement,
        operation: &'static str,
        subject: RequestSubject,
        request: F,
    ) -> Result<T, EtcdError>
    where
        F: FnOnce(Client) -> Fut,
        Fut: Future<Output = Result<T, etcd_client::Error>>,
    {
        self.call_within(
            self.settings.request_timeout,
            endpoint,
            requirement,
            operation,
            subject,
            request,
        )
        .await
    }

    /// [`Self::call`] under another deadline than the request timeout.
    async fn call_within<T, F, Fut>(
        &self,
        timeout: Duration,
        endpoint: &str,
        requirement: LeaderRequirement,
        operation: &'static str,
        subject: RequestSubject,
        request: F,
    ) -> Result<T, EtcdError>
    where
        F: FnOnce(Client) -> Fut,
        Fut: Future<Output = Result<T, etcd_client::Error>>,
    {
        let attempt = async {
            let client = self.client(endpoint, requirement, operation).await?;
            request(client)
                .await
                .map_err(|e| classify(endpoint, operation, subject, timeout, e))
        };
        let result = match tokio::time::timeout(timeout, attempt).await {
            Ok(result) => result,
            Err(_) => Err(EtcdError::Timeout {
                endpoint: endpoint.to_string(),
                operation,
                timeout,
            }),
        };
        if let Err(error) = &result
            && (error.is_unreachable() || matches!(error, EtcdError::Timeout { .. }))
        {
            self.forget(endpoint);
        }
        result
    }

    /// Runs `request` against `candidates` in order and returns the first
    /// answer; goes on to the next candidate only after an error that
    /// `try_next` accepts, and says which endpoints were tried when none
    /// answered.
    pub(crate) async fn first_answer<T, F, Fut>(
        &self,
        candidates: &[String],
        requirement: LeaderRequirement,
        operation: &'static str,
        subject: RequestSubject,
        request: F,
        try_next: fn(&EtcdError) -> bool,
    ) -> Result<T, EtcdError>
    where
        F: Fn(Client) -> Fut,
        Fut: Future<Output = Result<T, etcd_client::Error>>,
    {
        let mut last_error = None;
        for endpoint in candidates {
            let result = self
                .call(endpoint, requirement, operation, subject.clone(), &request)
                .await;
            match result {
                Err(error) if try_next(&error) => last_error = Some(error),
                other => return other,
            }
        }
        Err(all_unreachable(operation, candidates.to_vec(), last_error))
    }

    /// Maintenance.Status of one endpoint. Works without quorum.
    pub(crate) async fn status(&self, endpoint: &str) -> Result<EndpointStatus, EtcdError> {
        let operation = "status";
        let response = self
            .call(
                endpoint,
                LeaderRequirement::Local,
                operation,
                RequestSubject::None,
                |mut client| async move { client.status().await },
            )
            .await?;
        let header = response.header().ok_or_else(|| EtcdError::Request {
            endpoint: endpoint.to_string(),
            operation,
            message: "response without header".to_string(),
        })?;
        Ok(EndpointStatus {
            endpoint: endpoint.to_string(),
            member_id: header.member_id(),
            cluster_id: header.cluster_id(),
            leader_id: Some(response.leader()).filter(|id| *id != 0),
            revision: header.revision(),
            raft_term: response.raft_term(),
            raft_index: response.raft_index(),
            raft_applied_index: response.raft_applied_index(),
            db_size: response.db_size(),
            db_size_in_use: response.raft_used_db_size(),
            db_size_quota: response.db_size_quota(),
            version: response.version().to_string(),
            storage_version: response.storage_version().to_string(),
            downgrade_target: response
                .downgrade_info()
                .filter(|info| info.enabled())
                .map(|info| info.target_version().to_string()),
            is_learner: response.is_learner(),
            errors: response.errors().to_vec(),
        })
    }

    /// A serializable read served by the member alone: answers without
    /// quorum, so it says whether this member's process and store work.
    pub(crate) async fn local_read(&self, endpoint: &str) -> Result<MemberId, EtcdError> {
        let response = self
            .call(
                endpoint,
                LeaderRequirement::Local,
                "local health check",
                RequestSubject::None,
                |mut client| async move {
                    client
                        .get(
                            HEALTH_KEY,
                            Some(GetOptions::new().with_serializable().with_count_only()),
                        )
                        .await
                },
            )
            .await?;
        Ok(response.header().map(|h| h.member_id()).unwrap_or_default())
    }

    /// A linearizable read: only answers when a quorum of voters works.
    /// Bounded by the quorum-read timeout, not the request timeout.
    pub(crate) async fn quorum_read(&self, endpoint: &str) -> Result<i64, EtcdError> {
        let response = self
            .call_within(
                self.settings.quorum_read_timeout,
                endpoint,
                LeaderRequirement::RequireLeader,
                "cluster health check",
                RequestSubject::None,
                |mut client| async move {
                    client
                        .get(HEALTH_KEY, Some(GetOptions::new().with_count_only()))
                        .await
                },
            )
            .await?;
        Ok(response.header().map(|h| h.revision()).unwrap_or_default())
    }

    /// Local health of one endpoint: the status (for alarms) and a
    /// serializable read. Never needs quorum (durability rule 9): a member
    /// that knows no leader but serves local reads is healthy here.
    pub(crate) async fn local_health(
        &self,
        endpoint: &str,
    ) -> (Result<EndpointStatus, EtcdError>, MemberHealth) {
        let status = self.status(endpoint).await;
        let health = match &status {
            Err(error) if error.is_unreachable() || matches!(error, EtcdError::Timeout { .. }) => {
                MemberHealth::Unreachable(error.to_string())
            }
            Err(error) => MemberHealth::Unhealthy(error.to_string()),
            Ok(status) if status.errors.iter().any(|e| is_alarm(e)) => {
                MemberHealth::Unhealthy(format!("reports {}", status.errors.join("; ")))
            }
            Ok(_) => match self.local_read(endpoint).await {
                Ok(_) => MemberHealth::Healthy,
                Err(error) => MemberHealth::Unhealthy(error.to_string()),
            },
        };
        (status, health)
    }
}

/// None of `endpoints` answered `operation`; `last_error` is the last
/// failure seen.
pub(crate) fn all_unreachable(
    operation: &'static str,
    endpoints: Vec<String>,
    last_error: Option<EtcdError>,
) -> EtcdError {
    EtcdError::AllUnreachable {
        operation,
        endpoints,
        last_error: last_error
            .map(|e| e.to_string())
            .unwrap_or_else(|| "no endpoint to try".to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_quorum_read_waits_two_election_timeouts_within_the_request_timeout() {
        let request = Duration::from_secs(5);
        assert_eq!(quorum_read_deadline(1000, request), Duration::from_secs(2));
        assert_eq!(quorum_read_deadline(100, request), Duration::from_secs(2));
        assert_eq!(
            quorum_read_deadline(1500, request),
            Duration::from_secs(3),
            "two election timeouts above the floor"
        );
        assert_eq!(quorum_read_deadline(10_000, request), request);
        assert_eq!(
            quorum_read_deadline(1000, Duration::from_secs(1)),
            Duration::from_secs(1),
            "never beyond the request timeout"
        );
        assert_eq!(
            ConnectSettings::default().quorum_read_timeout,
            Duration::from_secs(2)
        );
    }
}
