//! Turning TLS on for a running plaintext cluster: once every member's Pod
//! runs the stage the member list asks for (a rollout of its own, through
//! the Pod template), each member's peer URL is updated in etcd, one
//! member per pass, while every voter is settled. See
//! [`crate::transport`] for the stages.

use super::action::Action;
use super::context::Context;
use super::membership::Source;
use super::rollout::{first_unsettled, up_to_date};
use super::step::{Step, Waiting};

/// The next peer URL to update, once every member runs the stage that
/// listens on both the old and the new URL.
pub(super) fn move_peer_urls(cx: &Context<'_>) -> Option<Step> {
    let stage = cx.o.transport.stage;
    if !stage.is_turning_tls_on() || cx.membership.source != Source::Live {
        return None;
    }
    let (member, url) = cx.o.etcd.members.iter().find_map(|member| {
        let url = member
            .peer_urls
            .iter()
            .find_map(|url| stage.peer_url_update(url))?;
        Some((member, url))
    })?;
    let name = if member.name.is_empty() {
        format!("{:x}", member.id)
    } else {
        member.name.clone()
    };
    let waits = |why: String| {
        Some(Step::Wait(Waiting::Rollout(format!(
            "turning TLS on: the peer URL of {name} moves to {url} once {why}"
        ))))
    };
    if let Some(ordinal) = (0..cx.replicas).find(|&o| !up_to_date(cx, o)) {
        return waits(format!(
            "{} runs Pod template {} (it does not yet)",
            cx.name(ordinal),
            cx.desired_template
        ));
    }
    if let Some(unsettled) = first_unsettled(cx) {
        return waits(format!(
            "every voter is settled ({})",
            super::maintenance::describe(&unsettled)
        ));
    }
    Some(Step::Act(Action::UpdatePeerUrl {
        id: member.id,
        name,
        from: member.peer_urls.clone(),
        to: url,
    }))
}

/// A spec the operator does not follow (turning TLS off) is reported
/// instead of "the cluster matches its spec".
pub(super) fn refused(cx: &Context<'_>) -> Option<Step> {
    let refused = cx.o.transport.refused.clone()?;
    Some(Step::Wait(Waiting::NeedsAttention(refused)))
}
