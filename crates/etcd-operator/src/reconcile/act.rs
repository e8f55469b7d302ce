//! Act: carries out the one step a pass planned, and nothing else.
//!
//! Children are written by server-side apply with the field manager
//! `etcd-operator`; deletions carry a UID precondition so that a step
//! planned for one incarnation of a pod or PVC never hits its successor;
//! membership changes go through the etcd layer.

use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod, Service};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{Patch, PatchParams};
use kube::{Api, Client, Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::FIELD_MANAGER;
use super::delete::delete_unless_gone;
use super::error::ActError;
use crate::api::identity::{CLUSTER_ID_ANNOTATION, CLUSTER_TOKEN_ANNOTATION, MEMBER_ID_ANNOTATION};
use crate::etcd::{ConnectSettings, EtcdAdmin, EtcdError, MemberId, format_id};

/// A child object to apply.
#[derive(Debug, Clone)]
pub enum Child {
    /// A member pod.
    Pod(Box<Pod>),
    /// A member's volume claim.
    Pvc(Box<PersistentVolumeClaim>),
    /// The peer (headless) or client Service.
    Service(Box<Service>),
    /// The PodDisruptionBudget of the cluster.
    Pdb(Box<PodDisruptionBudget>),
}

impl Child {
    /// Kind, for messages and events.
    pub fn kind(&self) -> &'static str {
        match self {
            Child::Pod(_) => "Pod",
            Child::Pvc(_) => "PersistentVolumeClaim",
            Child::Service(_) => "Service",
            Child::Pdb(_) => "PodDisruptionBudget",
        }
    }

    /// Object name.
    pub fn name(&self) -> String {
        match self {
            Child::Pod(o) => o.name_any(),
            Child::Pvc(o) => o.name_any(),
            Child::Service(o) => o.name_any(),
            Child::Pdb(o) => o.name_any(),
        }
    }
}

/// One concrete step against the API server or etcd.
#[derive(Debug, Clone)]
pub enum Step {
    /// Server-side apply of a child.
    Apply(Child),
    /// Delete a pod, only if it is still the incarnation `uid`.
    DeletePod {
        /// Pod name.
        name: String,
        /// UID the plan saw.
        uid: Option<String>,
        /// Skip the grace period: only for a pod whose node is confirmed
        /// gone (durability rule 4), so no process of it can still run.
        force: bool,
    },
    /// Merge annotations into a PVC (identity of the data it holds).
    AnnotatePvc {
        /// PVC name.
        name: String,
        /// Annotations to set.
        annotations: std::collections::BTreeMap<String, String>,
    },
    /// Delete a PVC, only if it is still the incarnation `uid`.
    DeletePvc {
        /// PVC name.
        name: String,
        /// UID the plan saw.
        uid: Option<String>,
    },
    /// Add a learner with these peer URLs.
    AddLearner {
        /// Member name (for messages).
        name: String,
        /// Peer URLs of the new member.
        peer_urls: Vec<String>,
    },
    /// Promote a caught-up learner.
    PromoteLearner {
        /// Member name (for messages).
        name: String,
        /// etcd member ID.
        id: MemberId,
    },
    /// Change a member's peer URLs in etcd's membership.
    UpdatePeerUrls {
        /// Member name (for messages).
        name: String,
        /// etcd member ID.
        id: MemberId,
        /// Its new peer URLs.
        urls: Vec<String>,
    },
    /// Remove a member from etcd's membership.
    RemoveMember {
        /// Member name (for messages).
        name: String,
        /// etcd member ID.
        id: MemberId,
    },
    /// Commit a raft entry that changes no key.
    AdvanceRaftLog {
        /// Name of the learner waiting for it (for messages).
        name: String,
    },
    /// Move leadership to another voter.
    MoveLeader {
        /// Member name (for messages).
        name: String,
        /// etcd member ID of the new leader.
        id: MemberId,
    },
    /// Record the PVC as holding a new incarnation's data: its token set,
    /// the lost incarnation's cluster and member IDs cleared.
    ResetPvcIdentity {
        /// PVC name.
        name: String,
        /// Token of the new incarnation.
        token: String,
    },
    /// Merge labels and annotations into a Pod (`None` removes a key).
    PatchPodMetadata {
        /// Pod name.
        name: String,
        /// Labels to set or remove.
        labels: std::collections::BTreeMap<String, Option<String>>,
        /// Annotations to set or remove.
        annotations: std::collections::BTreeMap<String, Option<String>>,
    },
    /// Ask a PVC for a larger volume.
    ResizePvc {
        /// PVC name.
        name: String,
        /// The new `spec.resources.requests.storage`.
        size: String,
    },
    /// Start etcd's downgrade to a minor release.
    EnableDowngrade {
        /// The minor release, e.g. `3.6`.
        target: String,
    },
    /// Cancel etcd's downgrade in progress.
    CancelDowngrade,
    /// Defragment the member answering on `endpoint`.
    Defragment {
        /// Member name.
        name: String,
        /// Its client endpoint.
        endpoint: String,
    },
    /// Compact the history up to a revision.
    Compact {
        /// The revision.
        revision: i64,
    },
    /// Keep a PersistentVolume for a person: reclaim policy `Retain` and
    /// these annotations, only while it is bound to `claim`.
    SetVolumeAside {
        /// The PersistentVolume.
        volume: String,
        /// The claim it must be bound to (in the cluster's namespace).
        claim: String,
        /// Annotations to set (the damage and where it came from).
        annotations: std::collections::BTreeMap<String, String>,
        /// Labels to set (the cluster's, so that it is found again).
        labels: std::collections::BTreeMap<String, String>,
    },
    /// Disarm alarms.
    DisarmAlarms {
        /// The alarms.
        alarms: Vec<crate::etcd::Alarm>,
    },
    /// Take a step of the CA rotation of a cluster (its CA Secret).
    RotateCa {
        /// The cluster.
        cluster: String,
        /// The step.
        step: crate::tls::CaRotationStep,
        /// The request (annotation value) it carries out.
        request: String,
    },
    /// Nothing to do against the API server or etcd: the pass records a
    /// restore in status, which is written after the step.
    RecordRestore,
    /// Merge the member labels back into a PVC and/or Pod that lost them.
    RestoreLabels {
        /// The PVC to label, if it lost its labels.
        pvc: Option<String>,
        /// The Pod to label, if it lost its labels.
        pod: Option<String>,
        /// The labels.
        labels: std::collections::BTreeMap<String, String>,
    },
}

/// Executes `step` in `namespace`; `endpoints` are the client endpoints of
/// the cluster for membership calls. Returns what changed, in one line, for
/// the action's Event and the log.
pub async fn execute(
    client: &Client,
    namespace: &str,
    endpoints: &[String],
    etcd_settings: ConnectSettings,
    step: &Step,
) -> Result<String, ActError> {
    let etcd = EtcdCalls {
        endpoints,
        settings: etcd_settings,
    };
    match step {
        Step::Apply(child) => {
            match child {
                Child::Pod(o) => apply(client, namespace, o.as_ref()).await?,
                Child::Pvc(o) => apply(client, namespace, o.as_ref()).await?,
                Child::Service(o) => apply(client, namespace, o.as_ref()).await?,
                Child::Pdb(o) => apply(client, namespace, o.as_ref()).await?,
            }
            Ok(note(step))
        }
        Step::DeletePod { name, uid, force } => {
            delete::<Pod>(client, namespace, name, uid.clone(), *force).await?;
            Ok(note(step))
        }
        Step::DeletePvc { name, uid } => {
            delete::<PersistentVolumeClaim>(client, namespace, name, uid.clone(), false).await?;
            Ok(note(step))
        }
        Step::AnnotatePvc { name, annotations } => {
            let patch = serde_json::json!({ "metadata": { "annotations": annotations } });
            merge_patch::<PersistentVolumeClaim>(client, namespace, name, &patch).await?;
            Ok(note(step))
        }
        Step::RestoreLabels { pvc, pod, labels } => {
            let patch = serde_json::json!({ "metadata": { "labels": labels } });
            if let Some(name) = pvc {
                merge_patch::<PersistentVolumeClaim>(client, namespace, name, &patch).await?;
            }
            if let Some(name) = pod {
                merge_patch::<Pod>(client, namespace, name, &patch).await?;
            }
            Ok(note(step))
        }
        Step::AddLearner { peer_urls, .. } => {
            let added = etcd
                .call("add learner", async |a| a.add_learner(peer_urls).await)
                .await?;
            Ok(format!("{} as {}", note(step), format_id(added.member.id)))
        }
        Step::PromoteLearner { id, .. } => {
            etcd.call("promote learner", async |a| a.promote_learner(*id).await)
                .await?;
            Ok(note(step))
        }
        Step::RemoveMember { id, .. } => {
            etcd.call("remove member", async |a| a.remove_member(*id).await)
                .await?;
            Ok(note(step))
        }
        Step::UpdatePeerUrls { id, urls, .. } => {
            etcd.call("update member", async |a| {
                a.update_peer_urls(*id, urls).await
            })
            .await?;
            Ok(note(step))
        }
        Step::ResetPvcIdentity { name, token } => {
            let api: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), namespace);
            let patch = serde_json::json!({ "metadata": { "annotations": {
                CLUSTER_TOKEN_ANNOTATION: token,
                CLUSTER_ID_ANNOTATION: null,
                MEMBER_ID_ANNOTATION: null,
            } } });
            api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .map_err(|source| ActError::Apply {
                    kind: "PersistentVolumeClaim",
                    name: name.clone(),
                    source,
                })?;
            Ok(note(step))
        }
        Step::RecordRestore => Ok(note(step)),
        Step::AdvanceRaftLog { .. } => {
            etcd.call("append to the raft log", async |a| {
                a.append_log_entries().await
            })
            .await?;
            Ok(note(step))
        }
        Step::PatchPodMetadata {
            name,
            labels,
            annotations,
        } => {
            let patch = serde_json::json!({
                "metadata": { "labels": labels, "annotations": annotations }
            });
            merge_patch::<Pod>(client, namespace, name, &patch).await?;
            Ok(note(step))
        }
        Step::ResizePvc { name, size } => {
            let patch = serde_json::json!({
                "spec": { "resources": { "requests": { "storage": size } } }
            });
            merge_patch::<PersistentVolumeClaim>(client, namespace, name, &patch).await?;
            Ok(note(step))
        }
        Step::EnableDowngrade { target } => {
            etcd.call("enable downgrade", async |a| {
                a.enable_downgrade(target).await
            })
            .await?;
            Ok(note(step))
        }
        Step::CancelDowngrade => {
            etcd.call("cancel downgrade", async |a| a.cancel_downgrade().await)
                .await?;
            Ok(note(step))
        }
        Step::MoveLeader { id, .. } => {
            etcd.call("move leader", async |a| a.move_leader(*id).await)
                .await?;
            Ok(note(step))
        }
        Step::Defragment { endpoint, .. } => {
            let before = etcd
                .call("status", async |a| a.status(endpoint).await)
                .await?;
            etcd.call("defragment", async |a| a.defragment(endpoint).await)
                .await?;
            let after = etcd
                .call("status", async |a| a.status(endpoint).await)
                .await?;
            Ok(format!(
                "{}: database file {} → {} ({} in use)",
                note(step),
                human_bytes(before.db_size),
                human_bytes(after.db_size),
                human_bytes(after.db_size_in_use)
            ))
        }
        Step::Compact { revision } => {
            etcd.call("compact", async |a| a.compact(*revision).await)
                .await?;
            Ok(note(step))
        }
        Step::SetVolumeAside {
            volume,
            claim,
            annotations,
            labels,
        } => {
            super::volume_aside::set_volume_aside(
                client,
                namespace,
                volume,
                claim,
                annotations,
                labels,
            )
            .await?;
            Ok(note(step))
        }
        Step::DisarmAlarms { alarms } => {
            for alarm in alarms {
                etcd.call("disarm alarm", async |a| a.disarm(alarm).await)
                    .await?;
            }
            Ok(note(step))
        }
        Step::RotateCa {
            cluster,
            step,
            request,
        } => Ok(super::tls_material::advance_ca_rotation(
            client, namespace, cluster, *step, request,
        )
        .await?),
    }
}

/// What a step changes, in one line (its Event's note and the log).
pub fn note(step: &Step) -> String {
    match step {
        Step::Apply(child) => format!("applied {} {}", child.kind(), child.name()),
        Step::DeletePod { name, force, .. } => {
            if *force {
                format!("deleted Pod {name} without grace period (its node is confirmed gone)")
            } else {
                format!("deleted Pod {name}")
            }
        }
        Step::AnnotatePvc { name, annotations } => format!(
            "recorded {} on PersistentVolumeClaim {name}",
            annotations
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        Step::RestoreLabels { pvc, pod, .. } => format!(
            "put the member labels back on {}",
            pvc.iter()
                .map(|n| format!("PersistentVolumeClaim {n}"))
                .chain(pod.iter().map(|n| format!("Pod {n}")))
                .collect::<Vec<_>>()
                .join(" and ")
        ),
        Step::DeletePvc { name, .. } => format!("deleted PersistentVolumeClaim {name}"),
        Step::SetVolumeAside { volume, claim, .. } => format!(
            "set PersistentVolume {volume} of {claim} aside (reclaim policy Retain): deleting the claim keeps it"
        ),
        Step::AddLearner { name, peer_urls } => {
            format!("added member {name} ({}) as a learner", peer_urls.join(","))
        }
        Step::PromoteLearner { name, id } => {
            format!("promoted learner {name} ({}) to voter", format_id(*id))
        }
        Step::UpdatePeerUrls { name, urls, .. } => {
            format!("changed the peer URLs of {name} to {}", urls.join(","))
        }
        Step::RemoveMember { name, id } => format!(
            "removed member {name} ({}) from the cluster",
            format_id(*id)
        ),
        Step::AdvanceRaftLog { name } => format!(
            "committed a lease grant and revoke so that learner {name} applies an entry after its snapshot"
        ),
        Step::MoveLeader { name, id } => format!("moved leadership to {name} ({})", format_id(*id)),
        Step::ResetPvcIdentity { name, token } => {
            format!("recorded incarnation {token} on PersistentVolumeClaim {name}")
        }
        Step::RecordRestore => "recorded the restore in status".to_string(),
        Step::ResizePvc { name, size } => {
            format!("asked PersistentVolumeClaim {name} for {size}")
        }
        Step::PatchPodMetadata { name, .. } => {
            format!("set the labels and annotations of spec.pod on Pod {name}")
        }
        Step::EnableDowngrade { target } => format!(
            "enabled etcd's downgrade to {target}: the cluster version is lowered, and each member's storage version after it"
        ),
        Step::CancelDowngrade => "cancelled etcd's downgrade".to_string(),
        Step::Defragment { name, .. } => format!("defragmented {name}"),
        Step::Compact { revision } => format!("compacted the history up to revision {revision}"),
        Step::RotateCa { step, .. } => format!("took CA rotation step {step}"),
        Step::DisarmAlarms { alarms } => format!(
            "disarmed {}",
            alarms
                .iter()
                .map(|a| format!("{} of {}", a.kind.name(), format_id(a.member_id)))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

/// Bytes in MiB with one decimal, for notes.
fn human_bytes(bytes: i64) -> String {
    // Display only: the precision of f64 is plenty for a size in MiB.
    #[allow(clippy::cast_precision_loss)]
    let mib = bytes as f64 / (1024.0 * 1024.0);
    format!("{mib:.1} MiB")
}

/// Where a step's etcd calls go.
struct EtcdCalls<'a> {
    endpoints: &'a [String],
    settings: ConnectSettings,
}

impl EtcdCalls<'_> {
    /// Runs one etcd call of a step through a fresh admin client, its
    /// failure named after `operation`.
    async fn call<T>(
        &self,
        operation: &'static str,
        call: impl AsyncFnOnce(&EtcdAdmin) -> Result<T, EtcdError>,
    ) -> Result<T, ActError> {
        let admin = admin(self.endpoints, self.settings.clone(), operation)?;
        call(&admin).await.map_err(etcd_failed(operation))
    }
}

/// Maps an etcd failure of `operation` to the step's error.
fn etcd_failed(operation: &'static str) -> impl FnOnce(EtcdError) -> ActError {
    move |source| ActError::Etcd { operation, source }
}

fn admin(
    endpoints: &[String],
    settings: ConnectSettings,
    operation: &'static str,
) -> Result<EtcdAdmin, ActError> {
    EtcdAdmin::new(endpoints.iter().cloned(), settings)
        .map_err(|source| ActError::Etcd { operation, source })
}

async fn apply<K>(client: &Client, namespace: &str, object: &K) -> Result<(), ActError>
where
    K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + Serialize
        + DeserializeOwned
        + std::fmt::Debug,
{
    let name = object.name_any();
    let api: Api<K> = Api::namespaced(client.clone(), namespace);
    api.patch(
        &name,
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(object),
    )
    .await
    .map_err(|source| ActError::Apply {
        kind: kind_of::<K>(),
        name,
        source,
    })?;
    Ok(())
}

async fn merge_patch<K>(
    client: &Client,
    namespace: &str,
    name: &str,
    patch: &serde_json::Value,
) -> Result<(), ActError>
where
    K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + DeserializeOwned
        + std::fmt::Debug,
{
    let api: Api<K> = Api::namespaced(client.clone(), namespace);
    api.patch(name, &PatchParams::default(), &Patch::Merge(patch))
        .await
        .map_err(|source| ActError::Apply {
            kind: kind_of::<K>(),
            name: name.to_owned(),
            source,
        })?;
    Ok(())
}

async fn delete<K>(
    client: &Client,
    namespace: &str,
    name: &str,
    uid: Option<String>,
    force: bool,
) -> Result<(), ActError>
where
    K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + DeserializeOwned
        + std::fmt::Debug,
{
    let api: Api<K> = Api::namespaced(client.clone(), namespace);
    let grace = force.then_some(0);
    // Already gone: the step's goal holds.
    delete_unless_gone(&api, name, uid, grace)
        .await
        .map(|_| ())
        .map_err(|source| ActError::Delete {
            kind: kind_of::<K>(),
            name: name.to_owned(),
            source,
        })
}

fn kind_of<K: Resource<DynamicType = ()>>() -> &'static str {
    match K::kind(&()).as_ref() {
        "Pod" => "Pod",
        "PersistentVolumeClaim" => "PersistentVolumeClaim",
        "Service" => "Service",
        "PodDisruptionBudget" => "PodDisruptionBudget",
        _ => "object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::api::ObjectMeta;

    #[test]
    fn every_step_says_what_it_changed() {
        let pod = Pod {
            metadata: ObjectMeta {
                name: Some("main-0".into()),
                ..Default::default()
            },
            ..Default::default()
        };
        let step = Step::Apply(Child::Pod(Box::new(pod)));
        assert_eq!(note(&step), "applied Pod main-0");
        let step = Step::RemoveMember {
            name: "main-2".into(),
            id: 0xabc,
        };
        assert_eq!(note(&step), "removed member main-2 (abc) from the cluster");
    }

    #[test]
    fn kinds_are_named() {
        assert_eq!(kind_of::<Pod>(), "Pod");
        assert_eq!(kind_of::<PodDisruptionBudget>(), "PodDisruptionBudget");
    }
}
