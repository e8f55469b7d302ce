//! The lab end to end, against the real upstream control plane: needs root
//! and the upstream binaries (`bash tools/build-upstream.sh`).
//!
//! One lab per machine (fixed namespace and cgroup names), so a single test
//! drives the whole sequence.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use etcd_lab::{Lab, LabOptions};
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{Node, Pod, Service};
use kube::Api;
use kube::api::{DeleteParams, ListParams, PostParams};
use serde_json::json;

const LAB_DIR: &str = "/var/lib/etcd-lab-test";
const ETCD_LAB: &str = env!("CARGO_BIN_EXE_etcd-lab");

/// The test workload: serves its volume on :8080, records each start in the
/// volume, and keeps probing its peers by DNS name, reporting at `/peers`.
const WORKLOAD: &str = r#"
import http.server, json, os, socket, threading, time
name = os.environ["POD_NAME"]
with open("/data/starts.txt", "a") as f:
    f.write(name + " " + os.environ["POD_UID"] + "\n")
if not os.path.exists("/data/first.txt"):
    with open("/data/first.txt", "w") as f:
        f.write(os.environ["POD_UID"])
peers = {}
def probe():
    while True:
        for i in range(3):
            host = "web-%d.web.default.svc.cluster.local" % i
            try:
                with socket.create_connection((host, 8080), timeout=2) as s:
                    s.sendall(b"GET /first.txt HTTP/1.0\r\n\r\n")
                    peers[host] = s.recv(12).decode(errors="replace")
            except Exception as e:
                peers[host] = "error: %r" % e
        time.sleep(1)
threading.Thread(target=probe, daemon=True).start()
class Handler(http.server.SimpleHTTPRequestHandler):
    def __init__(self, *a, **k):
        super().__init__(*a, directory="/data", **k)
    def do_GET(self):
        if self.path == "/peers":
            body = json.dumps(peers).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        else:
            super().do_GET()
http.server.ThreadingHTTPServer(("", 8080), Handler).serve_forever()
"#;

#[test]
fn lab_runs_a_stateful_workload_and_leaves_nothing_behind() {
    assert!(
        nix::unistd::Uid::effective().is_root(),
        "the lab test needs root (network namespaces, cgroups, mounts)"
    );
    let _cleanup = DownOnFailure;
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let lab = runtime.block_on(async {
        let lab = bring_up().await;
        check_nodes(&lab).await;
        check_idempotent_up().await;
        check_status_command();
        check_statefulset(&lab).await;
        lab
    });
    drop(runtime);
    check_down(&lab);
}

/// Stops the lab when the test fails, keeping its state directory (logs)
/// for inspection.
struct DownOnFailure;

impl Drop for DownOnFailure {
    fn drop(&mut self) {
        if std::thread::panicking() {
            let _ = Command::new(ETCD_LAB)
                .args(["down", "--keep-data"])
                .env("ETCD_LAB_DIR", LAB_DIR)
                .status();
            eprintln!("the lab is down; its logs are kept in {LAB_DIR}/logs");
        }
    }
}

fn options() -> LabOptions {
    LabOptions {
        lab_dir: Some(PathBuf::from(LAB_DIR)),
        etcd_lab_binary: Some(PathBuf::from(ETCD_LAB)),
        ..LabOptions::default()
    }
}

async fn bring_up() -> Lab {
    if Path::new(LAB_DIR).exists() {
        // Left by an earlier failed run: start from an empty lab.
        let down = Command::new(ETCD_LAB)
            .arg("down")
            .env("ETCD_LAB_DIR", LAB_DIR)
            .status()
            .expect("etcd-lab down");
        assert!(down.success(), "cleaning up an earlier lab failed");
    }
    let started = Instant::now();
    let lab = Lab::up(options()).await.expect("etcd-lab up");
    println!("etcd-lab up took {:.1}s", started.elapsed().as_secs_f64());
    lab
}

async fn check_nodes(lab: &Lab) {
    let nodes: Api<Node> = Api::all(lab.kube_client().await.expect("client"));
    let list = nodes.list(&ListParams::default()).await.expect("nodes");
    let mut seen: Vec<(String, String, bool)> = list
        .items
        .iter()
        .map(|n| {
            let labels = n.metadata.labels.clone().unwrap_or_default();
            let ready = n
                .status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
            (
                n.metadata.name.clone().unwrap_or_default(),
                labels
                    .get("topology.kubernetes.io/zone")
                    .cloned()
                    .unwrap_or_default(),
                ready,
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

async fn check_idempotent_up() {
    let again = Lab::up(options()).await.expect("second etcd-lab up");
    assert!(again.was_already_up(), "a second up must find the lab up");
}

fn check_status_command() {
    let output = Command::new(ETCD_LAB)
        .args(["status"])
        .env("ETCD_LAB_DIR", LAB_DIR)
        .output()
        .expect("etcd-lab status");
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "status: {text}");
    assert!(text.contains("healthy"), "{text}");
}

async fn check_statefulset(lab: &Lab) {
    let client = lab.kube_client().await.expect("client");
    let services: Api<Service> = Api::namespaced(client.clone(), "default");
    let sets: Api<StatefulSet> = Api::namespaced(client.clone(), "default");
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");

    let service: Service = serde_json::from_value(json!({
        "metadata": {"name": "web"},
        "spec": {"clusterIP": "None", "selector": {"app": "web"},
                 "ports": [{"name": "http", "port": 8080}]}
    }))
    .expect("service");
    services
        .create(&PostParams::default(), &service)
        .await
        .expect("create service");
    let set: StatefulSet = serde_json::from_value(json!({
        "metadata": {"name": "web"},
        "spec": {
            "serviceName": "web",
            "replicas": 3,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {
                    "terminationGracePeriodSeconds": 5,
                    "containers": [{
                        "name": "web",
                        "image": "lab.local/host",
                        "command": ["/usr/bin/python3", "-u", "-c", WORKLOAD],
                        "env": [
                            {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                            {"name": "POD_UID", "valueFrom": {"fieldRef": {"fieldPath": "metadata.uid"}}}
                        ],
                        "ports": [{"containerPort": 8080}],
                        "readinessProbe": {"httpGet": {"path": "/first.txt", "port": 8080},
                                           "periodSeconds": 1},
                        "volumeMounts": [{"name": "data", "mountPath": "/data"}]
                    }]
                }
            },
            "volumeClaimTemplates": [{
                "metadata": {"name": "data"},
                "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "lab-local",
                         "resources": {"requests": {"storage": "16Mi"}}}
            }]
        }
    }))
    .expect("statefulset");
    sets.create(&PostParams::default(), &set)
        .await
        .expect("create statefulset");

    wait_for("3 ready replicas", Duration::from_secs(240), || async {
        let set = sets.get("web").await.ok()?;
        (set.status?.ready_replicas? == 3).then_some(())
    })
    .await;

    // Every pod reaches every pod by its DNS name, from inside its own namespace.
    for i in 0..3 {
        wait_for(
            &format!("web-{i} reaching its peers"),
            Duration::from_secs(60),
            || async move {
                let peers = lab_get(&format!(
                    "http://web-{i}.web.default.svc.cluster.local:8080/peers"
                ))?;
                let peers: serde_json::Value = serde_json::from_str(&peers).ok()?;
                let all = (0..3).all(|j| {
                    peers[format!("web-{j}.web.default.svc.cluster.local")]
                        .as_str()
                        .is_some_and(|answer| answer.starts_with("HTTP/1.0 200"))
                });
                all.then_some(())
            },
        )
        .await;
    }

    // A file in the volume survives deleting the pod.
    let first_uid = pod_uid(&pods, "web-0").await;
    assert_eq!(read_web("web-0", "first.txt").await, first_uid);
    pods.delete("web-0", &DeleteParams::default())
        .await
        .expect("delete web-0");
    wait_for("web-0 replaced and ready", Duration::from_secs(180), || {
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
        read_web("web-0", "first.txt").await,
        first_uid,
        "the file written by the first pod is still in the volume"
    );
    let starts = read_web("web-0", "starts.txt").await;
    assert_eq!(starts.lines().count(), 2, "two starts recorded: {starts}");

    // A killed container process is restarted, and restartCount rises.
    let uid = pod_uid(&pods, "web-1").await;
    let killed = kill_container_processes(&uid);
    assert!(killed > 0, "no process found for pod web-1 ({uid})");
    wait_for(
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
    let starts = read_web("web-1", "starts.txt").await;
    assert_eq!(starts.lines().count(), 2, "two starts of web-1: {starts}");
}

fn check_down(lab: &Lab) {
    let output = Command::new(ETCD_LAB)
        .args(["down"])
        .env("ETCD_LAB_DIR", LAB_DIR)
        .output()
        .expect("etcd-lab down");
    assert!(
        output.status.success(),
        "down: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        !Path::new(LAB_DIR).exists(),
        "the state directory is removed"
    );
    let cgroups = etcd_lab::cgroup::LabCgroups::detect().expect("cgroup2");
    assert!(!cgroups.lab().exists(), "the lab's cgroup is removed");
    assert_eq!(etcd_lab::teardown::lab_netns(), Vec::<String>::new());
    assert!(etcd_lab::teardown::mounts_under(lab.paths().root()).is_empty());
    let tables = Command::new("nft")
        .args(["list", "tables"])
        .output()
        .expect("nft");
    let tables = String::from_utf8_lossy(&tables.stdout);
    assert!(!tables.contains("etcdlab"), "host nft tables: {tables}");
    let links = Command::new("ip").args(["link"]).output().expect("ip link");
    assert!(!String::from_utf8_lossy(&links.stdout).contains("etcdlab"));
    let leftovers: Vec<String> = std::fs::read_dir("/proc")
        .expect("/proc")
        .flatten()
        .filter_map(|e| {
            let exe = std::fs::read_link(e.path().join("exe")).ok()?;
            let exe = exe.to_string_lossy().into_owned();
            (exe.contains("/.cache/etcd-lab/upstream/")).then_some(exe)
        })
        .collect();
    assert_eq!(leftovers, Vec::<String>::new(), "upstream processes left");
}

/// GETs a URL from inside the lab network (`etcd-lab exec`, cluster DNS).
fn lab_get(url: &str) -> Option<String> {
    let output = Command::new(ETCD_LAB)
        .args([
            "exec",
            "--",
            "/usr/bin/python3",
            "-c",
            "import sys, urllib.request; sys.stdout.write(urllib.request.urlopen(sys.argv[1], timeout=3).read().decode())",
            url,
        ])
        .env("ETCD_LAB_DIR", LAB_DIR)
        .output()
        .ok()?;
    output
        .status
        .success()
        .then(|| String::from_utf8_lossy(&output.stdout).into_owned())
}

async fn read_web(pod: &str, file: &str) -> String {
    let url = format!("http://{pod}.web.default.svc.cluster.local:8080/{file}");
    let mut text = None;
    wait_for(&format!("GET {url}"), Duration::from_secs(30), || {
        let got = lab_get(&url);
        text = got.clone();
        async move { got.map(|_| ()) }
    })
    .await;
    text.unwrap_or_default()
}

async fn pod_uid(pods: &Api<Pod>, name: &str) -> String {
    pods.get(name)
        .await
        .expect("pod")
        .metadata
        .uid
        .expect("uid")
}

fn pod_ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// SIGKILLs the python processes in the pod's cgroup (an OOM kill).
fn kill_container_processes(uid: &str) -> usize {
    let cgroups = etcd_lab::cgroup::LabCgroups::detect().expect("cgroup2");
    let mut killed = 0;
    for pid in cgroups.pids() {
        let Ok(cgroup) = std::fs::read_to_string(format!("/proc/{pid}/cgroup")) else {
            continue;
        };
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        if cgroup.contains(uid) && String::from_utf8_lossy(&cmdline).contains("python3") {
            nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGKILL,
            )
            .expect("kill");
            killed += 1;
        }
    }
    killed
}

async fn wait_for<F, Fut>(what: &str, timeout: Duration, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<()>>,
{
    let started = Instant::now();
    while started.elapsed() < timeout {
        if check().await.is_some() {
            println!("{what}: after {:.1}s", started.elapsed().as_secs_f64());
            return;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    panic!("timed out after {}s waiting for {what}", timeout.as_secs());
}
