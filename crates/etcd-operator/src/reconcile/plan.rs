//! The seam between the reconciler and the pure planner: a [`Snapshot`]
//! becomes the planner's [`Observed`]; the planner's one [`Action`] becomes
//! the concrete [`Step`] that `act` executes, built with the `resources`
//! builders; its status and Events are handed on.
//!
//! Everything here is pure, so the translation is tested on plain objects.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;

use super::act::{Child, Step};
use super::facts;
use super::observe::Snapshot;
use crate::addressing::restore_pod_name;
use crate::addressing::{member_name, ordinal_of_member, pvc_name};
use crate::api::identity::{DAMAGED_DATA_ANNOTATION, SET_ASIDE_FROM_ANNOTATION};
use crate::api::pod_revision::{AppliedKeys, TEMPLATE_METADATA_ANNOTATION, user_labels};
use crate::api::{EtcdCluster, EtcdClusterStatus};
use crate::planner::{self, Action, ActionKind, EventType, Observed, OrdinalObjects};
use crate::resources::scheduling::{self, PlacementFacts, VolumeLocality};
use crate::resources::{self, MemberAddressing};

/// How soon a pass follows one that took a step. The next pass reads the
/// API server afresh before it acts (a copy its watch has not brought up
/// to date yet only costs that read), so waiting longer only adds to every
/// sequence of steps: a replacement takes six.
pub const AFTER_A_STEP: Duration = Duration::from_millis(50);

/// What the seam needs beyond the observation to build objects.
#[derive(Debug, Clone)]
pub struct BuildSettings {
    /// Image of the `member-guard` init container (the operator's own).
    pub operator_image: String,
    /// DNS domain of the Kubernetes cluster.
    pub cluster_domain: String,
}

/// What one pass will do.
#[derive(Debug, Clone)]
pub struct PassPlan {
    /// The one step to take, if any.
    pub step: Option<Step>,
    /// The kind of the planner's action behind the step: its name in
    /// status, Events, the log and metrics.
    pub action: Option<ActionKind>,
    /// The planner's sentence for that step, for its Event and the log.
    pub description: Option<String>,
    /// The Event of the action, published once the step is taken (none
    /// for a quiet kind).
    pub action_event: Option<PlanEvent>,
    /// The status to write (timestamps are settled by `status::finalize`).
    pub status: EtcdClusterStatus,
    /// Events reporting waits, condition changes and refusals.
    pub events: Vec<PlanEvent>,
    /// When to observe again at the latest.
    pub requeue_after: Duration,
}

/// An Event the planner asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlanEvent {
    /// Warning rather than Normal.
    pub warning: bool,
    /// PascalCase reason.
    pub reason: String,
    /// One-line note.
    pub note: String,
    /// PascalCase action.
    pub action: String,
}

/// Plans one pass at time `now`.
pub fn plan(
    cluster: &EtcdCluster,
    snapshot: &Snapshot,
    settings: &BuildSettings,
    now: Timestamp,
) -> PassPlan {
    let observed = observed(cluster, snapshot, now);
    let planned = planner::plan(&observed);
    let action = planned.action.as_ref().map(Action::kind);
    let to_event = |e: &planner::PlannedEvent, action: &str| PlanEvent {
        warning: e.type_ == EventType::Warning,
        reason: e.reason.clone(),
        note: e.message.clone(),
        action: action.to_owned(),
    };
    // The action's own Event is published by the pipeline once it is taken.
    let (action_events, events): (Vec<_>, Vec<_>) = planned
        .events
        .iter()
        .partition(|e| action.is_some_and(|kind| e.reason == kind.reason()));
    let action_event =
        action.and_then(|kind| action_events.first().map(|e| to_event(e, kind.name())));
    let events: Vec<PlanEvent> = events.into_iter().map(|e| to_event(e, "Observe")).collect();
    let status = planned.status;
    let description = planned.action.as_ref().map(|a| a.describe(&observed.name));
    let step = planned
        .action
        .as_ref()
        .map(|action| to_step(action, cluster, snapshot, &observed, settings));
    let requeue_after = if step.is_some() {
        // Observe again soon: the next step is planned from what this one
        // changed (a change to a watched object starts a pass sooner).
        AFTER_A_STEP
    } else {
        planned.requeue_after
    };
    PassPlan {
        step,
        action,
        description,
        action_event,
        status,
        events,
        requeue_after,
    }
}

/// The planner's view of a snapshot.
pub fn observed(cluster: &EtcdCluster, snapshot: &Snapshot, now: Timestamp) -> Observed {
    let name = cluster.name_any();
    let mut ordinals: BTreeMap<u32, OrdinalObjects> = BTreeMap::new();
    for pvc in &snapshot.pvcs {
        let Some(ordinal) = pvc
            .name_any()
            .strip_prefix("data-")
            .and_then(|member| ordinal_of_member(&name, member))
        else {
            continue;
        };
        let mut state = facts::pvc_state(pvc, snapshot.volume_of(pvc));
        state.labels_missing = facts::labels_missing(pvc, &name, ordinal);
        ordinals.entry(ordinal).or_default().pvc = Some(state);
    }
    for pod in &snapshot.pods {
        if let Some(ordinal) = ordinal_of_member(&name, &pod.name_any()) {
            let mut state = facts::pod_state(pod);
            state.labels_missing = facts::labels_missing(pod, &name, ordinal);
            ordinals.entry(ordinal).or_default().pod = Some(state);
        }
    }
    let restore_name = restore_pod_name(&name);
    let restore_pod = snapshot
        .pods
        .iter()
        .find(|p| p.name_any() == restore_name)
        .map(facts::restore_pod_state);
    Observed {
        restore_pod,
        unowned: snapshot.unowned.clone(),
        damaged_volumes_kept: snapshot
            .set_aside_volumes
            .iter()
            .map(facts::describe_set_aside)
            .collect(),
        volume_usage: snapshot.volume_usage.clone(),
        log_tails: snapshot
            .wal_tails
            .iter()
            .map(|(&ordinal, tail)| {
                (
                    ordinal,
                    crate::planner::LogTail {
                        last_index: tail.last_index,
                        last_term: tail.last_term,
                        persisted_commit: tail.persisted_commit,
                    },
                )
            })
            .collect(),
        keyspaces: snapshot.keyspaces.clone(),
        backup_schedules: snapshot.backup_schedules.clone(),
        tls: snapshot.tls.clone(),
        transport: crate::planner::TransportObservation {
            stage: snapshot.transport.desired(&snapshot.etcd),
            refused: snapshot.transport.intent.refused.clone(),
        },
        volume_expansion_allowed: snapshot
            .storage
            .class
            .as_ref()
            .map(|c| c.allow_volume_expansion == Some(true)),
        members_may_share_a_node: scheduling::members_may_share_a_node_with_their_data(
            &cluster.spec.pod,
            placement(cluster, snapshot).volumes,
        ),
        name,
        uid: cluster.uid().unwrap_or_default(),
        generation: cluster.metadata.generation,
        spec: cluster.spec.clone(),
        status: cluster.status.clone().unwrap_or_default(),
        now,
        children: snapshot.children,
        etcd: snapshot.etcd.clone(),
        ordinals,
        nodes: snapshot
            .nodes
            .iter()
            .map(|(name, node)| (name.clone(), facts::node_state(node)))
            .collect(),
    }
}

/// Where the members' volumes keep their data and how many zones their
/// nodes span: what member spreading is decided from.
pub fn placement(cluster: &EtcdCluster, snapshot: &Snapshot) -> PlacementFacts {
    let class = snapshot
        .storage
        .class
        .as_ref()
        .map_or(VolumeLocality::Unknown, |class| {
            scheduling::storage_class_locality(class, snapshot.storage.driver.as_ref())
        });
    let bound: Vec<_> = snapshot
        .pvcs
        .iter()
        .map(|pvc| facts::volume_kind(snapshot.volume_of(pvc)))
        .collect();
    let selector = &cluster.spec.pod.node_selector;
    let eligible = snapshot.nodes.values().filter(|node| {
        let labels = node.labels();
        facts::node_readiness(node).0
            && node
                .spec
                .as_ref()
                .is_none_or(|s| s.unschedulable != Some(true))
            && selector.iter().all(|(k, v)| labels.get(k) == Some(v))
    });
    PlacementFacts {
        volumes: scheduling::volume_locality(class, bound.iter()),
        zones: Some(scheduling::zone_count(eligible)).filter(|&zones| zones > 0),
    }
}

/// The concrete step of an action.
fn to_step(
    action: &Action,
    cluster: &EtcdCluster,
    snapshot: &Snapshot,
    observed: &Observed,
    settings: &BuildSettings,
) -> Step {
    let name = cluster.name_any();
    let addressing = MemberAddressing {
        cluster_domain: settings.cluster_domain.clone(),
        transport: snapshot.transport.desired(&snapshot.etcd),
        ..MemberAddressing::new(name.clone(), cluster.namespace().unwrap_or_default())
    };
    let member = |ordinal: u32| member_name(&name, ordinal);
    let member_of_id =
        |id: u64, ordinal: Option<u32>| ordinal.map_or_else(|| crate::etcd::format_id(id), member);
    let uid_of_pod = |pod_name: &str| {
        snapshot
            .pods
            .iter()
            .find(|p| p.name_any() == pod_name)
            .and_then(|p| p.uid())
    };
    match action {
        Action::CreatePeerService => {
            Step::Apply(Child::Service(Box::new(resources::peer_service(cluster))))
        }
        Action::CreateClientService => {
            Step::Apply(Child::Service(Box::new(resources::client_service(cluster))))
        }
        Action::ApplyPodDisruptionBudget { min_available } => Step::Apply(Child::Pdb(Box::new(
            resources::pdb(cluster, *min_available),
        ))),
        Action::RestoreLabels { ordinal, pvc, pod } => Step::RestoreLabels {
            pvc: pvc.then(|| pvc_name(&name, *ordinal)),
            pod: pod.then(|| member(*ordinal)),
            labels: resources::member_labels(&name, *ordinal),
        },
        Action::CreatePvc {
            ordinal,
            identity,
            size,
        } => Step::Apply(Child::Pvc(Box::new(resources::pvc(
            cluster, *ordinal, identity, size,
        )))),
        Action::CreatePod {
            ordinal,
            bootstrap,
            identity,
            release,
        } => Step::Apply(Child::Pod(Box::new(resources::member_pod_with(
            &with_release(cluster, release.as_deref()),
            &addressing,
            &settings.operator_image,
            *ordinal,
            bootstrap,
            identity,
            &resources::MemberPodFacts {
                placement: placement(cluster, snapshot),
                etcd_ran_on_volume: false,
                tls_revision: snapshot.tls.as_ref().map(|t| t.revision.clone()),
                quota_backend_bytes: Some(observed.quota_backend_bytes()),
            },
        )))),
        Action::DeletePod { ordinal, force, .. } => {
            let pod_name = member(*ordinal);
            Step::DeletePod {
                uid: uid_of_pod(&pod_name),
                name: pod_name,
                force: *force,
            }
        }
        Action::RollMember { ordinal, .. } => {
            let pod_name = member(*ordinal);
            Step::DeletePod {
                uid: uid_of_pod(&pod_name),
                name: pod_name,
                force: false,
            }
        }
        Action::UpdatePodMetadata { ordinal } => {
            let pod_name = member(*ordinal);
            let recorded = snapshot
                .pods
                .iter()
                .find(|p| p.name_any() == pod_name)
                .and_then(|p| p.annotations().get(TEMPLATE_METADATA_ANNOTATION))
                .and_then(|v| AppliedKeys::decode(v))
                .unwrap_or_default();
            let applied = AppliedKeys::of(&cluster.spec);
            let set_or_remove = |desired: BTreeMap<String, String>, recorded: &[String]| {
                let mut patch: BTreeMap<String, Option<String>> = recorded
                    .iter()
                    .filter(|k| !desired.contains_key(*k))
                    .map(|k| (k.clone(), None))
                    .collect();
                patch.extend(desired.into_iter().map(|(k, v)| (k, Some(v))));
                patch
            };
            let mut annotations =
                set_or_remove(cluster.spec.pod.annotations.clone(), &recorded.annotations);
            annotations.insert(
                TEMPLATE_METADATA_ANNOTATION.to_string(),
                Some(applied.encode()),
            );
            Step::PatchPodMetadata {
                labels: set_or_remove(user_labels(&cluster.spec), &recorded.labels),
                annotations,
                name: pod_name,
            }
        }
        Action::ExpandVolume { ordinal, size } => Step::ResizePvc {
            name: pvc_name(&name, *ordinal),
            size: size.clone(),
        },
        Action::EnableDowngrade { target } => Step::EnableDowngrade {
            target: target.clone(),
        },
        Action::CancelDowngrade { .. } => Step::CancelDowngrade,
        Action::DefragmentMember { ordinal, id, .. } => Step::Defragment {
            name: member_name(&name, *ordinal),
            endpoint: snapshot
                .etcd
                .member(*id)
                .and_then(|m| m.endpoint.clone())
                .unwrap_or_else(|| addressing.client_url(*ordinal)),
        },
        Action::CompactHistory { revision } => Step::Compact {
            revision: *revision,
        },
        Action::UpdatePeerUrl { id, name, to, .. } => Step::UpdatePeerUrls {
            name: name.clone(),
            id: *id,
            urls: vec![to.clone()],
        },
        Action::RotateCa { step, request } => Step::RotateCa {
            cluster: cluster.name_any(),
            step: *step,
            request: request.clone(),
        },
        Action::SetVolumeAside {
            ordinal,
            volume,
            evidence,
        } => {
            let claim = pvc_name(&name, *ordinal);
            Step::SetVolumeAside {
                volume: volume.clone(),
                annotations: std::collections::BTreeMap::from([
                    (DAMAGED_DATA_ANNOTATION.to_string(), evidence.clone()),
                    (
                        SET_ASIDE_FROM_ANNOTATION.to_string(),
                        format!(
                            "{}/{claim} (member {})",
                            cluster.namespace().unwrap_or_default(),
                            member(*ordinal)
                        ),
                    ),
                ]),
                labels: std::collections::BTreeMap::from([(
                    crate::api::identity::CLUSTER_LABEL.to_string(),
                    name.clone(),
                )]),
                claim,
            }
        }
        Action::DisarmNoSpace { members } => Step::DisarmAlarms {
            alarms: members
                .iter()
                .map(|&member_id| crate::etcd::Alarm {
                    member_id,
                    kind: crate::etcd::AlarmKind::NoSpace,
                })
                .collect(),
        },
        Action::DisarmCorrupt { members } => Step::DisarmAlarms {
            alarms: members
                .iter()
                .map(|&member_id| crate::etcd::Alarm {
                    member_id,
                    kind: crate::etcd::AlarmKind::Corrupt,
                })
                .collect(),
        },
        Action::DeletePvc { ordinal, .. } => {
            let claim = pvc_name(&name, *ordinal);
            Step::DeletePvc {
                uid: snapshot
                    .pvcs
                    .iter()
                    .find(|p| p.name_any() == claim)
                    .and_then(|p| p.uid()),
                name: claim,
            }
        }
        Action::AnnotatePvcIdentity { ordinal, identity } => Step::AnnotatePvc {
            name: pvc_name(&name, *ordinal),
            annotations: resources::identity_annotations(identity),
        },
        Action::AddLearner { ordinal } => Step::AddLearner {
            name: member(*ordinal),
            peer_urls: vec![addressing.peer_url(*ordinal)],
        },
        Action::PromoteLearner { id, ordinal } => Step::PromoteLearner {
            name: member(*ordinal),
            id: *id,
        },
        Action::RemoveMember { id, ordinal, .. } => Step::RemoveMember {
            name: member_of_id(*id, *ordinal),
            id: *id,
        },
        Action::AdvanceRaftLog { ordinal, .. } => Step::AdvanceRaftLog {
            name: member_name(&name, *ordinal),
        },
        Action::TransferLeadership { to, .. } => Step::MoveLeader {
            name: snapshot
                .etcd
                .members
                .iter()
                .find(|m| m.id == *to)
                .map(|m| m.name.clone())
                .filter(|n| !n.is_empty())
                .unwrap_or_else(|| crate::etcd::format_id(*to)),
            id: *to,
        },
        // The restore is recorded in status (written after this step); the
        // next passes carry out its steps.
        Action::RestoreFromSurvivor { .. } | Action::RestoreFromBackup { .. } => {
            Step::RecordRestore
        }
        Action::RunRestore {
            ordinal,
            token,
            from_backup,
        } => Step::Apply(Child::Pod(Box::new(resources::restore::restore_pod(
            cluster,
            &addressing,
            &settings.operator_image,
            *ordinal,
            token,
            from_backup
                .then(|| restore_backup_source(cluster))
                .flatten(),
        )))),
        Action::DeleteRestorePod { .. } => {
            let pod_name = restore_pod_name(&name);
            Step::DeletePod {
                uid: uid_of_pod(&pod_name),
                name: pod_name,
                force: false,
            }
        }
        Action::AdoptRestoredVolume { ordinal, token } => Step::ResetPvcIdentity {
            name: pvc_name(&name, *ordinal),
            token: token.clone(),
        },
    }
}

/// The cluster as the Pod builder sees it: `spec.version` replaced by the
/// release the planner chose for a new Pod, if it chose one.
fn with_release(cluster: &EtcdCluster, release: Option<&str>) -> EtcdCluster {
    let mut cluster = cluster.clone();
    if let Some(release) = release {
        // The image the spec names runs the spec's release, not this one.
        cluster.spec.version = release.to_string();
        cluster.spec.image = None;
    }
    cluster
}

#[cfg(test)]
mod tests;

/// The backup a restore reads: `spec.recovery.backup` when it replaces a
/// lost incarnation, `spec.bootstrap.fromBackup` when it bootstraps.
fn restore_backup_source(cluster: &EtcdCluster) -> Option<crate::api::BackupSource> {
    let in_place = cluster
        .status
        .as_ref()
        .and_then(|s| s.restore.as_ref())
        .is_some_and(|r| !r.from_incarnation.is_empty());
    if in_place {
        return cluster.spec.recovery.backup.clone();
    }
    cluster
        .spec
        .bootstrap
        .as_ref()
        .and_then(|b| b.from_backup.clone())
}
