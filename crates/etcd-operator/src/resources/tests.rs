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
    serde_saphyr::from_str(CLUSTER).expect("valid EtcdCluster")
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
    let pvc = pvc(&cluster(), 1, &identity());
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
    assert_eq!(etcd.image.as_deref(), Some("registry.k8s.io/etcd:3.6.16-0"));
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
}

#[test]
fn existing_members_never_get_new() {
    let bootstrap = Bootstrap::Existing {
        token: "t".to_string(),
        initial_members: vec![0, 1],
    };
    let args = etcd_args(
        &cluster(),
        &MemberAddressing::new("demo", "prod"),
        1,
        &bootstrap,
    );
    assert!(args.contains(&"--initial-cluster-state=existing".to_string()));
}

#[test]
fn pdb_keeps_a_quorum() {
    let pdb = pdb(&cluster());
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
        MemberGuard(crate::member_guard::MemberGuardArgs),
    }
    let parse = |identity: &MemberIdentity| {
        let args = guard_args("demo-2", identity);
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
