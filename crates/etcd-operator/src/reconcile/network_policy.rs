//! The cluster's NetworkPolicy, made current before each pass observes the
//! cluster (so it exists before the first member Pod): read it, compare it
//! with what [`resources::network_policy`] builds (pure), then apply it by
//! server-side apply, delete it when the spec turns it off, or leave it.
//!
//! It is not a planner step: applying it changes no Pod and no member, so
//! it needs no ordering against the durability work. A failure is reported
//! (Warning Event `NetworkPolicyFailed`, the reconcile error metric, the
//! log) but does not stop the pass: the members' durability never waits on
//! their isolation.

use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::api::{Patch, PatchParams};
use kube::{Api, Resource, ResourceExt};

use super::FIELD_MANAGER;
use super::context::Context;
use super::delete::delete_unless_gone;
use super::error::{ActError, Category, ObserveError};
use super::watched::Reads;
use crate::addressing::network_policy_name;
use crate::api::EtcdCluster;
use crate::controller_kit::events;
use crate::resources::network_policy::network_policy;

/// What to do with the NetworkPolicy.
#[derive(Debug, Clone, PartialEq)]
pub enum PolicyChange {
    /// Apply this one (missing, or different from what exists).
    Apply(Box<NetworkPolicy>),
    /// Delete the cluster's own (the spec turned it off).
    Delete {
        /// Its UID, a precondition of the delete.
        uid: Option<String>,
    },
    /// Nothing to do.
    Keep,
    /// An object of that name that the cluster does not own: left alone.
    Foreign,
}

/// The change that turns `existing` into `desired` (`None`: no policy) for
/// the cluster whose UID is `owner`. What the API server adds to a policy
/// (defaults, managed fields) is not a difference.
pub fn change(
    existing: Option<&NetworkPolicy>,
    desired: Option<NetworkPolicy>,
    owner: &str,
) -> PolicyChange {
    let owned = |policy: &NetworkPolicy| {
        policy
            .owner_references()
            .iter()
            .any(|r| r.controller == Some(true) && r.uid == owner)
    };
    match (existing, desired) {
        (Some(existing), _) if !owned(existing) => PolicyChange::Foreign,
        (None, None) => PolicyChange::Keep,
        (Some(existing), None) => PolicyChange::Delete {
            uid: existing.uid(),
        },
        (None, Some(desired)) => PolicyChange::Apply(Box::new(desired)),
        (Some(existing), Some(desired)) => {
            let labels_kept = desired
                .labels()
                .iter()
                .all(|(k, v)| existing.labels().get(k) == Some(v));
            if labels_kept && existing.spec == desired.spec {
                PolicyChange::Keep
            } else {
                PolicyChange::Apply(Box::new(desired))
            }
        }
    }
}

/// Makes the cluster's NetworkPolicy what its spec says; reports a failure
/// and carries on.
pub(super) async fn ensure(
    ctx: &Context,
    reads: Reads<'_>,
    cluster: &EtcdCluster,
    namespace: &str,
) {
    let name = network_policy_name(&cluster.name_any());
    if let Err(error) = make_current(ctx, reads, cluster, namespace, &name).await {
        let category = error.category();
        tracing::warn!(cluster = %cluster.name_any(), %namespace, "NetworkPolicy {name}: {error}");
        ctx.metrics
            .reconcile_failed("network-policy", category.as_str());
        let event = events::warning(
            "ApplyNetworkPolicy",
            "NetworkPolicyFailed",
            &error.to_string(),
        );
        events::publish(&ctx.recorder, &cluster.object_ref(&()), &event).await;
    }
}

/// Why the NetworkPolicy could not be made current.
#[derive(Debug, thiserror::Error)]
enum EnsureError {
    #[error(transparent)]
    Read(#[from] ObserveError),
    #[error(transparent)]
    Write(#[from] ActError),
}

impl EnsureError {
    fn category(&self) -> Category {
        match self {
            Self::Read(error) => error.category(),
            Self::Write(error) => error.category(),
        }
    }
}

/// The change, decided from `reads`; one that is not `Keep` is decided
/// again from a fresh read (the copies hold only labelled policies).
async fn decide(
    ctx: &Context,
    reads: Reads<'_>,
    cluster: &EtcdCluster,
    namespace: &str,
    name: &str,
) -> Result<PolicyChange, ObserveError> {
    let desired = network_policy(cluster, &ctx.config.operator_pods);
    let owner = cluster.uid().unwrap_or_default();
    let existing = read_policy(reads, namespace, name).await?;
    let change = change(existing.as_ref(), desired.clone(), &owner);
    if change == PolicyChange::Keep || reads.is_fresh() {
        return Ok(change);
    }
    let existing = read_policy(Reads::Fresh(&ctx.client), namespace, name).await?;
    Ok(self::change(existing.as_ref(), desired, &owner))
}

async fn read_policy(
    reads: Reads<'_>,
    namespace: &str,
    name: &str,
) -> Result<Option<NetworkPolicy>, ObserveError> {
    reads
        .get::<NetworkPolicy>(Some(namespace), name)
        .await
        .map_err(|source| ObserveError::Get {
            kind: "networkpolicy",
            name: name.to_owned(),
            source,
        })
}

async fn make_current(
    ctx: &Context,
    reads: Reads<'_>,
    cluster: &EtcdCluster,
    namespace: &str,
    name: &str,
) -> Result<(), EnsureError> {
    let api: Api<NetworkPolicy> = Api::namespaced(ctx.client.clone(), namespace);
    match decide(ctx, reads, cluster, namespace, name).await? {
        PolicyChange::Keep => {}
        PolicyChange::Foreign => {
            tracing::warn!(
                cluster = %cluster.name_any(),
                %namespace,
                "NetworkPolicy {name} exists and is not this cluster's: left as it is"
            );
        }
        PolicyChange::Apply(policy) => {
            api.patch(
                name,
                &PatchParams::apply(FIELD_MANAGER).force(),
                &Patch::Apply(&*policy),
            )
            .await
            .map_err(|source| ActError::Apply {
                kind: "NetworkPolicy",
                name: name.to_owned(),
                source,
            })?;
            tracing::info!(cluster = %cluster.name_any(), %namespace, "NetworkPolicy {name} applied");
        }
        PolicyChange::Delete { uid } => {
            let deleted = delete_unless_gone(&api, name, uid, None)
                .await
                .map_err(|source| ActError::Delete {
                    kind: "NetworkPolicy",
                    name: name.to_owned(),
                    source,
                })?;
            if deleted {
                tracing::info!(cluster = %cluster.name_any(), %namespace, "NetworkPolicy {name} deleted (spec.networkPolicy.enabled is false)");
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::network_policy::OperatorPods;

    fn cluster(spec: &str) -> EtcdCluster {
        serde_saphyr::from_str(&format!(
            "apiVersion: durable-etcd.io/v1alpha1\nkind: EtcdCluster\nmetadata: {{name: demo, namespace: prod, uid: u-1}}\nspec: {{networkPolicy: {spec}}}\n"
        ))
        .expect("valid EtcdCluster")
    }

    fn desired(spec: &str) -> Option<NetworkPolicy> {
        network_policy(&cluster(spec), &OperatorPods::default())
    }

    /// As read back: what was applied, plus what the API server adds.
    fn stored(policy: Option<NetworkPolicy>) -> NetworkPolicy {
        let mut policy = policy.expect("a policy");
        policy.metadata.uid = Some("p-1".into());
        policy.metadata.resource_version = Some("7".into());
        policy
            .metadata
            .labels
            .get_or_insert_default()
            .insert("added-by".into(), "someone".into());
        policy
    }

    #[test]
    fn a_missing_policy_is_applied_and_a_current_one_kept() {
        assert!(matches!(
            change(None, desired("{}"), "u-1"),
            PolicyChange::Apply(_)
        ));
        let existing = stored(desired("{}"));
        assert_eq!(
            change(Some(&existing), desired("{}"), "u-1"),
            PolicyChange::Keep
        );
    }

    #[test]
    fn a_changed_spec_is_applied_again() {
        let existing = stored(desired("{}"));
        let wider = desired("{clientsFrom: [{namespaceSelector: {}}]}");
        assert_eq!(
            change(Some(&existing), wider.clone(), "u-1"),
            PolicyChange::Apply(Box::new(wider.expect("a policy")))
        );
    }

    #[test]
    fn turned_off_deletes_the_clusters_own_only() {
        let existing = stored(desired("{}"));
        assert_eq!(
            change(Some(&existing), desired("{enabled: false}"), "u-1"),
            PolicyChange::Delete {
                uid: Some("p-1".into())
            }
        );
        assert_eq!(
            change(None, desired("{enabled: false}"), "u-1"),
            PolicyChange::Keep
        );
        assert_eq!(
            change(Some(&existing), desired("{enabled: false}"), "another-uid"),
            PolicyChange::Foreign
        );
        assert_eq!(
            change(Some(&existing), desired("{}"), "another-uid"),
            PolicyChange::Foreign,
            "someone else's policy of that name is never overwritten"
        );
    }
}
