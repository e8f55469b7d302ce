//! Builders of the Services, PVC, member Pod and PodDisruptionBudget of a
//! cluster. Pure: the `EtcdCluster` and the planner's decision in, objects out.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Capabilities, Container, ContainerPort, EmptyDirVolumeSource, HTTPGetAction,
    PersistentVolumeClaim, PersistentVolumeClaimSpec, PersistentVolumeClaimVolumeSource, Pod,
    PodSecurityContext, PodSpec, Probe, ResourceRequirements, SeccompProfile, SecretVolumeSource,
    SecurityContext, Service, ServicePort, ServiceSpec, Volume, VolumeMount,
    VolumeResourceRequirements,
};
use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetSpec};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::{Resource, ResourceExt};

use super::labels::{labels, selector_labels};
use super::scheduling::{self, PlacementFacts};
use crate::addressing::{
    CLIENT_PORT, METRICS_PORT, MemberAddressing, PEER_PORT, client_service_name, member_name,
    pdb_name, peer_service_name, pvc_name,
};
use crate::api::identity::{
    CLUSTER_ID_ANNOTATION, CLUSTER_TOKEN_ANNOTATION, MEMBER_ID_ANNOTATION, MemberIdentity,
    format_id,
};
use crate::api::pod_revision::{
    AppliedKeys, TEMPLATE_HASH_ANNOTATION, TEMPLATE_METADATA_ANNOTATION, template_hash, user_labels,
};
use crate::api::{EtcdCluster, MemberPodTemplate};
use crate::planner::Bootstrap;
use crate::pod_contract::{TERMINATION_MESSAGE_POLICY, VOLUME_USAGE_PORT};

/// Where the member's volume is mounted.
pub const DATA_MOUNT: &str = "/var/lib/etcd";
/// The data dir, a sub-directory of the mount so its mode can be 0700.
pub const DATA_DIR: &str = "/var/lib/etcd/data";
/// Where the init container installs the guard for the etcd container (an
/// `emptyDir`: it lives as long as the Pod, across container restarts).
pub const GUARD_DIR: &str = "/var/run/etcd-operator";
/// The guard installed in [`GUARD_DIR`].
pub const GUARD_BINARY: &str = "/var/run/etcd-operator/etcd-operator";
/// The Pod-scoped copy of the identity marker (see `member_guard`).
pub const SEEN_MARKER: &str = "/var/run/etcd-operator/seen-member-identity.json";
/// The etcd binary of the etcd images.
pub const ETCD_BINARY: &str = "/usr/local/bin/etcd";

/// The operator's binary in the operator's image.
pub const OPERATOR_BINARY: &str = "/usr/local/bin/etcd-operator";
/// The container that runs etcd (through the member guard).
pub const ETCD_CONTAINER: &str = "etcd";
/// The sidecar serving how full the member's volume is.
pub const VOLUME_USAGE_CONTAINER: &str = "volume-usage";
/// What the sidecar asks for: it idles between requests.
const VOLUME_USAGE_CPU_REQUEST: &str = "5m";
const VOLUME_USAGE_MEMORY_REQUEST: &str = "16Mi";
/// Its memory limit. Measured on the lab: 2.6 MiB of anonymous memory,
/// steady over hundreds of requests; the rest of its resident set (24 MiB
/// with a debug build) is the binary's pages, which the kernel reclaims
/// under the limit rather than killing the process.
const VOLUME_USAGE_MEMORY_LIMIT: &str = "32Mi";

/// The user etcd runs as.
pub const ETCD_USER: i64 = 1000;

fn meta(cluster: &EtcdCluster, name: String, ordinal: Option<u32>) -> ObjectMeta {
    ObjectMeta {
        name: Some(name),
        namespace: cluster.namespace(),
        labels: Some(labels(&cluster.name_any(), ordinal)),
        owner_references: cluster.controller_owner_ref(&()).map(|r| vec![r]),
        ..ObjectMeta::default()
    }
}

fn port(name: &str, port: u16) -> ServicePort {
    let port = i32::from(port);
    ServicePort {
        name: Some(name.to_string()),
        port,
        target_port: Some(IntOrString::Int(port)),
        ..ServicePort::default()
    }
}

/// The headless Service giving each member its DNS name; it publishes
/// not-ready addresses so members find each other before they are ready
/// (and while quorum is lost).
pub fn peer_service(cluster: &EtcdCluster) -> Service {
    let name = cluster.name_any();
    member_service(
        cluster,
        peer_service_name(&name),
        ServiceSpec {
            cluster_ip: Some("None".to_string()),
            publish_not_ready_addresses: Some(true),
            ports: Some(vec![port("peer", PEER_PORT), port("client", CLIENT_PORT)]),
            ..ServiceSpec::default()
        },
    )
}

/// The Service clients use: ready members only.
pub fn client_service(cluster: &EtcdCluster) -> Service {
    let name = cluster.name_any();
    member_service(
        cluster,
        client_service_name(&name),
        ServiceSpec {
            ports: Some(vec![port("client", CLIENT_PORT)]),
            ..ServiceSpec::default()
        },
    )
}

/// A Service `name` of the cluster selecting its members, with `spec`.
fn member_service(cluster: &EtcdCluster, name: String, spec: ServiceSpec) -> Service {
    Service {
        metadata: meta(cluster, name, None),
        spec: Some(ServiceSpec {
            selector: Some(selector_labels(&cluster.name_any())),
            ..spec
        }),
        ..Service::default()
    }
}

/// The PVC of an ordinal, annotated with the identity its data will carry.
pub fn pvc(
    cluster: &EtcdCluster,
    ordinal: u32,
    identity: &MemberIdentity,
    size: &str,
) -> PersistentVolumeClaim {
    let name = cluster.name_any();
    let mut metadata = meta(cluster, pvc_name(&name, ordinal), Some(ordinal));
    // The PVC outlives the EtcdCluster only by choice; no ownerReference so
    // that deleting the EtcdCluster never deletes data by garbage collection.
    metadata.owner_references = None;
    metadata.annotations = Some(identity_annotations(identity));
    PersistentVolumeClaim {
        metadata,
        spec: Some(PersistentVolumeClaimSpec {
            access_modes: Some(vec!["ReadWriteOnce".to_string()]),
            storage_class_name: cluster.spec.storage.storage_class_name.clone(),
            resources: Some(VolumeResourceRequirements {
                requests: Some(BTreeMap::from([(
                    "storage".to_string(),
                    Quantity(size.to_string()),
                )])),
                ..VolumeResourceRequirements::default()
            }),
            ..PersistentVolumeClaimSpec::default()
        }),
        ..PersistentVolumeClaim::default()
    }
}

/// The identity annotations of a PVC.
pub fn identity_annotations(identity: &MemberIdentity) -> BTreeMap<String, String> {
    let mut annotations = BTreeMap::from([(
        CLUSTER_TOKEN_ANNOTATION.to_string(),
        identity.cluster_token.clone(),
    )]);
    if let Some(id) = identity.cluster_id {
        annotations.insert(CLUSTER_ID_ANNOTATION.to_string(), format_id(id));
    }
    if let Some(id) = identity.member_id {
        annotations.insert(MEMBER_ID_ANNOTATION.to_string(), format_id(id));
    }
    annotations
}

/// etcd's feature gates, in the one `--feature-gates` flag every member
/// gets (3.6 and 3.7 take the same names):
/// - `StopGRPCServiceOnDefrag`: while a member defragments, its gRPC health
///   service says NOT_SERVING, so clients that check it go to another
///   member;
/// - `InitialCorruptCheck`: a member that restarts on its data compares the
///   hash of its keyspace with its peers' at its revision before it serves
///   anything, and exits ("found data inconsistency with peers") when they
///   differ;
/// - `CompactHashCheck`: every member hashes the keys it keeps when it
///   compacts; the leader compares those hashes with the followers' every
///   [`COMPACT_HASH_CHECK_INTERVAL`] and raises CORRUPT naming the members
///   that differ from a majority.
const FEATURE_GATES: &str =
    "StopGRPCServiceOnDefrag=true,InitialCorruptCheck=true,CompactHashCheck=true";

/// How often the leader compares the hashes the members computed at their
/// last compactions (`--compact-hash-check-time`, etcd's default). Nearly
/// free: the hash is computed by the compaction's own read of the keyspace,
/// and auto-compaction runs every few minutes on a cluster that takes
/// writes, so damage to live data is found within minutes.
pub const COMPACT_HASH_CHECK_INTERVAL: &str = "1m";

/// How often the leader hashes its whole keyspace at its current revision
/// and compares it with every follower's (`--corrupt-check-time`). Costly:
/// each member reads every key-value it holds while it keeps its backend's
/// read lock, which holds back the commit of writes for as long as the scan
/// takes (seconds per GiB). The compaction hashes above catch damage on a
/// cluster that takes writes; this is the backstop for one that is idle
/// (no compaction, so no compaction hash). etcd's guide recommends "a
/// couple of hours"; four hours is six full scans a day, and damage on an
/// idle cluster is still found within a working day.
pub const CORRUPT_CHECK_INTERVAL: &str = "4h";

/// The flags that turn on etcd's corruption checks (with the other feature
/// gates, which share their flag): the initial check when a member restarts,
/// the compaction hash check and the periodic full check. Every member gets
/// them through [`etcd_args`].
pub fn feature_and_corruption_check_flags() -> Vec<String> {
    vec![
        format!("--feature-gates={FEATURE_GATES}"),
        format!("--compact-hash-check-time={COMPACT_HASH_CHECK_INTERVAL}"),
        format!("--corrupt-check-time={CORRUPT_CHECK_INTERVAL}"),
    ]
}

/// The etcd command line of a member.
pub fn etcd_args(
    cluster: &EtcdCluster,
    addressing: &MemberAddressing,
    ordinal: u32,
    bootstrap: &Bootstrap,
    quota_backend_bytes: i64,
) -> Vec<String> {
    let tuning = &cluster.spec.etcd;
    let transport = addressing.transport;
    let mut args = vec![
        format!("--name={}", member_name(&addressing.cluster, ordinal)),
        format!("--data-dir={DATA_DIR}"),
        format!("--listen-peer-urls={}", transport.listen_peer_urls()),
        format!("--listen-client-urls={}", transport.listen_client_urls()),
        format!("--listen-metrics-urls=http://0.0.0.0:{METRICS_PORT}"),
        format!(
            "--initial-advertise-peer-urls={}",
            addressing.peer_url(ordinal)
        ),
        format!(
            "--advertise-client-urls={}",
            addressing.advertised_client_urls(ordinal).join(",")
        ),
        format!(
            "--initial-cluster={}",
            addressing.initial_cluster(bootstrap.initial_members(), bootstrap.known_peer_urls())
        ),
        format!(
            "--initial-cluster-state={}",
            if bootstrap.is_new() {
                "new"
            } else {
                "existing"
            }
        ),
        format!("--initial-cluster-token={}", bootstrap.token()),
        format!("--quota-backend-bytes={quota_backend_bytes}"),
        format!(
            "--auto-compaction-mode={}",
            tuning.auto_compaction_mode.flag_value()
        ),
        format!(
            "--auto-compaction-retention={}",
            tuning.auto_compaction_retention
        ),
        format!("--snapshot-count={}", tuning.snapshot_count),
        format!("--heartbeat-interval={}", tuning.heartbeat_interval_ms),
        format!("--election-timeout={}", tuning.election_timeout_ms),
        "--strict-reconfig-check=true".to_string(),
    ];
    args.extend(feature_and_corruption_check_flags());
    if transport.serves_tls() {
        args.extend(super::tls::etcd_tls_flags(&addressing.cluster));
    }
    args
}

/// How long a member's etcd may take to serve `/livez` after its container
/// starts before the kubelet restarts it: 30 minutes, far beyond any
/// start measured (a restart would only begin the start again).
const STARTUP_PROBE_SECONDS: i32 = 1800;

fn http_probe(path: &str, period: i32, failures: i32) -> Probe {
    Probe {
        http_get: Some(HTTPGetAction {
            path: Some(path.to_string()),
            port: IntOrString::Int(i32::from(METRICS_PORT)),
            ..HTTPGetAction::default()
        }),
        period_seconds: Some(period),
        timeout_seconds: Some(5),
        failure_threshold: Some(failures),
        ..Probe::default()
    }
}

/// The command line of the `member-guard` init container: the identity the
/// data dir must carry. Once the member ID is recorded on the PVC, or the
/// operator knows etcd ran on the volume (`etcd_ran_on_volume`), an empty
/// data dir means its data is lost (`--expect-data`).
pub fn guard_args(
    member: &str,
    identity: &MemberIdentity,
    etcd_ran_on_volume: bool,
) -> Vec<String> {
    let mut args = vec![
        "member-guard".to_string(),
        format!("--data-dir={DATA_DIR}"),
        format!("--member-name={member}"),
        format!("--cluster-token={}", identity.cluster_token),
    ];
    if let Some(id) = identity.cluster_id {
        args.push(format!("--cluster-id={}", format_id(id)));
    }
    if let Some(id) = identity.member_id {
        args.push(format!("--member-id={}", format_id(id)));
    }
    if identity.member_id.is_some() || etcd_ran_on_volume {
        args.push("--expect-data".to_string());
    }
    args.push(format!("--seen-marker={SEEN_MARKER}"));
    args
}

/// The pod-level security context of the operator's Pods: the template's
/// fields merged over the defaults, field by field (a field the user sets
/// wins; every other keeps its default). The defaults pass the `restricted`
/// Pod Security Standard together with [`container_security_context`].
pub fn pod_security_context(template: &MemberPodTemplate) -> PodSecurityContext {
    let defaults = PodSecurityContext {
        run_as_non_root: Some(true),
        run_as_user: Some(ETCD_USER),
        run_as_group: Some(ETCD_USER),
        fs_group: Some(ETCD_USER),
        seccomp_profile: Some(SeccompProfile {
            type_: "RuntimeDefault".to_string(),
            ..SeccompProfile::default()
        }),
        ..PodSecurityContext::default()
    };
    let Some(user) = template.security_context.clone() else {
        return defaults;
    };
    // Every field named, so that a field added to the type is a compile
    // error here rather than silently dropped or kept.
    let PodSecurityContext {
        app_armor_profile,
        fs_group,
        fs_group_change_policy,
        run_as_group,
        run_as_non_root,
        run_as_user,
        se_linux_change_policy,
        se_linux_options,
        seccomp_profile,
        supplemental_groups,
        supplemental_groups_policy,
        sysctls,
        windows_options,
    } = user;
    PodSecurityContext {
        app_armor_profile: app_armor_profile.or(defaults.app_armor_profile),
        fs_group: fs_group.or(defaults.fs_group),
        fs_group_change_policy: fs_group_change_policy.or(defaults.fs_group_change_policy),
        run_as_group: run_as_group.or(defaults.run_as_group),
        run_as_non_root: run_as_non_root.or(defaults.run_as_non_root),
        run_as_user: run_as_user.or(defaults.run_as_user),
        se_linux_change_policy: se_linux_change_policy.or(defaults.se_linux_change_policy),
        se_linux_options: se_linux_options.or(defaults.se_linux_options),
        seccomp_profile: seccomp_profile.or(defaults.seccomp_profile),
        supplemental_groups: supplemental_groups.or(defaults.supplemental_groups),
        supplemental_groups_policy: supplemental_groups_policy
            .or(defaults.supplemental_groups_policy),
        sysctls: sysctls.or(defaults.sysctls),
        windows_options: windows_options.or(defaults.windows_options),
    }
}

/// The security context of every container of a member Pod. It holds only
/// what the pod level cannot say (no privilege escalation, no capability,
/// a read-only root), so that the pod-level fields, the user's included,
/// are never shadowed by a container-level default.
pub fn container_security_context() -> SecurityContext {
    SecurityContext {
        allow_privilege_escalation: Some(false),
        read_only_root_filesystem: Some(true),
        capabilities: Some(Capabilities {
            drop: Some(vec!["ALL".to_string()]),
            ..Capabilities::default()
        }),
        ..SecurityContext::default()
    }
}

/// What the member Pod builder is told about the cluster beyond the spec.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct MemberPodFacts {
    /// Where volumes keep their data and how many zones there are: the
    /// spreading of members (see `scheduling`).
    pub placement: PlacementFacts,
    /// The operator has seen etcd run on this member's volume (recorded on
    /// the PVC), even if it has not recorded the member ID yet: the guard
    /// then refuses an empty volume (`--expect-data`).
    pub etcd_ran_on_volume: bool,
    /// What a TLS cluster's members must have loaded (see
    /// `CaSet::revision`), part of the template hash.
    pub tls_revision: Option<String>,
    /// The quota the members run with (see `Observed::quota_backend_bytes`:
    /// derived from the volumes they have); `None`: derived from
    /// `storage.size`.
    pub quota_backend_bytes: Option<i64>,
}

/// The member Pod of an ordinal with nothing known beyond the spec: volume
/// locality unknown (members never share a node under `Auto`), zones
/// unknown (preferred). See [`member_pod_with`].
pub fn member_pod(
    cluster: &EtcdCluster,
    addressing: &MemberAddressing,
    operator_image: &str,
    ordinal: u32,
    bootstrap: &Bootstrap,
    identity: &MemberIdentity,
) -> Pod {
    member_pod_with(
        cluster,
        addressing,
        operator_image,
        ordinal,
        bootstrap,
        identity,
        &MemberPodFacts::default(),
    )
}

/// The member Pod of an ordinal: `<cluster>-<ordinal>` on its PVC, with the
/// `member-guard` init container checking the data dir's identity first,
/// and the `volume-usage` sidecar serving how full the volume is.
///
/// Liveness is etcd's `/livez` (never needs quorum, rule 9); readiness is
/// `/readyz` (the member's own health). The sidecar has no probe: only
/// etcd's health decides whether the member is ready.
pub fn member_pod_with(
    cluster: &EtcdCluster,
    addressing: &MemberAddressing,
    operator_image: &str,
    ordinal: u32,
    bootstrap: &Bootstrap,
    identity: &MemberIdentity,
    facts: &MemberPodFacts,
) -> Pod {
    let name = cluster.name_any();
    let template = &cluster.spec.pod;
    let quota_backend_bytes = facts
        .quota_backend_bytes
        .unwrap_or_else(|| cluster.spec.quota_backend_bytes());
    let mut metadata = meta(cluster, member_name(&name, ordinal), Some(ordinal));
    let mut pod_labels = user_labels(&cluster.spec);
    pod_labels.extend(labels(&name, Some(ordinal)));
    metadata.labels = Some(pod_labels);
    let mut pod_annotations = template.annotations.clone();
    pod_annotations.insert(
        TEMPLATE_HASH_ANNOTATION.to_string(),
        template_hash(
            &cluster.spec,
            quota_backend_bytes,
            addressing.transport,
            facts.tls_revision.as_deref(),
        ),
    );
    pod_annotations.insert(
        TEMPLATE_METADATA_ANNOTATION.to_string(),
        AppliedKeys::of(&cluster.spec).encode(),
    );
    metadata.annotations = Some(pod_annotations);
    let data_mount = VolumeMount {
        name: "data".to_string(),
        mount_path: DATA_MOUNT.to_string(),
        ..VolumeMount::default()
    };
    let container_security = container_security_context();
    let guard_mount = VolumeMount {
        name: "guard".to_string(),
        mount_path: GUARD_DIR.to_string(),
        ..VolumeMount::default()
    };
    let member_guard_args = guard_args(
        &member_name(&name, ordinal),
        identity,
        facts.etcd_ran_on_volume,
    );
    let mut init_args = member_guard_args.clone();
    init_args.push(format!("--install-to={GUARD_BINARY}"));
    // etcd starts through the guard installed by the init container, so
    // that every start of etcd, container restarts included, is checked:
    // a volume wiped under a running Pod is refused at the next start.
    let mut etcd_command = member_guard_args;
    etcd_command.push("--".to_string());
    etcd_command.push(ETCD_BINARY.to_string());
    etcd_command.extend(etcd_args(
        cluster,
        addressing,
        ordinal,
        bootstrap,
        quota_backend_bytes,
    ));
    let guard = Container {
        name: "member-guard".to_string(),
        image: Some(operator_image.to_string()),
        command: Some(vec![OPERATOR_BINARY.to_string()]),
        args: Some(init_args),
        // The guard's report: in the termination message file, or the tail
        // of the log for a runtime without one.
        termination_message_policy: Some(TERMINATION_MESSAGE_POLICY.to_string()),
        volume_mounts: Some(vec![data_mount.clone(), guard_mount.clone()]),
        security_context: Some(container_security.clone()),
        ..Container::default()
    };
    let volume_usage = volume_usage_container(operator_image, &data_mount, &container_security);
    let etcd = Container {
        name: ETCD_CONTAINER.to_string(),
        image: Some(cluster.spec.etcd_image()),
        command: Some(vec![GUARD_BINARY.to_string()]),
        args: Some(etcd_command),
        termination_message_policy: Some(TERMINATION_MESSAGE_POLICY.to_string()),
        ports: Some(vec![
            ContainerPort {
                name: Some("client".to_string()),
                container_port: i32::from(CLIENT_PORT),
                ..ContainerPort::default()
            },
            ContainerPort {
                name: Some("peer".to_string()),
                container_port: i32::from(PEER_PORT),
                ..ContainerPort::default()
            },
            ContainerPort {
                name: Some("metrics".to_string()),
                container_port: i32::from(METRICS_PORT),
                ..ContainerPort::default()
            },
        ]),
        // Until etcd answers `/livez` (every second, for up to
        // [`STARTUP_PROBE_SECONDS`]), neither liveness nor readiness runs;
        // the kubelet then probes readiness at once, so a new member turns
        // Ready as soon as it serves, not a readiness period later. A long
        // start (a large WAL to replay) is not killed by the liveness
        // probe meanwhile.
        startup_probe: Some(http_probe("/livez", 1, STARTUP_PROBE_SECONDS)),
        liveness_probe: Some(http_probe("/livez", 10, 6)),
        readiness_probe: Some(http_probe("/readyz", 5, 3)),
        resources: template.resources.clone(),
        volume_mounts: Some(etcd_mounts(
            data_mount,
            guard_mount,
            addressing.transport.serves_tls(),
        )),
        security_context: Some(container_security),
        ..Container::default()
    };
    let mut volumes = vec![
        data_volume(&name, ordinal),
        Volume {
            name: "guard".to_string(),
            empty_dir: Some(EmptyDirVolumeSource::default()),
            ..Volume::default()
        },
    ];
    if addressing.transport.serves_tls() {
        volumes.extend(tls_volumes(&name));
    }
    let replicas = u32::try_from(cluster.spec.replicas).unwrap_or(0);
    let spreading = scheduling::spreading(template, replicas, &facts.placement);
    Pod {
        metadata,
        spec: Some(PodSpec {
            hostname: Some(member_name(&name, ordinal)),
            subdomain: Some(peer_service_name(&name)),
            restart_policy: Some("Always".to_string()),
            init_containers: Some(vec![guard]),
            containers: vec![etcd, volume_usage],
            volumes: Some(volumes),
            security_context: Some(pod_security_context(template)),
            node_selector: (!template.node_selector.is_empty())
                .then(|| template.node_selector.clone()),
            affinity: Some(scheduling::affinity(&name, template, spreading)),
            tolerations: (!template.tolerations.is_empty()).then(|| template.tolerations.clone()),
            topology_spread_constraints: Some(scheduling::topology_spread(
                &name, template, spreading,
            )),
            priority_class_name: template.priority_class_name.clone(),
            termination_grace_period_seconds: Some(30),
            ..PodSpec::default()
        }),
        ..Pod::default()
    }
}

/// The etcd container's mounts: data, the guard, and the server and peer
/// certificates of a TLS cluster (read-only).
fn etcd_mounts(data: VolumeMount, guard: VolumeMount, tls: bool) -> Vec<VolumeMount> {
    let mut mounts = vec![data, guard];
    if tls {
        for (volume, dir) in [
            ("server-tls", super::tls::SERVER_TLS_DIR),
            ("peer-tls", super::tls::PEER_TLS_DIR),
        ] {
            mounts.push(VolumeMount {
                name: volume.to_string(),
                mount_path: dir.to_string(),
                read_only: Some(true),
                ..VolumeMount::default()
            });
        }
    }
    mounts
}

/// The Secrets of the server and peer certificates, as volumes (files
/// readable by the etcd user only through the pod's `fsGroup`).
fn tls_volumes(cluster: &str) -> Vec<Volume> {
    [
        ("server-tls", super::tls::TlsRole::Server),
        ("peer-tls", super::tls::TlsRole::Peer),
    ]
    .into_iter()
    .map(|(volume, role)| Volume {
        name: volume.to_string(),
        secret: Some(SecretVolumeSource {
            secret_name: Some(super::tls::leaf_secret_name(cluster, &role)),
            default_mode: Some(0o440),
            ..SecretVolumeSource::default()
        }),
        ..Volume::default()
    })
    .collect()
}

/// The `volume-usage` sidecar: the operator's binary serving how full the
/// volume is, the volume mounted read-only, no probe (a sidecar that fails
/// never makes the member unready by a probe; it never exits on its own).
fn volume_usage_container(
    operator_image: &str,
    data_mount: &VolumeMount,
    security: &SecurityContext,
) -> Container {
    let quantity = |q: &str| Quantity(q.to_string());
    Container {
        name: VOLUME_USAGE_CONTAINER.to_string(),
        image: Some(operator_image.to_string()),
        command: Some(vec![OPERATOR_BINARY.to_string()]),
        args: Some(vec![
            "volume-usage".to_string(),
            format!("--data-dir={DATA_DIR}"),
            format!("--listen=0.0.0.0:{VOLUME_USAGE_PORT}"),
        ]),
        ports: Some(vec![ContainerPort {
            name: Some(VOLUME_USAGE_CONTAINER.to_string()),
            container_port: i32::from(VOLUME_USAGE_PORT),
            ..ContainerPort::default()
        }]),
        resources: Some(ResourceRequirements {
            requests: Some(BTreeMap::from([
                ("cpu".to_string(), quantity(VOLUME_USAGE_CPU_REQUEST)),
                ("memory".to_string(), quantity(VOLUME_USAGE_MEMORY_REQUEST)),
            ])),
            limits: Some(BTreeMap::from([(
                "memory".to_string(),
                quantity(VOLUME_USAGE_MEMORY_LIMIT),
            )])),
            ..ResourceRequirements::default()
        }),
        termination_message_policy: Some(TERMINATION_MESSAGE_POLICY.to_string()),
        volume_mounts: Some(vec![VolumeMount {
            read_only: Some(true),
            ..data_mount.clone()
        }]),
        security_context: Some(security.clone()),
        ..Container::default()
    }
}

/// The `data` volume of a Pod working on member `ordinal`'s PVC.
pub fn data_volume(cluster: &str, ordinal: u32) -> Volume {
    Volume {
        name: "data".to_string(),
        persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
            claim_name: pvc_name(cluster, ordinal),
            read_only: Some(false),
        }),
        ..Volume::default()
    }
}

/// The PodDisruptionBudget: voluntary evictions never take the members below
/// `min_available`, the quorum of the current voters (rule 5).
pub fn pdb(cluster: &EtcdCluster, min_available: u32) -> PodDisruptionBudget {
    let name = cluster.name_any();
    PodDisruptionBudget {
        metadata: meta(cluster, pdb_name(&name), None),
        spec: Some(PodDisruptionBudgetSpec {
            min_available: Some(IntOrString::Int(
                i32::try_from(min_available).unwrap_or(i32::MAX),
            )),
            selector: Some(LabelSelector {
                match_labels: Some(selector_labels(&name)),
                ..LabelSelector::default()
            }),
            ..PodDisruptionBudgetSpec::default()
        }),
        ..PodDisruptionBudget::default()
    }
}
