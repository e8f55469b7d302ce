//! Choosing the member a snapshot is streamed from, and opening the stream.
//!
//! A follower is preferred: streaming a large database costs the serving
//! member disk reads and network, and the leader has the most to do. The
//! leader serves only when no follower is healthy. Learners are never used
//! (they may lag).

use std::fmt;
use std::time::Duration;

use etcd_client::{Client, ConnectOptions, SnapshotStreaming};
use futures::future::join_all;

use super::BackupError;
use crate::etcd::{ConnectSettings, format_id, with_tls};

/// Why asking an endpoint for its status did not give a usable answer.
#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    /// No status within the request timeout.
    #[error("no answer within {timeout:?}")]
    Timeout {
        /// The time allowed.
        timeout: Duration,
    },
    /// The connection or the status request failed.
    #[error(transparent)]
    Etcd(#[from] etcd_client::Error),
    /// The member answered and reports an error of its own (an alarm,
    /// a corrupt database).
    #[error("reports {error}")]
    MemberError {
        /// The first error the member reports.
        error: String,
    },
    /// The status carries no response header (no member or cluster ID).
    #[error("status without header")]
    NoHeader,
}

/// Why one endpoint cannot serve a snapshot.
#[derive(Debug, thiserror::Error)]
pub enum SourceRefusal {
    /// Its status could not be had.
    #[error(transparent)]
    Probe(#[from] ProbeError),
    /// It is a learner (it may lag).
    #[error("a learner")]
    Learner,
    /// It knows no leader.
    #[error("knows no leader")]
    NoLeader,
}

/// Every endpoint asked and why none can serve a snapshot; shown as
/// `endpoint: reason; ...`, or "no endpoints" when none was given.
#[derive(Debug)]
pub struct SourceRefusals(pub Vec<(String, SourceRefusal)>);

impl fmt::Display for SourceRefusals {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_empty() {
            return f.write_str("no endpoints");
        }
        for (i, (endpoint, refusal)) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str("; ")?;
            }
            write!(f, "{endpoint}: {refusal}")?;
        }
        Ok(())
    }
}

/// A member that answered its status and can serve a snapshot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapshotSource {
    /// The member's client URL.
    pub endpoint: String,
    /// Its member ID.
    pub member_id: u64,
    /// Its cluster ID.
    pub cluster_id: u64,
    /// The leader it knows.
    pub leader: u64,
    /// Its key-value revision when probed.
    pub revision: i64,
    /// Its server version.
    pub version: String,
    /// Its database size in bytes.
    pub db_size: i64,
    /// Whether it is a learner.
    pub is_learner: bool,
}

impl SnapshotSource {
    /// Whether this member is the leader it reports.
    pub fn is_leader(&self) -> bool {
        self.leader == self.member_id
    }
}

/// The best member to stream from: a healthy voting follower with the
/// newest revision, else the leader. `None` when no voter is usable.
pub fn prefer_follower(candidates: &[SnapshotSource]) -> Option<&SnapshotSource> {
    let voters = candidates.iter().filter(|c| !c.is_learner && c.leader != 0);
    voters.max_by_key(|c| (!c.is_leader(), c.revision, std::cmp::Reverse(c.member_id)))
}

/// Asks every endpoint for its status, concurrently, and picks the source.
/// The error ([`BackupError::NoSnapshotSource`]) lists why each endpoint
/// was not usable.
pub async fn choose_source(
    endpoints: &[String],
    settings: &ConnectSettings,
) -> Result<SnapshotSource, BackupError> {
    let probes = join_all(endpoints.iter().map(|e| probe(e, settings))).await;
    choose(endpoints.iter().cloned().zip(probes)).map_err(BackupError::NoSnapshotSource)
}

/// The source among the answers of every endpoint ([`prefer_follower`]),
/// or why each endpoint cannot serve.
fn choose(
    probes: impl IntoIterator<Item = (String, Result<SnapshotSource, ProbeError>)>,
) -> Result<SnapshotSource, SourceRefusals> {
    let mut usable = Vec::new();
    let mut refusals = Vec::new();
    for (endpoint, probe) in probes {
        match probe {
            Ok(source) => usable.push(source),
            Err(error) => refusals.push((endpoint, error.into())),
        }
    }
    if let Some(source) = prefer_follower(&usable) {
        return Ok(source.clone());
    }
    for source in usable {
        let refusal = if source.is_learner {
            SourceRefusal::Learner
        } else {
            SourceRefusal::NoLeader
        };
        refusals.push((source.endpoint, refusal));
    }
    Err(SourceRefusals(refusals))
}

async fn probe(endpoint: &str, settings: &ConnectSettings) -> Result<SnapshotSource, ProbeError> {
    let options = ConnectOptions::new()
        .with_connect_timeout(settings.connect_timeout)
        .with_timeout(settings.request_timeout);
    let options = with_tls(options, settings.tls.as_deref());
    let request = async {
        let mut client = Client::connect([endpoint], Some(options)).await?;
        client.status().await
    };
    let status = tokio::time::timeout(settings.request_timeout, request)
        .await
        .map_err(|_| ProbeError::Timeout {
            timeout: settings.request_timeout,
        })??;
    if let Some(error) = status.errors().first() {
        return Err(ProbeError::MemberError {
            error: error.clone(),
        });
    }
    let header = status.header().ok_or(ProbeError::NoHeader)?;
    Ok(SnapshotSource {
        endpoint: endpoint.to_string(),
        member_id: header.member_id(),
        cluster_id: header.cluster_id(),
        leader: status.leader(),
        revision: header.revision(),
        version: status.version().to_string(),
        db_size: status.db_size(),
        is_learner: status.is_learner(),
    })
}

/// Opens the snapshot stream of one member. No overall request deadline
/// (a large database takes a while); the caller bounds each message.
pub async fn open_snapshot(
    source: &SnapshotSource,
    settings: &ConnectSettings,
) -> Result<SnapshotStreaming, BackupError> {
    let connect_timeout = settings.connect_timeout;
    let options = ConnectOptions::new()
        .with_connect_timeout(connect_timeout)
        .with_keep_alive(Duration::from_secs(10), connect_timeout);
    let options = with_tls(options, settings.tls.as_deref());
    let stream_error = |e: etcd_client::Error| BackupError::Stream {
        endpoint: source.endpoint.clone(),
        message: e.to_string(),
    };
    let client = Client::connect([source.endpoint.as_str()], Some(options))
        .await
        .map_err(stream_error)?;
    client
        .maintenance_client()
        .snapshot()
        .await
        .map_err(stream_error)
}

/// Brings `source.revision` up to everything committed before the
/// snapshot is opened: a linearizable read through the member returns only
/// once the member has applied what the cluster had committed when the
/// read began, and its revision then. The snapshot, opened on that member
/// afterwards, holds at least that revision, so every write acknowledged
/// before the backup started is in it and the recorded revision says so.
/// (The status revision the member was chosen by can lag what it has
/// applied by the time the snapshot opens: a follower behind its leader.)
/// The snapshot may still hold writes made after this read; the recorded
/// revision stays a lower bound of its content. Keeps the status revision
/// when the read fails.
pub async fn settle_revision(source: &mut SnapshotSource, settings: &ConnectSettings) {
    let options = ConnectOptions::new()
        .with_connect_timeout(settings.connect_timeout)
        .with_timeout(settings.request_timeout);
    let options = with_tls(options, settings.tls.as_deref());
    let read = async {
        let mut client = Client::connect([source.endpoint.as_str()], Some(options)).await?;
        // Any key (etcd refuses an empty one): only the header's revision
        // is wanted.
        client
            .get(
                [0u8],
                Some(etcd_client::GetOptions::new().with_count_only()),
            )
            .await
    };
    match tokio::time::timeout(settings.request_timeout, read).await {
        Ok(Ok(response)) => {
            if let Some(header) = response.header() {
                source.revision = source.revision.max(header.revision());
            }
        }
        Ok(Err(error)) => {
            tracing::debug!(endpoint = %source.endpoint, %error, "linearizable read before the snapshot failed; the status revision stands")
        }
        Err(_) => {
            tracing::debug!(endpoint = %source.endpoint, "no linearizable read before the snapshot in time; the status revision stands")
        }
    }
}

/// Hex member and cluster IDs for status and metadata.
pub fn ids(source: &SnapshotSource) -> (String, String) {
    (format_id(source.member_id), format_id(source.cluster_id))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backup::BackupErrorCategory;

    fn source(id: u64, leader: u64, revision: i64, is_learner: bool) -> SnapshotSource {
        SnapshotSource {
            endpoint: format!("http://m{id}"),
            member_id: id,
            cluster_id: 9,
            leader,
            revision,
            version: "3.6.0".into(),
            db_size: 1,
            is_learner,
        }
    }

    #[test]
    fn prefers_the_newest_follower() {
        let candidates = [
            source(1, 1, 50, false),
            source(2, 1, 48, false),
            source(3, 1, 49, false),
        ];
        assert_eq!(prefer_follower(&candidates).map(|s| s.member_id), Some(3));
    }

    #[test]
    fn falls_back_to_the_leader_and_never_uses_learners() {
        let candidates = [source(1, 1, 50, false), source(4, 1, 60, true)];
        assert_eq!(prefer_follower(&candidates).map(|s| s.member_id), Some(1));
        let candidates = [source(4, 1, 60, true)];
        assert_eq!(prefer_follower(&candidates), None);
    }

    #[test]
    fn a_member_without_leader_is_not_used() {
        let candidates = [source(2, 0, 70, false)];
        assert_eq!(prefer_follower(&candidates), None);
    }

    #[test]
    fn every_endpoint_says_why_it_cannot_serve() {
        let refusals = choose([
            (
                "http://m1".to_string(),
                Err(ProbeError::Timeout {
                    timeout: Duration::from_secs(2),
                }),
            ),
            ("http://m2".to_string(), Ok(source(2, 0, 70, false))),
            ("http://m4".to_string(), Ok(source(4, 1, 70, true))),
        ])
        .expect_err("no usable member");
        assert!(matches!(
            refusals.0.as_slice(),
            [
                (_, SourceRefusal::Probe(ProbeError::Timeout { .. })),
                (_, SourceRefusal::NoLeader),
                (_, SourceRefusal::Learner),
            ]
        ));
        assert_eq!(
            refusals.to_string(),
            "http://m1: no answer within 2s; http://m2: knows no leader; http://m4: a learner"
        );
        let none = choose([]).expect_err("no endpoints");
        assert_eq!(none.to_string(), "no endpoints");
        let error = BackupError::NoSnapshotSource(none);
        assert_eq!(
            error.to_string(),
            "no healthy member to take a snapshot from: no endpoints"
        );
        assert_eq!(error.category(), BackupErrorCategory::Transient);

        let chosen = choose([
            ("http://m1".to_string(), Err(ProbeError::NoHeader)),
            ("http://m3".to_string(), Ok(source(3, 1, 49, false))),
        ])
        .expect("a follower");
        assert_eq!(chosen.member_id, 3);
    }

    fn settings(request_timeout: Duration) -> ConnectSettings {
        ConnectSettings {
            connect_timeout: Duration::from_secs(5),
            request_timeout,
            quorum_read_timeout: request_timeout,
            tls: None,
        }
    }

    #[tokio::test]
    async fn an_endpoint_that_never_answers_is_given_up_on_time() {
        // A socket that accepts connections and never speaks: no etcd can
        // stand in for a member that hangs. The channel's own request
        // deadline and the probe's run out together; either may report it.
        let silent = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let endpoint = format!("http://{}", silent.local_addr().expect("address"));
        let timeout = Duration::from_millis(300);
        // Only a guard against a hang: the error below says which deadline
        // ended the probe.
        let error = tokio::time::timeout(
            Duration::from_secs(60),
            probe(&endpoint, &settings(timeout)),
        )
        .await
        .expect("the probe gave up by itself")
        .expect_err("no answer");
        match &error {
            ProbeError::Timeout { timeout: waited } => assert_eq!(*waited, timeout),
            ProbeError::Etcd(etcd) => {
                assert!(etcd.to_string().contains("Timeout expired"), "{etcd}")
            }
            other => panic!("expected a timeout, got {other:?}"),
        }
    }

    #[tokio::test]
    async fn a_refused_connection_is_an_etcd_client_error() {
        // A port nothing listens on: bound, then released.
        let port = {
            let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
            listener.local_addr().expect("address").port()
        };
        let endpoint = format!("http://127.0.0.1:{port}");
        let error = probe(&endpoint, &settings(Duration::from_secs(5)))
            .await
            .expect_err("refused");
        assert!(matches!(error, ProbeError::Etcd(_)), "{error:?}");
    }
}
