//! Choosing the member a snapshot is streamed from, and opening the stream.
//!
//! A follower is preferred: streaming a large database costs the serving
//! member disk reads and network, and the leader has the most to do. The
//! leader serves only when no follower is healthy. Learners are never used
//! (they may lag).

use std::time::Duration;

use etcd_client::{Client, ConnectOptions, SnapshotStreaming};
use futures::future::join_all;

use super::BackupError;
use crate::etcd::{ConnectSettings, format_id};

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
/// The error lists why each endpoint was not usable.
pub async fn choose_source(
    endpoints: &[String],
    settings: ConnectSettings,
) -> Result<SnapshotSource, BackupError> {
    let probes = join_all(endpoints.iter().map(|e| probe(e, settings))).await;
    let mut usable = Vec::new();
    let mut refusals = Vec::new();
    for (endpoint, probe) in endpoints.iter().zip(probes) {
        match probe {
            Ok(source) => usable.push(source),
            Err(reason) => refusals.push(format!("{endpoint}: {reason}")),
        }
    }
    match prefer_follower(&usable) {
        Some(source) => Ok(source.clone()),
        None if refusals.is_empty() && endpoints.is_empty() => {
            Err(BackupError::NoHealthyMember("no endpoints".to_string()))
        }
        None => {
            for source in &usable {
                if source.is_learner {
                    refusals.push(format!("{}: a learner", source.endpoint));
                } else {
                    refusals.push(format!("{}: knows no leader", source.endpoint));
                }
            }
            Err(BackupError::NoHealthyMember(refusals.join("; ")))
        }
    }
}

async fn probe(endpoint: &str, settings: ConnectSettings) -> Result<SnapshotSource, String> {
    let options = ConnectOptions::new()
        .with_connect_timeout(settings.connect_timeout)
        .with_timeout(settings.request_timeout);
    let request = async {
        let mut client = Client::connect([endpoint], Some(options)).await?;
        client.status().await
    };
    let status = tokio::time::timeout(settings.request_timeout, request)
        .await
        .map_err(|_| format!("no answer within {:?}", settings.request_timeout))?
        .map_err(|e| e.to_string())?;
    if let Some(error) = status.errors().first() {
        return Err(format!("reports {error}"));
    }
    let header = status
        .header()
        .ok_or_else(|| "status without header".to_string())?;
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
    connect_timeout: Duration,
) -> Result<SnapshotStreaming, BackupError> {
    let options = ConnectOptions::new()
        .with_connect_timeout(connect_timeout)
        .with_keep_alive(Duration::from_secs(10), connect_timeout);
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

/// Hex member and cluster IDs for status and metadata.
pub fn ids(source: &SnapshotSource) -> (String, String) {
    (format_id(source.member_id), format_id(source.cluster_id))
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
