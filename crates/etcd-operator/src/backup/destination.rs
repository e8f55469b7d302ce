//! From a [`BackupDestination`] and its Secret's data to an object store
//! and the folder of one cluster's backups inside it.

use std::collections::BTreeMap;
use std::sync::Arc;

use object_store::ClientConfigKey;
use object_store::ObjectStore;
use object_store::aws::AmazonS3Builder;
use object_store::azure::MicrosoftAzureBuilder;
use object_store::gcp::{GoogleCloudStorageBuilder, GoogleConfigKey};
use object_store::local::LocalFileSystem;
use object_store::path::Path;

use super::BackupError;
use super::encryption::EncryptionKey;
use crate::api::BackupDestination;

/// The data of a destination's credentials Secret (decoded), key to value.
pub type Credentials = BTreeMap<String, String>;

/// Keys read from a credentials Secret.
pub mod keys {
    /// S3 access key ID.
    pub const S3_ACCESS_KEY_ID: &str = "accessKeyID";
    /// S3 secret access key.
    pub const S3_SECRET_ACCESS_KEY: &str = "secretAccessKey";
    /// Optional S3 session token.
    pub const S3_SESSION_TOKEN: &str = "sessionToken";
    /// GCS service-account key file.
    pub const GCS_SERVICE_ACCOUNT: &str = "serviceAccount.json";
    /// Azure storage account key.
    pub const AZURE_ACCOUNT_KEY: &str = "accountKey";
    /// Token of the store of a `persistentVolumeClaim` destination.
    pub const STORE_TOKEN: &str = crate::pod_contract::backup_store::TOKEN_KEY;
    /// URL of the store of a `persistentVolumeClaim` destination.
    pub const STORE_ENDPOINT: &str = crate::pod_contract::backup_store::ENDPOINT_KEY;
}

/// Where one cluster's backups live: a store and the folder inside it,
/// and the key objects are sealed with before they reach the store, if any.
#[derive(Clone, Debug)]
pub struct BackupStore {
    store: Arc<dyn ObjectStore>,
    folder: Path,
    url_base: String,
    encryption: Option<EncryptionKey>,
}

impl BackupStore {
    /// Opens the destination for the backups of `namespace/cluster`.
    /// `credentials` is the data of the destination's Secret (empty when it
    /// names none).
    pub fn open(
        destination: &BackupDestination,
        namespace: &str,
        cluster: &str,
        credentials: &Credentials,
    ) -> Result<Self, BackupError> {
        install_tls_provider();
        let secret = destination.credentials_secret().unwrap_or_default();
        let secret = secret.as_str();
        let (store, url_base): (Arc<dyn ObjectStore>, String) = if let Some(claim) =
            &destination.persistent_volume_claim
        {
            (
                volume_store_client(credentials, secret)?,
                format!("pvc://{}", claim.claim_name),
            )
        } else if let Some(local) = &destination.local {
            std::fs::create_dir_all(&local.path)
                .map_err(|e| BackupError::io(format!("create {}", local.path), e))?;
            let store = LocalFileSystem::new_with_prefix(&local.path)?;
            (Arc::new(store), format!("file://{}", local.path))
        } else if let Some(s3) = &destination.s3 {
            own_credentials_stay_home("s3", s3.endpoint.as_deref(), &s3.credentials_secret)?;
            // Without an endpoint: AWS, with the operator's own
            // credentials unless a Secret is named. With one: nothing from
            // the operator's environment (not even a session token beside
            // the Secret's keys).
            let builder = if s3.endpoint.is_some() {
                AmazonS3Builder::new()
            } else {
                AmazonS3Builder::from_env()
            };
            let mut builder = builder
                .with_bucket_name(&s3.bucket)
                .with_region(s3.region.as_deref().unwrap_or("us-east-1"))
                .with_virtual_hosted_style_request(!s3.force_path_style);
            if let Some(endpoint) = &s3.endpoint {
                builder = builder
                    .with_endpoint(endpoint)
                    .with_allow_http(endpoint.starts_with("http://"));
            }
            if s3.credentials_secret.is_some() {
                builder = builder
                    .with_access_key_id(required(credentials, secret, keys::S3_ACCESS_KEY_ID)?)
                    .with_secret_access_key(required(
                        credentials,
                        secret,
                        keys::S3_SECRET_ACCESS_KEY,
                    )?);
                if let Some(token) = credentials.get(keys::S3_SESSION_TOKEN) {
                    builder = builder.with_token(token);
                }
            }
            (Arc::new(builder.build()?), format!("s3://{}", s3.bucket))
        } else if let Some(gcs) = &destination.gcs {
            own_credentials_stay_home("gcs", gcs.endpoint.as_deref(), &gcs.credentials_secret)?;
            let builder = if gcs.endpoint.is_some() {
                GoogleCloudStorageBuilder::new()
            } else {
                GoogleCloudStorageBuilder::from_env()
            };
            let mut builder = builder.with_bucket_name(&gcs.bucket);
            if let Some(endpoint) = &gcs.endpoint {
                let endpoint = endpoint_url(endpoint)?;
                builder = builder.with_base_url(&endpoint);
                if endpoint.starts_with("http://") {
                    builder = builder
                        .with_config(GoogleConfigKey::Client(ClientConfigKey::AllowHttp), "true");
                }
            }
            if gcs.credentials_secret.is_some() {
                builder = builder.with_service_account_key(required(
                    credentials,
                    secret,
                    keys::GCS_SERVICE_ACCOUNT,
                )?);
            }
            (Arc::new(builder.build()?), format!("gs://{}", gcs.bucket))
        } else if let Some(azure) = &destination.azure {
            own_credentials_stay_home(
                "azure",
                azure.endpoint.as_deref(),
                &azure.credentials_secret,
            )?;
            let builder = if azure.endpoint.is_some() {
                MicrosoftAzureBuilder::new()
            } else {
                MicrosoftAzureBuilder::from_env()
            };
            let mut builder = builder
                .with_account(&azure.account)
                .with_container_name(&azure.container);
            if let Some(endpoint) = &azure.endpoint {
                let endpoint = endpoint_url(endpoint)?;
                builder = builder
                    .with_allow_http(endpoint.starts_with("http://"))
                    .with_endpoint(endpoint);
            }
            if azure.credentials_secret.is_some() {
                builder = builder.with_access_key(required(
                    credentials,
                    secret,
                    keys::AZURE_ACCOUNT_KEY,
                )?);
            }
            (
                Arc::new(builder.build()?),
                format!("az://{}/{}", azure.account, azure.container),
            )
        } else {
            return Err(BackupError::Destination(
                "none of persistentVolumeClaim, s3, gcs, azure, local is set".to_string(),
            ));
        };
        let folder = cluster_folder(destination.prefix(), namespace, cluster)?;
        Ok(Self {
            store,
            folder,
            url_base,
            encryption: None,
        })
    }

    /// A store over an existing object store (tests, other transports).
    pub fn from_parts(store: Arc<dyn ObjectStore>, folder: Path, url_base: String) -> Self {
        Self {
            store,
            folder,
            url_base,
            encryption: None,
        }
    }

    /// The same store, sealing new objects with `key` (client-side
    /// encryption) and opening encrypted ones with it; `None` stores
    /// plaintext and can read only unencrypted backups.
    pub fn with_encryption(mut self, key: Option<EncryptionKey>) -> Self {
        self.encryption = key;
        self
    }

    /// The key new objects are sealed with, if any.
    pub fn encryption(&self) -> Option<&EncryptionKey> {
        self.encryption.as_ref()
    }

    /// The object store.
    pub fn store(&self) -> &Arc<dyn ObjectStore> {
        &self.store
    }

    /// The folder of this cluster's backups.
    pub fn folder(&self) -> &Path {
        &self.folder
    }

    /// The object at `name` inside the folder.
    pub fn path(&self, name: &str) -> Path {
        self.folder.clone().join(name)
    }

    /// A URL naming an object of this store, for status and logs.
    pub fn url(&self, path: &Path) -> String {
        format!("{}/{}", self.url_base, path)
    }
}

/// The client of a claim's store (see
/// [`crate::pod_contract::backup_store`]): the S3 protocol, path-style, to
/// the one bucket of the store at the credentials' endpoint, unsigned and
/// with the store's token on every request.
fn volume_store_client(
    credentials: &Credentials,
    secret: &str,
) -> Result<Arc<dyn ObjectStore>, BackupError> {
    use crate::pod_contract::backup_store::{STORE_BUCKET, TOKEN_HEADER};
    let endpoint = endpoint_url(required(credentials, secret, keys::STORE_ENDPOINT)?)?;
    let token = required(credentials, secret, keys::STORE_TOKEN)?;
    let mut headers = reqwest::header::HeaderMap::new();
    let value = reqwest::header::HeaderValue::from_str(token).map_err(|_| {
        BackupError::Destination(format!(
            "the token in Secret {secret} is not a valid header value"
        ))
    })?;
    headers.insert(TOKEN_HEADER, value);
    // Client options first: they replace any set before them.
    let store = AmazonS3Builder::new()
        .with_client_options(object_store::ClientOptions::new().with_default_headers(headers))
        .with_bucket_name(STORE_BUCKET)
        .with_region("us-east-1")
        .with_endpoint(&endpoint)
        .with_allow_http(true)
        .with_virtual_hosted_style_request(false)
        .with_skip_signature(true)
        .build()?;
    Ok(Arc::new(store))
}

fn required<'a>(
    credentials: &'a Credentials,
    secret: &str,
    key: &'static str,
) -> Result<&'a str, BackupError> {
    credentials
        .get(key)
        .map(String::as_str)
        .filter(|v| !v.is_empty())
        .ok_or_else(|| BackupError::MissingCredential {
            secret: secret.to_string(),
            key,
        })
}

/// Refuses a destination that names an `endpoint` without a
/// `credentialsSecret` (the CRD refuses it too; this catches objects stored
/// before the rule): the operator's own credentials (its environment,
/// workload identity, a metadata server) are never sent to an endpoint a
/// spec names.
fn own_credentials_stay_home(
    kind: &str,
    endpoint: Option<&str>,
    credentials_secret: &Option<String>,
) -> Result<(), BackupError> {
    match (endpoint, credentials_secret) {
        (Some(endpoint), None) => Err(BackupError::Destination(format!(
            "{kind}.endpoint {endpoint:?} needs {kind}.credentialsSecret: the operator never sends its own credentials to an endpoint a spec names"
        ))),
        _ => Ok(()),
    }
}

/// A destination's `endpoint` checked as an `http(s)://` URL with a host,
/// without a trailing `/` (the client appends `/<bucket or container>/...`).
/// A malformed endpoint is a configuration error here rather than a
/// failing request later.
fn endpoint_url(endpoint: &str) -> Result<String, BackupError> {
    let invalid = |why: &str| {
        BackupError::Destination(format!("endpoint {endpoint:?} is not a valid URL: {why}"))
    };
    let url = reqwest::Url::parse(endpoint).map_err(|e| invalid(&e.to_string()))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(invalid("the scheme must be http or https"));
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err(invalid("no host"));
    }
    if url.query().is_some() || url.fragment().is_some() {
        return Err(invalid("no query or fragment allowed"));
    }
    Ok(endpoint.trim_end_matches('/').to_string())
}

/// `<prefix>/<namespace>/<cluster>`, refusing empty or dotted segments.
fn cluster_folder(
    prefix: Option<&str>,
    namespace: &str,
    cluster: &str,
) -> Result<Path, BackupError> {
    let mut segments: Vec<&str> = prefix
        .unwrap_or("")
        .split('/')
        .filter(|s| !s.is_empty())
        .collect();
    segments.push(namespace);
    segments.push(cluster);
    for segment in &segments {
        if segment.is_empty() || *segment == "." || *segment == ".." {
            return Err(BackupError::Destination(format!(
                "invalid path segment {segment:?} in the backup folder"
            )));
        }
    }
    Ok(Path::from(segments.join("/")))
}

/// reqwest is built without a bundled TLS provider: use the ring provider
/// the rest of the operator's TLS (the Kubernetes client) uses.
fn install_tls_provider() {
    // Fails only when a provider is already installed, which is fine.
    let _ = rustls::crypto::ring::default_provider().install_default();
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{AzureDestination, GcsDestination, LocalDestination, S3Destination};

    #[test]
    fn folder_joins_prefix_namespace_and_cluster() {
        let folder = cluster_folder(Some("/backups/etcd/"), "prod", "main").expect("folder");
        assert_eq!(folder.as_ref(), "backups/etcd/prod/main");
        let folder = cluster_folder(None, "prod", "main").expect("folder");
        assert_eq!(folder.as_ref(), "prod/main");
        assert!(cluster_folder(Some("a/../b"), "prod", "main").is_err());
    }

    #[test]
    fn s3_without_its_secret_keys_is_a_configuration_error() {
        let destination = BackupDestination {
            s3: Some(S3Destination {
                bucket: "b".into(),
                endpoint: Some("http://127.0.0.1:9".into()),
                credentials_secret: Some("s3-creds".into()),
                force_path_style: true,
                ..S3Destination::default()
            }),
            ..BackupDestination::default()
        };
        let error = BackupStore::open(&destination, "ns", "c", &Credentials::new())
            .expect_err("missing keys");
        assert_eq!(error.to_string(), "Secret s3-creds has no key accessKeyID");
        assert_eq!(
            error.category(),
            super::super::BackupErrorCategory::Configuration
        );
    }

    fn gcs_at(endpoint: &str) -> BackupDestination {
        BackupDestination {
            gcs: Some(GcsDestination {
                bucket: "b".into(),
                endpoint: Some(endpoint.into()),
                credentials_secret: Some("gcs-creds".into()),
                ..GcsDestination::default()
            }),
            ..BackupDestination::default()
        }
    }

    fn azure_at(endpoint: &str) -> BackupDestination {
        BackupDestination {
            azure: Some(AzureDestination {
                account: "devstoreaccount1".into(),
                container: "c".into(),
                endpoint: Some(endpoint.into()),
                credentials_secret: Some("azure-creds".into()),
                ..AzureDestination::default()
            }),
            ..BackupDestination::default()
        }
    }

    #[test]
    fn an_endpoint_without_its_credentials_secret_is_refused() {
        let s3 = BackupDestination {
            s3: Some(S3Destination {
                bucket: "b".into(),
                endpoint: Some("http://127.0.0.1:9".into()),
                ..S3Destination::default()
            }),
            ..BackupDestination::default()
        };
        let mut gcs = gcs_at("http://127.0.0.1:9");
        let mut azure = azure_at("http://127.0.0.1:9/devstoreaccount1");
        for destination in [&mut gcs, &mut azure] {
            if let Some(d) = &mut destination.gcs {
                d.credentials_secret = None;
            }
            if let Some(d) = &mut destination.azure {
                d.credentials_secret = None;
            }
        }
        for (kind, destination) in [("s3", s3), ("gcs", gcs), ("azure", azure)] {
            let error = BackupStore::open(&destination, "ns", "c", &Credentials::new())
                .expect_err("refused");
            assert!(
                error
                    .to_string()
                    .contains(&format!("{kind}.endpoint \"http://127.0.0.1:9")),
                "{error}"
            );
            assert!(
                error
                    .to_string()
                    .contains("never sends its own credentials")
            );
            assert_eq!(
                error.category(),
                super::super::BackupErrorCategory::Configuration
            );
        }
    }

    #[test]
    fn an_endpoint_that_is_not_an_http_url_is_a_configuration_error() {
        for endpoint in [
            "storage.example.com",
            "ftp://127.0.0.1:1",
            "http://",
            "https://h/?sig=x",
        ] {
            for destination in [gcs_at(endpoint), azure_at(endpoint)] {
                let error = BackupStore::open(&destination, "ns", "c", &Credentials::new())
                    .expect_err(endpoint);
                assert_eq!(
                    error.category(),
                    super::super::BackupErrorCategory::Configuration,
                    "{error}"
                );
                assert!(error.to_string().contains(endpoint), "{error}");
            }
        }
    }

    #[test]
    fn endpoints_lose_their_trailing_slash() {
        assert_eq!(
            endpoint_url("http://127.0.0.1:10000/devstoreaccount1/").expect("url"),
            "http://127.0.0.1:10000/devstoreaccount1"
        );
        assert_eq!(
            endpoint_url("https://storage.example.com").expect("url"),
            "https://storage.example.com"
        );
    }

    #[test]
    fn azure_with_an_endpoint_and_a_key_opens_with_az_urls() {
        let credentials = Credentials::from([(
            keys::AZURE_ACCOUNT_KEY.to_string(),
            // Azurite's published development key.
            "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
                .to_string(),
        )]);
        let store = BackupStore::open(
            &azure_at("http://127.0.0.1:10000/devstoreaccount1"),
            "ns",
            "c",
            &credentials,
        )
        .expect("open");
        assert_eq!(
            store.url(&store.path("x.json")),
            "az://devstoreaccount1/c/ns/c/x.json"
        );
        let error = BackupStore::open(
            &azure_at("http://127.0.0.1:10000/devstoreaccount1"),
            "ns",
            "c",
            &Credentials::new(),
        )
        .expect_err("no key");
        assert_eq!(
            error.to_string(),
            "Secret azure-creds has no key accountKey"
        );
    }

    #[test]
    fn local_destination_names_file_urls() {
        let dir = tempfile::tempdir().expect("tempdir");
        let destination = BackupDestination {
            local: Some(LocalDestination {
                path: dir.path().join("nested").display().to_string(),
            }),
            ..BackupDestination::default()
        };
        let store = BackupStore::open(&destination, "ns", "c", &Credentials::new()).expect("open");
        let path = store.path("x.json");
        assert_eq!(path.as_ref(), "ns/c/x.json");
        assert!(store.url(&path).starts_with("file:///"));
        assert!(dir.path().join("nested").is_dir());
    }
}
