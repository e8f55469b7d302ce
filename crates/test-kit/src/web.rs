//! A stateful test workload on the lab: the StatefulSet `web` of three
//! `lab.local/host` pods behind the headless Service `web`, each serving its
//! volume on :8080, recording each start in it, and probing its peers by DNS
//! name; read from inside the lab network.

use std::time::Duration;

use etcd_lab::Lab;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::Service;
use kube::Api;
use kube::api::PostParams;
use serde_json::json;

use crate::lab_test::LabTest;
use crate::poll::wait_until;

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

impl LabTest {
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
        wait_until(&format!("GET {url}"), Duration::from_secs(30), || {
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
    wait_until("3 ready replicas", Duration::from_secs(240), || async {
        let set = sets.get("web").await.ok()?;
        (set.status?.ready_replicas? == 3).then_some(())
    })
    .await;
}
