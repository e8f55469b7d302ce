//! `kubectl etcd renew-certificates|rotate-ca <cluster>`: the request
//! annotations of a TLS cluster, with the time as a new value.

use etcd_operator_api::api::{RENEW_CERTIFICATES_ANNOTATION, ROTATE_CA_ANNOTATION};
use kube::api::{Patch, PatchParams};
use serde_json::json;

use super::{cluster_subject, clusters, get_cluster, namespace_flag, now_to_the_second};
use crate::connect::Target;
use crate::error::{Failure, api_failure};

#[derive(Debug, Clone, Copy)]
pub enum Request {
    Renew,
    RotateCa,
}

pub async fn run(target: &Target, name: &str, request: Request) -> Result<(), Failure> {
    let cluster = get_cluster(target, name).await?;
    if !etcd_operator_api::api::transport_choice::recorded(&cluster).serves_tls() {
        return Err(Failure::new(
            format!("{name} serves plain HTTP: it has no certificates"),
            "turn TLS on first: set `spec.tls: {builtIn: {}}` and wait for status.transport to read Tls (docs/security.md)",
        ));
    }
    let annotation = match request {
        Request::Renew => RENEW_CERTIFICATES_ANNOTATION,
        Request::RotateCa => ROTATE_CA_ANNOTATION,
    };
    let value = now_to_the_second().to_string();
    clusters(target)
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({ "metadata": { "annotations": { annotation: value } } })),
        )
        .await
        .map_err(|e| api_failure(e, &cluster_subject(target, name)))?;
    let ns = namespace_flag(target);
    match request {
        Request::Renew => println!(
            "asked {name} to renew every certificate ({annotation}={value}); done when status.tls.renewedFor is {value}:\n  kubectl get etcdcluster {name} {ns} -o jsonpath='{{.status.tls.renewedFor}}'"
        ),
        Request::RotateCa => println!(
            "asked {name} to rotate its CA ({annotation}={value}): three steps, each a rolling restart of the members; clients of {name}-client-tls must reload it between steps (docs/security.md)\n  follow: kubectl etcd status {name} {ns}   (TLS: the CA rotation in progress)\n  or:     kubectl get etcdcluster {name} {ns} -o jsonpath='{{.status.tls.caRotation}}'\n  done when status.tls.caRotatedFor is {value}"
        ),
    }
    Ok(())
}
