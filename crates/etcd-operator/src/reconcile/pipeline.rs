//! One reconcile pass: read the cluster fresh -> observe -> plan (pure) ->
//! confirm (a second read before a disruptive step) -> act (at most one
//! step) -> status (guarded by the read's resourceVersion) -> Events ->
//! requeue.
//!
//! The watch of `EtcdCluster`s only triggers passes; see [`fresh`] for why
//! each pass plans from its own read and never from the watch's cache.

mod fresh;

use std::time::Duration;

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::DynamicObject;
use kube::runtime::controller::Action;
use kube::runtime::events::{Event, EventType};
use kube::runtime::reflector::ObjectRef;
use kube::{Api, Resource, ResourceExt};

use super::Snapshot;
use super::act;
use super::cert_manager;
use super::context::Context;
use super::error::{ActError, ObserveError, ReadError, ReconcileError};
use super::network_policy;
use super::node_index::ClusterKey;
use super::observe::{self, EtcdReading};
use super::plan::{self, PassPlan, PlanEvent};
use super::status;
use super::tls_material;
use super::transport;
use super::watched::Reads;
use crate::api::{EtcdCluster, LastOperation, OperationState};
use crate::controller_kit::status_writer::needs_write;
use crate::controller_kit::{events, unreadable};
use crate::etcd::ConnectSettings;
use crate::planner::ActionKind;
use crate::telemetry::ClusterGauges;

pub use fresh::cluster_resource;

/// Delay before planning again when the object changed under a plan.
const REPLAN_AFTER: Duration = Duration::from_millis(100);

/// Runs one pass for the cluster `trigger` names. Only its name and
/// namespace are used: the pass plans from the watch-fed copies, and when
/// that plan would change anything, again from fresh reads ([`super::watched`]).
pub async fn pass(ctx: &Context, trigger: &DynamicObject) -> Result<Action, ReconcileError> {
    let name = trigger.name_any();
    let namespace = trigger
        .namespace()
        .ok_or_else(|| ObserveError::NoNamespace(name.clone()))?;
    let key = ClusterKey {
        namespace: namespace.clone(),
        name: name.clone(),
    };
    let earlier = match quiet_pass(ctx, &key).await {
        Quiet::Nothing(action) => {
            ctx.metrics.pass_from_copies(true);
            return Ok(action);
        }
        Quiet::Act(earlier) => earlier,
    };
    ctx.metrics.pass_from_copies(false);
    fresh_pass(ctx, &key, earlier).await
}

/// What planning from the copies said.
enum Quiet {
    /// Nothing to change: requeue so.
    Nothing(Action),
    /// Something to change (or the copies could not say): plan again from
    /// fresh reads, with what etcd said if there is one.
    Act(Option<EtcdReading>),
}

/// Plans from the watch-fed copies; nothing is written.
async fn quiet_pass(ctx: &Context, key: &ClusterKey) -> Quiet {
    if !ctx.watched.synced() {
        return Quiet::Act(None);
    }
    let reference = ObjectRef::new_with(&key.name, cluster_resource()).within(&key.namespace);
    let Some(object) = ctx.watched.clusters.get(&reference) else {
        return Quiet::Act(None);
    };
    let Ok(cluster) = fresh::decode(&object) else {
        return Quiet::Act(None);
    };
    if cluster.meta().deletion_timestamp.is_some() {
        return Quiet::Act(None);
    }
    let reads = Reads::Watched(&ctx.client, &ctx.watched);
    let prepared = match prepare(ctx, reads, &cluster, key, None).await {
        Ok(prepared) => prepared,
        Err(error) => {
            tracing::debug!(cluster = %key.name, namespace = %key.namespace, "planning from the copies: {error}");
            return Quiet::Act(None);
        }
    };
    let Prepared { snapshot, plan, .. } = &prepared;
    let desired = status::finalize(
        cluster.status.as_ref(),
        plan.status.clone(),
        cluster.metadata.generation,
        true,
    );
    let changes_nothing = plan.step.is_none()
        && plan.events.is_empty()
        && !needs_write(cluster.status.as_ref(), &desired);
    if changes_nothing {
        record(ctx, key, &cluster, snapshot);
        Quiet::Nothing(requeue(ctx, plan))
    } else {
        tracing::debug!(
            cluster = %key.name,
            namespace = %key.namespace,
            step = plan.action.map_or("none", ActionKind::name),
            events = ?plan.events.iter().map(|e| e.reason.as_str()).collect::<Vec<_>>(),
            status_changes = needs_write(cluster.status.as_ref(), &desired),
            "planning again from fresh reads"
        );
        if needs_write(cluster.status.as_ref(), &desired) {
            tracing::trace!(current = ?cluster.status, ?desired, "status planned from the copies");
        }
        Quiet::Act(Some(snapshot.etcd_reading()))
    }
}

/// What a pass plans from, and the plan.
struct Prepared {
    snapshot: Snapshot,
    plan: PassPlan,
    etcd_settings: ConnectSettings,
}

/// Makes the cluster's NetworkPolicy and certificates current, observes it
/// and plans. `earlier`: what etcd said to an earlier observation of this
/// pass (used again if the member Pods are the same).
async fn prepare(
    ctx: &Context,
    reads: Reads<'_>,
    cluster: &EtcdCluster,
    key: &ClusterKey,
    earlier: Option<EtcdReading>,
) -> Result<Prepared, ReconcileError> {
    network_policy::ensure(ctx, reads, cluster, &key.namespace).await;
    let transport = transport::facts(reads, cluster).await?;
    let tls = certificates(ctx, reads, cluster, key, transport.intent.tls).await?;
    // Clients use TLS once every member serves it; plain HTTP before.
    let etcd_settings = ConnectSettings {
        tls: tls
            .as_ref()
            .filter(|_| transport.running.clients_use_tls())
            .map(|material| material.client.clone()),
        quorum_read_timeout: crate::etcd::quorum_read_deadline(
            cluster.spec.etcd.election_timeout_ms,
            ctx.config.etcd.request_timeout,
        ),
        ..ctx.config.etcd.clone()
    };
    let mut snapshot = observe::observe(reads, cluster, etcd_settings.clone(), earlier).await?;
    snapshot.tls = tls.map(|material| material.observation);
    snapshot.transport = transport;
    let settings = plan::BuildSettings {
        operator_image: ctx.config.operator_image.clone(),
        cluster_domain: ctx.config.cluster_domain.clone(),
    };
    let plan = plan::plan(cluster, &snapshot, &settings, Timestamp::now());
    Ok(Prepared {
        snapshot,
        plan,
        etcd_settings,
    })
}

/// The certificates of a TLS cluster: remembered from an earlier full read
/// when planning from the copies, else read (and issued where due).
async fn certificates(
    ctx: &Context,
    reads: Reads<'_>,
    cluster: &EtcdCluster,
    key: &ClusterKey,
    tls: bool,
) -> Result<Option<tls_material::TlsMaterial>, tls_material::TlsMaterialError> {
    if !reads.is_fresh()
        && let Some(material) = ctx.certificates.recall(key, cluster, tls)
    {
        return Ok(material);
    }
    let domain = &ctx.config.cluster_domain;
    let issuer = cluster
        .spec
        .tls
        .as_ref()
        .and_then(|t| t.cert_manager.as_ref());
    let material = match issuer {
        Some(issuer) if tls => {
            Some(cert_manager::ensure(&ctx.client, cluster, domain, issuer).await?)
        }
        _ => tls_material::ensure(&ctx.client, cluster, domain, tls).await?,
    };
    ctx.certificates
        .remember(key.clone(), cluster, tls, material.clone());
    Ok(material)
}

/// What every pass records, acting or not: the nodes the members run on,
/// certificate expiries and the cluster's gauges.
fn record(ctx: &Context, key: &ClusterKey, cluster: &EtcdCluster, snapshot: &Snapshot) {
    if let Some(tls) = &snapshot.tls {
        ctx.metrics.set_certificates(
            &key.namespace,
            &key.name,
            &certificate_expiry(&key.name, &tls.status),
        );
    }
    ctx.nodes.set_nodes(key.clone(), snapshot.pod_node_names());
    ctx.metrics
        .set_cluster(&key.namespace, &key.name, gauges(cluster, &snapshot.etcd));
}

/// The pass from fresh reads: what every step and status write is planned
/// from.
async fn fresh_pass(
    ctx: &Context,
    key: &ClusterKey,
    earlier: Option<EtcdReading>,
) -> Result<Action, ReconcileError> {
    let ClusterKey { namespace, name } = key.clone();
    let objects: Api<DynamicObject> =
        Api::namespaced_with(ctx.client.clone(), &namespace, &cluster_resource());
    let Some(object) = read(&objects, &name).await? else {
        forget(ctx, key);
        return Ok(Action::await_change());
    };
    let cluster = match fresh::decode(&object) {
        Ok(cluster) => cluster,
        Err(unreadable) => {
            // The controller logs the error this pass returns.
            unreadable::report(
                &ctx.recorder,
                &objects,
                &cluster_resource(),
                "cluster",
                &object,
                &unreadable,
            )
            .await;
            return Err(ReadError::Unreadable {
                cluster: name,
                path: unreadable.path,
                message: unreadable.message,
            }
            .into());
        }
    };
    if cluster.meta().deletion_timestamp.is_some() {
        // Children go with the cluster through their ownerReferences; no
        // external state needs a finalizer.
        forget(ctx, key);
        return Ok(Action::await_change());
    }

    let prepared = match prepare(ctx, Reads::Fresh(&ctx.client), &cluster, key, earlier).await {
        Ok(prepared) => prepared,
        Err(ReconcileError::Tls(error)) => {
            report_certificates_failed(ctx, &objects, &object, &error).await;
            return Err(error.into());
        }
        Err(error) => return Err(error),
    };
    let Prepared {
        snapshot,
        plan,
        etcd_settings,
    } = prepared;
    record(ctx, key, &cluster, &snapshot);

    // A disruptive step is taken only if a second read agrees with the one
    // it was planned from (observing etcd can take seconds, more when
    // members are down, which is when such steps are planned).
    let cluster = match &plan.step {
        Some(step) if fresh::is_disruptive(step, &name) => {
            let now = match read(&objects, &name).await? {
                Some(object) => fresh::decode(&object).ok(),
                None => None,
            };
            match fresh::compare(&cluster, now.as_ref()) {
                fresh::Freshness::Unchanged => now.unwrap_or(cluster),
                fresh::Freshness::Changed(what) => {
                    tracing::info!(
                        cluster = %name,
                        %namespace,
                        action = plan.action.map_or("Step", ActionKind::name),
                        "{what} changed while the step was planned: planning again from the new object"
                    );
                    ctx.metrics.reconcile_failed("confirm", "conflict");
                    return Ok(Action::requeue(REPLAN_AFTER));
                }
            }
        }
        _ => cluster,
    };

    let reference = cluster.object_ref(&());
    for event in &plan.events {
        publish(ctx, &reference, to_kube_event(event)).await;
    }

    let outcome = match &plan.step {
        Some(step) => {
            let result = act::execute(
                &ctx.client,
                &namespace,
                &snapshot.endpoints,
                etcd_settings.clone(),
                step,
            )
            .await;
            let action = plan.action.map_or("Step", ActionKind::name);
            let result = result.map(|note| match &plan.description {
                Some(description) => format!("{description}: {note}"),
                None => note,
            });
            match &result {
                Ok(note) => {
                    ctx.metrics.action_taken(action);
                    tracing::info!(cluster = %name, %namespace, action, "{note}");
                    // The planner's Event of the action, with what the step
                    // changed; none for a quiet kind.
                    if let Some(event) = &plan.action_event {
                        let event = PlanEvent {
                            note: note.clone(),
                            ..event.clone()
                        };
                        publish(ctx, &reference, to_kube_event(&event)).await;
                    }
                }
                Err(error) => {
                    tracing::warn!(cluster = %name, %namespace, action, "{error}");
                    publish(ctx, &reference, failure_event(action, error)).await;
                }
            }
            // What the step changed is read again, certificates included.
            ctx.certificates.forget(key);
            Some((action, result))
        }
        None => None,
    };

    let succeeded = !matches!(outcome, Some((_, Err(_))));
    let mut desired = plan.status.clone();
    if let Some((action, result)) = &outcome {
        desired.last_operation = Some(last_operation(action, result));
    }
    let desired = status::finalize(
        cluster.status.as_ref(),
        desired,
        cluster.metadata.generation,
        succeeded,
    );
    let api: Api<EtcdCluster> = Api::namespaced(ctx.client.clone(), &namespace);
    // Written only over the status this pass read: a newer one (another
    // writer's, or one this pass did not see) is never overwritten.
    status::write(&api, &cluster, &desired).await?;

    if let Some((_, Err(error))) = outcome {
        return Err(error.into());
    }
    Ok(requeue(ctx, &plan))
}

/// Says on the cluster why its pass stopped at the certificates: a
/// Warning Event and `Degraded` with the error.
async fn report_certificates_failed(
    ctx: &Context,
    objects: &Api<DynamicObject>,
    object: &DynamicObject,
    error: &tls_material::TlsMaterialError,
) {
    let message = format!(
        "the certificates cannot be issued or stored: {error}; the operator takes no other step for this cluster until they can"
    );
    let reference = object.object_ref(&cluster_resource());
    publish(
        ctx,
        &reference,
        events::warning("IssueCertificates", error.reason(), &message),
    )
    .await;
    crate::controller_kit::blocked::set_condition(
        objects,
        &cluster_resource(),
        object,
        crate::api::ConditionType::Degraded.as_str(),
        error.reason(),
        &message,
    )
    .await;
}

/// Reads the cluster by name; `None` when it is gone.
async fn read(
    objects: &Api<DynamicObject>,
    name: &str,
) -> Result<Option<DynamicObject>, ReadError> {
    objects
        .get_opt(name)
        .await
        .map_err(|source| ReadError::Get {
            cluster: name.to_owned(),
            source,
        })
}

fn forget(ctx: &Context, key: &ClusterKey) {
    ctx.nodes.forget(key);
    ctx.certificates.forget(key);
    ctx.metrics.forget_cluster(&key.namespace, &key.name);
}

/// After a step, observe again soon; otherwise when the planner says, but
/// never later than the idle period.
fn requeue(ctx: &Context, plan: &PassPlan) -> Action {
    Action::requeue(plan.requeue_after.min(ctx.config.idle_requeue))
}

fn gauges(cluster: &EtcdCluster, etcd: &crate::etcd::ObservedEtcd) -> ClusterGauges {
    let count = |n: usize| i64::try_from(n).unwrap_or(i64::MAX);
    ClusterGauges {
        desired: i64::from(cluster.spec.replicas),
        members: count(etcd.members.len()),
        healthy: count(
            etcd.members
                .iter()
                .filter(|m| m.health.is_healthy())
                .count(),
        ),
        learners: count(etcd.learners().count()),
        quorum: etcd.quorum_reachable,
    }
}

/// When each certificate of a TLS cluster expires, by Secret (Unix time).
fn certificate_expiry(cluster: &str, tls: &crate::api::TlsStatus) -> Vec<(String, i64)> {
    tls.ca_not_after
        .iter()
        .map(|at| (crate::addressing::ca_secret_name(cluster), at.0.as_second()))
        .chain(
            tls.certificates
                .iter()
                .map(|c| (c.secret.clone(), c.not_after.0.as_second())),
        )
        .collect()
}

fn last_operation(action: &str, result: &Result<String, ActError>) -> LastOperation {
    let (description, state) = match result {
        Ok(note) => (note.clone(), OperationState::Succeeded),
        Err(error) => (error.to_string(), OperationState::Failed),
    };
    LastOperation {
        type_: action.to_owned(),
        description,
        state,
        time: Time(Timestamp::now()),
    }
}

/// The Event of a step that failed.
pub fn failure_event(action: &str, error: &ActError) -> Event {
    events::warning(action, &format!("{action}Failed"), &error.to_string())
}

/// The Event of something the planner reports (a wait, a refusal).
pub fn to_kube_event(event: &PlanEvent) -> Event {
    let type_ = if event.warning {
        EventType::Warning
    } else {
        EventType::Normal
    };
    events::event(type_, &event.action, &event.reason, &event.note)
}

async fn publish(ctx: &Context, reference: &ObjectReference, event: Event) {
    events::publish(&ctx.recorder, reference, &event).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failures_are_warnings_named_after_the_action() {
        let error = ActError::Build {
            kind: "Pod",
            name: "main-0".into(),
            reason: "no token".into(),
        };
        let event = failure_event("CreatePod", &error);
        assert_eq!(event.type_, EventType::Warning);
        assert_eq!(event.reason, "CreatePodFailed");
        assert_eq!(event.action, "CreatePod");
        assert_eq!(
            event.note.as_deref(),
            Some("cannot build Pod main-0: no token")
        );
    }

    #[test]
    fn planned_events_keep_their_type_reason_and_action() {
        let event = to_kube_event(&PlanEvent {
            warning: true,
            reason: "MemberRemoved".into(),
            note: "removing member abc: removed member main-2 (abc) from the cluster".into(),
            action: "RemoveMember".into(),
        });
        assert_eq!(event.type_, EventType::Warning);
        assert_eq!(event.reason, "MemberRemoved");
        assert_eq!(event.action, "RemoveMember");
    }
}
