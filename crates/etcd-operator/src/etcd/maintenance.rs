//! Space maintenance through the etcd API: compaction, defragmentation of
//! one member, and the alarms etcd raises (`NOSPACE`, `CORRUPT`).

use std::time::Duration;

use super::admin::EtcdAdmin;
use super::client::{ConnectSettings, LeaderRequirement};
use super::error::{EtcdError, RequestSubject};
use super::types::MemberId;

/// How long one member's defragmentation may take: it rewrites the whole
/// database file (a few seconds per GiB on a local SSD, more on network
/// disks).
pub const DEFRAG_TIMEOUT: Duration = Duration::from_secs(600);

/// An alarm etcd raised, as its status reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Alarm {
    /// The member the alarm is about.
    pub member_id: MemberId,
    /// Which alarm.
    pub kind: AlarmKind,
}

/// etcd's alarm kinds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AlarmKind {
    /// The member's database reached the backend quota: the cluster takes
    /// only reads and deletes until the alarm is disarmed.
    NoSpace,
    /// The member's data differs from the others': etcd refuses requests.
    Corrupt,
    /// A kind this operator does not know.
    Other(String),
}

impl AlarmKind {
    /// The name etcd gives it.
    pub fn name(&self) -> &str {
        match self {
            Self::NoSpace => "NOSPACE",
            Self::Corrupt => "CORRUPT",
            Self::Other(name) => name,
        }
    }
}

/// The alarms among a status's errors: etcd writes each active alarm as
/// `memberID:<decimal id> alarm:<KIND>`; other errors are skipped.
pub fn parse_alarms(errors: &[String]) -> Vec<Alarm> {
    errors
        .iter()
        .filter_map(|error| {
            let mut member_id = None;
            let mut kind = None;
            for field in error.split_whitespace() {
                if let Some(id) = field.strip_prefix("memberID:") {
                    member_id = id.parse::<u64>().ok();
                } else if let Some(name) = field.strip_prefix("alarm:") {
                    kind = Some(match name {
                        "NOSPACE" => AlarmKind::NoSpace,
                        "CORRUPT" => AlarmKind::Corrupt,
                        other => AlarmKind::Other(other.to_string()),
                    });
                }
            }
            Some(Alarm {
                member_id: member_id?,
                kind: kind?,
            })
        })
        .collect()
}

impl EtcdAdmin {
    /// Defragments the member answering on `endpoint`, and only it: its
    /// database file is rewritten without free pages. The member serves no
    /// request meanwhile (and, with etcd's `StopGRPCServiceOnDefrag`
    /// feature, reports its gRPC service as not serving so that clients
    /// go elsewhere). Waits up to [`DEFRAG_TIMEOUT`].
    pub async fn defragment(&self, endpoint: &str) -> Result<(), EtcdError> {
        let long = EtcdAdmin::new(
            [endpoint],
            ConnectSettings {
                request_timeout: DEFRAG_TIMEOUT,
                ..self.settings()
            },
        )?;
        long.clients
            .call(
                endpoint,
                LeaderRequirement::Local,
                "defragment",
                RequestSubject::None,
                |client| async move { client.maintenance_client().defragment().await.map(|_| ()) },
            )
            .await
    }

    /// Compacts the key-value history up to `revision` (physically, so the
    /// freed pages are reusable when it returns). A revision already
    /// compacted is not an error: the history is gone either way.
    pub async fn compact(&self, revision: i64) -> Result<(), EtcdError> {
        let leader = self.find_leader().await?;
        let result = self
            .clients
            .call(
                &leader.endpoint,
                LeaderRequirement::RequireLeader,
                "compact",
                RequestSubject::None,
                |mut client| async move {
                    client
                        .compact(
                            revision,
                            Some(etcd_client::CompactionOptions::new().with_physical()),
                        )
                        .await
                        .map(|_| ())
                },
            )
            .await;
        match result {
            Err(error)
                if error
                    .to_string()
                    .contains("required revision has been compacted") =>
            {
                Ok(())
            }
            other => other,
        }
    }

    /// The hash of the keyspace of the member answering on `endpoint` at
    /// `revision` (etcd's `HashKV`), and the compaction revision it covers
    /// from. Answered under every alarm: it reads the member's own data.
    pub async fn keyspace_hash(
        &self,
        endpoint: &str,
        revision: i64,
    ) -> Result<super::agreement::KeyspaceHash, EtcdError> {
        self.clients
            .call(
                endpoint,
                LeaderRequirement::Local,
                "hash keyspace",
                RequestSubject::None,
                |mut client| async move { client.hash_kv(revision).await },
            )
            .await
            .map(|response| super::agreement::KeyspaceHash {
                hash: response.hash(),
                compact_revision: response.compact_version(),
            })
    }

    /// Every member of `observed` hashes its keyspace at the lowest
    /// revision the voters that answered report, and the hashes are compared
    /// against the one a majority of the voters holds (a member that did not
    /// answer counts as not compared). `None` when no voter answered.
    pub async fn compare_keyspaces(
        &self,
        observed: &super::ObservedEtcd,
    ) -> Option<super::agreement::KeyspaceComparison> {
        let revision = observed
            .members
            .iter()
            .filter(|m| !m.is_learner)
            .filter_map(|m| m.status.as_ref())
            .map(|s| s.revision)
            .min()?;
        let hash_of = |m: &super::ObservedMember| {
            let endpoint = m.endpoint.clone();
            let id = m.id;
            async move {
                let hash = match endpoint {
                    Some(endpoint) => self
                        .keyspace_hash(&endpoint, revision)
                        .await
                        .map_err(|e| e.to_string()),
                    None => Err("its endpoint did not answer".to_string()),
                };
                (id, hash)
            }
        };
        let (voters, learners) = futures::join!(
            futures::future::join_all(
                observed
                    .members
                    .iter()
                    .filter(|m| !m.is_learner)
                    .map(hash_of)
            ),
            futures::future::join_all(
                observed
                    .members
                    .iter()
                    .filter(|m| m.is_learner)
                    .map(hash_of)
            ),
        );
        Some(super::agreement::KeyspaceComparison {
            revision,
            members: super::agreement::compare_with_learners(&voters, &learners),
        })
    }

    /// Disarms one alarm of one member.
    pub async fn disarm(&self, alarm: &Alarm) -> Result<(), EtcdError> {
        let leader = self.find_leader().await?;
        let kind = match alarm.kind {
            AlarmKind::NoSpace => etcd_client::AlarmType::Nospace,
            AlarmKind::Corrupt => etcd_client::AlarmType::Corrupt,
            AlarmKind::Other(_) => etcd_client::AlarmType::None,
        };
        let member_id = alarm.member_id;
        self.clients
            .call(
                &leader.endpoint,
                LeaderRequirement::RequireLeader,
                "disarm alarm",
                RequestSubject::None,
                |client| async move {
                    let mut options = etcd_client::AlarmOptions::new();
                    options.with_member(member_id);
                    client
                        .maintenance_client()
                        .alarm(etcd_client::AlarmAction::Deactivate, kind, Some(options))
                        .await
                        .map(|_| ())
                },
            )
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn alarms_are_read_from_the_status_errors() {
        let errors = vec![
            "memberID:10276657743932975437 alarm:NOSPACE ".to_string(),
            "etcdserver: no leader".to_string(),
            "memberID:12 alarm:CORRUPT".to_string(),
            "memberID:13 alarm:SOMETHING".to_string(),
        ];
        assert_eq!(
            parse_alarms(&errors),
            vec![
                Alarm {
                    member_id: 10276657743932975437,
                    kind: AlarmKind::NoSpace
                },
                Alarm {
                    member_id: 12,
                    kind: AlarmKind::Corrupt
                },
                Alarm {
                    member_id: 13,
                    kind: AlarmKind::Other("SOMETHING".to_string())
                },
            ]
        );
    }
}
