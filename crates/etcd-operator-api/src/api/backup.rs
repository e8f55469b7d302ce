//! The `EtcdBackup` kind: one full snapshot of an `EtcdCluster`, taken once,
//! and the destinations backups are written to.

// Each `printcolumn(...)` repeats `type_ = ...`, which clippy mistakes for
// a duplicated attribute.
#![allow(clippy::duplicated_attributes)]

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::rules;

/// A one-shot full backup of an `EtcdCluster` in the same namespace.
///
/// The operator streams a snapshot from a healthy member (a follower when
/// one is healthy), checks etcd's embedded SHA-256, compresses it with zstd
/// and uploads it in parts to the destination, with a JSON metadata object
/// beside it. The backup runs once; its status records where it went and
/// what it holds. The spec is immutable.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "durable-etcd.io",
    version = "v1alpha1",
    kind = "EtcdBackup",
    plural = "etcdbackups",
    shortname = "etcdb",
    namespaced,
    status = "EtcdBackupStatus",
    derive = "PartialEq",
    doc = "A one-shot full snapshot of an EtcdCluster, verified, compressed and uploaded to an object store or a local path.",
    printcolumn(
        name = "Cluster",
        type_ = "string",
        json_path = ".spec.clusterName",
        description = "The EtcdCluster backed up"
    ),
    printcolumn(
        name = "Phase",
        type_ = "string",
        json_path = ".status.phase",
        description = "Pending, Running, Succeeded or Failed"
    ),
    printcolumn(
        name = "Revision",
        type_ = "integer",
        json_path = ".status.revision",
        description = "Revision of the snapshot"
    ),
    printcolumn(
        name = "Location",
        type_ = "string",
        json_path = ".status.location",
        description = "Where the snapshot was written"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = kube::core::Rule::new("self == oldSelf").message("the spec of an EtcdBackup is immutable: create a new one"))]
pub struct EtcdBackupSpec {
    /// Name of the `EtcdCluster` to back up, in the same namespace.
    #[schemars(length(min = 1, max = 63))]
    #[x_kube(validation = rules::cluster_name_length("self", "clusterName"))]
    #[x_kube(validation = rules::cluster_name_shape("self", "clusterName"))]
    pub cluster_name: String,

    /// Where the snapshot and its metadata are written.
    pub destination: BackupDestination,
}

/// Where backups go: exactly one of `persistentVolumeClaim`, `s3`, `gcs`,
/// `azure`, `local`.
///
/// Objects are named `<prefix>/<namespace>/<cluster>/<UTC time>-r<revision>`
/// with the suffixes `.db.zst` (the compressed snapshot; `.db.zst.enc` when
/// encrypted) and `.json` (its metadata).
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = kube::core::Rule::new("[has(self.local), has(self.s3), has(self.gcs), has(self.azure), has(self.persistentVolumeClaim)].filter(x, x).size() == 1").message("destination needs exactly one of persistentVolumeClaim, s3, gcs, azure, local"))]
pub struct BackupDestination {
    /// A PersistentVolumeClaim in the backup's namespace. The operator runs
    /// one store Pod per claim (Deployment `backup-store-<claim>`, from the
    /// operator's image) that mounts it and serves it to the operator and to
    /// restore Pods; backups are plain files on the volume.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "VolumeClaimDestination")]
    pub persistent_volume_claim: Option<VolumeClaimDestination>,

    /// A directory on the operator's own filesystem. Only for an operator
    /// run outside Kubernetes, or one whose Pod mounts a volume at that
    /// path: an in-cluster operator refuses a path on its container's own
    /// filesystem, which is lost with the Pod. Use
    /// `persistentVolumeClaim` to keep backups on a volume.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "LocalDestination")]
    pub local: Option<LocalDestination>,

    /// Amazon S3 or an S3-compatible endpoint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "S3Destination")]
    pub s3: Option<S3Destination>,

    /// Google Cloud Storage.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "GcsDestination")]
    pub gcs: Option<GcsDestination>,

    /// Azure Blob Storage.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "AzureDestination")]
    pub azure: Option<AzureDestination>,

    /// Client-side encryption: when set, every object is encrypted (after
    /// compression) before it leaves the operator, so the store only holds
    /// ciphertext; restoring needs the same key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "BackupEncryption")]
    pub encryption: Option<BackupEncryption>,
}

/// The key backups are encrypted with: a Secret in the backup's namespace
/// and a key in it holding 256 bits, either as 32 raw bytes or as the
/// base64 of 32 bytes (e.g. `head -c 32 /dev/urandom | base64`); anything
/// else is refused as a configuration error. Objects are sealed with
/// XChaCha20-Poly1305 in 64 KiB authenticated chunks; the metadata records
/// the key's fingerprint, never the key. Keep every key that sealed a
/// backup you may restore.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct BackupEncryption {
    /// Name of the Secret, in the backup's namespace.
    #[schemars(length(min = 1, max = 253))]
    #[x_kube(validation = rules::subdomain("encryption.secretName"))]
    pub secret_name: String,

    /// Key of the Secret's data holding the encryption key.
    #[serde(default = "default_encryption_key")]
    #[schemars(length(min = 1, max = 253))]
    #[x_kube(validation = rules::rule("self.matches('^[-._a-zA-Z0-9]+$')", "encryption.key must be a key of the Secret's data: letters, digits, '-', '_' and '.'"))]
    pub key: String,
}

/// The Secret key read when `encryption.key` is unset.
pub const DEFAULT_ENCRYPTION_KEY: &str = "encryptionKey";

fn default_encryption_key() -> String {
    DEFAULT_ENCRYPTION_KEY.to_string()
}

/// The label a PersistentVolumeClaim carries (value `"true"`) when its owner
/// made it for backups: the operator keeps backups only on such a claim,
/// since its store Pod mounts the claim read-write and owns its files.
pub const BACKUP_CLAIM_MARKER_LABEL: &str = "durable-etcd.io/backup-store";

/// Whether a claim's labels mark it for backups ([`BACKUP_CLAIM_MARKER_LABEL`]).
pub fn claim_marked_for_backups(labels: &std::collections::BTreeMap<String, String>) -> bool {
    labels
        .get(BACKUP_CLAIM_MARKER_LABEL)
        .is_some_and(|v| v == "true")
}

/// A PersistentVolumeClaim the backups are kept on.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct VolumeClaimDestination {
    /// Name of the claim, in the backup's namespace. It must exist and
    /// carry the label `durable-etcd.io/backup-store: "true"` (a claim made
    /// for backups: the store Pod mounts it read-write and owns its files;
    /// any other claim is refused); it may be `ReadWriteOnce` (only the
    /// store Pod mounts it).
    #[schemars(length(min = 1, max = 253))]
    #[x_kube(validation = rules::subdomain("persistentVolumeClaim.claimName"))]
    pub claim_name: String,

    /// Directory inside the volume, without leading or trailing `/`; the
    /// volume's root when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 512))]
    #[x_kube(validation = rules::object_prefix("persistentVolumeClaim.path"))]
    pub path: Option<String>,
}

/// A directory on the operator's filesystem.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct LocalDestination {
    /// Absolute path of the directory; created when missing.
    #[schemars(length(max = 4096))]
    #[x_kube(validation = rules::rule("self.startsWith('/') && !self.split('/').exists(s, s == '..')", "local.path must be an absolute path (starting with /) without '..' segments"))]
    pub path: String,
}

/// An S3 bucket (AWS or any S3-compatible server).
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = rules::endpoint_needs_credentials("s3"))]
pub struct S3Destination {
    /// Bucket name. It must exist. 3 to 255 letters, digits, `.`, `-`,
    /// `_`, starting and ending with a letter or digit (what S3 and
    /// S3-compatible servers accept, old US-East buckets included).
    #[schemars(length(min = 3, max = 255))]
    #[x_kube(validation = rules::rule("self.matches('^[A-Za-z0-9][-A-Za-z0-9._]*[A-Za-z0-9]$')", "s3.bucket must be a bucket name: 3 to 255 letters, digits, '.', '-' or '_', starting and ending with a letter or digit (no '/')"))]
    pub bucket: String,

    /// Key prefix inside the bucket, without leading or trailing `/`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 512))]
    #[x_kube(validation = rules::object_prefix("s3.prefix"))]
    pub prefix: Option<String>,

    /// Endpoint URL of an S3-compatible server (e.g. `http://minio:9000`);
    /// AWS when unset. `http://` endpoints are allowed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 2048))]
    #[x_kube(validation = rules::endpoint_url("s3.endpoint", "http://minio:9000"))]
    pub endpoint: Option<String>,

    /// Region; `us-east-1` when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 63))]
    #[x_kube(validation = rules::rule("self.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?$')", "s3.region must be a region name such as us-east-1"))]
    pub region: Option<String>,

    /// Secret in the backup's namespace with the keys `accessKeyID` and
    /// `secretAccessKey` (and optionally `sessionToken`). Without it the
    /// operator's own environment credentials are used, and only with AWS
    /// itself: an `endpoint` needs this Secret.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 253))]
    #[x_kube(validation = rules::subdomain("s3.credentialsSecret"))]
    pub credentials_secret: Option<String>,

    /// Address buckets as `endpoint/bucket` rather than `bucket.endpoint`
    /// (most S3-compatible servers need it).
    #[serde(default)]
    pub force_path_style: bool,
}

/// A Google Cloud Storage bucket.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = rules::endpoint_needs_credentials("gcs"))]
pub struct GcsDestination {
    /// Bucket name. It must exist. 3 to 222 lower-case letters, digits,
    /// `.`, `-`, `_`, starting and ending with a letter or digit (Cloud
    /// Storage's naming rules).
    #[schemars(length(min = 3, max = 222))]
    #[x_kube(validation = rules::rule("self.matches('^[a-z0-9][-a-z0-9._]*[a-z0-9]$')", "gcs.bucket must be a bucket name: 3 to 222 lower-case letters, digits, '.', '-' or '_', starting and ending with a letter or digit"))]
    pub bucket: String,

    /// Object name prefix, without leading or trailing `/`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 512))]
    #[x_kube(validation = rules::object_prefix("gcs.prefix"))]
    pub prefix: Option<String>,

    /// Base URL of the storage service (XML API), for a Private Service
    /// Connect endpoint (e.g. `https://storage-myendpoint.p.googleapis.com`)
    /// or an emulator; `https://storage.googleapis.com` when unset.
    /// `http://` endpoints are allowed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 2048))]
    #[x_kube(validation = rules::endpoint_url("gcs.endpoint", "https://storage-myendpoint.p.googleapis.com"))]
    pub endpoint: Option<String>,

    /// Secret in the backup's namespace with the key `serviceAccount.json`
    /// (a service-account key file). Without it the operator's own
    /// credentials are used (workload identity, `GOOGLE_APPLICATION_CREDENTIALS`,
    /// the metadata server), and only with Google's own endpoint: an
    /// `endpoint` needs this Secret.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 253))]
    #[x_kube(validation = rules::subdomain("gcs.credentialsSecret"))]
    pub credentials_secret: Option<String>,
}

/// An Azure Blob Storage container.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = rules::endpoint_needs_credentials("azure"))]
pub struct AzureDestination {
    /// Storage account name: 3 to 24 lower-case letters and digits.
    #[schemars(length(min = 3, max = 24))]
    #[x_kube(validation = rules::rule("self.matches('^[a-z0-9]+$')", "azure.account must be a storage account name: 3 to 24 lower-case letters and digits"))]
    pub account: String,

    /// Container name. It must exist. 3 to 63 lower-case letters, digits
    /// and single `-` between them, or `$root`.
    #[schemars(length(min = 3, max = 63))]
    #[x_kube(validation = rules::rule("self == '$root' || self.matches('^[a-z0-9](-?[a-z0-9])+$')", "azure.container must be a container name: 3 to 63 lower-case letters, digits and single '-' between them"))]
    pub container: String,

    /// Blob name prefix, without leading or trailing `/`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 512))]
    #[x_kube(validation = rules::object_prefix("azure.prefix"))]
    pub prefix: Option<String>,

    /// URL of the account's Blob service, for a sovereign cloud (e.g.
    /// `https://<account>.blob.core.usgovcloudapi.net`), a private endpoint
    /// or an emulator (Azurite: `http://127.0.0.1:10000/devstoreaccount1`);
    /// `https://<account>.blob.core.windows.net` when unset. Containers are
    /// addressed under it. `http://` endpoints are allowed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 2048))]
    #[x_kube(validation = rules::endpoint_url("azure.endpoint", "https://myaccount.blob.core.usgovcloudapi.net"))]
    pub endpoint: Option<String>,

    /// Secret in the backup's namespace with the key `accountKey` (the
    /// storage account's shared key; for Azurite its published development
    /// key). Without it the operator's own credentials are used (workload
    /// identity, managed identity, `AZURE_STORAGE_*` variables), and only
    /// with Azure's own endpoint: an `endpoint` needs this Secret.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 253))]
    #[x_kube(validation = rules::subdomain("azure.credentialsSecret"))]
    pub credentials_secret: Option<String>,
}

impl BackupDestination {
    /// The key prefix configured for the destination, if any.
    pub fn prefix(&self) -> Option<&str> {
        if let Some(claim) = &self.persistent_volume_claim {
            return claim.path.as_deref();
        }
        if let Some(s3) = &self.s3 {
            return s3.prefix.as_deref();
        }
        if let Some(gcs) = &self.gcs {
            return gcs.prefix.as_deref();
        }
        if let Some(azure) = &self.azure {
            return azure.prefix.as_deref();
        }
        None
    }

    /// The Secret holding the destination's credentials, if any (for a
    /// claim, the Secret of its store, which the operator creates).
    pub fn credentials_secret(&self) -> Option<String> {
        if let Some(claim) = &self.persistent_volume_claim {
            return Some(crate::pod_contract::backup_store::store_secret_name(
                &claim.claim_name,
            ));
        }
        if let Some(s3) = &self.s3 {
            return s3.credentials_secret.clone();
        }
        if let Some(gcs) = &self.gcs {
            return gcs.credentials_secret.clone();
        }
        if let Some(azure) = &self.azure {
            return azure.credentials_secret.clone();
        }
        None
    }
}

/// Observed state of a backup.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct EtcdBackupStatus {
    /// Pending, Running, Succeeded or Failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<BackupPhase>,

    /// etcd cluster ID (hex) the snapshot was taken from.
    #[serde(default, skip_serializing_if = "Option::is_none", rename = "clusterID")]
    pub cluster_id: Option<String>,

    /// The member the snapshot was streamed from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub member: Option<String>,

    /// Key-value revision of the snapshot.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision: Option<i64>,

    /// etcd server version of the member the snapshot came from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub etcd_version: Option<String>,

    /// Size of the snapshot (the etcd database) in bytes, uncompressed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size_bytes: Option<i64>,

    /// Size of the stored, compressed object in bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stored_bytes: Option<i64>,

    /// SHA-256 (hex) of the uncompressed snapshot, as etcd embedded it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,

    /// When the snapshot started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_time: Option<Time>,

    /// When the backup completed (succeeded or failed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completion_time: Option<Time>,

    /// How long streaming, verifying and uploading took, in seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration_seconds: Option<f64>,

    /// URL of the stored snapshot object (`file://`, `s3://`, `gs://`,
    /// `az://`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub location: Option<String>,

    /// Number of attempts made so far.
    #[serde(default)]
    pub attempts: i32,

    /// Why the last attempt failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,

    /// Condition `Complete` (the backup succeeded) with the reason of the
    /// last transition.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

/// The phase of a one-shot backup.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
pub enum BackupPhase {
    /// Waiting for a healthy member or for a retry after a transient error.
    Pending,
    /// Streaming and uploading.
    Running,
    /// Stored and verified; the status describes the backup.
    Succeeded,
    /// Gave up: the spec cannot work (e.g. no such cluster for too long) or
    /// the retries are exhausted. `error` says why.
    Failed,
}

#[cfg(test)]
mod tests {
    use kube::CustomResourceExt;
    use serde_json::Value;

    use super::*;
    use crate::api::EtcdBackupSchedule;

    fn schema<K: CustomResourceExt>() -> Value {
        let crd = serde_json::to_value(K::crd()).expect("crd serialises");
        crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"].clone()
    }

    fn rules(schema: &Value) -> Vec<String> {
        schema["x-kubernetes-validations"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|r| r["rule"].as_str().map(str::to_string))
            .collect()
    }

    #[test]
    fn destination_needs_exactly_one_kind() {
        let backup = schema::<EtcdBackup>();
        let destination = &backup["properties"]["spec"]["properties"]["destination"];
        assert!(
            rules(destination)
                .iter()
                .any(|r| r.contains(".filter(x, x).size() == 1")),
            "{destination}"
        );
        let schedule = schema::<EtcdBackupSchedule>();
        let destination = &schedule["properties"]["spec"]["properties"]["destination"];
        assert!(!rules(destination).is_empty());
    }

    #[test]
    fn backup_spec_is_immutable_and_schedule_has_defaults() {
        let backup = schema::<EtcdBackup>();
        assert!(rules(&backup["properties"]["spec"]).contains(&"self == oldSelf".to_string()));
        let schedule = schema::<EtcdBackupSchedule>();
        let props = &schedule["properties"]["spec"]["properties"];
        assert_eq!(
            props["incremental"]["properties"]["interval"]["default"],
            "4s"
        );
        assert_eq!(props["retention"]["properties"]["count"]["default"], 7);
    }

    #[test]
    fn encryption_names_a_secret_and_defaults_its_key() {
        let spec: EtcdBackupSpec = serde_saphyr::from_str(
            "clusterName: main\ndestination:\n  local:\n    path: /b\n  encryption:\n    secretName: backup-key\n",
        )
        .expect("yaml");
        let encryption = spec.destination.encryption.expect("encryption");
        assert_eq!(encryption.secret_name, "backup-key");
        assert_eq!(encryption.key, DEFAULT_ENCRYPTION_KEY);
        let backup = schema::<EtcdBackup>();
        let props =
            &backup["properties"]["spec"]["properties"]["destination"]["properties"]["encryption"];
        assert_eq!(props["properties"]["key"]["default"], "encryptionKey");
        assert_eq!(props["required"], serde_json::json!(["secretName"]));
    }

    #[test]
    fn the_destination_parses_from_yaml() {
        let spec: EtcdBackupSpec = serde_saphyr::from_str(
            "clusterName: main\ndestination:\n  s3:\n    bucket: b\n    endpoint: http://127.0.0.1:9000\n    forcePathStyle: true\n    credentialsSecret: s3\n",
        )
        .expect("yaml");
        let s3 = spec.destination.s3.as_ref().expect("s3");
        assert!(s3.force_path_style);
        assert_eq!(
            spec.destination.credentials_secret(),
            Some("s3".to_string())
        );
    }
}
