//! The lab end to end, against the real upstream control plane: needs root
//! and the upstream binaries (`bash tools/build-upstream.sh`).
//!
//! One lab per machine (fixed namespace and cgroup names): a single test
//! drives the whole sequence, under the machine-wide lab test lock.

use std::time::{Duration, Instant};

use etcd_lab::Lab;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::storage::v1::{StorageClass, VolumeAttachment};
use kube::Api;
use kube::api::{DeleteParams, ListParams};
use serde_json::json;
use test_kit::conditions::{node_ready, pod_ready};
use test_kit::lab_test::{LabTest, container_pids};
use test_kit::poll::wait_until;
use test_kit::web::create_web;

const LAB_DIR: &str = "/var/lib/etcd-lab-test";

#[test]
fn lab_runs_a_stateful_workload_and_leaves_nothing_behind() {
    let test = LabTest::start(LAB_DIR, env!("CARGO_BIN_EXE_etcd-lab"));
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    runtime.block_on(async {
        let started = Instant::now();
        let lab = Lab::up(test.options()).await.expect("etcd-lab up");
        println!("etcd-lab up took {:.1}s", started.elapsed().as_secs_f64());
        check_nodes(&lab).await;
        let again = Lab::up(test.options()).await.expect("second etcd-lab up");
        assert!(again.was_already_up(), "a second up must find the lab up");
        let status = test.cli(&["status"]);
        let text = String::from_utf8_lossy(&status.stdout);
        assert!(status.status.success(), "status: {text}");
        check_statefulset(&test, &lab).await;
        check_scheduler_is_restarted(&lab).await;
    });
    drop(runtime);
    test.down_leaves_nothing();
}

async fn check_nodes(lab: &Lab) {
    let nodes: Api<Node> = Api::all(lab.kube_client().await.expect("client"));
    let list = nodes.list(&ListParams::default()).await.expect("nodes");
    let mut seen: Vec<(String, String, bool)> = list
        .items
        .iter()
        .map(|n| {
            let labels = n.metadata.labels.clone().unwrap_or_default();
            (
                n.metadata.name.clone().unwrap_or_default(),
                labels
                    .get("topology.kubernetes.io/zone")
                    .cloned()
                    .unwrap_or_default(),
                node_ready(n),
            )
        })
        .collect();
    seen.sort();
    assert_eq!(
        seen,
        [
            ("lab-node-1".into(), "zone-a".into(), true),
            ("lab-node-2".into(), "zone-b".into(), true),
            ("lab-node-3".into(), "zone-c".into(), true),
        ]
    );
}

async fn check_statefulset(test: &LabTest, lab: &Lab) {
    let pods: Api<Pod> = Api::namespaced(lab.kube_client().await.expect("client"), "default");
    // lab-network, the default class: CSI volumes the real attach-detach
    // controller attaches through VolumeAttachments (lab-local is covered by
    // tests/faults.rs).
    create_web(lab, "lab-network", json!({})).await;
    check_attachments(lab).await;

    // Every pod reaches every pod by its DNS name, from inside its own namespace.
    for i in 0..3 {
        wait_until(
            &format!("web-{i} reaching its peers"),
            Duration::from_secs(60),
            || async move {
                let peers = test.peers_of(&format!("web-{i}"))?;
                (0..3)
                    .all(|j| {
                        peers[format!("web-{j}.web.default.svc.cluster.local")]
                            .as_str()
                            .is_some_and(|answer| answer.starts_with("HTTP/1.0 200"))
                    })
                    .then_some(())
            },
        )
        .await;
    }

    // A file in the volume survives deleting the pod.
    let first_uid = pod_uid(&pods, "web-0").await;
    assert_eq!(test.read_web("web-0", "first.txt").await, first_uid);
    pods.delete("web-0", &DeleteParams::default())
        .await
        .expect("delete web-0");
    wait_until("web-0 replaced and ready", Duration::from_secs(180), || {
        let pods = pods.clone();
        let first_uid = first_uid.clone();
        async move {
            let pod = pods.get("web-0").await.ok()?;
            (pod.metadata.uid.as_deref() != Some(first_uid.as_str()) && pod_ready(&pod))
                .then_some(())
        }
    })
    .await;
    assert_eq!(
        test.read_web("web-0", "first.txt").await,
        first_uid,
        "the file written by the first pod is still in the volume"
    );
    let starts = test.read_web("web-0", "starts.txt").await;
    assert_eq!(starts.lines().count(), 2, "two starts recorded: {starts}");

    // A killed container process is restarted, and restartCount rises.
    let uid = pod_uid(&pods, "web-1").await;
    let pids = container_pids(&uid);
    assert!(!pids.is_empty(), "no process found for pod web-1 ({uid})");
    for pid in pids {
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGKILL,
        )
        .expect("kill");
    }
    wait_until(
        "web-1 restarted and ready",
        Duration::from_secs(120),
        || {
            let pods = pods.clone();
            async move {
                let pod = pods.get("web-1").await.ok()?;
                let restarts = pod
                    .status
                    .as_ref()?
                    .container_statuses
                    .as_ref()?
                    .first()?
                    .restart_count;
                (restarts >= 1 && pod_ready(&pod)).then_some(())
            }
        },
    )
    .await;
    let starts = test.read_web("web-1", "starts.txt").await;
    assert_eq!(starts.lines().count(), 2, "two starts of web-1: {starts}");

    // `etcd-lab logs` prints the container's output.
    let logs = test.cli(&["logs", "web-1"]);
    assert!(
        logs.status.success(),
        "logs: {}",
        String::from_utf8_lossy(&logs.stderr)
    );
}

/// Every volume of the StatefulSet is attached, through a VolumeAttachment,
/// to the node of its pod, and `lab-network` is the default class.
async fn check_attachments(lab: &Lab) {
    let client = lab.kube_client().await.expect("client");
    let class = Api::<StorageClass>::all(client.clone())
        .get("lab-network")
        .await
        .expect("storage class");
    assert_eq!(
        class
            .metadata
            .annotations
            .unwrap_or_default()
            .get("storageclass.kubernetes.io/is-default-class")
            .map(String::as_str),
        Some("true")
    );
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let attachments = Api::<VolumeAttachment>::all(client)
        .list(&ListParams::default())
        .await
        .expect("volume attachments");
    for i in 0..3 {
        let node = pods
            .get(&format!("web-{i}"))
            .await
            .expect("pod")
            .spec
            .and_then(|s| s.node_name)
            .expect("scheduled");
        assert!(
            attachments
                .items
                .iter()
                .any(|va| va.spec.node_name == node
                    && va.status.as_ref().is_some_and(|s| s.attached)),
            "an attached VolumeAttachment on {node}"
        );
    }
}

async fn pod_uid(pods: &Api<Pod>, name: &str) -> String {
    pods.get(name)
        .await
        .expect("pod")
        .metadata
        .uid
        .expect("uid")
}

/// kube-scheduler exits on purpose when it finds its cache corrupted (after
/// an API server restart, say) and counts on its kubelet to start it
/// again: the lab does the same. Its process is killed; a new one runs and
/// schedules a Pod.
async fn check_scheduler_is_restarted(lab: &Lab) {
    let supervisor = std::fs::read_to_string(lab.paths().pid_file("kube-scheduler"))
        .ok()
        .and_then(|p| p.trim().parse::<i32>().ok())
        .expect("kube-scheduler pid file");
    let children = || {
        std::fs::read_to_string(format!("/proc/{supervisor}/task/{supervisor}/children"))
            .unwrap_or_default()
            .split_whitespace()
            .filter_map(|p| p.parse::<i32>().ok())
            .filter(|p| {
                std::fs::read_to_string(format!("/proc/{p}/comm"))
                    .is_ok_and(|c| c.trim() == "kube-scheduler")
            })
            .collect::<Vec<i32>>()
    };
    let first = children();
    assert_eq!(
        first.len(),
        1,
        "one kube-scheduler under its supervisor: {first:?}"
    );
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(first[0]),
        nix::sys::signal::Signal::SIGKILL,
    )
    .expect("kill kube-scheduler");
    wait_until(
        "kube-scheduler started again",
        Duration::from_secs(60),
        || async {
            let now = children();
            (now.len() == 1 && now[0] != first[0]).then_some(())
        },
    )
    .await;
    // And it schedules: a Pod made now gets a node.
    let pods: Api<Pod> = Api::namespaced(lab.kube_client().await.expect("client"), "default");
    let pod: Pod = serde_json::from_value(json!({
        "metadata": { "name": "after-scheduler-restart" },
        "spec": { "containers": [{ "name": "c", "image": "lab.local/host", "command": ["sleep", "30"] }] }
    }))
    .expect("pod");
    pods.create(&Default::default(), &pod)
        .await
        .expect("create pod");
    wait_until(
        "the Pod scheduled by the new kube-scheduler",
        Duration::from_secs(60),
        || async {
            pods.get("after-scheduler-restart")
                .await
                .ok()?
                .spec?
                .node_name
                .map(|_| ())
        },
    )
    .await;
    pods.delete("after-scheduler-restart", &DeleteParams::default())
        .await
        .expect("delete pod");
}
