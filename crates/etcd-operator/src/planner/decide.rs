//! The decision: which single step to take next, in a fixed order of
//! priority. Each step function returns `Some` when it decides the pass.

use super::action::{Action, Bootstrap};
use super::evidence::{PodTrouble, data_gone, local_volume_on_deleted_node, pod_trouble};
use super::membership::{KnownMember, Membership, Source, quorum};
use super::observed::{Observed, PodPhase};
use crate::api::identity::{MemberIdentity, parse_id};
use crate::api::{RecoveryPolicy, RecoverySource, RetentionPolicy};

/// What a pass decided.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// Take this action.
    Act(Action),
    /// Take no action, for this reason.
    Wait(Waiting),
}

/// Why the planner waits.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Waiting {
    /// `spec.paused`.
    Paused,
    /// Bootstrap members are starting.
    Bootstrapping,
    /// Quorum is lost; the named members are awaited.
    QuorumLost {
        /// Member names awaited.
        awaited: Vec<String>,
    },
    /// The data of a majority is known lost; waiting for the recovery policy.
    MajorityDataLost {
        /// Members whose data is lost, with the evidence.
        lost: Vec<String>,
        /// The survivor a restore would start from, as far as known.
        survivor: SurvivorChoice,
    },
    /// A membership change waits for every voter to be healthy for 5 s.
    HealthNotStable,
    /// A learner is catching up.
    LearnerCatchingUp,
    /// Something needs a person; the message says what.
    NeedsAttention(String),
    /// A Pod or volume is on its way (terminating, starting).
    InProgress(String),
    /// Nothing to do.
    Steady,
}

/// A member whose data survived the loss of a majority.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Survivor {
    /// Its ordinal.
    pub ordinal: u32,
    /// Its member name.
    pub name: String,
    /// Its etcd member ID.
    pub id: u64,
    /// Its store revision, read from it in this pass.
    pub revision: Option<i64>,
    /// Its committed raft index, read from it in this pass.
    pub raft_index: Option<u64>,
    /// The revision it last reported (status), for a person choosing a
    /// survivor that cannot be read now.
    pub last_seen_revision: Option<i64>,
}

/// Which survivor a restore starts from (rule 11): the one with the highest
/// committed raft index among every survivor whose volume exists.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SurvivorChoice {
    /// Every survivor answered; this one holds the newest data.
    Newest(Survivor),
    /// Some survivors keep their volumes but cannot be read now, so the
    /// newest is not known: wait for them, or a person chooses.
    Unreadable {
        /// The newest of those that answered, if any.
        newest_readable: Option<Survivor>,
        /// The member names that did not answer.
        unreadable: Vec<String>,
        /// What each of them last reported ("<name> last at revision N").
        last_seen: Vec<String>,
    },
    /// No voter kept its data.
    NoSurvivor,
}

impl SurvivorChoice {
    /// The survivor a restore would start from without a person's choice.
    pub fn newest(&self) -> Option<&Survivor> {
        match self {
            Self::Newest(s) => Some(s),
            _ => None,
        }
    }

    /// One line for status: what is known of the survivors.
    pub fn describe(&self) -> String {
        match self {
            Self::Newest(s) => format!(
                "newest survivor {} at revision {} (raft index {})",
                s.name,
                s.revision.map_or("unknown".to_string(), |r| r.to_string()),
                s.raft_index.map_or("unknown".to_string(), |r| r.to_string()),
            ),
            Self::Unreadable {
                newest_readable,
                unreadable,
                last_seen,
            } => format!(
                "survivors {} keep their volumes but cannot be read (an etcd restarted without quorum does not answer), so the newest data is not known: waiting for them ({}){}",
                unreadable.join(", "),
                last_seen.join(", "),
                newest_readable.as_ref().map_or(String::new(), |s| format!(
                    " (of those that answered, {} is newest at revision {}; a person may choose it explicitly)",
                    s.name,
                    s.revision.map_or("unknown".to_string(), |r| r.to_string())
                )),
            ),
            Self::NoSurvivor => "no member kept its data".to_string(),
        }
    }
}

/// Everything derived once per pass.
pub struct Context<'a> {
    /// The observation.
    pub o: &'a Observed,
    /// The membership.
    pub membership: Membership,
    /// Token of the current incarnation.
    pub token: String,
    /// The cluster has formed at least once (quorum was reached): from now
    /// on, never `--initial-cluster-state=new`.
    pub formed: bool,
    /// The etcd cluster ID, when known.
    pub cluster_id: Option<u64>,
    /// Voters of the first bootstrap.
    pub bootstrap_replicas: u32,
    /// Desired voters.
    pub replicas: u32,
    /// The restore into a new incarnation in progress, if any.
    pub restoring: Option<crate::api::RestoreStatus>,
}

impl<'a> Context<'a> {
    /// Derives the context of an observation.
    pub fn new(o: &'a Observed) -> Self {
        let membership = Membership::from_observed(o);
        let status_cluster_id = o.status.cluster_id.as_deref().and_then(parse_id);
        let pvc_cluster_id = o
            .ordinals
            .values()
            .filter_map(|objects| objects.pvc.as_ref()?.identity.cluster_id)
            .next();
        let live_cluster_id = if o.etcd.quorum_reachable {
            o.etcd.cluster_id
        } else {
            None
        };
        let restoring = o.status.restore.clone().filter(|r| r.in_progress());
        // While a restore runs, only the new incarnation serving tells its
        // cluster ID; the lost incarnation's IDs (status, PVCs) are history.
        let cluster_id = match &restoring {
            Some(restore) => {
                let lost = restore.from_cluster_id.as_deref().and_then(parse_id);
                live_cluster_id.filter(|id| Some(*id) != lost)
            }
            None => live_cluster_id.or(status_cluster_id).or(pvc_cluster_id),
        };
        let token = match &restoring {
            Some(restore) => restore.incarnation.clone(),
            None => o
                .status
                .cluster_token
                .clone()
                .unwrap_or_else(|| first_token(o)),
        };
        let replicas = o.spec.replica_count();
        let bootstrap_replicas = o
            .status
            .bootstrap_replicas
            .and_then(|r| u32::try_from(r).ok())
            .unwrap_or(replicas);
        Self {
            o,
            membership,
            token,
            formed: cluster_id.is_some(),
            cluster_id,
            bootstrap_replicas,
            replicas,
            restoring,
        }
    }

    pub(crate) fn name(&self, ordinal: u32) -> String {
        crate::resources::names::member_name(&self.o.name, ordinal)
    }

    fn identity_of(&self, ordinal: u32) -> MemberIdentity {
        let objects = self.o.objects(ordinal);
        let from_pvc = objects.pvc.map(|p| p.identity).unwrap_or_default();
        MemberIdentity {
            cluster_token: self.token.clone(),
            cluster_id: from_pvc.cluster_id.or(self.cluster_id),
            member_id: from_pvc.member_id,
        }
    }

    /// Data-loss evidence of an ordinal.
    pub fn data_gone(&self, ordinal: u32) -> Option<String> {
        let member = self.membership.of_ordinal(ordinal);
        // Rule 10: a member whose etcd answers healthy from its own data is
        // never lost, whatever the objects around it say (stripped labels,
        // a deleted Node object, a PV deleted under Retain, a stale
        // annotation).
        if self.serves_from_own_data(ordinal) {
            return None;
        }
        let objects = self.o.objects(ordinal);
        if let Some(evidence) = data_gone(self.o, &objects, member.is_some()) {
            // A deleted Node is confirmed gone only once its member has been
            // down for memberFailureTimeout: a machine that lives registers
            // its Node again well before.
            let node_deleted_only =
                local_volume_on_deleted_node(self.o, &objects).as_ref() == Some(&evidence);
            if node_deleted_only && member.is_some_and(|m| !self.down_long_enough(m)) {
                return None;
            }
            return Some(evidence);
        }
        // A PVC that records another member than the one etcd knows for
        // this ordinal holds that other member's data.
        let recorded = objects.pvc.as_ref().and_then(|p| p.identity.member_id);
        match (member, recorded) {
            (Some(m), Some(recorded))
                if self.membership.source == Source::Live && recorded != m.id =>
            {
                Some(format!(
                    "its PVC holds the data of removed member {recorded:x}"
                ))
            }
            _ => None,
        }
    }

    /// Whether a member has been down for `memberFailureTimeout`.
    fn down_long_enough(&self, member: &KnownMember) -> bool {
        !member.healthy
            && self
                .o
                .now
                .duration_since(member.healthy_since)
                .unsigned_abs()
                >= self.o.spec.member_failure_timeout()
    }

    /// Whether the member of `ordinal` answers healthy right now, from the
    /// data of the volume its Pod runs on: etcd itself says so.
    pub fn serves_from_own_data(&self, ordinal: u32) -> bool {
        self.membership.source == Source::Live
            && self
                .membership
                .of_ordinal(ordinal)
                .is_some_and(|m| m.started && m.healthy)
            && self
                .o
                .objects(ordinal)
                .pod
                .is_some_and(|p| p.phase == PodPhase::Running)
    }

    /// Why the PVC of `ordinal` is kept although its member is gone: it
    /// holds a member's data of an earlier incarnation (a survivor that a
    /// restore did not start from), not known lost and not released by a
    /// person.
    pub fn retained(&self, ordinal: u32) -> Option<String> {
        let objects = self.o.objects(ordinal);
        let pvc = objects.pvc.as_ref()?;
        let token = &pvc.identity.cluster_token;
        let member = pvc.identity.member_id?;
        if token.is_empty() || *token == self.token || pvc.released || pvc.deleting {
            return None;
        }
        if self.restoring.is_none() && self.serves_from_own_data(ordinal) {
            return None;
        }
        let name = self.name(ordinal);
        let known_lost = self
            .o
            .status
            .restore
            .as_ref()
            .is_some_and(|r| r.from_incarnation == *token && r.lost_members.contains(&name));
        if known_lost || data_gone(self.o, &objects, false).is_some() {
            return None;
        }
        Some(format!(
            "the PVC of {name} keeps the data of member {member:x} of incarnation {token}"
        ))
    }

    /// Voters whose data is known gone: they will never be healthy again, so
    /// they do not hold up the changes that replace them.
    pub fn lost_voters(&self) -> Vec<u64> {
        self.membership
            .voters()
            .filter(|m| m.ordinal.and_then(|o| self.data_gone(o)).is_some())
            .map(|m| m.id)
            .collect()
    }

    /// The ordinals considered in this pass.
    pub fn ordinals(&self) -> Vec<u32> {
        let mut all: Vec<u32> = (0..self.replicas)
            .chain(self.o.ordinals.keys().copied())
            .chain(self.membership.ordinals())
            .collect();
        all.sort_unstable();
        all.dedup();
        all
    }
}

/// The first incarnation token: unique to this `EtcdCluster` object, and the
/// same on every pass, so an operator restart never invents another one.
fn first_token(o: &Observed) -> String {
    first_token_of(&o.name, &o.uid)
}

/// The first incarnation token of the cluster `name` with UID `uid`.
pub fn first_token_of(name: &str, uid: &str) -> String {
    let uid: String = uid
        .chars()
        .filter(|c| c.is_ascii_alphanumeric())
        .take(12)
        .collect();
    format!("{name}-{uid}")
}

/// Decides the single step of this pass.
pub fn decide(cx: &Context<'_>) -> Step {
    if cx.o.spec.paused {
        return Step::Wait(Waiting::Paused);
    }
    [
        unowned_names as fn(&Context<'_>) -> Option<Step>,
        children,
        restore_labels,
        super::restore::restore_in_progress,
        bootstrap,
        release_pods_on_gone_nodes,
        record_identity,
        recreate_pods,
        without_quorum,
        learner_in_progress,
        replace_lost_members,
        pdb,
        add_missing_members,
        scale_down,
        retained_data,
    ]
    .iter()
    .find_map(|step| step(cx))
    .unwrap_or(Step::Wait(Waiting::Steady))
}

fn act(action: Action) -> Option<Step> {
    Some(Step::Act(action))
}

fn wait(waiting: Waiting) -> Option<Step> {
    Some(Step::Wait(waiting))
}

/// An object under a name the cluster needs that it does not own is never
/// taken over (a forced apply would): a person renames or removes it.
fn unowned_names(cx: &Context<'_>) -> Option<Step> {
    if cx.o.unowned.is_empty() {
        return None;
    }
    wait(Waiting::NeedsAttention(format!(
        "{} exist(s) but do(es) not belong to this cluster; the operator will not take it over: delete or rename it",
        cx.o.unowned.join(", ")
    )))
}

/// Rule 10: objects of a member that lost their labels were found by name;
/// they are this member's, so their labels go back (never a replacement).
fn restore_labels(cx: &Context<'_>) -> Option<Step> {
    cx.o.ordinals.iter().find_map(|(&ordinal, objects)| {
        let pvc = objects.pvc.as_ref().is_some_and(|p| p.labels_missing);
        let pod = objects.pod.as_ref().is_some_and(|p| p.labels_missing);
        (pvc || pod).then_some(Step::Act(Action::RestoreLabels { ordinal, pvc, pod }))
    })
}

fn children(cx: &Context<'_>) -> Option<Step> {
    if !cx.o.children.peer_service {
        return act(Action::CreatePeerService);
    }
    if !cx.o.children.client_service {
        return act(Action::CreateClientService);
    }
    None
}

/// Rule 6: `new` only before the cluster has ever formed, all members of
/// the first bootstrap with the same `--initial-cluster` and token.
fn bootstrap(cx: &Context<'_>) -> Option<Step> {
    if cx.formed {
        return None;
    }
    if cx
        .o
        .spec
        .bootstrap
        .as_ref()
        .is_some_and(|b| b.from_backup.is_some())
    {
        // Never an empty keyspace when the user asked for a backup: the
        // restore is recorded and carried out by `restore_in_progress`.
        // Once it is complete the cluster has formed.
        return act(Action::RestoreFromBackup {
            ordinal: 0,
            new_token: cx.token.clone(),
        });
    }
    let initial: Vec<u32> = (0..cx.bootstrap_replicas).collect();
    for &ordinal in &initial {
        if cx.o.objects(ordinal).pvc.is_none() {
            return act(Action::CreatePvc {
                ordinal,
                identity: MemberIdentity {
                    cluster_token: cx.token.clone(),
                    ..Default::default()
                },
            });
        }
    }
    for &ordinal in &initial {
        let objects = cx.o.objects(ordinal);
        if objects.pod.is_none() && objects.pvc.as_ref().is_some_and(|p| !p.deleting) {
            return act(Action::CreatePod {
                ordinal,
                bootstrap: Bootstrap::New {
                    token: cx.token.clone(),
                    initial_members: initial.clone(),
                },
                identity: cx.identity_of(ordinal),
            });
        }
    }
    wait(Waiting::Bootstrapping)
}

/// Rule 4: a Pod on a node confirmed gone can be released (force-deleted):
/// nothing of it can still run. Done for Pods already terminating, and for
/// Pods whose volume can follow them to another node once the member has
/// been given `memberFailureTimeout`.
fn release_pods_on_gone_nodes(cx: &Context<'_>) -> Option<Step> {
    let timeout = cx.o.spec.member_failure_timeout();
    for ordinal in cx.ordinals() {
        let objects = cx.o.objects(ordinal);
        let (Some(pod), Some(PodTrouble::NodeGone { node })) =
            (&objects.pod, pod_trouble(cx.o, &objects))
        else {
            continue;
        };
        let waited_enough = cx.o.node_deleted(&node)
            || cx
                .o
                .nodes
                .get(&node)
                .and_then(|n| n.not_ready_since)
                .is_none_or(|since| cx.o.now.duration_since(since).unsigned_abs() >= timeout);
        let volume_moves = objects
            .pvc
            .as_ref()
            .is_some_and(|p| p.volume == super::observed::VolumeKind::Network);
        let data_lost = cx.data_gone(ordinal).is_some();
        if pod.deleting || (waited_enough && (volume_moves || data_lost)) {
            return act(Action::DeletePod {
                ordinal,
                force: true,
                reason: format!("node {node} is confirmed gone"),
            });
        }
    }
    None
}

/// Records on each PVC the member its data belongs to, once etcd shows it.
fn record_identity(cx: &Context<'_>) -> Option<Step> {
    if cx.membership.source != Source::Live {
        return None;
    }
    let cluster_id = cx.o.etcd.cluster_id?;
    for member in cx
        .membership
        .members
        .iter()
        .filter(|m| m.started && m.healthy)
    {
        let Some(ordinal) = member.ordinal else {
            continue;
        };
        let Some(pvc) = cx.o.objects(ordinal).pvc else {
            continue;
        };
        if pvc.deleting || pvc.identity.member_id == Some(member.id) {
            continue;
        }
        // A recorded ID that differs from the member serving from this
        // volume is stale metadata (rule 10): the data is this member's, as
        // etcd shows, so the record is corrected while it serves — before a
        // restart would have the guard refuse its own data.
        if pvc.identity.member_id.is_some() && !cx.serves_from_own_data(ordinal) {
            continue;
        }
        // Only record the member that actually runs on this PVC: its Pod is
        // there and etcd reports it started.
        if cx.o.objects(ordinal).pod.is_none() {
            continue;
        }
        return act(Action::AnnotatePvcIdentity {
            ordinal,
            identity: MemberIdentity {
                cluster_token: pvc.identity.cluster_token.clone(),
                cluster_id: Some(cluster_id),
                member_id: Some(member.id),
            },
        });
    }
    None
}

/// Lifecycle rows "pod deleted or evicted" and "majority of pods down": a
/// member whose PVC is intact gets its Pod back — same name, same PVC, same
/// member — with or without quorum.
fn recreate_pods(cx: &Context<'_>) -> Option<Step> {
    let known = !cx.membership.members.is_empty();
    let initial_members = if known {
        cx.membership.ordinals()
    } else {
        (0..cx.bootstrap_replicas).collect()
    };
    for ordinal in cx.ordinals() {
        let objects = cx.o.objects(ordinal);
        if objects.pod.is_some() {
            continue;
        }
        let Some(pvc) = &objects.pvc else { continue };
        if pvc.deleting || cx.data_gone(ordinal).is_some() {
            continue;
        }
        let belongs = match cx.membership.of_ordinal(ordinal) {
            Some(_) => true,
            // Without any membership knowledge, a PVC of this incarnation
            // that records no foreign member is one of ours.
            None => !known && pvc.identity.cluster_token == cx.token,
        };
        if !belongs {
            continue;
        }
        let mut members = initial_members.clone();
        if !members.contains(&ordinal) {
            members.push(ordinal);
            members.sort_unstable();
        }
        return act(Action::CreatePod {
            ordinal,
            bootstrap: Bootstrap::Existing {
                token: cx.token.clone(),
                initial_members: members,
            },
            identity: cx.identity_of(ordinal),
        });
    }
    None
}

/// Rule 2: without quorum, only wait. Rule 7: a restore only when the data
/// of a majority is known lost and the recovery policy says so.
fn without_quorum(cx: &Context<'_>) -> Option<Step> {
    if cx.membership.source == Source::Live && cx.membership.quorum {
        return None;
    }
    let voters: Vec<&KnownMember> = cx.membership.voters().collect();
    let lost: Vec<(&KnownMember, String)> = voters
        .iter()
        .filter_map(|m| Some((*m, cx.data_gone(m.ordinal?)?)))
        .collect();
    if !voters.is_empty() && voters.len() - lost.len() < quorum(voters.len()) {
        let survivor = choose_survivor(cx, &lost);
        let restore = match cx.o.spec.recovery.source {
            RecoverySource::Survivor => approved_survivor(cx, &lost, &survivor)
                .and_then(|chosen| restore_from_survivor(cx, &chosen)),
            RecoverySource::Backup => {
                let approved = cx.o.spec.recovery.policy == RecoveryPolicy::NewestSurvivor
                    || cx.o.spec.recovery.approved_incarnation.as_deref()
                        == Some(cx.token.as_str());
                approved
                    .then(|| restore_from_backup_in_place(cx, &survivor))
                    .flatten()
            }
        };
        if let Some(step) = restore {
            return Some(step);
        }
        return wait(Waiting::MajorityDataLost {
            survivor,
            lost: lost
                .iter()
                .map(|(m, why)| {
                    format!(
                        "{} ({why})",
                        m.ordinal.map(|o| cx.name(o)).unwrap_or_default()
                    )
                })
                .collect(),
        });
    }
    let awaited = voters
        .iter()
        .filter(|m| !m.healthy)
        .map(|m| {
            m.ordinal
                .map(|o| cx.name(o))
                .unwrap_or_else(|| format!("{:x}", m.id))
        })
        .collect();
    wait(Waiting::QuorumLost { awaited })
}

/// The voters whose data was not lost, with what they said in this pass.
fn survivors<'c>(
    cx: &'c Context<'_>,
    lost: &[(&KnownMember, String)],
) -> Vec<(&'c KnownMember, u32)> {
    cx.membership
        .voters()
        .filter(|m| !lost.iter().any(|(l, _)| l.id == m.id))
        .filter_map(|m| Some((m, m.ordinal?)))
        .collect()
}

fn survivor_of(cx: &Context<'_>, member: &KnownMember, ordinal: u32) -> Survivor {
    let live = cx.membership.source == Source::Live;
    Survivor {
        ordinal,
        name: cx.name(ordinal),
        id: member.id,
        revision: member.revision.filter(|_| live),
        raft_index: member.raft_index.filter(|_| live),
        last_seen_revision: cx
            .o
            .status
            .members
            .iter()
            .find(|m| m.name == cx.name(ordinal))
            .and_then(|m| m.revision),
    }
}

/// Rule 11: the newest survivor is the one with the highest committed raft
/// index (then revision) among *all* voters whose data was not lost; while
/// one of them cannot be read, the newest is unknown. What status recorded
/// earlier is not a reading: only what a member answered in this pass.
pub fn choose_survivor(cx: &Context<'_>, lost: &[(&KnownMember, String)]) -> SurvivorChoice {
    let all: Vec<Survivor> = survivors(cx, lost)
        .into_iter()
        .map(|(m, ordinal)| survivor_of(cx, m, ordinal))
        .collect();
    let newest = |list: &[&Survivor]| -> Option<Survivor> {
        list.iter()
            .max_by_key(|s| (s.raft_index, s.revision, std::cmp::Reverse(s.ordinal)))
            .map(|s| (*s).clone())
    };
    let readable: Vec<&Survivor> = all.iter().filter(|s| s.raft_index.is_some()).collect();
    let unreadable: Vec<String> = all
        .iter()
        .filter(|s| s.raft_index.is_none())
        .map(|s| s.name.clone())
        .collect();
    if all.is_empty() {
        SurvivorChoice::NoSurvivor
    } else if unreadable.is_empty() {
        newest(&readable).map_or(SurvivorChoice::NoSurvivor, SurvivorChoice::Newest)
    } else {
        SurvivorChoice::Unreadable {
            newest_readable: newest(&readable),
            last_seen: all
                .iter()
                .filter(|s| s.raft_index.is_none())
                .map(|s| {
                    format!(
                        "{} last at revision {}",
                        s.name,
                        s.last_seen_revision
                            .map_or("unknown".to_string(), |r| r.to_string())
                    )
                })
                .collect(),
            unreadable,
        }
    }
}

/// The survivor a restore from a survivor may start from now, if the
/// recovery policy allows one: by `NewestSurvivor`, only the newest of a
/// complete reading; by a person, the survivor they named at the revision
/// they named, which must be what it answers now.
fn approved_survivor(
    cx: &Context<'_>,
    lost: &[(&KnownMember, String)],
    choice: &SurvivorChoice,
) -> Option<Survivor> {
    let recovery = &cx.o.spec.recovery;
    if recovery.policy == RecoveryPolicy::NewestSurvivor {
        return choice.newest().cloned();
    }
    if recovery.approved_incarnation.as_deref() != Some(cx.token.as_str()) {
        return None;
    }
    let named = recovery.approved_survivor.as_deref()?;
    let survivor = survivors(cx, lost)
        .into_iter()
        .map(|(m, ordinal)| survivor_of(cx, m, ordinal))
        .find(|s| s.name == named)?;
    match survivor.revision {
        // It answers: the approval must name what it holds now.
        Some(revision) => (Some(revision) == recovery.approved_revision).then_some(survivor),
        // It cannot be read (an etcd restarted without quorum does not serve
        // its client port): a person may still choose it explicitly, at the
        // revision it last reported; the other survivors' volumes are kept.
        None => (survivor.last_seen_revision.is_some()
            && survivor.last_seen_revision == recovery.approved_revision)
            .then_some(Survivor {
                revision: survivor.last_seen_revision,
                ..survivor
            }),
    }
}

fn restore_from_survivor(cx: &Context<'_>, survivor: &Survivor) -> Option<Step> {
    let incarnation = cx.o.status.cluster_token.as_deref().unwrap_or_default();
    Some(Step::Act(Action::RestoreFromSurvivor {
        ordinal: survivor.ordinal,
        id: survivor.id,
        revision: survivor.revision,
        new_token: next_token(&cx.token, incarnation),
    }))
}

/// A restore from the backups of `spec.recovery.backup` into the volume of
/// the newest survivor (its data kept beside the restored one), else of
/// member 0. The backup is restored, so an unreadable survivor does not
/// hold it up; its volume is kept like every other survivor's.
fn restore_from_backup_in_place(cx: &Context<'_>, choice: &SurvivorChoice) -> Option<Step> {
    cx.o.spec.recovery.backup.as_ref()?;
    let target = match choice {
        SurvivorChoice::Newest(s) => s.ordinal,
        SurvivorChoice::Unreadable {
            newest_readable, ..
        } => newest_readable.as_ref().map_or(0, |s| s.ordinal),
        SurvivorChoice::NoSurvivor => 0,
    };
    let incarnation = cx.o.status.cluster_token.as_deref().unwrap_or_default();
    Some(Step::Act(Action::RestoreFromBackup {
        ordinal: target,
        new_token: next_token(&cx.token, incarnation),
    }))
}

/// The token of the incarnation after `token`: `<token>-r<n>`.
fn next_token(token: &str, _previous: &str) -> String {
    match token
        .rsplit_once("-r")
        .and_then(|(base, n)| Some((base, n.parse::<u32>().ok()?)))
    {
        Some((base, n)) => format!("{base}-r{}", n + 1),
        None => format!("{token}-r1"),
    }
}

/// The shortest time between two entries committed for a joining learner.
const RAFT_NUDGE_INTERVAL: k8s_openapi::jiff::SignedDuration =
    k8s_openapi::jiff::SignedDuration::from_secs(5);

/// Rule 3: at most one learner; promote it once it has caught up.
fn learner_in_progress(cx: &Context<'_>) -> Option<Step> {
    let learner = cx.membership.learners().next()?;
    let beyond_spec = learner.ordinal.is_none_or(|o| o >= cx.replicas);
    let lost = learner.ordinal.and_then(|o| cx.data_gone(o));
    if beyond_spec || lost.is_some() {
        return act(Action::RemoveMember {
            id: learner.id,
            ordinal: learner.ordinal,
            reason: lost.unwrap_or_else(|| "learner no longer wanted by spec.replicas".to_string()),
        });
    }
    let ordinal = learner.ordinal?;
    let pod_running =
        cx.o.objects(ordinal)
            .pod
            .is_some_and(|p| p.phase == PodPhase::Running && !p.deleting);
    // At most one entry per interval: the status write of each nudge
    // triggers the next pass at once.
    let nudged_lately = cx.o.status.last_operation.as_ref().is_some_and(|op| {
        op.type_ == "AdvanceRaftLog" && cx.o.now.duration_since(op.time.0) < RAFT_NUDGE_INTERVAL
    });
    if !learner.started
        && pod_running
        && !nudged_lately
        && cx.membership.source == Source::Live
        && cx.membership.quorum
    {
        // Harmless while it receives the snapshot; needed once it has
        // applied it on a cluster where nothing else is written.
        return act(Action::AdvanceRaftLog {
            learner: learner.id,
            ordinal,
        });
    }
    if !learner.started || !cx.membership.stably_healthy(learner) {
        return wait(Waiting::LearnerCatchingUp);
    }
    let leader_index = cx
        .membership
        .members
        .iter()
        .find(|m| m.leader)
        .and_then(|m| m.raft_index);
    let caught_up = match (learner.raft_index, leader_index) {
        (Some(mine), Some(leader)) => mine.saturating_mul(10) >= leader.saturating_mul(9),
        _ => true,
    };
    if !caught_up {
        return wait(Waiting::LearnerCatchingUp);
    }
    if !cx.membership.change_allowed(&cx.lost_voters()) {
        return wait(Waiting::HealthNotStable);
    }
    act(Action::PromoteLearner {
        id: learner.id,
        ordinal,
    })
}

/// Lifecycle rows "PVC/PV deleted, data dir wiped or foreign" and "node
/// gone, node-local PV": remove the member whose data is gone (remove, then
/// add as a learner), one at a time, only while the others hold quorum and
/// are healthy.
fn replace_lost_members(cx: &Context<'_>) -> Option<Step> {
    let lost = cx.lost_voters();
    for member in cx.membership.voters() {
        let Some(ordinal) = member.ordinal else {
            continue;
        };
        let Some(evidence) = cx.data_gone(ordinal) else {
            continue;
        };
        if !cx.membership.change_allowed(&lost) {
            return wait(Waiting::HealthNotStable);
        }
        let remaining = cx.membership.voter_count() - 1;
        let healthy_remaining = cx
            .membership
            .voters()
            .filter(|m| m.id != member.id && m.healthy)
            .count();
        if remaining == 0 || healthy_remaining < quorum(remaining) {
            return wait(Waiting::NeedsAttention(format!(
                "{} lost its data ({evidence}) but removing it would leave no quorum",
                cx.name(ordinal)
            )));
        }
        return act(Action::RemoveMember {
            id: member.id,
            ordinal: Some(ordinal),
            reason: evidence,
        });
    }
    None
}

/// Ordinals wanted by the spec without a member: clear what is left of a
/// removed member, then PVC, learner, Pod. Also scale-up.
fn add_missing_members(cx: &Context<'_>) -> Option<Step> {
    if cx.membership.source != Source::Live || !cx.membership.quorum {
        return None;
    }
    for ordinal in 0..cx.replicas {
        if cx.membership.of_ordinal(ordinal).is_some() {
            continue;
        }
        let objects = cx.o.objects(ordinal);
        if let Some(pvc) = &objects.pvc {
            if pvc.deleting {
                if objects.pod.is_some() {
                    return release_stale_pod(cx, ordinal);
                }
                return wait(Waiting::InProgress(format!(
                    "PVC of {} is being deleted",
                    cx.name(ordinal)
                )));
            }
            if let Some(evidence) = data_gone(cx.o, &objects, false) {
                return act(Action::DeletePvc {
                    ordinal,
                    reason: format!("it holds no usable member data: {evidence}"),
                });
            }
            if cx.retained(ordinal).is_some() {
                continue;
            }
            if let Some(old) = pvc.identity.member_id {
                // etcd never lets a removed member rejoin: the data of a
                // member no longer in the cluster cannot serve this ordinal
                // again. (Scale-down leftovers stay while the ordinal is not
                // wanted; storage.retentionPolicy applies there.)
                return act(Action::DeletePvc {
                    ordinal,
                    reason: format!(
                        "it holds the data of removed member {old:x}, which can never rejoin"
                    ),
                });
            }
        }
        if objects.pod.is_some() {
            return release_stale_pod(cx, ordinal);
        }
        if objects.pvc.is_none() {
            return act(Action::CreatePvc {
                ordinal,
                identity: cx.identity_of(ordinal),
            });
        }
        if cx.membership.learners().next().is_some() {
            return wait(Waiting::LearnerCatchingUp);
        }
        if !cx.membership.change_allowed(&[]) {
            return wait(Waiting::HealthNotStable);
        }
        return act(Action::AddLearner { ordinal });
    }
    None
}

/// A Pod of an ordinal without member: delete it (gracefully, or by force
/// when its node is confirmed gone) before anything new starts there.
fn release_stale_pod(cx: &Context<'_>, ordinal: u32) -> Option<Step> {
    let objects = cx.o.objects(ordinal);
    let pod = objects.pod.as_ref()?;
    if pod.deleting {
        return wait(Waiting::InProgress(format!(
            "Pod {} is terminating",
            cx.name(ordinal)
        )));
    }
    act(Action::DeletePod {
        ordinal,
        force: false,
        reason: "its member is no longer in the cluster".to_string(),
    })
}

/// Scale down: one member at a time among the ordinals beyond
/// `spec.replicas`: an unhealthy one first (it serves nobody, and waiting for
/// it to be healthy would block the scale-down forever), else the highest
/// ordinal; leadership moved away first; then its Pod; then its PVC by the
/// retention policy. Never below a quorum of healthy voters (rule 5).
fn scale_down(cx: &Context<'_>) -> Option<Step> {
    if cx.membership.source != Source::Live || !cx.membership.quorum {
        return None;
    }
    let extra = cx
        .membership
        .voters()
        .filter(|m| m.ordinal.is_some_and(|o| o >= cx.replicas))
        .max_by_key(|m| (!m.healthy, m.ordinal));
    if let Some(member) = extra {
        let except: &[u64] = if member.healthy { &[] } else { &[member.id] };
        if !cx.membership.change_allowed(except) {
            return wait(Waiting::HealthNotStable);
        }
        let remaining = cx.membership.voter_count() - 1;
        let healthy_remaining = cx
            .membership
            .voters()
            .filter(|m| m.id != member.id && m.healthy)
            .count();
        if remaining == 0 || healthy_remaining < quorum(remaining) {
            return wait(Waiting::HealthNotStable);
        }
        if member.leader {
            let to = cx
                .membership
                .voters()
                .filter(|m| m.ordinal.is_some_and(|o| o < cx.replicas))
                .find(|m| cx.membership.stably_healthy(m))?;
            return act(Action::TransferLeadership {
                from: member.id,
                to: to.id,
            });
        }
        return act(Action::RemoveMember {
            id: member.id,
            ordinal: member.ordinal,
            reason: if member.healthy {
                "scaling down".to_string()
            } else {
                "scaling down (an unhealthy member first)".to_string()
            },
        });
    }
    let leftovers: Vec<u32> =
        cx.o.ordinals
            .keys()
            .copied()
            .filter(|&o| o >= cx.replicas && cx.membership.of_ordinal(o).is_none())
            .collect();
    for ordinal in leftovers.into_iter().rev() {
        let objects = cx.o.objects(ordinal);
        if objects.pod.is_some() {
            return release_stale_pod(cx, ordinal);
        }
        if let Some(pvc) = &objects.pvc
            && !pvc.deleting
            && cx.o.spec.storage.retention_policy == RetentionPolicy::Delete
            && cx.retained(ordinal).is_none()
        {
            return act(Action::DeletePvc {
                ordinal,
                reason: "scaled down; storage.retentionPolicy is Delete".to_string(),
            });
        }
    }
    None
}

/// Rule 5: the PodDisruptionBudget keeps a quorum of the current voters
/// (not of `spec.replicas`: during and after a scale the two differ). Until
/// the voters are known it is created for the spec's size.
fn pdb(cx: &Context<'_>) -> Option<Step> {
    let voters = if cx.membership.source == Source::Live && cx.membership.voter_count() > 0 {
        cx.membership.voter_count()
    } else if cx.o.children.pdb {
        return None;
    } else {
        usize::try_from(cx.replicas).unwrap_or(1).max(1)
    };
    let min_available = u32::try_from(quorum(voters)).unwrap_or(u32::MAX);
    let current =
        cx.o.children
            .pdb_min_available
            .and_then(|m| u32::try_from(m).ok());
    (!cx.o.children.pdb || current != Some(min_available)).then_some(Step::Act(
        Action::ApplyPodDisruptionBudget { min_available },
    ))
}

/// Rule 11: PVCs that hold a survivor's data of a lost incarnation are
/// kept until a person releases them; the cluster says so instead of
/// looking complete.
fn retained_data(cx: &Context<'_>) -> Option<Step> {
    let kept: Vec<String> =
        cx.o.ordinals
            .keys()
            .filter_map(|&o| cx.retained(o))
            .collect();
    if kept.is_empty() {
        return None;
    }
    wait(Waiting::NeedsAttention(format!(
        "{}; annotate a PVC with {}=true to let the operator delete it and replace its member",
        kept.join("; "),
        crate::api::identity::RELEASE_DATA_ANNOTATION
    )))
}
