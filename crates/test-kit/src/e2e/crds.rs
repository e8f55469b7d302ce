//! What the lab must have before a scenario: the operator's CRDs
//! established, and nodes registered as a real kubelet registers them.

use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{ListParams, Patch, PatchParams};
use kube::{Api, Client, ResourceExt};

use crate::TestResult;
use crate::poll::wait_for;

/// Applies every CRD of the operator (its controllers watch them all) with
/// field manager `manager`, and waits until the `EtcdCluster` CRD is
/// established.
pub(super) async fn install(client: &Client, manager: &str) -> TestResult {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    for crd in etcd_operator_api::api::crds() {
        crds.patch(
            &crd.name_any(),
            &PatchParams::apply(manager).force(),
            &Patch::Apply(&crd),
        )
        .await?;
    }
    let crd = etcd_operator_api::api::crd();
    wait_for(
        "the CRD to be established",
        Duration::from_secs(30),
        || async {
            let crd = crds.get(&crd.name_any()).await?;
            Ok(crd.status.and_then(|s| s.conditions).is_some_and(|c| {
                c.iter()
                    .any(|c| c.type_ == "Established" && c.status == "True")
            }))
        },
    )
    .await
}

/// A real kubelet registers its Node with
/// `volumes.kubernetes.io/controller-managed-attach-detach: "true"`; without
/// it the attach-detach controller creates no VolumeAttachment and pods on
/// `lab-network` volumes never start. The lab's node agent sets it; this
/// checks that it did (no test edits Node objects itself).
pub async fn controller_managed_attach(client: &Client) -> TestResult {
    let nodes: Api<Node> = Api::all(client.clone());
    for node in nodes.list(&ListParams::default()).await?.items {
        let managed = node
            .annotations()
            .get("volumes.kubernetes.io/controller-managed-attach-detach")
            .is_some_and(|v| v == "true");
        if !managed {
            return Err(format!(
                "node {} is not registered as controller-managed for attach",
                node.name_any()
            )
            .into());
        }
    }
    Ok(())
}
