//! What a pass plans from, and when it may act on it.
//!
//! The controller watches `EtcdCluster`s as untyped objects: the watch is
//! only a trigger. Each pass reads the object fresh from the API server
//! (durability rule 8: the operator re-observes before it acts; a cached
//! copy may lack the status the previous pass wrote), then decodes it here.
//! An object this operator cannot decode (a newer CRD version, a field of
//! another type) is reported on that object alone, with the path of the
//! field ([`crate::controller_kit::unreadable`]): it never stops the watch of
//! every other cluster.
//!
//! Before a disruptive step the pass reads the object once more and acts
//! only if nothing the planner reads changed meanwhile ([`compare`]);
//! otherwise it plans again from the new object.

use kube::ResourceExt;
use kube::api::{ApiResource, DynamicObject};

use crate::addressing::restore_pod_name;
use crate::api::EtcdCluster;
use crate::controller_kit::unreadable::{self, Unreadable};
use crate::reconcile::{Child, Step};

/// The `EtcdCluster` resource, for untyped API calls.
pub fn cluster_resource() -> ApiResource {
    ApiResource::erase::<EtcdCluster>(&())
}

/// Decodes a fresh object into an `EtcdCluster`. The error names the path
/// of the field at fault ([`unreadable::decode`]).
pub fn decode(object: &DynamicObject) -> Result<EtcdCluster, Unreadable> {
    unreadable::decode(object)
}

/// Whether the planned object still holds, as far as the planner reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Freshness {
    /// Nothing the planner reads changed: act.
    Unchanged,
    /// Something changed (named): do not act, plan again from the new object.
    Changed(&'static str),
}

/// Compares the object a plan was made from with a fresh read of it: the
/// identity (UID), the spec (generation and content), the deletion mark and
/// the status, i.e. everything the planner reads of the object. Labels and
/// annotations the planner does not read may change freely.
pub fn compare(planned_from: &EtcdCluster, fresh: Option<&EtcdCluster>) -> Freshness {
    let Some(fresh) = fresh else {
        return Freshness::Changed("the object is gone or unreadable");
    };
    if planned_from.uid() != fresh.uid() {
        Freshness::Changed("the object was recreated")
    } else if planned_from.metadata.deletion_timestamp != fresh.metadata.deletion_timestamp {
        Freshness::Changed("the object is being deleted")
    } else if planned_from.metadata.generation != fresh.metadata.generation
        || planned_from.spec != fresh.spec
    {
        Freshness::Changed("the spec")
    } else if planned_from.status != fresh.status {
        Freshness::Changed("the status")
    } else {
        Freshness::Unchanged
    }
}

/// Whether a step destroys or replaces something (a member, a volume, a
/// Pod, a restore record): such a step is taken only after a second fresh
/// read agrees with the one it was planned from.
pub fn is_disruptive(step: &Step, cluster: &str) -> bool {
    match step {
        Step::DeletePod { .. }
        | Step::DeletePvc { .. }
        | Step::RemoveMember { .. }
        | Step::RecordRestore
        | Step::ResetPvcIdentity { .. }
        // Lowers the cluster version: only for the spec as it stands.
        | Step::EnableDowngrade { .. }
        // Drops history older than the revision.
        | Step::Compact { .. }
        // Takes a member out of service while it runs.
        | Step::Defragment { .. }
        // Starts the rebuild of a member whose data etcd found damaged.
        | Step::SetVolumeAside { .. } => true,
        // The restore Pod writes a member's volume.
        Step::Apply(Child::Pod(pod)) => pod.name_any() == restore_pod_name(cluster),
        Step::Apply(_)
        | Step::AnnotatePvc { .. }
        | Step::RestoreLabels { .. }
        | Step::AddLearner { .. }
        | Step::PromoteLearner { .. }
        // Every member already listens on the new URL.
        | Step::UpdatePeerUrls { .. }
        | Step::AdvanceRaftLog { .. }
        | Step::MoveLeader { .. }
        | Step::CancelDowngrade
        | Step::DisarmAlarms { .. }
        | Step::PatchPodMetadata { .. }
        | Step::ResizePvc { .. }
        // Checked against the CA Secret it rewrites (its version, and
        // that the step follows from the CAs it holds).
        | Step::RotateCa { .. } => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller_kit::unreadable::test_objects::{cluster_json, object};
    use serde_json::{Value, json};

    fn cluster(spec: Value) -> EtcdCluster {
        decode(&object(cluster_json(spec))).expect("readable")
    }

    #[test]
    fn a_plan_is_acted_on_only_while_what_the_planner_reads_is_unchanged() {
        let planned = cluster(json!({ "replicas": 3 }));
        assert_eq!(compare(&planned, Some(&planned)), Freshness::Unchanged);

        // Labels and annotations the planner does not read may change.
        let mut labelled = planned.clone();
        labelled.metadata.resource_version = Some("8".into());
        labelled
            .labels_mut()
            .insert("team".into(), "storage".into());
        assert_eq!(compare(&planned, Some(&labelled)), Freshness::Unchanged);

        // The status another writer (or this operator's previous pass) wrote.
        let mut newer_status = labelled.clone();
        newer_status.status = Some(crate::api::EtcdClusterStatus {
            cluster_token: Some("main-other".into()),
            ..Default::default()
        });
        assert_eq!(
            compare(&planned, Some(&newer_status)),
            Freshness::Changed("the status")
        );

        let mut new_spec = planned.clone();
        new_spec.spec.replicas = 1;
        new_spec.metadata.generation = Some(3);
        assert_eq!(
            compare(&planned, Some(&new_spec)),
            Freshness::Changed("the spec")
        );

        let mut recreated = planned.clone();
        recreated.metadata.uid = Some("u-2".into());
        assert_eq!(
            compare(&planned, Some(&recreated)),
            Freshness::Changed("the object was recreated")
        );

        assert!(matches!(compare(&planned, None), Freshness::Changed(_)));
    }

    #[test]
    fn destructive_steps_need_a_second_read() {
        let delete = Step::DeletePod {
            name: "main-0".into(),
            uid: None,
            force: false,
        };
        assert!(is_disruptive(&delete, "main"));
        assert!(is_disruptive(
            &Step::RemoveMember {
                name: "main-1".into(),
                id: 1
            },
            "main"
        ));
        assert!(is_disruptive(&Step::RecordRestore, "main"));
        assert!(!is_disruptive(
            &Step::AddLearner {
                name: "main-3".into(),
                peer_urls: Vec::new()
            },
            "main"
        ));
        let pod = |name: &str| {
            Step::Apply(Child::Pod(Box::new(k8s_openapi::api::core::v1::Pod {
                metadata: kube::api::ObjectMeta {
                    name: Some(name.to_owned()),
                    ..Default::default()
                },
                ..Default::default()
            })))
        };
        assert!(is_disruptive(&pod(&restore_pod_name("main")), "main"));
        assert!(!is_disruptive(&pod("main-0"), "main"));
    }
}
