//! YAML in (an `EtcdCluster`), objects out.

use super::*;
use crate::api::EtcdCluster;
use crate::api::identity::MemberIdentity;
use crate::planner::Bootstrap;

const CLUSTER: &str = r#"
apiVersion: durable-etcd.io/v1alpha1
kind: EtcdCluster
metadata:
  name: demo
  namespace: prod
  uid: 1234-5678
spec:
  replicas: 3
  storage:
    storageClassName: lab-network
    size: 2Gi
"#;

fn cluster() -> EtcdCluster {
    cluster_with("")
}

/// The test cluster with `spec` (YAML lines indented under `spec:`)
/// added.
pub(super) fn cluster_with(spec: &str) -> EtcdCluster {
    serde_saphyr::from_str(&format!("{CLUSTER}{spec}\n")).expect("valid EtcdCluster")
}

fn identity() -> MemberIdentity {
    MemberIdentity {
        cluster_token: "demo-1234".to_string(),
        cluster_id: Some(0xabc),
        member_id: Some(0xdef),
    }
}

#[test]
fn peer_service_is_headless_and_publishes_not_ready_addresses() {
    let svc = peer_service(&cluster());
    let spec = svc.spec.expect("spec");
    assert_eq!(svc.metadata.name.as_deref(), Some("demo-peer"));
    assert_eq!(spec.cluster_ip.as_deref(), Some("None"));
    assert_eq!(spec.publish_not_ready_addresses, Some(true));
    assert!(svc.metadata.owner_references.is_some());
}

#[test]
fn pvc_carries_identity_and_size() {
    let pvc = pvc(&cluster(), 1, &identity(), "1Gi");
    assert_eq!(pvc.metadata.name.as_deref(), Some("data-demo-1"));
    let annotations = pvc.metadata.annotations.expect("annotations");
    assert_eq!(annotations["durable-etcd.io/member-id"], "def");
    assert_eq!(annotations["durable-etcd.io/cluster-token"], "demo-1234");
    let spec = pvc.spec.expect("spec");
    assert_eq!(spec.storage_class_name.as_deref(), Some("lab-network"));
    assert!(
        pvc.metadata.owner_references.is_none(),
        "data is never garbage-collected"
    );
}

#[test]
fn member_pod_has_stable_dns_guard_and_quorum_free_liveness() {
    let cluster = cluster();
    let addressing = MemberAddressing::new("demo", "prod");
    let bootstrap = Bootstrap::New {
        token: "demo-1234".to_string(),
        initial_members: vec![0, 1, 2],
    };
    let pod = member_pod(
        &cluster,
        &addressing,
        "example.org/etcd-operator:dev",
        2,
        &bootstrap,
        &identity(),
    );
    assert_eq!(pod.metadata.name.as_deref(), Some("demo-2"));
    let spec = pod.spec.expect("spec");
    assert_eq!(spec.hostname.as_deref(), Some("demo-2"));
    assert_eq!(spec.subdomain.as_deref(), Some("demo-peer"));
    assert_eq!(spec.restart_policy.as_deref(), Some("Always"));
    let security = spec.security_context.expect("security context");
    assert_eq!(security.run_as_non_root, Some(true));
    assert_eq!(security.fs_group, Some(1000));
    let guard = &spec.init_containers.expect("init")[0];
    assert_eq!(guard.name, "member-guard");
    let etcd = &spec.containers[0];
    assert_eq!(
        etcd.image.as_deref(),
        Some("gcr.io/etcd-development/etcd:v3.6.16")
    );
    let args = etcd.args.clone().expect("args");
    assert!(args.contains(&"--initial-cluster-state=new".to_string()));
    assert!(args.contains(&"--data-dir=/var/lib/etcd/data".to_string()));
    assert!(
        args.contains(
            &"--initial-advertise-peer-urls=http://demo-2.demo-peer.prod.svc.cluster.local:2380"
                .to_string()
        )
    );
    let liveness = etcd.liveness_probe.clone().expect("liveness");
    assert_eq!(
        liveness.http_get.expect("http").path.as_deref(),
        Some("/livez")
    );
    // The start is probed every second on the member-local `/livez`
    // (never on `/readyz`, which needs a quorum: a member waiting for its
    // peers must not be restarted), for long enough not to kill a slow
    // start.
    let startup = etcd.startup_probe.clone().expect("startup");
    assert_eq!(startup.period_seconds, Some(1));
    assert!(startup.failure_threshold.unwrap_or_default() >= 600);
    assert_eq!(
        startup.http_get.expect("http").path.as_deref(),
        Some("/livez")
    );
}

#[test]
fn existing_members_never_get_new() {
    let bootstrap = Bootstrap::Existing {
        token: "t".to_string(),
        initial_members: vec![0, 1],
        peer_urls: Default::default(),
    };
    let args = etcd_args(
        &cluster(),
        &MemberAddressing::new("demo", "prod"),
        1,
        &bootstrap,
        cluster().spec.quota_backend_bytes(),
    );
    assert!(args.contains(&"--initial-cluster-state=existing".to_string()));
}

#[test]
fn pdb_keeps_a_quorum() {
    let pdb = pdb(&cluster(), 2);
    let min = pdb.spec.expect("spec").min_available.expect("min");
    assert_eq!(
        min,
        k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(2)
    );
}

/// The guard's command line, as built for the Pod, is accepted by the
/// guard's own argument parser and carries the expected identity.
#[test]
fn guard_arguments_are_understood_by_the_guard() {
    #[derive(clap::Parser)]
    struct Guard {
        #[command(subcommand)]
        command: Command,
    }
    #[derive(clap::Subcommand)]
    enum Command {
        MemberGuard(crate::pod_programs::member_guard::MemberGuardArgs),
    }
    let parse = |identity: &MemberIdentity| {
        let args = guard_args("demo-2", identity, false);
        let Command::MemberGuard(parsed) = <Guard as clap::Parser>::try_parse_from(
            std::iter::once("etcd-operator".to_string()).chain(args),
        )
        .expect("the guard accepts the arguments of the Pod")
        .command;
        parsed
    };
    let known = parse(&identity());
    assert_eq!(known.member_name, "demo-2");
    assert_eq!(known.cluster_token, "demo-1234");
    assert_eq!(known.cluster_id, Some(0xabc));
    assert_eq!(known.member_id, Some(0xdef));
    assert!(known.expect_data, "a recorded member must find its data");

    let first = parse(&MemberIdentity {
        cluster_token: "demo-1234".to_string(),
        ..MemberIdentity::default()
    });
    assert_eq!(first.cluster_id, None);
    assert_eq!(first.member_id, None);
    assert!(!first.expect_data, "a new member starts on an empty volume");
}

fn demo_pod(cluster: &EtcdCluster, facts: &MemberPodFacts) -> k8s_openapi::api::core::v1::PodSpec {
    let bootstrap = Bootstrap::New {
        token: "demo-1234".to_string(),
        initial_members: vec![0, 1, 2],
    };
    member_pod_with(
        cluster,
        &MemberAddressing::new("demo", "prod"),
        "example.org/etcd-operator:dev",
        1,
        &bootstrap,
        &identity(),
        facts,
    )
    .spec
    .expect("spec")
}

fn with_pod_template(template: &str) -> EtcdCluster {
    let indented: String = template.lines().map(|l| format!("    {l}\n")).collect();
    serde_saphyr::from_str(&format!("{CLUSTER}  pod:\n{indented}")).expect("valid EtcdCluster")
}

#[test]
fn the_default_security_context_passes_the_restricted_standard() {
    let spec = demo_pod(&cluster(), &MemberPodFacts::default());
    let pod = spec.security_context.expect("pod security context");
    assert_eq!(pod.run_as_non_root, Some(true));
    assert_eq!(pod.run_as_user, Some(ETCD_USER));
    assert_eq!(
        pod.seccomp_profile.map(|p| p.type_).as_deref(),
        Some("RuntimeDefault")
    );
    let containers = spec.init_containers.unwrap_or_default();
    for container in containers.iter().chain(&spec.containers) {
        let sc = container
            .security_context
            .clone()
            .expect("security context");
        assert_eq!(
            sc.allow_privilege_escalation,
            Some(false),
            "{}",
            container.name
        );
        assert_eq!(
            sc.capabilities.and_then(|c| c.drop),
            Some(vec!["ALL".to_string()]),
            "{}",
            container.name
        );
    }
}

#[test]
fn a_user_security_context_is_merged_over_the_defaults_field_by_field() {
    let cluster = with_pod_template(
        "securityContext:\n  runAsUser: 2000\n  supplementalGroups: [5]\n  fsGroupChangePolicy: OnRootMismatch",
    );
    let spec = demo_pod(&cluster, &MemberPodFacts::default());
    let pod = spec.security_context.expect("pod security context");
    // The user's fields win...
    assert_eq!(pod.run_as_user, Some(2000));
    assert_eq!(pod.supplemental_groups, Some(vec![5]));
    assert_eq!(
        pod.fs_group_change_policy.as_deref(),
        Some("OnRootMismatch")
    );
    // ...and every other keeps its default.
    assert_eq!(pod.run_as_non_root, Some(true));
    assert_eq!(pod.run_as_group, Some(ETCD_USER));
    assert_eq!(pod.fs_group, Some(ETCD_USER));
    assert_eq!(
        pod.seccomp_profile.map(|p| p.type_).as_deref(),
        Some("RuntimeDefault")
    );
    // No container-level default shadows a pod-level field of the user.
    for container in &spec.containers {
        let sc = container
            .security_context
            .clone()
            .expect("security context");
        assert_eq!(sc.run_as_user, None);
        assert_eq!(sc.run_as_non_root, None);
        assert_eq!(sc.seccomp_profile, None);
    }

    // Each default can be overridden on its own.
    let cluster = with_pod_template(
        "securityContext:\n  runAsNonRoot: false\n  fsGroup: 3000\n  seccompProfile:\n    type: Localhost\n    localhostProfile: etcd.json",
    );
    let pod = demo_pod(&cluster, &MemberPodFacts::default())
        .security_context
        .expect("pod security context");
    assert_eq!(pod.run_as_non_root, Some(false));
    assert_eq!(pod.fs_group, Some(3000));
    assert_eq!(pod.run_as_user, Some(ETCD_USER));
    let profile = pod.seccomp_profile.expect("seccomp");
    assert_eq!(profile.type_, "Localhost");
    assert_eq!(profile.localhost_profile.as_deref(), Some("etcd.json"));
}

fn required_node_spreading(spec: &k8s_openapi::api::core::v1::PodSpec) -> bool {
    spec.affinity
        .as_ref()
        .and_then(|a| a.pod_anti_affinity.as_ref())
        .and_then(|a| {
            a.required_during_scheduling_ignored_during_execution
                .as_ref()
        })
        .is_some_and(|terms| {
            terms
                .iter()
                .any(|t| t.topology_key == scheduling::HOSTNAME_TOPOLOGY)
        })
}

fn zone_spread(spec: &k8s_openapi::api::core::v1::PodSpec) -> String {
    spec.topology_spread_constraints
        .iter()
        .flatten()
        .find(|c| c.topology_key == scheduling::ZONE_TOPOLOGY)
        .map(|c| c.when_unsatisfiable.clone())
        .unwrap_or_default()
}

#[test]
fn members_never_share_a_node_unless_volumes_are_network_attached_or_the_user_opts_out() {
    let placed = |volumes, zones| MemberPodFacts {
        placement: PlacementFacts { volumes, zones },
        ..MemberPodFacts::default()
    };
    // Nothing known: the member Pod without facts keeps members apart.
    let unknown = demo_pod(&cluster(), &MemberPodFacts::default());
    assert!(required_node_spreading(&unknown));
    assert_eq!(zone_spread(&unknown), "ScheduleAnyway");
    assert_eq!(
        member_pod(
            &cluster(),
            &MemberAddressing::new("demo", "prod"),
            "example.org/etcd-operator:dev",
            1,
            &Bootstrap::New {
                token: "demo-1234".to_string(),
                initial_members: vec![0, 1, 2],
            },
            &identity(),
        )
        .spec
        .expect("spec"),
        unknown
    );

    let local = demo_pod(&cluster(), &placed(VolumeLocality::NodeLocal, Some(3)));
    assert!(required_node_spreading(&local));
    assert_eq!(zone_spread(&local), "DoNotSchedule");
    let few_zones = demo_pod(&cluster(), &placed(VolumeLocality::NodeLocal, Some(2)));
    assert_eq!(zone_spread(&few_zones), "ScheduleAnyway");

    let network = demo_pod(
        &cluster(),
        &placed(VolumeLocality::NetworkAttached, Some(3)),
    );
    assert!(!required_node_spreading(&network));
    assert_eq!(zone_spread(&network), "ScheduleAnyway");

    let opted_out = with_pod_template("memberSpreading: Preferred");
    let relaxed = demo_pod(&opted_out, &placed(VolumeLocality::NodeLocal, Some(3)));
    assert!(!required_node_spreading(&relaxed));
    assert_eq!(zone_spread(&relaxed), "ScheduleAnyway");

    let strict = with_pod_template("memberSpreading: RequiredPerNode");
    let kept = demo_pod(&strict, &placed(VolumeLocality::NetworkAttached, None));
    assert!(required_node_spreading(&kept));
}

#[test]
fn a_volume_etcd_ran_on_must_hold_data_even_before_the_member_id_is_known() {
    let bootstrap = MemberIdentity {
        cluster_token: "demo-1234".to_string(),
        ..MemberIdentity::default()
    };
    assert!(!guard_args("demo-2", &bootstrap, false).contains(&"--expect-data".to_string()));
    assert!(guard_args("demo-2", &bootstrap, true).contains(&"--expect-data".to_string()));
    let facts = MemberPodFacts {
        etcd_ran_on_volume: true,
        ..MemberPodFacts::default()
    };
    let spec = demo_pod(&cluster(), &facts);
    for container in spec
        .init_containers
        .iter()
        .flatten()
        .chain(&spec.containers)
        .filter(|c| c.name != VOLUME_USAGE_CONTAINER)
    {
        assert!(
            container
                .args
                .iter()
                .flatten()
                .any(|a| a == "--expect-data"),
            "{}",
            container.name
        );
    }
}

/// The `volume-usage` sidecar runs the operator's binary on the member's
/// volume mounted read-only, and has no probe: whatever happens to it,
/// only etcd's own health decides whether the member is ready.
#[test]
fn the_volume_usage_sidecar_reads_the_volume_and_never_decides_readiness() {
    let spec = demo_pod(&cluster(), &MemberPodFacts::default());
    let names: Vec<&str> = spec.containers.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, ["etcd", "volume-usage"]);
    let sidecar = &spec.containers[1];
    assert_eq!(
        sidecar.image.as_deref(),
        Some("example.org/etcd-operator:dev")
    );
    assert_eq!(
        sidecar.command.as_deref(),
        Some(&["/usr/local/bin/etcd-operator".to_string()][..])
    );
    assert_eq!(
        sidecar.args.clone().expect("args"),
        [
            "volume-usage",
            "--data-dir=/var/lib/etcd/data",
            "--listen=0.0.0.0:2383"
        ]
    );
    let mounts = sidecar.volume_mounts.clone().expect("mounts");
    assert_eq!(mounts.len(), 1, "{mounts:?}");
    assert_eq!(mounts[0].name, "data");
    assert_eq!(mounts[0].mount_path, DATA_MOUNT);
    assert_eq!(mounts[0].read_only, Some(true));
    assert!(sidecar.readiness_probe.is_none());
    assert!(sidecar.liveness_probe.is_none());
    assert!(sidecar.startup_probe.is_none());
    assert_eq!(sidecar.security_context, Some(container_security_context()));
    let ports = sidecar.ports.clone().expect("ports");
    assert_eq!(ports[0].name.as_deref(), Some("volume-usage"));
    assert_eq!(ports[0].container_port, 2383);
    let resources = sidecar.resources.clone().expect("resources");
    let requests = resources.requests.expect("requests");
    assert_eq!(requests["cpu"].0, "5m");
    assert_eq!(requests["memory"].0, "16Mi");
    assert_eq!(resources.limits.expect("limits")["memory"].0, "32Mi");

    // Its port is none of etcd's.
    let etcd_ports: Vec<i32> = spec.containers[0]
        .ports
        .iter()
        .flatten()
        .map(|p| p.container_port)
        .collect();
    assert!(!etcd_ports.contains(&2383), "{etcd_ports:?}");
    // etcd still mounts the volume writable.
    let etcd_mounts = spec.containers[0].volume_mounts.clone().expect("mounts");
    assert!(
        etcd_mounts
            .iter()
            .any(|m| m.name == "data" && m.read_only.is_none())
    );
}

/// The sidecar's command line, as built for the Pod, is accepted by the
/// program's own argument parser.
#[test]
fn volume_usage_arguments_are_understood_by_the_sidecar() {
    #[derive(clap::Parser)]
    struct Binary {
        #[command(subcommand)]
        command: Command,
    }
    #[derive(clap::Subcommand)]
    enum Command {
        VolumeUsage(crate::pod_programs::volume_usage::VolumeUsageArgs),
    }
    let spec = demo_pod(&cluster(), &MemberPodFacts::default());
    let sidecar = &spec.containers[1];
    let argv = sidecar
        .command
        .iter()
        .flatten()
        .chain(sidecar.args.iter().flatten());
    let parsed = <Binary as clap::Parser>::try_parse_from(argv).expect("parsed");
    let Command::VolumeUsage(args) = parsed.command;
    assert_eq!(args.data_dir, std::path::Path::new(DATA_DIR));
    assert_eq!(args.listen.port(), crate::pod_contract::VOLUME_USAGE_PORT);
}

/// Every member runs etcd's three corruption checks, with flag names both
/// supported releases take, and the defrag gate in the same (single)
/// `--feature-gates` flag.
#[test]
fn members_run_the_corruption_checks() {
    let bootstrap = Bootstrap::Existing {
        token: "t".to_string(),
        initial_members: vec![0, 1, 2],
        peer_urls: Default::default(),
    };
    let args = etcd_args(
        &cluster(),
        &MemberAddressing::new("demo", "prod"),
        1,
        &bootstrap,
        cluster().spec.quota_backend_bytes(),
    );
    let gates: Vec<&String> = args
        .iter()
        .filter(|a| a.starts_with("--feature-gates="))
        .collect();
    assert_eq!(
        gates,
        [&"--feature-gates=StopGRPCServiceOnDefrag=true,InitialCorruptCheck=true,CompactHashCheck=true".to_string()],
        "one --feature-gates flag with every gate"
    );
    assert!(args.contains(&"--corrupt-check-time=4h".to_string()));
    assert!(args.contains(&"--compact-hash-check-time=1m".to_string()));
    assert!(
        !args.iter().any(|a| a.starts_with("--experimental-")),
        "3.7 no longer takes the 3.5-era experimental names: {args:?}"
    );
    for flag in feature_and_corruption_check_flags() {
        assert!(args.contains(&flag), "{flag} missing from {args:?}");
    }
}
