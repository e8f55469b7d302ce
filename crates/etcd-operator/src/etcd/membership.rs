//! Membership changes: add a learner, promote it, remove a member.
//!
//! Each change is sent once, to the leader when it is known. Only an
//! endpoint that could not be reached at all is skipped for the next one;
//! a change that timed out may have been applied, so the error says so and
//! the caller must re-observe the member list before trying again.

use std::future::Future;

use etcd_client::{Client, MemberAddOptions};

use super::admin::{EtcdAdmin, to_member};
use super::client::LeaderRequirement;
use super::error::{EtcdError, RequestSubject};
use super::types::{Member, MemberId};

/// The result of adding a member.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AddedMember {
    /// The new member: an ID, its peer URLs, no name until it starts.
    pub member: Member,
    /// The member list right after the change.
    pub members: Vec<Member>,
    pub cluster_id: u64,
}

impl EtcdAdmin {
    /// Adds a member as a learner (non-voting) with the given peer URLs.
    /// Start it afterwards with `--initial-cluster-state=existing`; it
    /// does not count towards quorum until [`promote_learner`](Self::promote_learner).
    pub async fn add_learner(&self, peer_urls: &[String]) -> Result<AddedMember, EtcdError> {
        let urls = peer_urls.to_vec();
        let response = self
            .change_membership(
                "add learner",
                RequestSubject::PeerUrls(urls.clone()),
                move |mut client| {
                    let urls = urls.clone();
                    async move {
                        client
                            .member_add(urls, Some(MemberAddOptions::new().with_is_learner()))
                            .await
                    }
                },
            )
            .await?;
        let member = response
            .member()
            .map(to_member)
            .ok_or_else(|| EtcdError::Request {
                endpoint: String::new(),
                operation: "add learner",
                message: "etcd answered without the new member".to_string(),
            })?;
        Ok(AddedMember {
            member,
            members: response.member_list().iter().map(to_member).collect(),
            cluster_id: response
                .header()
                .map(|h| h.cluster_id())
                .unwrap_or_default(),
        })
    }

    /// Promotes a learner to a voting member. etcd refuses until the learner
    /// has caught up with the leader's log: that is
    /// [`EtcdError::LearnerNotReady`], a refusal to retry after re-observing.
    pub async fn promote_learner(&self, id: MemberId) -> Result<Vec<Member>, EtcdError> {
        let response = self
            .change_membership(
                "promote learner",
                RequestSubject::Member(id),
                move |mut client| async move { client.member_promote(id).await },
            )
            .await?;
        Ok(response.members().iter().map(to_member).collect())
    }

    /// Removes a member (voter or learner). etcd refuses with
    /// [`EtcdError::UnsafeMembershipChange`] when removing a voter would
    /// leave too few started members, or a voter was not connected lately.
    pub async fn remove_member(&self, id: MemberId) -> Result<Vec<Member>, EtcdError> {
        let response = self
            .change_membership(
                "remove member",
                RequestSubject::Member(id),
                move |mut client| async move { client.member_remove(id).await },
            )
            .await?;
        Ok(response.members().iter().map(to_member).collect())
    }

    /// Changes a member's peer URLs (every member must already listen on
    /// the new ones: the others dial them at once).
    pub async fn update_peer_urls(
        &self,
        id: MemberId,
        urls: &[String],
    ) -> Result<Vec<Member>, EtcdError> {
        let urls = urls.to_vec();
        let response = self
            .change_membership(
                "update member",
                RequestSubject::Member(id),
                move |mut client| {
                    let urls = urls.clone();
                    async move { client.member_update(id, urls).await }
                },
            )
            .await?;
        Ok(response.members().iter().map(to_member).collect())
    }

    async fn change_membership<T, F, Fut>(
        &self,
        operation: &'static str,
        subject: RequestSubject,
        request: F,
    ) -> Result<T, EtcdError>
    where
        F: Fn(Client) -> Fut,
        Fut: Future<Output = Result<T, etcd_client::Error>>,
    {
        let candidates = self.request_order(operation).await?;
        self.clients
            .first_answer(
                &candidates,
                LeaderRequirement::RequireLeader,
                operation,
                subject,
                request,
                // Never reached etcd: safe to try the next endpoint.
                EtcdError::is_unreachable,
            )
            .await
    }
}
