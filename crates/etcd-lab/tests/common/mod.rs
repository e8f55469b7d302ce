//! Shared by the lab's integration tests: they need root and the upstream
//! binaries, and run one lab at a time (a file lock serializes test binaries).

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use etcd_lab::{Lab, LabOptions};
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{Node, Pod, Service};
use kube::Api;
use kube::api::PostParams;
use serde_json::json;

pub const ETCD_LAB: &str = env!("CARGO_BIN_EXE_etcd-lab");

/// The test workload: serves its volume on :8080, records each start in the
/// volume, and keeps probing its peers by DNS name, reporting at `/peers`.
pub const WORKLOAD: &str = r#"
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

/// Holds the machine-wide lab test lock; stops the lab when the test fails
/// (keeping its logs for inspection).
pub struct LabTest {
    pub lab_dir: PathBuf,
    _lock: nix::fcntl::Flock<std::fs::File>,
}

impl LabTest {
    pub fn start(lab_dir: &str) -> Self {
        assert!(
            nix::unistd::Uid::effective().is_root(),
            "the lab tests need root (network namespaces, cgroups, mounts)"
        );
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open("/run/etcd-lab-tests.lock")
            .expect("lock file");
        let lock = nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusive)
            .map_err(|(_, e)| e)
            .expect("lock");
        // Holding the lock, no test uses another lab: a lab left up for
        // reuse is stopped (its data kept), as one lab runs per machine.
        if let Some(other) = etcd_lab::current::current()
            && other != Path::new(lab_dir)
        {
            let down = etcd_lab_cli(&other.to_string_lossy(), &["down", "--keep-data"]);
            assert!(
                down.status.success(),
                "stopping the lab at {}: {}",
                other.display(),
                String::from_utf8_lossy(&down.stderr)
            );
        }
        if Path::new(lab_dir).exists() {
            // Left by an earlier failed run: start from an empty lab.
            assert!(
                etcd_lab_cli(lab_dir, &["down"]).status.success(),
                "cleaning up an earlier lab failed"
            );
        }
        Self {
            lab_dir: PathBuf::from(lab_dir),
            _lock: lock,
        }
    }

    pub fn options(&self) -> LabOptions {
        LabOptions {
            lab_dir: Some(self.lab_dir.clone()),
            etcd_lab_binary: Some(PathBuf::from(ETCD_LAB)),
            ..LabOptions::default()
        }
    }

    pub fn cli(&self, args: &[&str]) -> std::process::Output {
        etcd_lab_cli(&self.lab_dir.to_string_lossy(), args)
    }

    /// GETs a URL from inside the lab network (`etcd-lab exec`, cluster DNS).
    pub fn lab_get(&self, url: &str) -> Option<String> {
        let output = self.cli(&[
            "exec",
            "--",
            "/usr/bin/python3",
            "-c",
            "import sys, urllib.request; sys.stdout.write(urllib.request.urlopen(sys.argv[1], timeout=3).read().decode())",
            url,
        ]);
        output
            .status
            .success()
            .then(|| String::from_utf8_lossy(&output.stdout).into_owned())
    }

    /// A file served by pod `web-N` from its volume.
    pub async fn read_web(&self, pod: &str, file: &str) -> String {
        let url = format!("http://{pod}.web.default.svc.cluster.local:8080/{file}");
        let mut text = None;
        wait_for(&format!("GET {url}"), Duration::from_secs(30), || {
            let got = self.lab_get(&url);
            text = got.clone();
            async move { got.map(|_| ()) }
        })
        .await;
        text.unwrap_or_default()
    }

    /// The peers table of pod `web-N`: peer host -> answer or error.
    pub fn peers_of(&self, pod: &str) -> Option<serde_json::Value> {
        let text = self.lab_get(&format!(
            "http://{pod}.web.default.svc.cluster.local:8080/peers"
        ))?;
        serde_json::from_str(&text).ok()
    }
}

impl Drop for LabTest {
    fn drop(&mut self) {
        if std::thread::panicking() {
            let _ = self.cli(&["down", "--keep-data"]);
            eprintln!(
                "the lab is down; its logs are kept in {}/logs",
                self.lab_dir.display()
            );
        }
    }
}

fn etcd_lab_cli(lab_dir: &str, args: &[&str]) -> std::process::Output {
    Command::new(ETCD_LAB)
        .args(args)
        .env("ETCD_LAB_DIR", lab_dir)
        .env("RUST_BACKTRACE", "0")
        .output()
        .expect("run etcd-lab")
}

/// Creates the headless Service `web` and the StatefulSet `web` of 3
/// `lab.local/host` pods running [`WORKLOAD`], with `extra_pod_spec` merged
/// into the pod spec, and waits until all 3 are Ready.
pub async fn create_web(lab: &Lab, storage_class: &str, extra_pod_spec: serde_json::Value) {
    let client = lab.kube_client().await.expect("client");
    let services: Api<Service> = Api::namespaced(client.clone(), "default");
    let sets: Api<StatefulSet> = Api::namespaced(client, "default");
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
    let mut pod_spec = json!({
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
    });
    if let (Some(spec), Some(extra)) = (pod_spec.as_object_mut(), extra_pod_spec.as_object()) {
        for (key, value) in extra {
            spec.insert(key.clone(), value.clone());
        }
    }
    let set: StatefulSet = serde_json::from_value(json!({
        "metadata": {"name": "web"},
        "spec": {
            "serviceName": "web",
            "replicas": 3,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}}, "spec": pod_spec},
            "volumeClaimTemplates": [{
                "metadata": {"name": "data"},
                "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": storage_class,
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
}

pub async fn wait_for<F, Fut>(what: &str, timeout: Duration, mut check: F)
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

pub fn pod_ready(pod: &Pod) -> bool {
    condition_true(
        pod.status.as_ref().and_then(|s| s.conditions.as_ref()),
        "Ready",
    )
}

pub fn node_ready(node: &Node) -> bool {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

fn condition_true(
    conditions: Option<&Vec<k8s_openapi::api::core::v1::PodCondition>>,
    kind: &str,
) -> bool {
    conditions.is_some_and(|c| c.iter().any(|c| c.type_ == kind && c.status == "True"))
}

/// Pids of a pod's container processes (found through the lab's cgroups).
pub fn container_pids(uid: &str) -> Vec<i32> {
    let cgroups = etcd_lab::cgroup::LabCgroups::detect().expect("cgroup2");
    cgroups
        .pids()
        .into_iter()
        .filter(|pid| {
            let cgroup = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap_or_default();
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            cgroup.contains(uid) && String::from_utf8_lossy(&cmdline).contains("python3")
        })
        .collect()
}

/// The state letter of a process (`R`, `S`, `T`...).
pub fn process_state(pid: i32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(')')?.1.trim_start().chars().next()
}

/// Checks that `etcd-lab down` left nothing behind.
pub fn assert_nothing_left(lab_dir: &Path) {
    assert!(!lab_dir.exists(), "the state directory is removed");
    let cgroups = etcd_lab::cgroup::LabCgroups::detect().expect("cgroup2");
    assert!(!cgroups.lab().exists(), "the lab's cgroup is removed");
    assert_eq!(etcd_lab::teardown::lab_netns(), Vec::<String>::new());
    assert!(etcd_lab::teardown::mounts_under(lab_dir).is_empty());
    let tables = Command::new("nft")
        .args(["list", "tables"])
        .output()
        .expect("nft");
    let tables = String::from_utf8_lossy(&tables.stdout);
    assert!(!tables.contains("etcdlab"), "host nft tables: {tables}");
    let links = Command::new("ip").args(["link"]).output().expect("ip link");
    assert!(!String::from_utf8_lossy(&links.stdout).contains("etcdlab"));
    // Every process of the lab names its state directory on its command line
    // (other tests may run their own etcd processes meanwhile).
    let lab_dir = lab_dir.to_string_lossy().into_owned();
    let leftovers: Vec<String> = std::fs::read_dir("/proc")
        .expect("/proc")
        .flatten()
        .filter_map(|e| {
            let cmdline = std::fs::read(e.path().join("cmdline")).ok()?;
            let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
            cmdline.contains(&lab_dir).then_some(cmdline)
        })
        .collect();
    assert_eq!(leftovers, Vec::<String>::new(), "lab processes left");
}
