//! The `EtcdCluster` custom resource: spec, status and the generated CRD.
//!
//! Every field is documented; the doc comments become the descriptions of the
//! OpenAPI schema that `kubectl explain` shows. Validation that the API server
//! can judge (ranges, patterns, immutability, CEL rules) lives in the schema,
//! so a bad spec is refused at `kubectl apply`; what only the operator can
//! judge is reported in status.

mod backup;
mod backup_schedule;
mod bootstrap;
mod ca_rotation;
mod cluster;
mod crd;
pub mod identity;
mod maintenance;
mod network_policy;
pub mod pod_revision;
mod pod_rules;
mod pod_template;
pub mod quantity;
mod recovery;
pub mod rules;
mod status;
mod storage;
mod tls;
pub mod transport_choice;
pub mod tuning;
pub mod version;

pub use backup::{
    AzureDestination, BACKUP_CLAIM_MARKER_LABEL, BackupDestination, BackupEncryption, BackupPhase,
    DEFAULT_ENCRYPTION_KEY, EtcdBackup, EtcdBackupSpec, EtcdBackupStatus, GcsDestination,
    LocalDestination, S3Destination, VolumeClaimDestination, claim_marked_for_backups,
};
pub use backup_schedule::{
    BackupRetention, EtcdBackupSchedule, EtcdBackupScheduleSpec, EtcdBackupScheduleStatus,
    IncrementalBackup, IncrementalBackupStatus,
};
pub use bootstrap::{BackupSource, BootstrapSpec};
pub use ca_rotation::CaRotationStep;
pub use cluster::{EtcdCluster, EtcdClusterSpec};
pub use crd::{CrdError, crd, crd_yaml, crds, crds_yaml};
pub use maintenance::{DefragSpec, MaintenanceSpec};
pub use network_policy::NetworkPolicySpec;
pub use pod_template::MemberPodTemplate;
pub use recovery::{RecoveryPolicy, RecoverySource, RecoverySpec};
pub use status::{
    CaRotationStatus, CertificateStatus, ClusterBackupStatus, ConditionType, DataLossStatus,
    DefragRound, EtcdClusterStatus, LastDefrag, LastOperation, MaintenanceStatus, MemberRole,
    MemberStatus, OperationState, Phase, RestoreStatus, RolloutStatus, SpaceRecovery,
    SurvivorRevision, TlsStatus,
};
pub use storage::{RetentionPolicy, StorageSpec};
pub use tls::{
    BuiltInIssuer, CA_ROTATED_FOR_ANNOTATION, CA_ROTATION_ASKED_FOR_ANNOTATION,
    CA_ROTATION_FOR_ANNOTATION, CaRotationPolicy, CertManagerIssuer, IssuerKind, IssuerReference,
    NAMED_CLIENT_CERTIFICATES_ANNOTATION, NamedClientCertificate, RENEW_CERTIFICATES_ANNOTATION,
    RENEWED_FOR_ANNOTATION, ROTATE_CA_ANNOTATION, TlsSpec,
};
pub use tuning::{AutoCompactionMode, EtcdTuning};

/// The API group of every kind this operator serves.
pub const GROUP: &str = "durable-etcd.io";
/// The version of the API group served by this release.
pub const VERSION: &str = "v1alpha1";
