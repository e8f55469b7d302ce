//! Faults injected into a real lab, and the reactions of the real upstream
//! controllers: needs root and the upstream binaries.
//!
//! Shortened on purpose (and only here): kube-controller-manager runs with
//! `--node-monitor-grace-period=20s` instead of 50s, and the pods tolerate
//! `unreachable`/`not-ready` for 30s instead of the default 300s, so the
//! evictions happen within a minute. Everything else is the lab's default.

use std::time::Duration;

use etcd_lab::{Lab, LabOptions};
use etcd_lab_node::network::PartitionKind;
use k8s_openapi::api::core::v1::{Node, PersistentVolume, PersistentVolumeClaim, Pod};
use kube::Api;
use serde_json::json;
use test_kit::conditions::{node_ready, pod_ready};
use test_kit::lab_test::{LabTest, container_pids, process_state};
use test_kit::poll::wait_until;
use test_kit::web::create_web;

const LAB_DIR: &str = "/var/lib/etcd-lab-faults-test";

#[test]
fn faults_are_real_and_kubernetes_reacts_to_them() {
    let test = LabTest::start(LAB_DIR, env!("CARGO_BIN_EXE_etcd-lab"));
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    runtime.block_on(async {
        let mut options: LabOptions = test.options();
        options
            .controller_manager_flags
            .insert("node-monitor-grace-period".into(), "20s".into());
        let mut lab = Lab::up(options).await.expect("etcd-lab up");
        create_web(
            &lab,
            "lab-local",
            json!({
                "tolerations": [
                    {"key": "node.kubernetes.io/unreachable", "operator": "Exists",
                     "effect": "NoExecute", "tolerationSeconds": 30},
                    {"key": "node.kubernetes.io/not-ready", "operator": "Exists",
                     "effect": "NoExecute", "tolerationSeconds": 30}
                ],
                "affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                    {"labelSelector": {"matchLabels": {"app": "web"}},
                     "topologyKey": "kubernetes.io/hostname"}
                ]}}
            }),
        )
        .await;
        let ctx = Ctx::new(&test, &lab).await;
        ctx.freeze_and_thaw().await;
        ctx.pod_kill().await;
        ctx.apiserver_outage().await;
        ctx.partition_peers().await;
        ctx.partition_apiserver().await;
        ctx.stopped_node().await;
        ctx.volume_corrupt_and_wipe().await;
        ctx.out_of_service().await;
        node_object_deleted(&ctx, &lab).await;
        deleted_node(&ctx, &mut lab).await;
    });
    drop(runtime);
    test.down_leaves_nothing();
}

struct Ctx<'a> {
    test: &'a LabTest,
    lab: Lab,
    pods: Api<Pod>,
    nodes: Api<Node>,
}

impl<'a> Ctx<'a> {
    async fn new(test: &'a LabTest, lab: &Lab) -> Self {
        let client = lab.kube_client().await.expect("client");
        Self {
            test,
            lab: lab.clone(),
            pods: Api::namespaced(client.clone(), "default"),
            nodes: Api::all(client),
        }
    }

    async fn pod(&self, name: &str) -> Pod {
        self.pods.get(name).await.expect("pod")
    }

    async fn node_of(&self, pod: &str) -> String {
        self.pod(pod)
            .await
            .spec
            .and_then(|s| s.node_name)
            .expect("scheduled")
    }

    async fn uid_of(&self, pod: &str) -> String {
        self.pod(pod).await.metadata.uid.expect("uid")
    }

    async fn wait_node(&self, node: &str, ready: bool, timeout: Duration) {
        let what = format!("{node} {}", if ready { "Ready" } else { "NotReady" });
        wait_until(&what, timeout, || async {
            let object = self.nodes.get(node).await.ok()?;
            (node_ready(&object) == ready).then_some(())
        })
        .await;
    }

    /// The peer answer of `web-to` as seen by `web-from`.
    fn peer_answer(&self, from: usize, to: usize) -> Option<String> {
        let peers = self.test.peers_of(&format!("web-{from}"))?;
        peers[format!("web-{to}.web.default.svc.cluster.local")]
            .as_str()
            .map(str::to_owned)
    }

    async fn freeze_and_thaw(&self) {
        let node = self.node_of("web-2").await;
        let pids = container_pids(&self.uid_of("web-2").await);
        assert!(!pids.is_empty());
        self.lab.node_freeze(&node).expect("freeze");
        for pid in &pids {
            assert_eq!(process_state(*pid), Some('T'), "pid {pid} is stopped");
        }
        self.lab.node_thaw(&node).expect("thaw");
        wait_until(
            "web-2 processes running again",
            Duration::from_secs(10),
            || {
                let pids = pids.clone();
                async move {
                    pids.iter()
                        .all(|pid| process_state(*pid).is_some_and(|s| s != 'T'))
                        .then_some(())
                }
            },
        )
        .await;
        assert!(!self.test.read_web("web-2", "first.txt").await.is_empty());
    }

    async fn restart_count(&self, pod: &str) -> i32 {
        self.pod(pod)
            .await
            .status
            .and_then(|s| s.container_statuses)
            .and_then(|c| c.first().map(|c| c.restart_count))
            .unwrap_or_default()
    }

    async fn pod_kill(&self) {
        let before = self.restart_count("web-2").await;
        let killed = self
            .lab
            .pod_kill("default", "web-2", None)
            .await
            .expect("pod kill");
        assert!(killed > 0);
        wait_until(
            "web-2 restarted after its process was killed",
            Duration::from_secs(60),
            || async {
                let pod = self.pods.get("web-2").await.ok()?;
                let restarts = pod
                    .status
                    .as_ref()?
                    .container_statuses
                    .as_ref()?
                    .first()?
                    .restart_count;
                (restarts > before && pod_ready(&pod)).then_some(())
            },
        )
        .await;
    }

    async fn apiserver_outage(&self) {
        let ip = self
            .pod("web-2")
            .await
            .status
            .and_then(|s| s.pod_ip)
            .expect("pod IP");
        self.lab.apiserver_stop().expect("apiserver stop");
        assert!(
            self.pods.get("web-2").await.is_err(),
            "the API server is gone"
        );
        assert!(
            self.test
                .lab_get(&format!("http://{ip}:8080/first.txt"))
                .is_some(),
            "pods keep serving without the API server"
        );
        self.lab.apiserver_start().await.expect("apiserver start");
        assert!(
            self.pods.get("web-2").await.is_ok(),
            "the API server is back"
        );
    }

    async fn partition_peers(&self) {
        let node = self.node_of("web-1").await;
        let pids = container_pids(&self.uid_of("web-1").await);
        self.lab
            .node_partition(&node, PartitionKind::Peers)
            .expect("partition");
        wait_until(
            "web-0 cut off from web-1",
            Duration::from_secs(30),
            || async {
                self.peer_answer(0, 1)
                    .filter(|a| a.starts_with("error"))
                    .map(|_| ())
            },
        )
        .await;
        assert!(
            pids.iter().all(|pid| process_state(*pid).is_some()),
            "web-1 keeps running while partitioned"
        );
        self.lab.node_heal(&node).expect("heal");
        wait_until(
            "web-0 reaching web-1 again",
            Duration::from_secs(30),
            || async {
                self.peer_answer(0, 1)
                    .filter(|a| a.starts_with("HTTP/1.0 200"))
                    .map(|_| ())
            },
        )
        .await;
    }

    async fn partition_apiserver(&self) {
        let node = self.node_of("web-1").await;
        let ip = self
            .pod("web-1")
            .await
            .status
            .and_then(|s| s.pod_ip)
            .expect("pod IP");
        self.lab
            .node_partition(&node, PartitionKind::Apiserver)
            .expect("partition");
        self.wait_node(&node, false, Duration::from_secs(60)).await;
        // The node-lifecycle controller marks the pod not Ready, so its DNS
        // name leaves the headless Service: ask its address.
        let url = format!("http://{ip}:8080/first.txt");
        wait_until(
            "web-1 serving while its node is cut from the API server",
            Duration::from_secs(20),
            || async { self.test.lab_get(&url).map(|_| ()) },
        )
        .await;
        self.lab.node_heal(&node).expect("heal");
        self.wait_node(&node, true, Duration::from_secs(60)).await;
    }

    async fn stopped_node(&self) {
        let node = self.node_of("web-1").await;
        let old_uid = self.uid_of("web-1").await;
        self.lab.node_stop(&node).expect("node stop");
        self.wait_node(&node, false, Duration::from_secs(60)).await;
        // The unreachable toleration (30s) runs out: the pod is evicted and
        // stays Terminating while its node is down.
        wait_until("web-1 evicted", Duration::from_secs(90), || async {
            let pod = self.pods.get("web-1").await.ok()?;
            pod.metadata.deletion_timestamp.map(|_| ())
        })
        .await;
        tokio::time::sleep(Duration::from_secs(10)).await;
        let pod = self.pod("web-1").await;
        assert_eq!(pod.metadata.uid.as_deref(), Some(old_uid.as_str()));
        assert!(
            pod.metadata.deletion_timestamp.is_some(),
            "still Terminating"
        );

        self.lab.node_start(&node).expect("node start");
        self.wait_node(&node, true, Duration::from_secs(60)).await;
        wait_until(
            "web-1 replaced and ready",
            Duration::from_secs(120),
            || async {
                let pod = self.pods.get("web-1").await.ok()?;
                (pod.metadata.uid.as_deref() != Some(old_uid.as_str()) && pod_ready(&pod))
                    .then_some(())
            },
        )
        .await;
    }

    /// After a non-graceful shutdown, the administrator's out-of-service
    /// taint lets the pod garbage collector release the Terminating pod.
    async fn out_of_service(&self) {
        let node = self.node_of("web-0").await;
        let old_uid = self.uid_of("web-0").await;
        self.lab.node_stop(&node).expect("node stop");
        self.wait_node(&node, false, Duration::from_secs(60)).await;
        wait_until("web-0 evicted", Duration::from_secs(90), || async {
            let pod = self.pods.get("web-0").await.ok()?;
            pod.metadata.deletion_timestamp.map(|_| ())
        })
        .await;
        self.lab
            .node_taint_out_of_service(&node)
            .await
            .expect("taint");
        wait_until(
            "the Terminating web-0 released",
            Duration::from_secs(90),
            || async {
                match self.pods.get_opt("web-0").await.ok()? {
                    None => Some(()),
                    Some(pod) => {
                        (pod.metadata.uid.as_deref() != Some(old_uid.as_str())).then_some(())
                    }
                }
            },
        )
        .await;
        // The node comes back; the administrator removes the taint.
        self.lab.node_start(&node).expect("node start");
        self.wait_node(&node, true, Duration::from_secs(60)).await;
        let patch = json!({"spec": {"taints": null}});
        self.nodes
            .patch(
                &node,
                &kube::api::PatchParams::default(),
                &kube::api::Patch::Merge(&patch),
            )
            .await
            .expect("remove taint");
    }

    async fn volume_corrupt_and_wipe(&self) {
        let dir = self
            .lab
            .volume_dir("default", "data-web-0")
            .await
            .expect("volume dir");
        let before = std::fs::read(dir.join("starts.txt")).expect("starts.txt");
        let corrupted = self
            .lab
            .volume_corrupt("default", "data-web-0", Some("starts"))
            .await
            .expect("corrupt");
        assert_eq!(corrupted, dir.join("starts.txt"));
        let after = std::fs::read(&corrupted).expect("corrupted file");
        assert_eq!(after.len(), before.len());
        assert_ne!(after, before, "bytes flipped");
        self.lab
            .volume_wipe("default", "data-web-0")
            .await
            .expect("wipe");
        assert_eq!(
            std::fs::read_dir(&dir).expect("volume").count(),
            0,
            "the volume is empty"
        );
    }
}

/// The local volume of a pod's claim, by its PV.
async fn local_volume_of(lab: &Lab, claim: &str) -> std::path::PathBuf {
    let client = lab.kube_client().await.expect("client");
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), "default");
    let volume = claims
        .get(claim)
        .await
        .expect("pvc")
        .spec
        .and_then(|s| s.volume_name)
        .expect("bound");
    Api::<PersistentVolume>::all(client)
        .get(&volume)
        .await
        .expect("pv")
        .spec
        .and_then(|s| s.local)
        .map(|l| std::path::PathBuf::from(l.path))
        .expect("a lab-local volume")
}

/// Someone deletes a Node object (`kubectl delete node`) while the machine
/// lives on: its local volumes keep their data, and its agent registers
/// the Node again, as a kubelet does.
async fn node_object_deleted(ctx: &Ctx<'_>, lab: &Lab) {
    let node = ctx.node_of("web-2").await;
    let local_path = local_volume_of(lab, "data-web-2").await;
    let on_volume = |f: fn(&std::path::Path) -> std::io::Result<Vec<u8>>| {
        etcd_lab_node::volume::disk::with_mounted(&local_path, |dir| f(&dir.join("kept")))
            .expect("the volume mounts")
    };
    on_volume(|marker| std::fs::write(marker, b"still here").map(|()| Vec::new()))
        .expect("write into the volume");
    ctx.nodes
        .delete(&node, &kube::api::DeleteParams::default())
        .await
        .expect("delete the Node object");
    wait_until(
        "the node agent to register the Node again",
        Duration::from_secs(120),
        || async { ctx.nodes.get_opt(&node).await.ok()?.map(|_| ()) },
    )
    .await;
    ctx.wait_node(&node, true, Duration::from_secs(60)).await;
    // Give a controller that would react to the deletion time to do so.
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(
        on_volume(|marker| std::fs::read(marker)).expect("the volume's data is kept"),
        b"still here"
    );
    on_volume(|marker| std::fs::remove_file(marker).map(|()| Vec::new()))
        .expect("remove the marker");
}

async fn deleted_node(ctx: &Ctx<'_>, lab: &mut Lab) {
    let node = ctx.node_of("web-2").await;
    let client = lab.kube_client().await.expect("client");
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), "default");
    let volume = claims
        .get("data-web-2")
        .await
        .expect("pvc")
        .spec
        .and_then(|s| s.volume_name)
        .expect("bound");
    let pv = Api::<PersistentVolume>::all(client)
        .get(&volume)
        .await
        .expect("pv");
    let local_path = pv
        .spec
        .and_then(|s| s.local)
        .map(|l| std::path::PathBuf::from(l.path))
        .expect("a lab-local volume");
    assert!(local_path.exists());
    let old_uid = ctx.uid_of("web-2").await;
    lab.node_delete(&node).await.expect("node delete");
    assert!(!local_path.exists(), "the node's local volume is gone");
    assert!(
        ctx.nodes.get_opt(&node).await.expect("get node").is_none(),
        "the Node object is deleted"
    );
    // PodGC removes the pods bound to a node that no longer exists.
    wait_until(
        "web-2 of the deleted node gone",
        Duration::from_secs(120),
        || async {
            match ctx.pods.get_opt("web-2").await.ok()? {
                None => Some(()),
                Some(pod) => (pod.metadata.uid.as_deref() != Some(old_uid.as_str())).then_some(()),
            }
        },
    )
    .await;
    let added = lab.node_add(None, None).expect("node add");
    ctx.wait_node(&added.name, true, Duration::from_secs(60))
        .await;
}
