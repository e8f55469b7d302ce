//! The operator's side of a `persistentVolumeClaim` destination: before
//! each use, the claim's store (Secret, Service, Deployment; see
//! [`crate::resources::backup_store`]) is made to exist, and the
//! credentials the destination is opened with are the store's token and
//! the address of its Ready Pod (the operator dials Pods by IP, as it
//! dials etcd members, so it works from outside the cluster too).

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod, Secret, Service};
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client, ResourceExt};

use super::{BackupError, Credentials, keys};
use crate::api::{BACKUP_CLAIM_MARKER_LABEL, claim_marked_for_backups};
use crate::controller_kit::member_endpoints::client_url;
use crate::pod_contract::backup_store::{
    STORE_PORT, TOKEN_KEY, store_secret_name, store_service_url,
};
use crate::resources::backup_store::{
    store_deployment, store_secret, store_selector, store_service,
};

/// The field manager of the store's objects.
const FIELD_MANAGER: &str = "etcd-operator-backup-store";

/// What the store's objects are built from.
#[derive(Clone, Debug)]
pub struct VolumeStoreSettings {
    /// The image the store runs (the operator's).
    pub operator_image: String,
    /// The Kubernetes cluster's DNS domain (the store's in-cluster URL).
    pub cluster_domain: String,
}

impl Default for VolumeStoreSettings {
    fn default() -> Self {
        Self {
            operator_image: crate::reconcile::DEFAULT_OPERATOR_IMAGE.to_string(),
            cluster_domain: crate::addressing::DEFAULT_CLUSTER_DOMAIN.to_string(),
        }
    }
}

/// Makes the store of `claim` exist and returns the credentials to reach
/// it: its token and the URL of its Ready Pod. A store that is not
/// serving yet is [`BackupError::StoreNotReady`] (retried), a claim that
/// does not exist a configuration error.
pub async fn ensure_store(
    client: &Client,
    namespace: &str,
    claim_name: &str,
    settings: &VolumeStoreSettings,
) -> Result<Credentials, BackupError> {
    let transient =
        |what: String| move |e: kube::Error| BackupError::StoreNotReady(format!("{what}: {e}"));
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), namespace);
    let claim = claims
        .get_opt(claim_name)
        .await
        .map_err(transient(format!(
            "read PersistentVolumeClaim {claim_name}"
        )))?
        .ok_or_else(|| {
            BackupError::Destination(format!(
                "PersistentVolumeClaim {namespace}/{claim_name} does not exist"
            ))
        })?;
    if !claim_marked_for_backups(claim.labels()) {
        return Err(BackupError::Destination(unmarked_claim(
            namespace, claim_name,
        )));
    }
    let token = ensure_secret(client, namespace, &claim, settings).await?;
    let apply = PatchParams::apply(FIELD_MANAGER).force();
    let services: Api<Service> = Api::namespaced(client.clone(), namespace);
    let service = store_service(&claim);
    let name = service.metadata.name.clone().unwrap_or_default();
    services
        .patch(&name, &apply, &Patch::Apply(&service))
        .await
        .map_err(transient(format!("apply Service {name}")))?;
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), namespace);
    let deployment = store_deployment(&claim, &settings.operator_image);
    deployments
        .patch(&name, &apply, &Patch::Apply(&deployment))
        .await
        .map_err(transient(format!("apply Deployment {name}")))?;
    let endpoint = ready_pod_url(client, namespace, claim_name).await?;
    Ok(Credentials::from([
        (keys::STORE_TOKEN.to_string(), token),
        (keys::STORE_ENDPOINT.to_string(), endpoint),
    ]))
}

/// Why a claim without the backup label is refused (nothing is mounted,
/// written or changed on it).
fn unmarked_claim(namespace: &str, claim_name: &str) -> String {
    format!(
        "PersistentVolumeClaim {namespace}/{claim_name} is not marked for backups: the backup store mounts its claim read-write and owns its files, so it only takes a claim labelled {BACKUP_CLAIM_MARKER_LABEL}=true (kubectl label pvc {claim_name} -n {namespace} {BACKUP_CLAIM_MARKER_LABEL}=true)"
    )
}

/// The store's token, from its Secret, created with a new random token
/// when missing (never rotated here: a token in use stays valid).
async fn ensure_secret(
    client: &Client,
    namespace: &str,
    claim: &PersistentVolumeClaim,
    settings: &VolumeStoreSettings,
) -> Result<String, BackupError> {
    let claim_name = kube::ResourceExt::name_any(claim);
    let name = store_secret_name(&claim_name);
    let secrets: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let read = |e: kube::Error| BackupError::StoreNotReady(format!("read Secret {name}: {e}"));
    if let Some(token) = secrets
        .get_opt(&name)
        .await
        .map_err(read)?
        .and_then(token_of)
    {
        return Ok(token);
    }
    let token = random_token()?;
    let endpoint = store_service_url(&claim_name, namespace, &settings.cluster_domain);
    let secret = store_secret(claim, &token, &endpoint);
    match secrets.create(&PostParams::default(), &secret).await {
        Ok(_) => Ok(token),
        // Created meanwhile by another pass: use that one.
        Err(kube::Error::Api(status)) if status.code == 409 => secrets
            .get_opt(&name)
            .await
            .map_err(|e| BackupError::StoreNotReady(format!("read Secret {name}: {e}")))?
            .and_then(token_of)
            .ok_or_else(|| BackupError::StoreNotReady(format!("Secret {name} has no {TOKEN_KEY}"))),
        Err(e) => Err(BackupError::StoreNotReady(format!(
            "create Secret {name}: {e}"
        ))),
    }
}

fn token_of(secret: Secret) -> Option<String> {
    let data = secret.data?;
    let token = String::from_utf8(data.get(TOKEN_KEY)?.0.clone()).ok()?;
    let token = token.trim().to_string();
    (!token.is_empty()).then_some(token)
}

/// The URL of the store's Ready Pod.
async fn ready_pod_url(
    client: &Client,
    namespace: &str,
    claim_name: &str,
) -> Result<String, BackupError> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let selector = store_selector(claim_name)
        .into_iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",");
    let listed = pods
        .list(&ListParams::default().labels(&selector))
        .await
        .map_err(|e| BackupError::StoreNotReady(format!("list the store's Pods: {e}")))?;
    let mut why = "its Pod has not been created yet".to_string();
    for pod in listed.items {
        if pod.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let name = pod.metadata.name.clone().unwrap_or_default();
        let status = pod.status.unwrap_or_default();
        let ready = status
            .conditions
            .iter()
            .flatten()
            .any(|c| c.type_ == "Ready" && c.status == "True");
        match (&status.pod_ip, ready) {
            (Some(ip), true) => return Ok(client_url("http", ip, STORE_PORT)),
            _ => {
                why = format!(
                    "Pod {name} is {} and not Ready",
                    status.phase.as_deref().unwrap_or("pending")
                );
            }
        }
    }
    Err(BackupError::StoreNotReady(format!(
        "the store of PersistentVolumeClaim {namespace}/{claim_name}: {why}"
    )))
}

fn random_token() -> Result<String, BackupError> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes)
        .map_err(|e| BackupError::StoreNotReady(format!("draw a random token: {e}")))?;
    Ok(hex::encode(bytes))
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    /// Only a claim its owner labelled for backups is taken; any other
    /// claim (an application's data, another cluster's volume) is refused
    /// with what to do.
    #[test]
    fn only_a_claim_labelled_for_backups_is_taken() {
        let marked = BTreeMap::from([(BACKUP_CLAIM_MARKER_LABEL.to_string(), "true".to_string())]);
        assert!(claim_marked_for_backups(&marked));
        let other = BTreeMap::from([(BACKUP_CLAIM_MARKER_LABEL.to_string(), "false".to_string())]);
        assert!(!claim_marked_for_backups(&other));
        assert!(!claim_marked_for_backups(&BTreeMap::new()));
        let why = unmarked_claim("prod", "app-data");
        assert!(why.contains("prod/app-data"), "{why}");
        assert!(why.contains("durable-etcd.io/backup-store=true"), "{why}");
    }
}
