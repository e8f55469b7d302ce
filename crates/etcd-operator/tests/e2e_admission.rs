//! Admission of the custom resources, judged by the real kube-apiserver:
//! a catalogue of invalid specs, each refused with (a fragment of) the
//! message its rule carries, valid edge specs accepted, transition rules
//! (immutable and only-growing fields) checked on updates, and the schedule
//! controller's report of a cron expression admission cannot judge.
//!
//! No lab nodes: the test starts the lab's pinned etcd and kube-apiserver
//! (`~/.cache/etcd-lab/upstream`, `tools/build-upstream.sh`) on free
//! loopback ports with the lab's PKI helpers, in a temporary directory,
//! installs `deploy/crds/*.yaml` as committed, and sends every spec with
//! server-side dry run (`dryRun=All`) unless it needs a stored object.
//! Needs no root; takes about ten seconds.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use etcd_operator::api::{EtcdBackup, EtcdBackupSchedule, EtcdCluster};
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{ApiResource, DynamicObject, PostParams};
use kube::{Api, Client};
use serde_json::{Value, json};
use test_kit::TestResult;
use test_kit::loopback::free_port;

const NAMESPACE: &str = "admission";
const OPERATOR: &str = env!("CARGO_BIN_EXE_etcd-operator");

/// A process of ours, killed when dropped.
struct Process {
    name: &'static str,
    child: Child,
    log: PathBuf,
}

impl Process {
    fn start(name: &'static str, program: &Path, args: &[String], dir: &Path) -> TestResult<Self> {
        Self::start_with_env(name, program, args, dir, &[])
    }

    fn start_with_env(
        name: &'static str,
        program: &Path,
        args: &[String],
        dir: &Path,
        env: &[(&str, &Path)],
    ) -> TestResult<Self> {
        let log = dir.join(format!("{name}.log"));
        let file = std::fs::File::create(&log)?;
        let mut command = Command::new(program);
        command
            .args(args)
            .stdin(Stdio::null())
            .stdout(file.try_clone()?)
            .stderr(file);
        for (key, value) in env {
            command.env(key, value);
        }
        let child = command
            .spawn()
            .map_err(|e| format!("start {}: {e}", program.display()))?;
        Ok(Self { name, child, log })
    }

    /// The end of its log, for a failure message.
    fn tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        let from = lines.len().saturating_sub(20);
        format!(
            "--- {} ({})\n{}",
            self.name,
            self.log.display(),
            lines[from..].join("\n")
        )
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn flag(name: &str, value: impl AsRef<str>) -> String {
    format!("--{name}={}", value.as_ref())
}

/// etcd and kube-apiserver on free loopback ports, and an admin client.
struct ApiServer {
    client: Client,
    kubeconfig: PathBuf,
    processes: Vec<Process>,
}

impl ApiServer {
    async fn start(dir: &Path) -> TestResult<Self> {
        let binaries = etcd_lab::upstream::Binaries::locate()?;
        let pki = etcd_lab::pki::Pki::ensure(&dir.join("pki"))?;
        let (client_port, peer_port, api_port) = (free_port(), free_port(), free_port());
        let etcd_url = format!("http://127.0.0.1:{client_port}");
        let peer_url = format!("http://127.0.0.1:{peer_port}");
        let etcd = Process::start(
            "etcd",
            &binaries.etcd(),
            &[
                flag("name", "admission"),
                flag("data-dir", dir.join("etcd").to_string_lossy()),
                flag("listen-client-urls", &etcd_url),
                flag("advertise-client-urls", &etcd_url),
                flag("listen-peer-urls", &peer_url),
                flag("initial-advertise-peer-urls", &peer_url),
                flag("initial-cluster", format!("admission={peer_url}")),
            ],
            dir,
        )?;
        let path = |p: PathBuf| p.to_string_lossy().into_owned();
        let apiserver = Process::start(
            "kube-apiserver",
            &binaries.kube("kube-apiserver"),
            &[
                flag("etcd-servers", &etcd_url),
                flag("bind-address", "127.0.0.1"),
                flag("secure-port", api_port.to_string()),
                flag("advertise-address", "127.0.0.1"),
                // Nothing reaches this API server through the `kubernetes`
                // Service: no endpoints for it.
                flag("endpoint-reconciler-type", "none"),
                flag("service-cluster-ip-range", "10.96.0.0/16"),
                flag("authorization-mode", "RBAC"),
                flag("client-ca-file", path(pki.ca().cert)),
                flag("tls-cert-file", path(pki.apiserver().cert)),
                flag("tls-private-key-file", path(pki.apiserver().key)),
                flag(
                    "service-account-issuer",
                    "https://kubernetes.default.svc.cluster.local",
                ),
                flag("service-account-key-file", path(pki.service_account_pub())),
                flag(
                    "service-account-signing-key-file",
                    path(pki.service_account_key()),
                ),
                flag("profiling", "false"),
            ],
            dir,
        )?;
        let kubeconfig = dir.join("kubeconfig");
        etcd_lab::kubeconfig::write(
            &kubeconfig,
            &format!("https://127.0.0.1:{api_port}"),
            &pki.ca().cert,
            "admin",
            &pki.client("admin"),
        )?;
        let processes = vec![etcd, apiserver];
        let client = etcd_lab::client::admin_client(&kubeconfig).await?;
        let started = Instant::now();
        loop {
            match etcd_lab::client::get_text(&client, "/readyz").await {
                Ok(_) => break,
                Err(why) if started.elapsed() > Duration::from_secs(90) => {
                    let logs: Vec<String> = processes.iter().map(Process::tail).collect();
                    return Err(
                        format!("kube-apiserver not ready: {why}\n{}", logs.join("\n")).into(),
                    );
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(250)).await,
            }
        }
        eprintln!("kube-apiserver ready in {:?}", started.elapsed());
        Ok(Self {
            client,
            kubeconfig,
            processes,
        })
    }

    fn logs(&self) -> String {
        self.processes
            .iter()
            .map(Process::tail)
            .collect::<Vec<_>>()
            .join("\n")
    }
}

/// Installs `deploy/crds/*.yaml` and waits until each is Established. A
/// CRD the API server refuses (a rule that does not compile, or whose
/// estimated cost is too high) fails here.
async fn install_crds(client: &Client) -> TestResult {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/crds");
    let mut names = Vec::new();
    for file in ["etcdclusters", "etcdbackups", "etcdbackupschedules"] {
        let path = dir.join(format!("{file}.yaml"));
        let crd: CustomResourceDefinition =
            serde_saphyr::from_str(&std::fs::read_to_string(&path)?)?;
        crds.create(&PostParams::default(), &crd)
            .await
            .map_err(|e| format!("the API server refused {}: {e}", path.display()))?;
        names.push(format!("{file}.durable-etcd.io"));
    }
    let started = Instant::now();
    for name in names {
        loop {
            let crd = crds.get(&name).await?;
            let established = crd
                .status
                .and_then(|s| s.conditions)
                .unwrap_or_default()
                .iter()
                .any(|c| c.type_ == "Established" && c.status == "True");
            if established {
                break;
            }
            if started.elapsed() > Duration::from_secs(30) {
                return Err(format!("CRD {name} not Established").into());
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    Ok(())
}

/// The kinds under test, as dynamic objects: a spec is sent as written,
/// including values the Rust types could not hold.
#[derive(Clone, Copy, Debug)]
enum Kind {
    Cluster,
    Backup,
    Schedule,
}

impl Kind {
    fn resource(self) -> ApiResource {
        match self {
            Kind::Cluster => ApiResource::erase::<EtcdCluster>(&()),
            Kind::Backup => ApiResource::erase::<EtcdBackup>(&()),
            Kind::Schedule => ApiResource::erase::<EtcdBackupSchedule>(&()),
        }
    }

    fn api(self, client: &Client) -> Api<DynamicObject> {
        Api::namespaced_with(client.clone(), NAMESPACE, &self.resource())
    }

    fn object(self, name: &str, spec: Value) -> DynamicObject {
        DynamicObject::new(name, &self.resource())
            .within(NAMESPACE)
            .data(json!({ "spec": spec }))
    }
}

fn dry_run() -> PostParams {
    PostParams {
        dry_run: true,
        ..PostParams::default()
    }
}

/// The message of a refusal (422 Invalid), or why it was not one.
fn refusal(result: Result<DynamicObject, kube::Error>) -> Result<String, String> {
    match result {
        Err(kube::Error::Api(status)) if status.code == 422 => Ok(status.message),
        Err(other) => Err(format!("failed otherwise: {other}")),
        Ok(_) => Err("ACCEPTED".to_string()),
    }
}

/// One invalid spec and a fragment of the message that must refuse it.
struct Invalid {
    kind: Kind,
    name: String,
    spec: Value,
    message: &'static str,
}

fn invalid(kind: Kind, spec: Value, message: &'static str) -> Invalid {
    let name = match kind {
        Kind::Cluster => "main",
        Kind::Backup => "main-backup",
        Kind::Schedule => "main-schedule",
    };
    Invalid {
        kind,
        name: name.to_string(),
        spec,
        message,
    }
}

fn named(name: &str, spec: Value, message: &'static str) -> Invalid {
    Invalid {
        kind: Kind::Cluster,
        name: name.to_string(),
        spec,
        message,
    }
}

/// A valid S3 destination (as the end-to-end backup test writes it).
fn s3() -> Value {
    json!({ "s3": {
        "bucket": "etcd-backups",
        "prefix": "etcd",
        "endpoint": "http://10.244.0.1:9000",
        "forcePathStyle": true,
        "credentialsSecret": "s3-credentials",
    } })
}

fn backup(destination: Value) -> Value {
    json!({ "clusterName": "main", "destination": destination })
}

fn schedule(fields: Value) -> Value {
    let mut spec = json!({ "clusterName": "main", "schedule": "0 * * * *", "destination": s3() });
    merge(&mut spec, fields);
    spec
}

fn cluster(fields: Value) -> Value {
    let mut spec = json!({
        "replicas": 3,
        "storage": { "storageClassName": "lab-network", "size": "1Gi" },
    });
    merge(&mut spec, fields);
    spec
}

/// A TLS cluster with client certificates of these names.
fn clients(names: &[&str]) -> Value {
    let certificates: Vec<Value> = names.iter().map(|name| json!({ "name": name })).collect();
    cluster(json!({ "tls": { "builtIn": {}, "clientCertificates": certificates } }))
}

fn from_backup(source: Value) -> Value {
    let mut fields = json!({ "destination": s3() });
    merge(&mut fields, source);
    cluster(json!({ "bootstrap": { "fromBackup": fields } }))
}

/// JSON merge: objects merge key by key, anything else replaces.
fn merge(into: &mut Value, from: Value) {
    match (into, from) {
        (Value::Object(into), Value::Object(from)) => {
            for (key, value) in from {
                merge(into.entry(key).or_insert(Value::Null), value);
            }
        }
        (into, from) => *into = from,
    }
}

/// The catalogue: every spec here was accepted before admission checked it.
fn catalogue() -> Vec<Invalid> {
    use Kind::*;
    let resources = |r: Value| cluster(json!({ "pod": { "resources": r } }));
    let pod = |p: Value| cluster(json!({ "pod": p }));
    let etcd = |e: Value| cluster(json!({ "etcd": e }));
    let size = |s: Value| cluster(json!({ "storage": { "size": s } }));
    let long = format!("a{}", "b".repeat(56));
    let network_policy = |n: Value| cluster(json!({ "networkPolicy": n }));
    let cert_manager = json!({ "issuerRef": { "name": "etcd-ca", "kind": "ClusterIssuer" } });
    vec![
        // EtcdCluster: one issuer.
        invalid(
            Cluster,
            cluster(json!({ "tls": {
                "certManager": cert_manager,
                "builtIn": { "caRotation": "Manual" },
            } })),
            "tls.certManager and tls.builtIn are two issuers: set one",
        ),
        invalid(
            Cluster,
            cluster(json!({ "tls": { "certManager": cert_manager, "disabled": true } })),
            "tls.certManager issues TLS certificates: it cannot go with tls.disabled",
        ),
        // EtcdCluster: an application's certificate never takes a common
        // name of the cluster's own (`<cluster>-peer` would join the peer
        // port), the operator's or etcd's superuser.
        invalid(
            Cluster,
            clients(&["app", "main-peer"]),
            "the names <cluster>-server, <cluster>-peer, <cluster>-client, etcd-operator and root are reserved",
        ),
        invalid(
            Cluster,
            clients(&["main-server"]),
            "the names <cluster>-server, <cluster>-peer, <cluster>-client, etcd-operator and root are reserved",
        ),
        invalid(
            Cluster,
            clients(&["main-client"]),
            "the names <cluster>-server, <cluster>-peer, <cluster>-client, etcd-operator and root are reserved",
        ),
        invalid(
            Cluster,
            clients(&["etcd-operator"]),
            "the names <cluster>-server, <cluster>-peer, <cluster>-client, etcd-operator and root are reserved",
        ),
        invalid(
            Cluster,
            clients(&["root"]),
            "the names <cluster>-server, <cluster>-peer, <cluster>-client, etcd-operator and root are reserved",
        ),
        // EtcdCluster: the NetworkPolicy's peers.
        invalid(
            Cluster,
            network_policy(json!({ "clientsFrom": [{}] })),
            "each entry of networkPolicy.clientsFrom needs podSelector, namespaceSelector or ipBlock",
        ),
        invalid(
            Cluster,
            network_policy(json!({ "metricsFrom": [
                { "ipBlock": { "cidr": "10.0.0.0/8" }, "podSelector": {} }
            ] })),
            "an entry of networkPolicy.metricsFrom with ipBlock cannot also have podSelector or namespaceSelector",
        ),
        // EtcdCluster: storage.
        invalid(
            Cluster,
            size(json!("-1Gi")),
            "storage.size must be a positive quantity such as 10Gi",
        ),
        invalid(
            Cluster,
            size(json!("lots")),
            "storage.size must be a positive quantity",
        ),
        invalid(
            Cluster,
            size(json!("0")),
            "storage.size must be a positive quantity",
        ),
        invalid(
            Cluster,
            size(json!(0)),
            "storage.size must be a positive quantity",
        ),
        invalid(
            Cluster,
            size(json!("1GB")),
            "storage.size must be a positive quantity",
        ),
        invalid(
            Cluster,
            cluster(json!({ "storage": { "storageClassName": "Fast_SSD" } })),
            "storage.storageClassName must be the name of a StorageClass",
        ),
        // EtcdCluster: the name and what is derived from it.
        named(
            &long,
            cluster(json!({})),
            "metadata.name must be at most 56 characters",
        ),
        named(
            "my.cluster",
            cluster(json!({})),
            "metadata.name must start with a lower-case letter",
        ),
        named(
            "1st",
            cluster(json!({})),
            "metadata.name must start with a lower-case letter",
        ),
        // EtcdCluster: counts and versions.
        invalid(
            Cluster,
            cluster(json!({ "replicas": 0 })),
            "should be greater than or equal to 1",
        ),
        invalid(
            Cluster,
            cluster(json!({ "replicas": 10 })),
            "should be less than or equal to 9",
        ),
        invalid(
            Cluster,
            cluster(json!({ "replicas": -3 })),
            "should be greater than or equal to 1",
        ),
        invalid(
            Cluster,
            cluster(json!({ "version": "3.5.21" })),
            "version must be an etcd 3.6 or 3.7 release",
        ),
        invalid(
            Cluster,
            cluster(json!({ "version": "latest" })),
            "version must be an etcd 3.6 or 3.7 release",
        ),
        invalid(
            Cluster,
            cluster(json!({ "image": "mirror.example/etcd 3.6.16" })),
            "image must not contain white space",
        ),
        invalid(
            Cluster,
            cluster(json!({ "image": "" })),
            "spec.image in body should be at least 1 chars long",
        ),
        // EtcdCluster: durations.
        invalid(
            Cluster,
            cluster(json!({ "memberFailureTimeout": "lots" })),
            "memberFailureTimeout must be a non-negative Go duration such as 5m",
        ),
        invalid(
            Cluster,
            cluster(json!({ "memberFailureTimeout": "-5m" })),
            "memberFailureTimeout must be a non-negative Go duration",
        ),
        invalid(
            Cluster,
            cluster(json!({ "memberFailureTimeout": "5 minutes" })),
            "memberFailureTimeout must be a non-negative Go duration",
        ),
        // EtcdCluster: pod resources, labels, scheduling.
        invalid(
            Cluster,
            resources(json!({ "requests": { "cpu": "lots" } })),
            "pod.resources requests and limits must be non-negative quantities",
        ),
        invalid(
            Cluster,
            resources(json!({ "limits": { "memory": "lots" } })),
            "pod.resources requests and limits must be non-negative quantities",
        ),
        invalid(
            Cluster,
            resources(json!({ "requests": { "cpu": "-1" } })),
            "pod.resources requests and limits must be non-negative quantities",
        ),
        invalid(
            Cluster,
            resources(json!({ "requests": { "memory": "2Gi" }, "limits": { "memory": "1Gi" } })),
            "a request may not be greater than the limit of the same resource",
        ),
        invalid(
            Cluster,
            pod(json!({ "labels": { "bad key!": "x" } })),
            "pod.labels: keys must be label keys",
        ),
        invalid(
            Cluster,
            pod(json!({ "labels": { "team": "v".repeat(64) } })),
            "spec.pod.labels.team: Too long: may not be more than 63 bytes",
        ),
        invalid(
            Cluster,
            pod(json!({ "labels": { "team": "-storage" } })),
            "pod.labels: keys must be label keys",
        ),
        invalid(
            Cluster,
            pod(json!({ "nodeSelector": { "zone": "a b" } })),
            "pod.nodeSelector: keys must be label keys",
        ),
        invalid(
            Cluster,
            pod(json!({ "annotations": { "-bad": "x" } })),
            "pod.annotations: keys must be",
        ),
        invalid(
            Cluster,
            pod(json!({ "priorityClassName": "High Priority" })),
            "pod.priorityClassName must be the name of a PriorityClass",
        ),
        invalid(
            Cluster,
            pod(json!({ "tolerations": [{ "key": "k", "operator": "Sometimes" }] })),
            "pod.tolerations: operator must be Exists or Equal",
        ),
        invalid(
            Cluster,
            pod(
                json!({ "tolerations": [{ "key": "k", "operator": "Exists", "effect": "NoSchedule", "tolerationSeconds": 30 }] }),
            ),
            "tolerationSeconds needs effect NoExecute",
        ),
        invalid(
            Cluster,
            pod(
                json!({ "topologySpreadConstraints": [{ "maxSkew": 0, "topologyKey": "topology.kubernetes.io/zone", "whenUnsatisfiable": "DoNotSchedule" }] }),
            ),
            "pod.topologySpreadConstraints: maxSkew must be at least 1",
        ),
        // EtcdCluster: etcd tuning.
        invalid(
            Cluster,
            etcd(json!({ "quotaBackendBytes": 100 })),
            "etcd.quotaBackendBytes must be 0 (derived from storage.size) or between 16 MiB (16777216) and 8 GiB (8589934592)",
        ),
        invalid(
            Cluster,
            etcd(json!({ "quotaBackendBytes": 17179869184_i64 })),
            "etcd.quotaBackendBytes must be 0 (derived from storage.size) or between 16 MiB",
        ),
        // 2 GiB on a 1Gi volume: no room for a defragmentation's copy.
        invalid(
            Cluster,
            etcd(json!({ "quotaBackendBytes": 2147483648_i64 })),
            "etcd.quotaBackendBytes does not fit storage.size",
        ),
        invalid(
            Cluster,
            cluster(json!({ "maintenance": { "defrag": { "schedule": "every night" } } })),
            "maintenance.defrag.schedule must be a cron expression",
        ),
        invalid(
            Cluster,
            cluster(json!({ "maintenance": { "defrag": { "minReclaimable": "0" } } })),
            "maintenance.defrag.minReclaimable must be a positive quantity",
        ),
        invalid(
            Cluster,
            cluster(json!({ "maintenance": { "defrag": { "fragmentedPercent": 101 } } })),
            "spec.maintenance.defrag.fragmentedPercent",
        ),
        invalid(
            Cluster,
            etcd(json!({ "autoCompactionRetention": "1 hour" })),
            "etcd.autoCompactionRetention must be a number",
        ),
        invalid(
            Cluster,
            etcd(json!({ "autoCompactionMode": "revision", "autoCompactionRetention": "1h" })),
            "in revision mode etcd.autoCompactionRetention is a number of revisions",
        ),
        invalid(
            Cluster,
            etcd(json!({ "electionTimeoutMs": 200 })),
            "etcd.electionTimeoutMs must be at least 5 times etcd.heartbeatIntervalMs",
        ),
        invalid(
            Cluster,
            etcd(json!({ "snapshotCount": 0 })),
            "should be greater than or equal to 1",
        ),
        // EtcdCluster: recovery and bootstrap.
        invalid(
            Cluster,
            cluster(json!({ "recovery": { "source": "Backup" } })),
            "recovery.source Backup needs recovery.backup",
        ),
        invalid(
            Cluster,
            cluster(json!({ "recovery": { "approvedIncarnation": "" } })),
            "should be at least 1 chars long",
        ),
        invalid(
            Cluster,
            cluster(
                json!({ "recovery": { "approvedIncarnation": "main-abc", "approvedSurvivor": "main-2" } }),
            ),
            "recovery.approvedSurvivor and recovery.approvedRevision go together",
        ),
        invalid(
            Cluster,
            cluster(
                json!({ "recovery": { "approvedSurvivor": "main-2", "approvedRevision": 42 } }),
            ),
            "recovery.approvedSurvivor needs recovery.approvedIncarnation",
        ),
        invalid(
            Cluster,
            cluster(
                json!({ "recovery": { "approvedLoss": "main-0,main-1@2026-12-06T04:00:00Z" } }),
            ),
            "recovery.approvedLoss needs recovery.approvedIncarnation",
        ),
        invalid(
            Cluster,
            from_backup(json!({ "clusterName": "Source.Cluster" })),
            "fromBackup.clusterName must start with a lower-case letter",
        ),
        invalid(
            Cluster,
            from_backup(json!({ "namespace": "Prod" })),
            "the namespace of a backup source must be a namespace name",
        ),
        invalid(
            Cluster,
            from_backup(json!({ "backupName": "latest" })),
            "backupName must name a full backup as full-<time>-r<revision>",
        ),
        invalid(
            Cluster,
            from_backup(json!({ "revision": 0 })),
            "should be greater than or equal to 1",
        ),
        invalid(
            Cluster,
            from_backup(json!({ "destination": { "local": { "path": "/backups" } } })),
            "destination needs exactly one of persistentVolumeClaim, s3, gcs, azure, local",
        ),
        invalid(
            Cluster,
            cluster(
                json!({ "bootstrap": { "fromBackup": { "destination": { "s3": { "bucket": "etcd-backups", "endpoint": "minio:9000" } } } } }),
            ),
            "s3.endpoint must be an http:// or https:// URL",
        ),
        // EtcdBackup.
        invalid(
            Backup,
            json!({ "clusterName": "a.b", "destination": s3() }),
            "clusterName must start with a lower-case letter",
        ),
        invalid(
            Backup,
            json!({ "clusterName": "c".repeat(57), "destination": s3() }),
            "clusterName must be at most 56 characters",
        ),
        invalid(
            Backup,
            backup(json!({})),
            "destination needs exactly one of persistentVolumeClaim, s3, gcs, azure, local",
        ),
        invalid(
            Backup,
            backup(json!({ "s3": null })),
            "destination needs exactly one of persistentVolumeClaim, s3, gcs, azure, local",
        ),
        invalid(
            Backup,
            backup(json!({ "persistentVolumeClaim": { "claimName": "Backups" } })),
            "persistentVolumeClaim.claimName must be an object name",
        ),
        invalid(
            Backup,
            backup(
                json!({ "persistentVolumeClaim": { "claimName": "backups", "path": "etcd/../other" } }),
            ),
            "persistentVolumeClaim.path must not hold '.' or '..' segments",
        ),
        invalid(
            Backup,
            backup(
                json!({ "persistentVolumeClaim": { "claimName": "backups" }, "s3": { "bucket": "etcd-backups" } }),
            ),
            "destination needs exactly one of persistentVolumeClaim, s3, gcs, azure, local",
        ),
        invalid(
            Backup,
            backup(json!({ "local": { "path": "backups" } })),
            "local.path must be an absolute path",
        ),
        invalid(
            Backup,
            backup(json!({ "local": { "path": "/backups/../etc" } })),
            "local.path must be an absolute path (starting with /) without '..' segments",
        ),
        invalid(
            Backup,
            backup(json!({ "s3": { "bucket": "my/bucket" } })),
            "s3.bucket must be a bucket name",
        ),
        invalid(
            Backup,
            backup(json!({ "s3": { "bucket": "ab" } })),
            "should be at least 3 chars long",
        ),
        invalid(
            Backup,
            backup(json!({ "s3": { "bucket": "b-1", "endpoint": "ftp://10.0.0.1" } })),
            "s3.endpoint must be an http:// or https:// URL",
        ),
        // The operator's own credentials never go to an endpoint a spec names.
        invalid(
            Backup,
            backup(json!({ "s3": { "bucket": "b-1", "endpoint": "https://attacker.example" } })),
            "s3.endpoint needs s3.credentialsSecret",
        ),
        invalid(
            Backup,
            backup(json!({ "gcs": { "bucket": "b-1", "endpoint": "https://attacker.example" } })),
            "gcs.endpoint needs gcs.credentialsSecret",
        ),
        invalid(
            Backup,
            backup(
                json!({ "azure": { "account": "acct1", "container": "etcd", "endpoint": "https://attacker.example" } }),
            ),
            "azure.endpoint needs azure.credentialsSecret",
        ),
        invalid(
            Backup,
            backup(json!({ "s3": { "bucket": "b-1", "prefix": "a/../b" } })),
            "s3.prefix must not hold '.' or '..' segments",
        ),
        invalid(
            Backup,
            backup(json!({ "s3": { "bucket": "b-1", "region": "US East" } })),
            "s3.region must be a region name",
        ),
        invalid(
            Backup,
            backup(json!({ "s3": { "bucket": "b-1", "credentialsSecret": "S3 Creds" } })),
            "s3.credentialsSecret must be an object name",
        ),
        invalid(
            Backup,
            backup(json!({ "gcs": { "bucket": "My_Bucket" } })),
            "gcs.bucket must be a bucket name",
        ),
        invalid(
            Backup,
            backup(json!({ "gcs": { "bucket": "b-1", "endpoint": "https://h/?sig=x" } })),
            "gcs.endpoint must be an http:// or https:// URL with a host and no query",
        ),
        invalid(
            Backup,
            backup(json!({ "azure": { "account": "Dev-Store", "container": "etcd" } })),
            "azure.account must be a storage account name",
        ),
        invalid(
            Backup,
            backup(json!({ "azure": { "account": "devstoreaccount1", "container": "a--b" } })),
            "azure.container must be a container name",
        ),
        invalid(
            Backup,
            backup(
                json!({ "azure": { "account": "devstoreaccount1", "container": "etcd", "endpoint": "blob.example.com" } }),
            ),
            "azure.endpoint must be an http:// or https:// URL",
        ),
        invalid(
            Backup,
            backup(
                json!({ "local": { "path": "/b" }, "encryption": { "secretName": "Backup Key" } }),
            ),
            "encryption.secretName must be an object name",
        ),
        invalid(
            Backup,
            backup(
                json!({ "local": { "path": "/b" }, "encryption": { "secretName": "k", "key": "a/b" } }),
            ),
            "encryption.key must be a key of the Secret's data",
        ),
        // EtcdBackupSchedule.
        invalid(
            Schedule,
            schedule(json!({ "schedule": "not a cron" })),
            "schedule must be a cron expression of five fields",
        ),
        invalid(
            Schedule,
            schedule(json!({ "schedule": "* * * * * *" })),
            "schedule must be a cron expression of five fields",
        ),
        invalid(
            Schedule,
            schedule(json!({ "schedule": "0 0 * * * * 2030" })),
            "schedule must be a cron expression of five fields",
        ),
        invalid(
            Schedule,
            schedule(json!({ "schedule": "@every 1s" })),
            "schedule must be a cron expression of five fields",
        ),
        invalid(
            Schedule,
            schedule(json!({ "schedule": "" })),
            "should be at least 1 chars long",
        ),
        invalid(
            Schedule,
            schedule(json!({ "clusterName": "Main" })),
            "clusterName must start with a lower-case letter",
        ),
        invalid(
            Schedule,
            schedule(json!({ "retention": { "count": 0 } })),
            "should be greater than or equal to 1",
        ),
        invalid(
            Schedule,
            schedule(json!({ "retention": { "count": -1 } })),
            "should be greater than or equal to 1",
        ),
        invalid(
            Schedule,
            schedule(json!({ "retention": { "maxAge": "0s" } })),
            "retention.maxAge must be a positive Go duration such as 168h",
        ),
        invalid(
            Schedule,
            schedule(json!({ "retention": { "maxAge": "-1h" } })),
            "retention.maxAge must be a positive Go duration",
        ),
        invalid(
            Schedule,
            schedule(json!({ "retention": { "maxAge": "a week" } })),
            "retention.maxAge must be a positive Go duration",
        ),
        invalid(
            Schedule,
            schedule(json!({ "incremental": { "interval": "500ms" } })),
            "incremental.interval must be a Go duration of at least 1s",
        ),
        invalid(
            Schedule,
            schedule(json!({ "incremental": { "interval": "lots" } })),
            "incremental.interval must be a Go duration of at least 1s",
        ),
        invalid(
            Schedule,
            schedule(json!({ "incremental": { "maxSegmentBytes": 100 } })),
            "should be greater than or equal to 4096",
        ),
        invalid(
            Schedule,
            schedule(json!({ "incremental": { "maxSegmentBytes": 1099511627776_i64 } })),
            "should be less than or equal to 268435456",
        ),
        invalid(
            Schedule,
            schedule(
                json!({ "destination": { "local": { "path": "/b" }, "s3": { "bucket": "b-1" } } }),
            ),
            "destination needs exactly one of persistentVolumeClaim, s3, gcs, azure, local",
        ),
    ]
}

/// Valid edge specs: each accepted, and what the API server stores.
fn accepted() -> Vec<(Kind, String, Value)> {
    use Kind::*;
    let tolerations = json!([
        { "key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 30 },
        { "key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 30 },
        { "key": "dedicated", "operator": "Equal", "value": "etcd", "effect": "NoSchedule" },
        { "operator": "Exists" },
    ]);
    vec![
        (Cluster, format!("a{}", "9".repeat(55)), json!({})),
        (
            Cluster,
            "secure".into(),
            cluster(json!({ "tls": { "builtIn": {} } })),
        ),
        // Another cluster's reserved names, and names that only look like
        // this one's, are an application's to take.
        (
            Cluster,
            "apps".into(),
            clients(&["app", "main-peer", "apps-peers", "peer", "apps", "operator"]),
        ),
        (
            Cluster,
            "issued".into(),
            cluster(json!({ "tls": { "certManager": { "issuerRef": { "name": "etcd-ca" } } } })),
        ),
        (
            Cluster,
            "isolated".into(),
            cluster(json!({ "networkPolicy": {
                "clientsFrom": [
                    { "namespaceSelector": { "matchLabels": { "team": "db" } },
                      "podSelector": { "matchExpressions": [{ "key": "app", "operator": "In", "values": ["api"] }] } },
                    { "ipBlock": { "cidr": "10.244.250.0/24", "except": ["10.244.250.128/25"] } }
                ],
                "metricsFrom": []
            } })),
        ),
        (
            Backup,
            "to-a-claim".into(),
            backup(
                json!({ "persistentVolumeClaim": { "claimName": "etcd-backups.team", "path": "etcd/prod" } }),
            ),
        ),
        (
            Cluster,
            "main".into(),
            cluster(json!({ "pod": { "tolerations": tolerations } })),
        ),
        (
            Cluster,
            "tuned".into(),
            cluster(json!({
                "version": "3.7.3",
                "memberFailureTimeout": "0",
                "storage": { "storageClassName": "", "size": 1073741824 },
                "etcd": { "quotaBackendBytes": 16777216, "autoCompactionMode": "revision", "autoCompactionRetention": "1000" },
                "maintenance": { "defrag": { "schedule": "@daily", "fragmentedPercent": 0 } },
                "pod": {
                    "resources": { "requests": { "cpu": "100m", "memory": "256Mi" }, "limits": { "cpu": 2, "memory": "256Mi" } },
                    "labels": { "team": "storage", "example.com/tier": "" },
                    "annotations": { "example.com/owner": "anything at all, spaces included" },
                    "nodeSelector": { "topology.kubernetes.io/zone": "zone-a" },
                    "priorityClassName": "system-cluster-critical",
                    "topologySpreadConstraints": [{ "maxSkew": 1, "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "ScheduleAnyway" }],
                },
            })),
        ),
        (
            Cluster,
            "largest".into(),
            cluster(json!({
                "memberFailureTimeout": "1h30m",
                "storage": { "storageClassName": "lab-network", "size": "17Gi" },
                "etcd": { "quotaBackendBytes": 8589934592_i64, "autoCompactionRetention": "1.5h" },
                "maintenance": { "defrag": { "schedule": "0 3 * * *", "fragmentedPercent": 30, "minReclaimable": "1Gi" } },
                "recovery": { "policy": "NewestSurvivor", "source": "Backup", "backup": { "destination": s3(), "clusterName": "source", "namespace": "prod", "backupName": "full-20260301T120000.000Z-r4213", "revision": 4300 } },
            })),
        ),
        (
            Cluster,
            "approved".into(),
            cluster(json!({
                "recovery": { "approvedIncarnation": "main-abc", "approvedSurvivor": "main-2", "approvedRevision": 4300 },
            })),
        ),
        (
            Cluster,
            "restored".into(),
            from_backup(json!({ "clusterName": "source" })),
        ),
        (Backup, "to-s3".into(), backup(s3())),
        (
            Backup,
            "to-azurite".into(),
            backup(
                json!({ "azure": { "account": "devstoreaccount1", "container": "etcd-backups", "prefix": "etcd", "endpoint": "http://127.0.0.1:10000/devstoreaccount1", "credentialsSecret": "azurite" } }),
            ),
        ),
        (
            Backup,
            "to-gcs".into(),
            backup(
                json!({ "gcs": { "bucket": "etcd_backups.example.com", "endpoint": "https://storage-myendpoint.p.googleapis.com", "credentialsSecret": "gcs" }, "encryption": { "secretName": "backup-key" } }),
            ),
        ),
        (
            Backup,
            "to-local".into(),
            backup(json!({ "local": { "path": "/var/lib/etcd-backups" } })),
        ),
        (
            Schedule,
            "readme".into(),
            schedule(json!({
                "destination": { "s3": { "bucket": "etcd-backups", "credentialsSecret": "s3-credentials" }, "encryption": { "secretName": "backup-key" } },
                "retention": { "count": 24, "maxAge": "168h" },
                "incremental": { "enabled": true, "interval": "20s" },
            })),
        ),
        (
            Schedule,
            "yearly".into(),
            schedule(
                json!({ "schedule": "0 0 1 1 *", "incremental": { "enabled": true, "interval": "4s" } }),
            ),
        ),
        (
            Schedule,
            "nickname".into(),
            schedule(json!({ "schedule": "@hourly" })),
        ),
        (
            Schedule,
            "names".into(),
            schedule(json!({ "schedule": "*/15 9-17 * JAN-MAR MON-FRI" })),
        ),
    ]
}

/// A create that must pass, then updates that must be refused or accepted.
struct Transition {
    kind: Kind,
    name: &'static str,
    spec: Value,
    change: Value,
    /// `None`: the update is accepted.
    message: Option<&'static str>,
}

fn transitions() -> Vec<Transition> {
    use Kind::*;
    let restored = from_backup(json!({ "clusterName": "source" }));
    let plain = cluster(json!({}));
    let bootstrap_rule = "spec.bootstrap is set at creation only";
    vec![
        // One minor release down: etcd's downgrade, driven by the operator.
        Transition {
            kind: Cluster,
            name: "newer",
            spec: cluster(json!({ "version": "3.7.3" })),
            change: json!({ "version": "3.6.16" }),
            message: None,
        },
        Transition {
            kind: Cluster,
            name: "restored",
            spec: restored.clone(),
            change: json!({ "bootstrap": { "fromBackup": { "clusterName": "other" } } }),
            message: Some(bootstrap_rule),
        },
        // One minor release down: etcd's downgrade, driven by the operator.
        Transition {
            kind: Cluster,
            name: "newer",
            spec: cluster(json!({ "version": "3.7.3" })),
            change: json!({ "version": "3.6.16" }),
            message: None,
        },
        Transition {
            kind: Cluster,
            name: "restored",
            spec: restored.clone(),
            change: json!({ "bootstrap": null }),
            message: Some(bootstrap_rule),
        },
        // One minor release down: etcd's downgrade, driven by the operator.
        Transition {
            kind: Cluster,
            name: "newer",
            spec: cluster(json!({ "version": "3.7.3" })),
            change: json!({ "version": "3.6.16" }),
            message: None,
        },
        Transition {
            kind: Cluster,
            name: "restored",
            spec: restored.clone(),
            change: json!({ "bootstrap": { "fromBackup": null } }),
            message: Some(bootstrap_rule),
        },
        Transition {
            kind: Cluster,
            name: "plain",
            spec: plain.clone(),
            change: json!({ "bootstrap": { "fromBackup": { "destination": s3() } } }),
            message: Some(bootstrap_rule),
        },
        // TLS may be turned on later (a rolling change), never off.
        Transition {
            kind: Cluster,
            name: "plaintext",
            spec: cluster(json!({ "tls": { "disabled": true } })),
            change: json!({ "tls": { "disabled": false, "builtIn": {} } }),
            message: None,
        },
        Transition {
            kind: Cluster,
            name: "secure",
            spec: cluster(json!({ "tls": { "builtIn": {} } })),
            change: json!({ "tls": { "disabled": true } }),
            message: Some("turning TLS off is not supported"),
        },
        Transition {
            kind: Cluster,
            name: "plain",
            spec: plain.clone(),
            change: json!({ "tls": { "disabled": true } }),
            message: Some("spec.tls.disabled can only be set when the cluster is created"),
        },
        Transition {
            kind: Cluster,
            name: "secure",
            spec: cluster(json!({ "tls": { "builtIn": {} } })),
            change: json!({ "tls": null }),
            message: None,
        },
        // The issuer is chosen at creation.
        Transition {
            kind: Cluster,
            name: "issued",
            spec: cluster(
                json!({ "tls": { "certManager": { "issuerRef": { "name": "etcd-ca" } } } }),
            ),
            change: json!({ "tls": { "certManager": { "issuerRef": { "name": "another-ca" } } } }),
            message: Some(
                "spec.tls.certManager is set when the cluster is created and does not change",
            ),
        },
        Transition {
            kind: Cluster,
            name: "secure",
            spec: cluster(json!({ "tls": { "builtIn": {} } })),
            change: json!({ "tls": { "builtIn": null, "certManager": { "issuerRef": { "name": "etcd-ca" } } } }),
            message: Some(
                "spec.tls.certManager is set when the cluster is created and does not change",
            ),
        },
        Transition {
            kind: Cluster,
            name: "issued",
            spec: cluster(
                json!({ "tls": { "certManager": { "issuerRef": { "name": "etcd-ca" } } } }),
            ),
            change: json!({ "tls": { "clientCertificates": [{ "name": "app" }] } }),
            message: None,
        },
        // A reserved name added to a running cluster is refused as at
        // creation; another name is accepted.
        Transition {
            kind: Cluster,
            name: "clients",
            spec: clients(&["app"]),
            change: json!({ "tls": { "clientCertificates": [{ "name": "app" }, { "name": "clients-peer" }] } }),
            message: Some("<cluster>-peer, <cluster>-client, etcd-operator and root are reserved"),
        },
        Transition {
            kind: Cluster,
            name: "clients",
            spec: clients(&["app"]),
            change: json!({ "tls": { "clientCertificates": [{ "name": "app" }, { "name": "reports" }] } }),
            message: None,
        },
        // A smaller size is accepted (volumes never shrink: it goes back
        // to what the volumes have after a class refused to grow them).
        Transition {
            kind: Cluster,
            name: "plain",
            spec: plain.clone(),
            change: json!({ "storage": { "size": "512Mi" } }),
            message: None,
        },
        Transition {
            kind: Cluster,
            name: "plain",
            spec: plain.clone(),
            change: json!({ "storage": { "storageClassName": "lab-local" } }),
            message: Some("storage.storageClassName is immutable"),
        },
        Transition {
            kind: Backup,
            name: "once",
            spec: backup(s3()),
            change: json!({ "clusterName": "other" }),
            message: Some("the spec of an EtcdBackup is immutable"),
        },
        // Accepted changes.
        Transition {
            kind: Cluster,
            name: "plain",
            spec: plain.clone(),
            change: json!({ "storage": { "size": "2Gi" }, "version": "3.7.3", "replicas": 5 }),
            message: None,
        },
        // One minor release down: etcd's downgrade, driven by the operator.
        Transition {
            kind: Cluster,
            name: "newer",
            spec: cluster(json!({ "version": "3.7.3" })),
            change: json!({ "version": "3.6.16" }),
            message: None,
        },
        Transition {
            kind: Cluster,
            name: "restored",
            spec: restored,
            change: json!({ "replicas": 1, "paused": true }),
            message: None,
        },
    ]
}

async fn scenario(client: &Client) -> TestResult<Vec<String>> {
    let mut failures = Vec::new();

    let catalogue = catalogue();
    for case in &catalogue {
        let api = case.kind.api(client);
        let object = case.kind.object(&case.name, case.spec.clone());
        match refusal(api.create(&dry_run(), &object).await) {
            Ok(message) if message.contains(case.message) => {}
            Ok(message) => failures.push(format!(
                "{:?} {} {}: refused with another message: {message}\n  (expected {:?})",
                case.kind, case.name, case.spec, case.message
            )),
            Err(why) => failures.push(format!(
                "{:?} {} {}: {why} (expected refusal {:?})",
                case.kind, case.name, case.spec, case.message
            )),
        }
    }
    eprintln!("{} invalid specs sent", catalogue.len());

    for (kind, name, spec) in accepted() {
        let api = kind.api(client);
        match api
            .create(&dry_run(), &kind.object(&name, spec.clone()))
            .await
        {
            Ok(stored) => {
                if name == "main" || name.starts_with('a') {
                    // Defaults filled in.
                    let size = &stored.data["spec"]["storage"]["size"];
                    if *size != json!("1Gi") {
                        failures.push(format!("{name}: storage.size defaulted to {size}"));
                    }
                }
            }
            Err(error) => failures.push(format!("{kind:?} {name} {spec}: refused: {error}")),
        }
    }

    // `storage.size: null` is dropped and defaulted, as if unset.
    let clusters = Kind::Cluster.api(client);
    let stored = clusters
        .create(
            &dry_run(),
            &Kind::Cluster.object(
                "nulls",
                cluster(json!({ "storage": { "size": null }, "bootstrap": null })),
            ),
        )
        .await;
    match stored {
        Ok(stored)
            if stored.data["spec"]["storage"]["size"] == json!("1Gi")
                && stored.data["spec"].get("bootstrap").is_none() => {}
        other => failures.push(format!("nulls: {other:?}")),
    }

    for t in transitions() {
        let api = t.kind.api(client);
        let created = match api.get_opt(t.name).await? {
            Some(existing) => existing,
            None => api
                .create(
                    &PostParams::default(),
                    &t.kind.object(t.name, t.spec.clone()),
                )
                .await
                .map_err(|e| format!("create {}: {e}", t.name))?,
        };
        let mut changed = created.clone();
        merge(&mut changed.data["spec"], t.change.clone());
        let result = api.replace(t.name, &dry_run(), &changed).await;
        match (t.message, refusal(result)) {
            (Some(expected), Ok(message)) if message.contains(expected) => {}
            (None, Err(why)) if why == "ACCEPTED" => {}
            (expected, outcome) => failures.push(format!(
                "update of {:?} {} with {}: {outcome:?} (expected {:?})",
                t.kind, t.name, t.change, expected
            )),
        }
    }
    Ok(failures)
}

/// The schedule controller reports what admission cannot judge: a field
/// out of range, a schedule that never fires.
async fn controller_reports_invalid_schedules(
    server: &ApiServer,
    dir: &Path,
) -> TestResult<Vec<String>> {
    let schedules = Kind::Schedule.api(&server.client);
    let cases = [
        ("out-of-range", "61 * * * *", "invalid cron schedule"),
        ("never", "0 0 30 2 *", "never fires"),
    ];
    for (name, cron, _) in cases {
        schedules
            .create(
                &PostParams::default(),
                &Kind::Schedule.object(name, schedule(json!({ "schedule": cron }))),
            )
            .await?;
    }
    let operator = Process::start_with_env(
        "etcd-operator",
        Path::new(OPERATOR),
        &[
            "run".to_string(),
            "--leader-election=false".to_string(),
            "--metrics-address=127.0.0.1:0".to_string(),
        ],
        dir,
        &[("KUBECONFIG", server.kubeconfig.as_path())],
    )?;
    let started = Instant::now();
    let mut failures = Vec::new();
    for (name, cron, fragment) in cases {
        loop {
            let status = schedules.get(name).await?.data["status"].clone();
            let condition = status["conditions"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|c| c["type"] == "BackupReady")
                .cloned();
            if let Some(c) = condition {
                let message = c["message"].as_str().unwrap_or_default();
                if c["status"] != "False"
                    || c["reason"] != "InvalidSchedule"
                    || !message.contains(fragment)
                {
                    failures.push(format!("schedule {cron:?}: condition {c}"));
                }
                if !status["lastError"]
                    .as_str()
                    .unwrap_or_default()
                    .contains(fragment)
                {
                    failures.push(format!(
                        "schedule {cron:?}: lastError {}",
                        status["lastError"]
                    ));
                }
                if status.get("nextScheduledTime").is_some() {
                    failures.push(format!(
                        "schedule {cron:?}: nextScheduledTime {}",
                        status["nextScheduledTime"]
                    ));
                }
                eprintln!("schedule {cron:?}: {message}");
                break;
            }
            if started.elapsed() > Duration::from_secs(60) {
                failures.push(format!(
                    "schedule {cron:?}: no BackupReady condition after 60s\n{}",
                    operator.tail()
                ));
                break;
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }
    Ok(failures)
}

#[test]
fn the_api_server_refuses_invalid_specs_with_a_clear_message() {
    let dir = tempfile::Builder::new()
        .prefix("etcd-operator-admission-")
        .tempdir()
        .expect("temporary directory");
    let runtime = tokio::runtime::Runtime::new().expect("tokio runtime");
    let started = Instant::now();
    let outcome: TestResult<(Vec<String>, String)> = runtime.block_on(async {
        let server = ApiServer::start(dir.path()).await?;
        let prepared: TestResult = async {
            install_crds(&server.client).await?;
            let namespaces: Api<Namespace> = Api::all(server.client.clone());
            namespaces
                .create(
                    &PostParams::default(),
                    &serde_json::from_value(json!({ "metadata": { "name": NAMESPACE } }))?,
                )
                .await?;
            Ok(())
        }
        .await;
        if let Err(error) = prepared {
            return Err(format!("{error}\n{}", server.logs()).into());
        }
        let mut failures = scenario(&server.client).await?;
        failures.extend(controller_reports_invalid_schedules(&server, dir.path()).await?);
        Ok((failures, server.logs()))
    });
    let (failures, logs) = outcome.unwrap_or_else(|error| panic!("{error}"));
    eprintln!("admission: {:?}", started.elapsed());
    if !failures.is_empty() {
        // Keep the directory (logs, etcd data) to look at.
        let kept = dir.keep();
        panic!(
            "{} failures:\n{}\n\nlogs in {}\n{logs}",
            failures.len(),
            failures.join("\n"),
            kept.display()
        );
    }
}
