//! Choosing the member a snapshot is streamed from, and opening the stream.
//!
//! A follower is preferred: streaming a large database costs the serving
//! member disk reads and network, and the leader has the most to do. The
//! leader serves only when no follower is healthy. Learners are never used
//! (they may lag), nor a member whose keyspace hash differs from the
//! majority's (see [`crate::etcd::agreement`]).

use std::time::Duration;

use etcd_client::{Client, ConnectOptions, SnapshotStreaming};
use futures::future::join_all;

use super::BackupError;
use super::source_refusal::{ProbeError, SourceRefusal, SourceRefusals};
use crate::etcd::agreement::{Agreement, KeyspaceHash};
use crate::etcd::{ConnectSettings, format_id, with_tls};

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
    let (usable, mut refusals) = usable_voters(endpoints.iter().cloned().zip(probes));
    let (agreeing, disagreeing) = agreeing_voters(usable, settings).await;
    refusals.extend(disagreeing);
    choose(agreeing, refusals).map_err(BackupError::NoSnapshotSource)
}

/// The members that answered their status as voters that know a leader,
/// and why each other endpoint cannot serve.
fn usable_voters(
    probes: impl IntoIterator<Item = (String, Result<SnapshotSource, ProbeError>)>,
) -> (Vec<SnapshotSource>, Vec<(String, SourceRefusal)>) {
    let mut usable = Vec::new();
    let mut refusals = Vec::new();
    for (endpoint, probe) in probes {
        match probe {
            Ok(source) if source.is_learner => refusals.push((endpoint, SourceRefusal::Learner)),
            Ok(source) if source.leader == 0 => refusals.push((endpoint, SourceRefusal::NoLeader)),
            Ok(source) => usable.push(source),
            Err(error) => refusals.push((endpoint, error.into())),
        }
    }
    (usable, refusals)
}

/// Hashes every usable voter's keyspace at the lowest revision they all
/// have applied and keeps those that agree with the majority.
async fn agreeing_voters(
    usable: Vec<SnapshotSource>,
    settings: &ConnectSettings,
) -> (Vec<SnapshotSource>, Vec<(String, SourceRefusal)>) {
    let Some(revision) = usable.iter().map(|s| s.revision).min() else {
        return (usable, Vec::new());
    };
    let hashes = join_all(
        usable
            .iter()
            .map(|s| keyspace_hash(&s.endpoint, revision, settings)),
    )
    .await;
    let compared = crate::etcd::agreement::compare(
        &usable
            .iter()
            .map(|s| s.member_id)
            .zip(hashes)
            .collect::<Vec<_>>(),
    );
    let mut agreeing = Vec::new();
    let mut refusals = Vec::new();
    for (source, (_, agreement)) in usable.into_iter().zip(compared) {
        match agreement {
            Agreement::Agrees => agreeing.push(source),
            Agreement::Disagrees { hash, majority } => refusals.push((
                source.endpoint,
                SourceRefusal::Disagrees {
                    revision,
                    hash,
                    majority,
                },
            )),
            Agreement::Unknown(reason) => refusals.push((
                source.endpoint,
                SourceRefusal::NotCompared { revision, reason },
            )),
        }
    }
    (agreeing, refusals)
}

async fn keyspace_hash(
    endpoint: &str,
    revision: i64,
    settings: &ConnectSettings,
) -> Result<KeyspaceHash, String> {
    let options = ConnectOptions::new()
        .with_connect_timeout(settings.connect_timeout)
        .with_timeout(settings.request_timeout);
    let options = with_tls(options, settings.tls.as_deref());
    let request = async {
        let mut client = Client::connect([endpoint], Some(options)).await?;
        client.hash_kv(revision).await
    };
    let response = tokio::time::timeout(settings.request_timeout, request)
        .await
        .map_err(|_| format!("no hash within {:?}", settings.request_timeout))?
        .map_err(|e| e.to_string())?;
    Ok(KeyspaceHash {
        hash: response.hash(),
        compact_revision: response.compact_version(),
    })
}

/// The source among the voters that agree ([`prefer_follower`]), or why
/// each endpoint cannot serve.
fn choose(
    agreeing: Vec<SnapshotSource>,
    refusals: Vec<(String, SourceRefusal)>,
) -> Result<SnapshotSource, SourceRefusals> {
    match prefer_follower(&agreeing) {
        Some(source) => Ok(source.clone()),
        None => Err(SourceRefusals(refusals)),
    }
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

    /// `choose` as `choose_source` calls it, with the agreement already
    /// decided.
    fn choose_from(
        probes: Vec<(String, Result<SnapshotSource, ProbeError>)>,
    ) -> Result<SnapshotSource, SourceRefusals> {
        let (usable, refusals) = usable_voters(probes);
        choose(usable, refusals)
    }

    #[test]
    fn every_endpoint_says_why_it_cannot_serve() {
        let refusals = choose_from(vec![
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
        let none = choose_from(Vec::new()).expect_err("no endpoints");
        assert_eq!(none.to_string(), "no endpoints");
        let error = BackupError::NoSnapshotSource(none);
        assert_eq!(
            error.to_string(),
            "no healthy member to take a snapshot from: no endpoints"
        );
        assert_eq!(error.category(), BackupErrorCategory::Transient);

        let chosen = choose_from(vec![
            ("http://m1".to_string(), Err(ProbeError::NoHeader)),
            ("http://m3".to_string(), Ok(source(3, 1, 49, false))),
        ])
        .expect("a follower");
        assert_eq!(chosen.member_id, 3);
    }

    #[test]
    fn a_member_that_disagrees_says_so() {
        let refusal = SourceRefusal::Disagrees {
            revision: 120,
            hash: 0x1234,
            majority: 0xabcd,
        };
        assert_eq!(
            refusal.to_string(),
            "its keyspace hash at revision 120 is 0x00001234 where the majority's is 0x0000abcd: its data differs from its peers'"
        );
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
