//! Objects in (as the API server returns them), planner input and steps out.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Node, PersistentVolume, PersistentVolumeClaim, Pod};
use serde_json::json;

use super::*;
use crate::etcd::ObservedEtcd;
use crate::planner::{Children, GuardRefusal, PodPhase, PvcPhase, VolumeKind};

fn cluster() -> EtcdCluster {
    serde_json::from_value(json!({
        "apiVersion": "durable-etcd.io/v1alpha1",
        "kind": "EtcdCluster",
        "metadata": { "name": "demo", "namespace": "prod", "uid": "0123-4567-89ab", "generation": 1 },
        "spec": { "replicas": 3, "storage": { "storageClassName": "lab-network", "size": "1Gi" } }
    }))
    .expect("valid EtcdCluster")
}

fn settings() -> BuildSettings {
    BuildSettings {
        operator_image: "example.org/etcd-operator:test".into(),
        cluster_domain: "cluster.local".into(),
    }
}

fn pvc(ordinal: u32, volume: &str, annotations: serde_json::Value) -> PersistentVolumeClaim {
    serde_json::from_value(json!({
        "metadata": { "name": format!("data-demo-{ordinal}"), "uid": format!("pvc-uid-{ordinal}"), "annotations": annotations,
            "labels": { "durable-etcd.io/cluster": "demo", "durable-etcd.io/ordinal": ordinal.to_string() } },
        "spec": { "volumeName": volume },
        "status": { "phase": "Bound" }
    }))
    .expect("valid PVC")
}

fn network_pv(name: &str) -> PersistentVolume {
    serde_json::from_value(json!({
        "metadata": { "name": name },
        "spec": { "csi": { "driver": "network.etcd-lab.dev", "volumeHandle": name } }
    }))
    .expect("valid PV")
}

fn local_pv(name: &str, node: &str) -> PersistentVolume {
    serde_json::from_value(json!({
        "metadata": { "name": name },
        "spec": {
            "local": { "path": "/data" },
            "nodeAffinity": { "required": { "nodeSelectorTerms": [ { "matchExpressions": [
                { "key": "kubernetes.io/hostname", "operator": "In", "values": [node] } ] } ] } }
        }
    }))
    .expect("valid PV")
}

fn pod(ordinal: u32, node: &str, extra_status: serde_json::Value) -> Pod {
    let mut status = json!({
        "phase": "Running",
        "podIP": format!("10.244.1.{}", 10 + ordinal),
        "conditions": [ { "type": "Ready", "status": "True" } ]
    });
    if let (Some(status), Some(extra)) = (status.as_object_mut(), extra_status.as_object()) {
        status.extend(extra.clone());
    }
    serde_json::from_value(json!({
        "metadata": { "name": format!("demo-{ordinal}"), "uid": format!("pod-uid-{ordinal}"),
            "labels": { "durable-etcd.io/cluster": "demo", "durable-etcd.io/ordinal": ordinal.to_string() } },
        "spec": { "nodeName": node, "containers": [ { "name": "etcd", "image": "registry.k8s.io/etcd:3.6.16-0" } ] },
        "status": status
    }))
    .expect("valid Pod")
}

fn node(name: &str, ready: bool) -> Node {
    serde_json::from_value(json!({
        "metadata": { "name": name },
        "status": { "conditions": [ { "type": "Ready", "status": if ready { "True" } else { "Unknown" },
            "lastTransitionTime": "2030-01-01T00:00:00Z" } ] }
    }))
    .expect("valid Node")
}

fn snapshot() -> Snapshot {
    Snapshot {
        pods: Vec::new(),
        pvcs: Vec::new(),
        unowned: Vec::new(),
        volumes: BTreeMap::new(),
        set_aside_volumes: Vec::new(),
        wal_tails: BTreeMap::new(),
        keyspaces: None,
        storage: Default::default(),
        children: Children::default(),
        nodes: ["n1", "n2", "n3"]
            .into_iter()
            .map(|n| (n.to_owned(), node(n, true)))
            .collect(),
        etcd: ObservedEtcd::nothing_observed(),
        endpoints: Vec::new(),
        volume_usage: BTreeMap::new(),
        backup_schedules: Vec::new(),
        tls: None,
        transport: Default::default(),
    }
}

fn now() -> Timestamp {
    "2030-01-01T01:00:00Z".parse().expect("timestamp")
}

#[test]
fn reads_every_planner_field_from_the_objects() {
    let mut snap = snapshot();
    snap.pvcs = vec![
        pvc(
            0,
            "pv-0",
            json!({ "durable-etcd.io/cluster-token": "demo-t", "durable-etcd.io/member-id": "abc" }),
        ),
        pvc(1, "pv-1", json!({})),
    ];
    snap.volumes.insert("pv-0".into(), Some(network_pv("pv-0")));
    snap.volumes
        .insert("pv-1".into(), Some(local_pv("pv-1", "n2")));
    let refused = json!({
        "phase": "Pending",
        "conditions": [],
        "initContainerStatuses": [ { "name": "member-guard", "image": "x", "imageID": "", "ready": false,
            "restartCount": 1, "state": { "waiting": { "reason": "CrashLoopBackOff" } },
            "lastState": { "terminated": { "exitCode": 3 } } } ]
    });
    snap.pods = vec![pod(0, "n1", json!({})), pod(1, "gone-node", refused)];
    snap.nodes.insert("n3".into(), node("n3", false));
    let o = observed(&cluster(), &snap, now());

    assert_eq!(o.name, "demo");
    assert_eq!(o.uid, "0123-4567-89ab");
    let zero = o.objects(0);
    let pvc0 = zero.pvc.expect("PVC of 0");
    assert_eq!(pvc0.phase, PvcPhase::Bound);
    assert_eq!(pvc0.volume, VolumeKind::Network);
    assert_eq!(pvc0.identity.member_id, Some(0xabc));
    assert_eq!(pvc0.identity.cluster_token, "demo-t");
    let pod0 = zero.pod.expect("Pod of 0");
    assert!(pod0.ready);
    assert_eq!(pod0.phase, PodPhase::Running);
    assert_eq!(pod0.node.as_deref(), Some("n1"));
    assert_eq!(pod0.version.as_deref(), Some("3.6.16"));

    let one = o.objects(1);
    assert_eq!(
        one.pvc.expect("PVC of 1").volume,
        VolumeKind::Local { node: "n2".into() }
    );
    let pod1 = one.pod.expect("Pod of 1");
    assert!(!pod1.ready);
    assert!(matches!(
        pod1.guard_refusal,
        Some(GuardRefusal { kind: None, .. })
    ));
    assert!(o.node_deleted("gone-node"));
    assert!(!o.nodes["n3"].ready);
    assert!(o.nodes["n3"].not_ready_since.is_some());
}

#[test]
fn a_new_cluster_starts_with_its_peer_service() {
    let pass = plan(&cluster(), &snapshot(), &settings(), now());
    let Some(Step::Apply(Child::Service(service))) = pass.step else {
        panic!("expected the peer Service, got {:?}", pass.step);
    };
    assert_eq!(service.name_any(), "demo-peer");
    assert_eq!(pass.requeue_after, AFTER_A_STEP);
}

#[test]
fn bootstrap_pods_run_the_guard_from_the_operator_image() {
    let mut snap = snapshot();
    snap.children = Children {
        peer_service: true,
        client_service: true,
        pdb: false,
        pdb_min_available: None,
    };
    snap.pvcs = (0..3).map(|o| pvc(o, "", json!({}))).collect();
    let pass = plan(&cluster(), &snap, &settings(), now());
    let Some(Step::Apply(Child::Pod(pod))) = pass.step else {
        panic!("expected a Pod, got {:?}", pass.step);
    };
    assert_eq!(pod.name_any(), "demo-0");
    let spec = pod.spec.expect("spec");
    let guard = &spec.init_containers.expect("init containers")[0];
    assert_eq!(
        guard.image.as_deref(),
        Some("example.org/etcd-operator:test")
    );
    let args = spec.containers[0].args.clone().expect("etcd args");
    assert!(args.contains(&"--initial-cluster-state=new".to_owned()));
    assert!(args.contains(&"--initial-cluster-token=demo-0123456789ab".to_owned()));
    assert!(
        pass.description
            .as_deref()
            .is_some_and(|d| d.contains("demo-0"))
    );
    assert_eq!(pass.status.bootstrap_replicas, Some(3));
}

#[test]
fn a_pod_on_a_deleted_node_is_force_deleted_with_its_uid() {
    let mut snap = snapshot();
    snap.children = Children {
        peer_service: true,
        client_service: true,
        pdb: true,
        pdb_min_available: Some(2),
    };
    snap.pvcs = (0..3)
        .map(|o| {
            pvc(
                o,
                &format!("pv-{o}"),
                json!({ "durable-etcd.io/cluster-token": "demo-0123456789ab",
                        "durable-etcd.io/cluster-id": "c1", "durable-etcd.io/member-id": format!("{}", o + 1) }),
            )
        })
        .collect();
    for o in 0..3 {
        snap.volumes
            .insert(format!("pv-{o}"), Some(network_pv(&format!("pv-{o}"))));
    }
    snap.pods = vec![
        pod(0, "n1", json!({})),
        pod(1, "n2", json!({})),
        pod(2, "deleted-node", json!({})),
    ];
    let pass = plan(&cluster(), &snap, &settings(), now());
    match pass.step {
        Some(Step::DeletePod { name, uid, force }) => {
            assert_eq!(name, "demo-2");
            assert_eq!(uid.as_deref(), Some("pod-uid-2"));
            assert!(force);
        }
        other => panic!("expected a forced delete of demo-2, got {other:?}"),
    }
}

fn required_node_anti_affinity(pod: &k8s_openapi::api::core::v1::Pod) -> bool {
    pod.spec
        .as_ref()
        .and_then(|s| s.affinity.as_ref())
        .and_then(|a| a.pod_anti_affinity.as_ref())
        .and_then(|a| {
            a.required_during_scheduling_ignored_during_execution
                .as_ref()
        })
        .is_some_and(|terms| {
            terms
                .iter()
                .any(|t| t.topology_key == "kubernetes.io/hostname")
        })
}

#[test]
fn member_pods_are_spread_by_where_their_volumes_keep_data() {
    let mut snap = snapshot();
    snap.children = Children {
        peer_service: true,
        client_service: true,
        pdb: false,
        pdb_min_available: None,
    };
    snap.pvcs = (0..3).map(|o| pvc(o, "", json!({}))).collect();
    // Nothing known of the volumes: members never share a node.
    let pass = plan(&cluster(), &snap, &settings(), now());
    let Some(Step::Apply(Child::Pod(pod))) = pass.step else {
        panic!("expected a Pod, got {:?}", pass.step);
    };
    assert!(required_node_anti_affinity(&pod));
    // A class whose CSI driver attaches volumes anywhere: only preferred.
    snap.storage = super::super::observe::StorageFacts {
        class: serde_json::from_value(json!({
            "metadata": { "name": "lab-network" },
            "provisioner": "network.etcd-lab.dev"
        }))
        .ok(),
        driver: serde_json::from_value(json!({
            "metadata": { "name": "network.etcd-lab.dev" },
            "spec": { "attachRequired": true }
        }))
        .ok(),
    };
    let pass = plan(&cluster(), &snap, &settings(), now());
    let Some(Step::Apply(Child::Pod(pod))) = pass.step else {
        panic!("expected a Pod, got {:?}", pass.step);
    };
    assert!(!required_node_anti_affinity(&pod));
    // A PV pinned to a node wins over the class.
    snap.pvcs[1] = pvc(1, "pv-1", json!({}));
    snap.volumes
        .insert("pv-1".into(), Some(local_pv("pv-1", "n2")));
    let pass = plan(&cluster(), &snap, &settings(), now());
    let Some(Step::Apply(Child::Pod(pod))) = pass.step else {
        panic!("expected a Pod, got {:?}", pass.step);
    };
    assert!(required_node_anti_affinity(&pod));
}

#[test]
fn an_object_under_a_needed_name_that_the_cluster_does_not_own_is_never_taken_over() {
    let mut snap = snapshot();
    snap.unowned = vec!["Service/demo-client".to_owned()];
    let pass = plan(&cluster(), &snap, &settings(), now());
    assert!(pass.step.is_none(), "{:?}", pass.step);
    let progressing = pass
        .status
        .conditions
        .iter()
        .map(|c| c.message.clone())
        .collect::<Vec<_>>()
        .join(" ");
    assert!(
        progressing.contains("Service/demo-client"),
        "status does not name the object: {progressing}"
    );
}
