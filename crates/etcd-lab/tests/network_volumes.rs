//! `lab-network` exclusivity, decided by the real attach-detach controller:
//! a pod cannot start on a second node while its volume is attached to a
//! stopped node (Multi-Attach), and can once that node is deleted or carries
//! the `node.kubernetes.io/out-of-service` taint. Needs root and the upstream
//! binaries.
//!
//! Nothing is shortened: the lab runs with the defaults of a real cluster.
//! After `node delete` the attach-detach controller force-detaches only when
//! its `maxWaitForUnmountDuration` (6 minutes, not configurable) has passed
//! since the pod left the deleted node (PodGC), so that case takes about
//! 7 minutes and is `#[ignore]`d in the default run (`--ignored` runs it).

use std::time::{Duration, Instant};

use etcd_lab::Lab;
use k8s_openapi::api::core::v1::{Event, PersistentVolumeClaim, Pod};
use k8s_openapi::api::storage::v1::VolumeAttachment;
use kube::Api;
use kube::api::{ListParams, PostParams};
use serde_json::json;
use test_kit::lab_test::LabTest;
use test_kit::poll::wait_until;

const LAB_DIR: &str = "/var/lib/etcd-lab-network-volumes-test";
const NS: &str = "default";

/// How the machine holding the volume is released.
#[derive(Clone, Copy)]
enum Release {
    /// An administrator marks the stopped node out of service: its pod is
    /// force-deleted (PodGC) and the volume force-detached at once.
    OutOfService,
    /// The machine is gone for good: the Node is deleted.
    NodeDeleted,
}

#[test]
fn a_network_volume_moves_only_after_its_stopped_node_is_out_of_service() {
    volume_is_attached_to_one_node_at_a_time(Release::OutOfService, Duration::from_secs(180));
}

#[test]
#[ignore = "takes about 7 minutes: after a node delete the upstream attach-detach \
            controller force-detaches only after its fixed 6-minute \
            maxWaitForUnmountDuration; run with --ignored"]
fn a_network_volume_moves_only_after_its_stopped_node_is_deleted() {
    volume_is_attached_to_one_node_at_a_time(Release::NodeDeleted, Duration::from_secs(600));
}

/// vol on lab-node-1; lab-node-1 stops; a second pod for the same volume on
/// lab-node-3 must not start (the volume is still attached to the stopped
/// node) until the stopped node is released.
fn volume_is_attached_to_one_node_at_a_time(release: Release, release_timeout: Duration) {
    let test = LabTest::start(LAB_DIR, env!("CARGO_BIN_EXE_etcd-lab"));
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    runtime.block_on(async {
        let mut lab = Lab::up(test.options()).await.expect("etcd-lab up");
        let client = lab.kube_client().await.expect("client");
        let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
        create_claim(&client, "vol-1").await;
        create_pod(&pods, "first-1", "vol-1", 1).await;
        wait_running(&pods, "first-1", Duration::from_secs(120)).await;
        // Running means its shell started, not that it has written yet: on a
        // busy machine the node could stop before the write.
        wait_written(&lab, "vol-1", "first-1").await;
        lab.node_stop("lab-node-1").expect("stop lab-node-1");
        create_pod(&pods, "second-1", "vol-1", 3).await;
        wait_multi_attach(&client, "second-1").await;
        // The volume stays attached to the stopped node: nothing starts.
        tokio::time::sleep(Duration::from_secs(10)).await;
        let pod = pods.get("second-1").await.expect("pod");
        assert_ne!(phase(&pod), "Running", "second-1 must not start");
        assert!(
            !attached_on(&client, "lab-node-3").await,
            "nothing is attached to lab-node-3"
        );

        let released_at = Instant::now();
        match release {
            Release::OutOfService => lab
                .node_taint_out_of_service("lab-node-1")
                .await
                .expect("taint"),
            Release::NodeDeleted => lab.node_delete("lab-node-1").await.expect("node delete"),
        }
        wait_running(&pods, "second-1", release_timeout).await;
        println!(
            "second-1 running {:.0}s after the node was released",
            released_at.elapsed().as_secs_f64()
        );
        check_data(&lab, "vol-1", "first-1").await;
    });
    drop(runtime);
    test.down_leaves_nothing();
}

async fn create_claim(client: &kube::Client, name: &str) {
    // No class named: the default class, lab-network.
    let claim: PersistentVolumeClaim = serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {"accessModes": ["ReadWriteOnce"],
                 "resources": {"requests": {"storage": "16Mi"}}}
    }))
    .expect("claim");
    Api::<PersistentVolumeClaim>::namespaced(client.clone(), NS)
        .create(&PostParams::default(), &claim)
        .await
        .expect("create claim");
}

/// A pod on `lab-node-<node>` that records its name in the volume and the
/// names already there in `seen-by-<name>`.
async fn create_pod(pods: &Api<Pod>, name: &str, claim: &str, node: usize) {
    let script = format!(
        "cat /data/written-by-* > /data/seen-by-{name} 2>/dev/null; echo {name} > /data/written-by-{name}; exec sleep 1000000"
    );
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {
            "terminationGracePeriodSeconds": 5,
            "nodeSelector": {"kubernetes.io/hostname": format!("lab-node-{node}")},
            "containers": [{
                "name": "main",
                "image": "lab.local/host",
                "command": ["/bin/sh", "-c", script],
                "volumeMounts": [{"name": "data", "mountPath": "/data"}]
            }],
            "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": claim}}]
        }
    }))
    .expect("pod");
    pods.create(&PostParams::default(), &pod)
        .await
        .expect("create pod");
}

fn phase(pod: &Pod) -> String {
    pod.status
        .as_ref()
        .and_then(|s| s.phase.clone())
        .unwrap_or_default()
}

async fn wait_running(pods: &Api<Pod>, name: &str, timeout: Duration) {
    wait_until(&format!("{name} running"), timeout, || async {
        let pod = pods.get(name).await.ok()?;
        (phase(&pod) == "Running").then_some(())
    })
    .await;
}

/// The attach-detach controller reports the Multi-Attach error on the pod
/// (worded "Waiting for detach ... Volume is already used by pod(s) ..." by
/// Kubernetes 1.37, "Multi-Attach error ..." by earlier releases).
async fn wait_multi_attach(client: &kube::Client, pod: &str) {
    let events: Api<Event> = Api::namespaced(client.clone(), NS);
    let selector = format!("involvedObject.name={pod}");
    wait_until(
        &format!("Multi-Attach reported for {pod}"),
        Duration::from_secs(60),
        || async {
            let list = events
                .list(&ListParams::default().fields(&selector))
                .await
                .ok()?;
            list.items
                .iter()
                .any(|e| {
                    e.reason.as_deref() == Some("FailedAttachVolume")
                        && e.message.as_deref().is_some_and(|m| {
                            m.contains("Multi-Attach") || m.contains("Waiting for detach")
                        })
                })
                .then_some(())
        },
    )
    .await;
}

async fn attached_on(client: &kube::Client, node: &str) -> bool {
    Api::<VolumeAttachment>::all(client.clone())
        .list(&ListParams::default())
        .await
        .expect("volume attachments")
        .items
        .iter()
        .any(|va| va.spec.node_name == node && va.status.as_ref().is_some_and(|s| s.attached))
}

/// `pod` has recorded its name in the volume of `claim`.
async fn wait_written(lab: &Lab, claim: &str, pod: &str) {
    let dir = lab.volume_dir(NS, claim).await.expect("volume dir");
    let file = dir.join(format!("written-by-{pod}"));
    wait_until(
        &format!("{pod} wrote to {claim}"),
        Duration::from_secs(60),
        || {
            let written = std::fs::read_to_string(&file).is_ok_and(|text| text.trim() == pod);
            async move { written.then_some(()) }
        },
    )
    .await;
}

/// The second pod found what the first one wrote: the same volume.
async fn check_data(lab: &Lab, claim: &str, first: &str) {
    let dir = lab.volume_dir(NS, claim).await.expect("volume dir");
    let second = first.replace("first", "second");
    let mut seen = String::new();
    wait_until(
        &format!("{second} reading {claim}"),
        Duration::from_secs(30),
        || {
            let text = std::fs::read_to_string(dir.join(format!("seen-by-{second}"))).ok();
            seen = text.clone().unwrap_or_default();
            async move { text.map(|_| ()) }
        },
    )
    .await;
    assert_eq!(seen.trim(), first, "{second} sees the data of {first}");
}
