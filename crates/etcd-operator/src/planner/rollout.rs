//! Rolling changes: every member whose Pod was built from an older Pod
//! template (another `durable-etcd.io/pod-template-hash`) gets its Pod
//! replaced, one member at a time, followers first and the leader last once
//! leadership has moved away; each only while every voter is healthy and
//! caught up, never while a member is lost, joining or leaving. A release
//! change follows etcd's rules ([`super::release`]): one minor release at a
//! time, down only through etcd's downgrade API.

use k8s_openapi::jiff::SignedDuration;

use super::context::Context;
use super::membership::{KnownMember, Source, quorum};
use super::observed::PodPhase;
use super::release::{Release, ReleaseStep};
use super::step::{Step, Waiting};
use crate::api::version;

/// How long a member on the new template may stay unhealthy before the
/// rollout reports itself halted (it still resumes once the member is
/// healthy, or once the spec changes).
pub const ROLLOUT_STALL: SignedDuration = SignedDuration::from_secs(120);

/// How far behind the leader's raft index a member may be and still count
/// as caught up (a few hundred milliseconds of a busy cluster's writes).
const CATCH_UP_ENTRIES: u64 = 1000;

/// The rollout's progress: members on the current template, of the voters
/// the spec wants.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Progress {
    /// Members whose Pod runs the current template.
    pub updated: usize,
    /// Members wanted (`spec.replicas`).
    pub of: usize,
}

/// Whether the Pod of `ordinal` exists and runs the current template.
pub fn up_to_date(cx: &Context<'_>, ordinal: u32) -> bool {
    cx.o.objects(ordinal)
        .pod
        .is_some_and(|p| p.template_hash.as_deref() == Some(cx.desired_template.as_str()))
}

/// The rollout's progress over the ordinals the spec wants.
pub fn progress(cx: &Context<'_>) -> Progress {
    Progress {
        updated: (0..cx.replicas).filter(|&o| up_to_date(cx, o)).count(),
        of: usize::try_from(cx.replicas).unwrap_or(usize::MAX),
    }
}

/// The release a member runs: as it reports it, else its Pod's image.
pub fn running_release(cx: &Context<'_>, ordinal: u32) -> Option<Release> {
    let reported = cx
        .membership
        .of_ordinal(ordinal)
        .and_then(|m| m.version.as_deref())
        .and_then(Release::parse);
    reported.or_else(|| {
        cx.o.objects(ordinal)
            .pod
            .and_then(|p| p.version)
            .as_deref()
            .and_then(Release::parse)
    })
}

/// Labels and annotations of `spec.pod` change in place, on every Pod
/// whose own differ, one Pod per pass: nothing restarts.
pub(super) fn update_pod_metadata(cx: &Context<'_>) -> Option<Step> {
    let desired = super::observed::TemplateMetadata {
        labels: crate::api::pod_revision::user_labels(&cx.o.spec),
        annotations: cx.o.spec.pod.annotations.clone(),
    };
    cx.ordinals().into_iter().find_map(|ordinal| {
        let pod = cx.o.objects(ordinal).pod?;
        (!pod.deleting && pod.template_metadata.as_ref() != Some(&desired))
            .then_some(Step::Act(super::Action::UpdatePodMetadata { ordinal }))
    })
}

/// The step of the rollout, if one is due.
pub(super) fn roll_members(cx: &Context<'_>) -> Option<Step> {
    if cx.membership.source != Source::Live || !cx.membership.quorum || cx.restoring.is_some() {
        return None;
    }
    let desired = Release::parse(&cx.o.spec.version);
    if let (Some(target), Some(desired)) = (&cx.downgrade_target, desired)
        && Release::parse(target).is_some_and(|t| !t.same_line(desired))
    {
        return Some(Step::Act(super::Action::CancelDowngrade {
            target: target.clone(),
        }));
    }
    // Missing Pods are recreated by the lifecycle steps, from the current
    // template: the rollout only replaces Pods that exist. A Pod whose
    // volume's filesystem grows only at the next mount is replaced too.
    let outdated: Vec<u32> = (0..cx.replicas)
        .filter(|&o| {
            cx.o.objects(o).pod.is_some()
                && (!up_to_date(cx, o) || super::expansion::filesystem_waits_for_restart(cx, o))
        })
        .collect();
    if outdated.is_empty() {
        return None;
    }
    let Some(desired) = desired.filter(|_| version::is_supported(&cx.o.spec.version)) else {
        return wait(Waiting::NeedsAttention(format!(
            "version {} is not supported by this operator (supported: {}); the members keep their Pods",
            cx.o.spec.version,
            version::SUPPORTED.join(", ")
        )));
    };
    if let Some(step) = membership_settled(cx) {
        return Some(step);
    }
    if let Some(step) = release_rules(cx, desired) {
        return Some(step);
    }
    for ordinal in 0..cx.replicas {
        let Some(pod) = cx.o.objects(ordinal).pod else {
            return wait(Waiting::InProgress(format!(
                "the Pod of {} is being recreated",
                cx.name(ordinal)
            )));
        };
        if pod.deleting {
            return wait(Waiting::InProgress(format!(
                "Pod {} is terminating",
                cx.name(ordinal)
            )));
        }
    }
    let progress = progress(cx);
    let roll = |ordinal: u32| {
        Some(Step::Act(super::Action::RollMember {
            ordinal,
            change: change(cx, ordinal, desired),
            updated: progress.updated,
            of: progress.of,
        }))
    };

    // A member on an older template whose etcd fails to start (a release
    // that does not start, a bad flag: its kubelet reports the container
    // not running) is replaced first: reverting the spec must be able to
    // repair it, and it serves nobody meanwhile. A member that is down
    // because its node stopped is not: its Pod keeps its last state.
    if let Some(stuck) = outdated.iter().copied().find(|&o| {
        cx.membership.of_ordinal(o).is_some_and(|m| !m.healthy)
            && node_ready(cx, o)
            && cx.o.objects(o).pod.is_some_and(|p| p.etcd_not_running)
    }) && let Some(member) = cx.membership.of_ordinal(stuck)
        && cx.membership.change_allowed(&[member.id])
        && storage_ready(cx, member, desired)
    {
        return roll(stuck);
    }

    if let Some(waiting) = not_settled(cx) {
        return wait(waiting);
    }
    let candidates: Vec<&KnownMember> = outdated
        .iter()
        .filter_map(|&o| cx.membership.of_ordinal(o))
        .collect();
    let follower = candidates.iter().find(|m| !m.leader);
    let next = follower.or_else(|| candidates.first())?;
    let ordinal = next.ordinal?;
    if !storage_ready(cx, next, desired) {
        return wait(Waiting::InProgress(format!(
            "waiting for etcd to lower the storage version of {} to {} before it runs {desired}",
            cx.name(ordinal),
            desired.line()
        )));
    }
    if next.leader && cx.membership.voter_count() > 1 {
        // The leader last, and only once leadership has moved to a member
        // that is already on the new template.
        let to = cx
            .membership
            .voters()
            .filter(|m| m.id != next.id && cx.membership.stably_healthy(m))
            .max_by_key(|m| (m.ordinal.is_some_and(|o| up_to_date(cx, o)), m.raft_index))?;
        return Some(Step::Act(super::Action::TransferLeadership {
            from: next.id,
            to: to.id,
        }));
    }
    if !cx.membership.quorum_stays_without(next.id) {
        return wait(Waiting::Rollout(format!(
            "replacing {} now would leave fewer than {} healthy voters",
            cx.name(ordinal),
            quorum(cx.membership.voter_count())
        )));
    }
    roll(ordinal)
}

fn wait(waiting: Waiting) -> Option<Step> {
    Some(Step::Wait(waiting))
}

/// The rollout waits while the membership is not exactly the spec's voters,
/// one per ordinal, none of them lost: durability work comes first.
fn membership_settled(cx: &Context<'_>) -> Option<Step> {
    if cx.membership.learners().next().is_some() {
        return wait(Waiting::LearnerCatchingUp);
    }
    let lost = cx.lost_voters();
    if !lost.is_empty() {
        return wait(Waiting::Rollout(
            "the rollout waits while a member whose data is lost is replaced".to_string(),
        ));
    }
    let ordinals: Vec<Option<u32>> = cx.membership.voters().map(|m| m.ordinal).collect();
    let matches = ordinals.len() == usize::try_from(cx.replicas).unwrap_or(usize::MAX)
        && (0..cx.replicas).all(|o| ordinals.contains(&Some(o)));
    if !matches {
        return wait(Waiting::Rollout(
            "the rollout waits until the voters match spec.replicas".to_string(),
        ));
    }
    None
}

/// etcd's rules for the release change: one minor release at a time; up
/// only from the documented patch floor; down only through etcd's
/// downgrade, enabled before the first member runs the older release.
fn release_rules(cx: &Context<'_>, desired: Release) -> Option<Step> {
    let mut running = Vec::new();
    for ordinal in 0..cx.replicas {
        match running_release(cx, ordinal) {
            Some(release) => running.push((ordinal, release)),
            None => {
                return wait(Waiting::Rollout(format!(
                    "the rollout waits until {} reports the release it runs",
                    cx.name(ordinal)
                )));
            }
        }
    }
    for &(ordinal, release) in &running {
        match release.step_to(desired) {
            ReleaseStep::Patch | ReleaseStep::MinorDowngrade => {}
            ReleaseStep::Unsupported => {
                return wait(Waiting::NeedsAttention(format!(
                    "{} runs {release}; {desired} is more than one minor release away, and etcd moves one minor release at a time: set spec.version to a {} release first",
                    cx.name(ordinal),
                    step_towards(release, desired)
                )));
            }
            ReleaseStep::MinorUpgrade => {
                if let Some(floor) = release.upgrade_floor()
                    && release < floor
                {
                    return wait(Waiting::NeedsAttention(format!(
                        "{} runs {release}; etcd upgrades to {} only from {floor} or later: set spec.version to the newest {} release first",
                        cx.name(ordinal),
                        desired.line(),
                        release.line()
                    )));
                }
            }
        }
    }
    // The data is of a newer minor release only once etcd raised the
    // storage version (every member ran it): then, and only then, going
    // back needs etcd's downgrade. A partial upgrade just rolls back.
    let Some(storage) = cluster_storage(cx) else {
        return wait(Waiting::Rollout(
            "the rollout waits until a member reports the storage version of its data".to_string(),
        ));
    };
    let downgrade = storage.step_to(desired) == ReleaseStep::MinorDowngrade;
    let enabled = cx
        .downgrade_target
        .as_deref()
        .and_then(Release::parse)
        .is_some_and(|t| t.same_line(desired));
    if downgrade && !enabled {
        if !cx.membership.change_allowed(&[]) {
            return wait(Waiting::Rollout(
                "etcd's downgrade is enabled only while every voter has been healthy for 5s"
                    .to_string(),
            ));
        }
        return Some(Step::Act(super::Action::EnableDowngrade {
            target: desired.line(),
        }));
    }
    None
}

/// The newest storage version the voters report, else the one status
/// recorded: the release line of the cluster's data.
pub fn cluster_storage(cx: &Context<'_>) -> Option<Release> {
    cx.membership
        .voters()
        .filter_map(|m| m.storage_version.as_deref().and_then(Release::parse))
        .max()
        .or_else(|| {
            cx.o.status
                .storage_version
                .as_deref()
                .and_then(|v| Release::parse(&format!("{v}.0")))
        })
}

/// The storage version to record in status: the newest release line the
/// members' data may have reached, the figure [`cluster_storage`] falls
/// back on when no voter answers. What the voters report (or, when none
/// answers, what was recorded), raised to the line every voter's Pod runs
/// once this pass's step is taken: etcd raises its storage version to
/// that line on its own seconds later, and the members may all be gone
/// before a pass sees it. Over-stating it is safe (a Pod created on older
/// data runs a newer release, which etcd starts), under-stating it is not
/// (etcd refuses newer data). Not raised while etcd's downgrade is on.
pub fn storage_to_record(cx: &Context<'_>, step: &Step) -> Option<Release> {
    let known = cluster_storage(cx);
    if cx.downgrade_target.is_some() {
        return known;
    }
    let created = match step {
        Step::Act(super::Action::CreatePod {
            ordinal, release, ..
        }) => Some((
            *ordinal,
            release.clone().unwrap_or(cx.o.spec.version.clone()),
        )),
        _ => None,
    };
    // `None` unless every voter has a Pod (or gets one now) of a known
    // release.
    let line_of = |voter: &KnownMember| {
        let ordinal = voter.ordinal?;
        let version = match &created {
            Some((o, version)) if *o == ordinal => Some(version.clone()),
            _ => cx.o.objects(ordinal).pod.and_then(|p| p.version.clone()),
        };
        Release::parse(&version?)
    };
    let lines: Option<Vec<Release>> = cx.membership.voters().map(line_of).collect();
    let every_voter_runs = lines.and_then(|lines| lines.into_iter().min());
    known.into_iter().chain(every_voter_runs).max()
}

/// The release a Pod created now runs when not `spec.version`: the spec's
/// minor release is older than the data's (a downgrade not yet enabled, or
/// not yet applied by etcd), and etcd refuses to start on newer data; the
/// newest pinned release of the data's line starts on it. The rollout
/// replaces that Pod once etcd has lowered the storage version.
pub fn release_for_new_pods(cx: &Context<'_>) -> Option<String> {
    let desired = Release::parse(&cx.o.spec.version)?;
    let storage = cluster_storage(cx)?;
    if storage.step_to(desired) != ReleaseStep::MinorDowngrade {
        return None;
    }
    version::SUPPORTED
        .iter()
        .filter_map(|v| Release::parse(v))
        .filter(|r| r.same_line(storage))
        .max()
        .map(|r| r.to_string())
}

/// The next minor line from `from` towards `to`.
fn step_towards(from: Release, to: Release) -> String {
    if to > from {
        format!("{}.{}", from.major, from.minor + 1)
    } else {
        format!("{}.{}", from.major, from.minor.saturating_sub(1))
    }
}

/// A member may run an older minor release only once etcd has lowered the
/// storage version of its data to that release (after the downgrade was
/// enabled). A member that does not answer goes by the cluster's.
fn storage_ready(cx: &Context<'_>, member: &KnownMember, desired: Release) -> bool {
    member
        .storage_version
        .as_deref()
        .and_then(Release::parse)
        .or_else(|| cluster_storage(cx))
        .is_some_and(|s| s.step_to(desired) != ReleaseStep::MinorDowngrade)
}

/// The first voter that keeps a one-at-a-time change (a rollout, a
/// defragmentation) from taking the next member now.
#[derive(Clone, Debug, PartialEq)]
pub(super) enum Unsettled {
    /// Not healthy by its own endpoint.
    Unhealthy {
        /// Member name.
        name: String,
        /// What its endpoint says.
        detail: String,
        /// For how long.
        down_for: SignedDuration,
        /// Whether its Pod runs the current template.
        updated: bool,
    },
    /// Healthy, but its Pod is not Ready: clients do not reach it yet.
    NotReady(String),
    /// Healthy for less than the stability window.
    NotStable(String),
    /// Behind the leader's raft index.
    Behind {
        /// Member name.
        name: String,
        /// Its raft index.
        mine: u64,
        /// The leader's.
        leader: u64,
    },
}

/// Every voter healthy for the stability window, its Pod Ready and caught
/// up with the leader; else the first that is not.
pub(super) fn first_unsettled(cx: &Context<'_>) -> Option<Unsettled> {
    let leader_index = cx
        .membership
        .voters()
        .find(|m| m.leader)
        .and_then(|m| m.raft_index);
    for member in cx.membership.voters() {
        let name = member
            .ordinal
            .map(|o| cx.name(o))
            .unwrap_or_else(|| format!("{:x}", member.id));
        if !member.healthy {
            return Some(Unsettled::Unhealthy {
                detail: member
                    .health_detail
                    .clone()
                    .unwrap_or_else(|| "unhealthy".to_string()),
                down_for: cx.o.now.duration_since(member.healthy_since),
                updated: member.ordinal.is_some_and(|o| up_to_date(cx, o)),
                name,
            });
        }
        // Clients reach a member through the Services only once its Pod is
        // Ready: the next member waits for that too.
        if member
            .ordinal
            .and_then(|o| cx.o.objects(o).pod)
            .is_some_and(|p| !p.ready)
        {
            return Some(Unsettled::NotReady(name));
        }
        if !cx.membership.stably_healthy(member) {
            return Some(Unsettled::NotStable(name));
        }
        if let (Some(mine), Some(leader)) = (member.raft_index, leader_index)
            && leader.saturating_sub(mine) > CATCH_UP_ENTRIES
        {
            return Some(Unsettled::Behind { name, mine, leader });
        }
    }
    None
}

/// Why the rollout does not take the next member now, if it does not; a
/// member on the new template down for [`ROLLOUT_STALL`] halts it.
fn not_settled(cx: &Context<'_>) -> Option<Waiting> {
    Some(match first_unsettled(cx)? {
        Unsettled::Unhealthy {
            name,
            detail,
            down_for,
            updated,
        } => {
            if updated && down_for >= ROLLOUT_STALL {
                Waiting::RolloutHalted(format!(
                    "{name} runs the new Pod template but has not been healthy for {}s ({detail}); the rollout goes on once it is, or once the spec changes",
                    down_for.as_secs()
                ))
            } else {
                Waiting::Rollout(format!(
                    "the rollout waits for {name} to be healthy ({detail})"
                ))
            }
        }
        Unsettled::NotReady(name) => {
            Waiting::Rollout(format!("the rollout waits for Pod {name} to be Ready"))
        }
        Unsettled::NotStable(name) => Waiting::Rollout(format!(
            "the rollout waits until {name} has been healthy for 5s"
        )),
        Unsettled::Behind { name, mine, leader } => Waiting::Rollout(format!(
            "the rollout waits for {name} to catch up with the leader (raft index {mine} of {leader})"
        )),
    })
}

/// Whether the node of an ordinal's Pod is Ready (a Pod on a lost node is
/// not replaced by the rollout: the node's return, or the lifecycle rules,
/// decide).
fn node_ready(cx: &Context<'_>, ordinal: u32) -> bool {
    cx.o.objects(ordinal)
        .pod
        .filter(|p| p.phase != PodPhase::Unknown)
        .and_then(|p| p.node)
        .and_then(|node| cx.o.nodes.get(&node).map(|n| n.ready))
        .unwrap_or(false)
}

/// What replacing a member's Pod changes, in words.
fn change(cx: &Context<'_>, ordinal: u32, desired: Release) -> String {
    let pod = cx.o.objects(ordinal).pod;
    let role = match cx.membership.of_ordinal(ordinal) {
        Some(m) if m.leader => "leader",
        _ => "follower",
    };
    let from_template = pod
        .as_ref()
        .and_then(|p| p.template_hash.clone())
        .unwrap_or_else(|| "unrecorded".to_string());
    let template = if up_to_date(cx, ordinal) {
        "its volume's filesystem grows when it starts again".to_string()
    } else {
        format!("template {from_template} → {}", cx.desired_template)
    };
    match running_release(cx, ordinal) {
        Some(running) if running != desired => format!("{role}, {running} → {desired}, {template}"),
        _ => format!("{role}, {template}"),
    }
}
