//! What a backup pass reads before it acts: the `EtcdCluster` to back up
//! (untyped, so one this operator cannot decode is reported as such), the
//! destination's Secrets (credentials and encryption key), and the member
//! Pods' client endpoints (dialled by pod IP, as the cluster reconciler
//! does). Every failure is a [`BackupError`] for status; the decisions on
//! what was read are pure functions, tested without a cluster.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::api::{ApiResource, DynamicObject, ListParams};
use kube::{Api, Client};

use crate::addressing::CLIENT_PORT;
use crate::api::identity::cluster_selector;
use crate::api::{BackupDestination, BackupEncryption, EtcdCluster};
use crate::backup::volume_store::{VolumeStoreSettings, ensure_store};
use crate::backup::{BackupError, BackupStore, Credentials, EncryptionKey};
use crate::controller_kit::member_endpoints::pod_endpoints;
use crate::controller_kit::unreadable;
use crate::etcd::ClientTls;

/// The Secrets of a destination, read.
pub(super) struct DestinationSecrets {
    /// The credentials of the object store (empty for a local path).
    pub credentials: Credentials,
    /// The encryption key, when the destination is encrypted.
    pub key: Option<EncryptionKey>,
}

impl DestinationSecrets {
    /// Opens the destination for `cluster`'s folder.
    pub fn open(
        &self,
        destination: &BackupDestination,
        namespace: &str,
        cluster: &str,
    ) -> Result<BackupStore, BackupError> {
        if let Some(why) = destination
            .local
            .as_ref()
            .and_then(|local| crate::backup::local_volume::lost_with_the_pod(&local.path))
        {
            return Err(BackupError::Destination(why));
        }
        Ok(
            BackupStore::open(destination, namespace, cluster, &self.credentials)?
                .with_encryption(self.key.clone()),
        )
    }
}

/// Reads the `EtcdCluster` to back up ([`cluster_to_back_up`]).
pub(super) async fn cluster(
    client: &Client,
    namespace: &str,
    cluster: &str,
) -> Result<EtcdCluster, BackupError> {
    let clusters: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        namespace,
        &ApiResource::erase::<EtcdCluster>(&()),
    );
    cluster_to_back_up(namespace, cluster, clusters.get_opt(cluster).await)
}

/// The cluster to back up, from a read of it (pure): one that is gone is a
/// configuration error, one this operator cannot decode is
/// [`BackupError::UnreadableCluster`].
pub(super) fn cluster_to_back_up(
    namespace: &str,
    cluster: &str,
    read: Result<Option<DynamicObject>, kube::Error>,
) -> Result<EtcdCluster, BackupError> {
    let object = match read {
        Ok(Some(object)) => object,
        Ok(None) => {
            return Err(BackupError::Destination(format!(
                "EtcdCluster {namespace}/{cluster} does not exist"
            )));
        }
        Err(error) => {
            return Err(BackupError::NoHealthyMember(format!(
                "read the cluster: {error}"
            )));
        }
    };
    unreadable::decode(&object).map_err(|unreadable| BackupError::UnreadableCluster {
        cluster: format!("{namespace}/{cluster}"),
        path: unreadable.path,
        message: unreadable.message,
    })
}

/// Reads the credentials and the encryption key of `destination`; for a
/// claim, makes its store exist and reads the store's credentials.
pub(super) async fn destination_secrets(
    client: &Client,
    namespace: &str,
    destination: &BackupDestination,
    store_settings: &VolumeStoreSettings,
) -> Result<DestinationSecrets, BackupError> {
    let secrets: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let credentials = match (
        &destination.persistent_volume_claim,
        destination.credentials_secret(),
    ) {
        (Some(claim), _) => {
            ensure_store(client, namespace, &claim.claim_name, store_settings).await?
        }
        (None, Some(name)) => {
            let secret = read_secret(&secrets, &name).await?.ok_or_else(|| {
                BackupError::Destination(format!("Secret {namespace}/{name} does not exist"))
            })?;
            credentials_from(secret)
        }
        (None, None) => BTreeMap::new(),
    };
    let key = match &destination.encryption {
        Some(encryption) => {
            let secret = read_secret(&secrets, &encryption.secret_name).await?;
            Some(encryption_key_from(namespace, encryption, secret.as_ref())?)
        }
        None => None,
    };
    Ok(DestinationSecrets { credentials, key })
}

async fn read_secret(secrets: &Api<Secret>, name: &str) -> Result<Option<Secret>, BackupError> {
    secrets
        .get_opt(name)
        .await
        .map_err(|e| BackupError::NoHealthyMember(format!("read Secret {name}: {e}")))
}

/// The credentials in a Secret (pure): its UTF-8 values, trimmed.
fn credentials_from(secret: Secret) -> Credentials {
    secret
        .data
        .unwrap_or_default()
        .into_iter()
        .filter_map(|(k, v)| {
            String::from_utf8(v.0)
                .ok()
                .map(|v| (k, v.trim().to_string()))
        })
        .collect()
}

/// The encryption key in `secret` (pure): a missing Secret, a missing key
/// or a value that is not 256 bits is a configuration error.
pub(super) fn encryption_key_from(
    namespace: &str,
    encryption: &BackupEncryption,
    secret: Option<&Secret>,
) -> Result<EncryptionKey, BackupError> {
    let name = &encryption.secret_name;
    let secret = secret.ok_or_else(|| {
        BackupError::EncryptionKey(format!("Secret {namespace}/{name} does not exist"))
    })?;
    let value = secret
        .data
        .as_ref()
        .and_then(|data| data.get(&encryption.key))
        .ok_or_else(|| {
            BackupError::EncryptionKey(format!(
                "Secret {namespace}/{name} has no key {}",
                encryption.key
            ))
        })?;
    EncryptionKey::from_secret_value(&value.0).map_err(|error| {
        BackupError::EncryptionKey(format!(
            "Secret {namespace}/{name} key {}: {error}",
            encryption.key
        ))
    })
}

/// What the operator connects to a TLS cluster with (`None` for a
/// plaintext one).
pub(super) async fn cluster_tls(
    client: &Client,
    cluster: &EtcdCluster,
    cluster_domain: &str,
) -> Result<Option<std::sync::Arc<ClientTls>>, BackupError> {
    crate::reconcile::tls_material::read_operator_tls(client, cluster, cluster_domain)
        .await
        .map_err(|e| BackupError::ClusterTls(e.to_string()))
}

/// The client URLs (`scheme://pod-ip:2379`) of the cluster's member Pods;
/// none is [`BackupError::NoHealthyMember`].
pub(super) async fn member_endpoints(
    client: &Client,
    namespace: &str,
    cluster: &str,
    scheme: &str,
) -> Result<Vec<String>, BackupError> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let selector = cluster_selector(cluster);
    let pods = pods
        .list(&ListParams::default().labels(&selector))
        .await
        .map_err(|e| BackupError::NoHealthyMember(format!("list the member Pods: {e}")))?;
    let endpoints = pod_endpoints(&pods.items, scheme, CLIENT_PORT);
    if endpoints.is_empty() {
        return Err(BackupError::NoHealthyMember(format!(
            "no member Pod of {cluster} has an IP"
        )));
    }
    Ok(endpoints)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backup::BackupErrorCategory;
    use k8s_openapi::ByteString;
    use serde_json::json;

    fn cluster(retention_policy: &str) -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": "durable-etcd.io/v1alpha1",
            "kind": "EtcdCluster",
            "metadata": { "name": "main", "namespace": "prod" },
            "spec": {
                "replicas": 3,
                "storage": { "size": "1Gi", "retentionPolicy": retention_policy }
            }
        }))
        .expect("a dynamic object")
    }

    #[test]
    fn an_unreadable_cluster_is_reported_as_such_not_as_no_healthy_member() {
        let error = cluster_to_back_up("prod", "main", Ok(Some(cluster("Archive"))))
            .expect_err("unreadable");
        assert!(
            matches!(
                &error,
                BackupError::UnreadableCluster { cluster, path, .. }
                    if cluster == "prod/main" && path == "spec.storage.retentionPolicy"
            ),
            "{error:?}"
        );
        let message = error.to_string();
        assert!(
            message.starts_with(
                "this operator cannot read EtcdCluster prod/main at spec.storage.retentionPolicy: unknown variant `Archive`"
            ),
            "{message}"
        );
        // Waits for a change of the object, with the configuration back-off.
        assert_eq!(error.category(), BackupErrorCategory::Configuration);

        let readable = cluster_to_back_up("prod", "main", Ok(Some(cluster("Keep"))))
            .expect("a readable cluster");
        assert_eq!(readable.spec.replicas, 3);
        let gone = cluster_to_back_up("prod", "main", Ok(None)).expect_err("gone");
        assert!(
            gone.to_string()
                .contains("EtcdCluster prod/main does not exist"),
            "{gone}"
        );
    }

    fn secret(key: &str, value: &[u8]) -> Secret {
        Secret {
            data: Some([(key.to_string(), ByteString(value.to_vec()))].into()),
            ..Secret::default()
        }
    }

    #[test]
    fn the_encryption_key_comes_from_its_secret_or_is_a_configuration_error() {
        let encryption = BackupEncryption {
            secret_name: "backup-key".into(),
            key: "encryptionKey".into(),
        };
        let key = encryption_key_from(
            "prod",
            &encryption,
            Some(&secret("encryptionKey", &[7u8; 32])),
        )
        .expect("raw key");
        assert_eq!(key, EncryptionKey::from_bytes([7u8; 32]));

        let cases = [
            (None, "Secret prod/backup-key does not exist"),
            (
                Some(secret("other", &[7u8; 32])),
                "Secret prod/backup-key has no key encryptionKey",
            ),
            (
                Some(secret("encryptionKey", b"too short")),
                "Secret prod/backup-key key encryptionKey: an encryption key must be 32 raw bytes",
            ),
        ];
        for (secret, message) in cases {
            let error =
                encryption_key_from("prod", &encryption, secret.as_ref()).expect_err(message);
            assert!(error.to_string().contains(message), "{error}");
            assert_eq!(error.category(), BackupErrorCategory::Configuration);
        }
    }

    #[test]
    fn credentials_are_the_secrets_text_values_trimmed() {
        let mut secret = secret("accessKeyId", b"AKIA\n");
        if let Some(data) = secret.data.as_mut() {
            data.insert("binary".into(), ByteString(vec![0xff, 0xfe]));
        }
        let credentials = credentials_from(secret);
        assert_eq!(
            credentials,
            BTreeMap::from([("accessKeyId".to_string(), "AKIA".to_string())])
        );
    }
}
