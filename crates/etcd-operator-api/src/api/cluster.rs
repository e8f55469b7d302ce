//! The `EtcdCluster` kind and its spec.

// Each `printcolumn(...)` repeats `type_ = ...`, which clippy mistakes for
// a duplicated attribute.
#![allow(clippy::duplicated_attributes)]

use kube::{CustomResource, KubeSchema, core::Duration};
use serde::{Deserialize, Serialize};

use super::{
    BootstrapSpec, EtcdClusterStatus, EtcdTuning, MaintenanceSpec, MemberPodTemplate,
    NetworkPolicySpec, RecoverySpec, StorageSpec, TlsSpec, pod_rules, quantity, rules, tuning,
    version,
};

/// Desired state of a durable etcd cluster.
///
/// The operator keeps one Pod and one PersistentVolumeClaim per member, named
/// `<cluster>-<ordinal>`. It prefers losing availability for a while to
/// losing data: members whose volumes still exist are always waited for, and
/// a restore happens only when a person (or a policy they chose) says so.
///
/// The cluster's name is at most 56 characters, starts with a lower-case
/// letter and holds only lower-case letters, digits and `-`: it names the
/// Services `<name>-client` and `<name>-peer`, which must be DNS-1035
/// labels of at most 63 characters (see `rules::MAX_CLUSTER_NAME`).
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "durable-etcd.io",
    version = "v1alpha1",
    kind = "EtcdCluster",
    plural = "etcdclusters",
    shortname = "etcdc",
    namespaced,
    status = "EtcdClusterStatus",
    derive = "PartialEq",
    doc = "A durable etcd cluster: members with stable identity that survive pod loss, node loss and loss of quorum.",
    printcolumn(
        name = "Replicas",
        type_ = "integer",
        json_path = ".spec.replicas",
        description = "Desired number of voting members"
    ),
    printcolumn(
        name = "Ready",
        type_ = "integer",
        json_path = ".status.readyMembers",
        description = "Members that are healthy"
    ),
    printcolumn(
        name = "Version",
        type_ = "string",
        json_path = ".status.version",
        description = "etcd releases the members run (running→desired during a rollout)"
    ),
    printcolumn(
        name = "Updated",
        type_ = "integer",
        json_path = ".status.updatedMembers",
        description = "Members whose Pod runs the current template"
    ),
    printcolumn(
        name = "Available",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Available\")].status",
        description = "Whether the cluster has quorum and serves"
    ),
    printcolumn(
        name = "Recovery Point",
        type_ = "date",
        json_path = ".status.backup.recoveryPoint",
        description = "Every write acknowledged before this time is in a backup"
    ),
    printcolumn(
        name = "Phase",
        type_ = "string",
        json_path = ".status.phase",
        description = "What the cluster is doing"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    ),
    validation = rules::cluster_name_length("self.metadata.name", "metadata.name"),
    validation = rules::cluster_name_shape("self.metadata.name", "metadata.name"),
    validation = super::tls::reserved_client_certificate_names(),
)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = rules::rule("has(self.bootstrap) == has(oldSelf.bootstrap) && (!has(self.bootstrap) || self.bootstrap == oldSelf.bootstrap)", "spec.bootstrap is set at creation only: it cannot be added, changed or removed later"))]
#[x_kube(validation = quota_fits_volume())]
#[x_kube(validation = rules::rule("!has(self.tls) || !has(self.tls.disabled) || !self.tls.disabled || (has(oldSelf.tls) && has(oldSelf.tls.disabled) && oldSelf.tls.disabled)", "spec.tls.disabled can only be set when the cluster is created: turning TLS off is not supported"))]
#[x_kube(validation = rules::rule("(has(self.tls) && has(self.tls.certManager)) == (has(oldSelf.tls) && has(oldSelf.tls.certManager)) && (!has(self.tls) || !has(self.tls.certManager) || self.tls.certManager == oldSelf.tls.certManager)", "spec.tls.certManager is set when the cluster is created and does not change: another issuer would change the CA every member and client trusts"))]
pub struct EtcdClusterSpec {
    /// Number of voting members, 1 to 9. Odd counts tolerate the most
    /// failures per member; even counts are accepted and reported in status.
    /// Changes are applied one member at a time, learners first.
    #[serde(default = "default_replicas")]
    #[schemars(range(min = 1, max = 9))]
    pub replicas: i32,

    /// etcd version, e.g. `3.6.16`. Defaults to the newest 3.6 release this
    /// operator pins. A version the operator does not support is reported in
    /// status and not rolled out.
    ///
    /// A change rolls through the members one at a time, followers first,
    /// the leader last: patch releases either way; one minor release at a
    /// time up (3.6 → 3.7, from 3.6.11 or later); one minor release down
    /// (3.7 → 3.6) through etcd's downgrade, which the operator enables
    /// before the first member runs the older release.
    #[serde(default = "default_version")]
    #[schemars(length(max = 32))]
    #[x_kube(validation = version::rule())]
    #[x_kube(validation = version::one_minor_step())]
    pub version: String,

    /// The etcd container image, when not the etcd project's release image
    /// of `version` (`gcr.io/etcd-development/etcd:v<version>`, published
    /// for every release): a mirror or a private registry. It must run the
    /// release `version` names: the operator applies etcd's upgrade and
    /// downgrade rules to `version`, never reads the release from the
    /// image. A change rolls like any other; a new default image in an
    /// operator upgrade rolls nothing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 512))]
    #[x_kube(validation = rules::rule("!self.matches('\\\\s')", "image must not contain white space"))]
    pub image: Option<String>,

    /// Persistent storage of each member's data directory.
    #[serde(default)]
    pub storage: StorageSpec,

    /// Scheduling and metadata of the member Pods. Admission checks what
    /// would make the Pods themselves refused: resource quantities, label
    /// and annotation keys and values, the PriorityClass name, tolerations
    /// and topology spread constraints.
    #[serde(default)]
    #[schemars(transform = pod_rules::bound_sizes)]
    #[x_kube(validation = pod_rules::resources_are_quantities())]
    #[x_kube(validation = pod_rules::requests_within_limits())]
    #[x_kube(validation = pod_rules::labels_are_valid())]
    #[x_kube(validation = pod_rules::node_selector_is_valid())]
    #[x_kube(validation = pod_rules::annotation_keys_are_valid())]
    #[x_kube(validation = pod_rules::priority_class_name())]
    #[x_kube(validation = pod_rules::tolerations_are_valid())]
    #[x_kube(validation = pod_rules::spread_constraints_are_valid())]
    pub pod: MemberPodTemplate,

    /// etcd tuning flags.
    #[serde(default)]
    pub etcd: EtcdTuning,

    /// Routine care: defragmentation on a schedule and when the database
    /// file is fragmented.
    #[serde(default)]
    pub maintenance: MaintenanceSpec,

    /// How long a member whose Pod is unready on a NotReady node is waited
    /// for before the operator considers acting (Go duration, e.g. `5m`;
    /// default 5 minutes).
    /// Even then it only moves a Pod whose node is confirmed gone (Node
    /// deleted or tainted `node.kubernetes.io/out-of-service`), and only
    /// replaces a member whose data is gone.
    #[serde(default = "default_member_failure_timeout")]
    #[schemars(length(max = 64))]
    #[x_kube(validation = rules::go_duration("memberFailureTimeout", "0s", false, "5m"))]
    pub member_failure_timeout: Duration,

    /// Stops every action of the operator (maintenance). Status is still
    /// reported; the phase says `Paused`.
    #[serde(default)]
    pub paused: bool,

    /// What to do when the data of a majority of members is known lost.
    #[serde(default)]
    pub recovery: RecoverySpec,

    /// Where the first data comes from (e.g. a backup). Set at creation
    /// only: it cannot be added, changed or removed later (a `null` is
    /// dropped by the API server, as if unset).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "BootstrapSpec")]
    pub bootstrap: Option<BootstrapSpec>,

    /// Mutual TLS for clients and peers, from the built-in issuer. Unset:
    /// mutual TLS for a new cluster; a cluster bootstrapped in plaintext
    /// before TLS was the default stays plaintext until this is set
    /// (`tls: {builtIn: {}}`), which turns TLS on member by member.
    /// `tls: {disabled: true}` at creation: plain HTTP without client
    /// authentication.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "TlsSpec")]
    pub tls: Option<TlsSpec>,

    /// Who may reach the members' ports: a NetworkPolicy the operator
    /// keeps (on by default).
    #[serde(default)]
    pub network_policy: NetworkPolicySpec,
}

/// An explicit `etcd.quotaBackendBytes` must leave the volume room for a
/// defragmentation's copy of the database and etcd's write-ahead log; a
/// quota stored before this rule existed is kept while unchanged.
fn quota_fits_volume() -> kube::core::Rule {
    let reserve = tuning::WAL_RESERVE;
    rules::rule(
        format!(
            "!has(self.etcd) || !has(self.etcd.quotaBackendBytes) || self.etcd.quotaBackendBytes == 0 || !has(self.storage) || !isQuantity(string(self.storage.size)) \
             || (oldSelf.hasValue() && has(oldSelf.value().etcd) && has(oldSelf.value().etcd.quotaBackendBytes) && oldSelf.value().etcd.quotaBackendBytes == self.etcd.quotaBackendBytes) \
             || double(self.etcd.quotaBackendBytes) * 2.0 + {reserve}.0 <= quantity(string(self.storage.size)).asApproximateFloat()"
        ),
        "etcd.quotaBackendBytes does not fit storage.size: the volume must hold twice the quota (the database and a defragmentation's copy of it) plus 256 MiB for etcd's write-ahead log; lower the quota, grow storage.size, or set it to 0 to derive it from the volume",
    )
    .optional_old_self(true)
}

fn default_replicas() -> i32 {
    3
}

fn default_version() -> String {
    version::DEFAULT.to_string()
}

fn default_member_failure_timeout() -> Duration {
    std::time::Duration::from_secs(300).into()
}

impl Default for EtcdClusterSpec {
    fn default() -> Self {
        Self {
            replicas: default_replicas(),
            version: default_version(),
            image: None,
            storage: StorageSpec::default(),
            pod: MemberPodTemplate::default(),
            etcd: EtcdTuning::default(),
            maintenance: MaintenanceSpec::default(),
            member_failure_timeout: default_member_failure_timeout(),
            paused: false,
            recovery: RecoverySpec::default(),
            bootstrap: None,
            tls: None,
            network_policy: NetworkPolicySpec::default(),
        }
    }
}

impl EtcdClusterSpec {
    /// `spec.replicas` as an unsigned count (the schema keeps it in 1..=9).
    pub fn replica_count(&self) -> u32 {
        u32::try_from(self.replicas).unwrap_or(0)
    }

    /// The backend quota the members run with: `etcd.quotaBackendBytes`,
    /// or when 0, derived from `storage.size`.
    pub fn quota_backend_bytes(&self) -> i64 {
        match self.etcd.quota_backend_bytes {
            0 => tuning::quota_for_volume(quantity::bytes(&self.storage.size).unwrap_or(1 << 30)),
            explicit => explicit,
        }
    }

    /// The image of every container of the cluster's Pods that runs etcd
    /// or etcdutl (members and restores alike): `image` when set (a
    /// mirror, a private registry), else the etcd project's release image
    /// of `version` ([`version::image`]).
    pub fn etcd_image(&self) -> String {
        self.image
            .clone()
            .unwrap_or_else(|| version::image(&self.version))
    }

    /// `spec.memberFailureTimeout` as a standard duration.
    pub fn member_failure_timeout(&self) -> std::time::Duration {
        if self.member_failure_timeout.is_negative() {
            std::time::Duration::ZERO
        } else {
            self.member_failure_timeout.into()
        }
    }
}
