//! Shared by the restore tests: etcd members started with the settings a
//! test needs and killed with SIGKILL, the restore Pod's containers run as
//! the Pod builder wrote them (images mapped to the pinned binaries and to
//! this workspace's operator binary, the Pod's paths to a temporary
//! volume), and the checks that a restored etcd never serves an old
//! revision again.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use etcd_client::{Client, GetOptions, WatchOptions};
use k8s_openapi::api::core::v1::{Container, Pod};
use sha2::{Digest, Sha256};

use crate::backup_support::{READY_TIMEOUT, etcd_bin, eventually, free_port};

/// Where the Pod builder puts things, mapped by [`run_pod`].
const POD_DATA_MOUNT: &str = "/var/lib/etcd";
const POD_TOOLS: &str = "/var/run/etcd-operator";
const POD_ETCD: &str = "/usr/local/bin/etcd";
const POD_ETCDUTL: &str = "/usr/local/bin/etcdutl";
const POD_OPERATOR: &str = "/usr/local/bin/etcd-operator";

/// One etcd process; SIGKILLed when dropped.
pub struct Member {
    pub name: String,
    pub client_url: String,
    pub peer_url: String,
    pub data_dir: PathBuf,
    pub log: PathBuf,
    child: Option<Child>,
}

impl Member {
    /// SIGKILL: no flush, no clean shutdown (a crash).
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    pub async fn client(&self) -> Client {
        Client::connect([self.client_url.as_str()], None)
            .await
            .expect("etcd client")
    }
}

impl Drop for Member {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Starts a new cluster of `size` members under `root` with `extra`
/// flags, and waits until every member answers a linearizable read.
pub async fn start_cluster(root: &Path, size: usize, extra: &[&str]) -> Vec<Member> {
    let names: Vec<String> = (0..size).map(|i| format!("m{i}")).collect();
    let peers: Vec<String> = (0..size)
        .map(|_| format!("http://127.0.0.1:{}", free_port()))
        .collect();
    let initial = names
        .iter()
        .zip(&peers)
        .map(|(n, p)| format!("{n}={p}"))
        .collect::<Vec<_>>()
        .join(",");
    let members: Vec<Member> = names
        .iter()
        .zip(&peers)
        .map(|(name, peer)| {
            let data_dir = root.join(name);
            let mut args = vec![
                format!("--initial-cluster={initial}"),
                "--initial-cluster-state=new".to_string(),
                "--initial-cluster-token=restore-test".to_string(),
            ];
            args.extend(extra.iter().map(|s| s.to_string()));
            spawn(root, name, peer, &data_dir, &args)
        })
        .collect();
    for member in &members {
        wait_serving(member).await;
    }
    members
}

/// Starts one member on a data dir that already holds its membership
/// (a restored one); `name` is the member's name in it.
pub async fn start_on(root: &Path, name: &str, data_dir: &Path) -> Member {
    let peer = format!("http://127.0.0.1:{}", free_port());
    let member = spawn(
        root,
        name,
        &peer,
        data_dir,
        &[format!("--initial-cluster={name}={peer}")],
    );
    wait_serving(&member).await;
    member
}

fn spawn(root: &Path, name: &str, peer_url: &str, data_dir: &Path, args: &[String]) -> Member {
    let client_url = format!("http://127.0.0.1:{}", free_port());
    let log = root.join(format!("{name}-{}.log", free_port()));
    let child = Command::new(etcd_bin("etcd"))
        .arg(format!("--name={name}"))
        .arg(format!("--data-dir={}", data_dir.display()))
        .arg(format!("--listen-client-urls={client_url}"))
        .arg(format!("--advertise-client-urls={client_url}"))
        .arg(format!("--listen-peer-urls={peer_url}"))
        .arg(format!("--initial-advertise-peer-urls={peer_url}"))
        .arg("--log-level=warn")
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(File::create(&log).expect("log file"))
        .spawn()
        .expect("start etcd");
    Member {
        name: name.to_string(),
        client_url,
        peer_url: peer_url.to_string(),
        data_dir: data_dir.to_path_buf(),
        log,
        child: Some(child),
    }
}

async fn wait_serving(member: &Member) {
    let endpoint = member.client_url.clone();
    eventually("etcd serves", READY_TIMEOUT, || {
        let endpoint = endpoint.clone();
        async move {
            let mut client = Client::connect([endpoint], None).await?;
            client.get("health", None).await?;
            Ok::<_, etcd_client::Error>(())
        }
    })
    .await
    .unwrap_or_else(|e| {
        panic!(
            "{e}\n{}",
            std::fs::read_to_string(&member.log).unwrap_or_default()
        )
    });
}

/// Writes `key-<i>` = `value-<i>` for `range`; returns the revision of
/// each write.
pub async fn write(client: &mut Client, range: std::ops::Range<usize>) -> Vec<i64> {
    let mut revisions = Vec::new();
    for i in range {
        let response = client.put(key(i), value(i), None).await.expect("put");
        revisions.push(response.header().expect("header").revision());
    }
    revisions
}

pub fn key(i: usize) -> String {
    format!("key-{i:05}")
}

pub fn value(i: usize) -> String {
    format!("value-{i}")
}

/// Copies a directory tree.
pub fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("create");
    for entry in std::fs::read_dir(from).expect("read dir") {
        let entry = entry.expect("entry");
        let target = to.join(entry.file_name());
        if entry.file_type().expect("type").is_dir() {
            copy_tree(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).expect("copy");
        }
    }
}

/// The SHA-256 of every file under `dir`, by relative path.
pub fn tree_digest(dir: &Path) -> BTreeMap<PathBuf, String> {
    fn walk(base: &Path, dir: &Path, out: &mut BTreeMap<PathBuf, String>) {
        for entry in std::fs::read_dir(dir).expect("read dir") {
            let path = entry.expect("entry").path();
            if path.is_dir() {
                walk(base, &path, out);
            } else {
                let digest = Sha256::digest(std::fs::read(&path).expect("read"));
                let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
                out.insert(path.strip_prefix(base).expect("under").to_path_buf(), hex);
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(dir, dir, &mut out);
    out
}

/// The revision a db file or snapshot holds, read by `etcdutl snapshot
/// status` on a copy (the member's own file stays as it was).
pub fn db_revision(db: &Path, scratch: &Path) -> i64 {
    let copy = scratch.join("status.db");
    std::fs::copy(db, &copy).expect("copy db");
    let output = Command::new(etcd_bin("etcdutl"))
        .args(["snapshot", "status", "-w", "json"])
        .arg(&copy)
        .output()
        .expect("etcdutl snapshot status");
    assert!(
        output.status.success(),
        "etcdutl snapshot status: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let status: serde_json::Value = serde_json::from_slice(&output.stdout).expect("json");
    status["revision"].as_i64().expect("revision")
}

/// Runs the restore Pod's init containers, then its containers, each as
/// the Pod builder wrote it, on `volume` (the Pod's data mount) with
/// `tools` as its tools volume; panics with the output of a step that
/// fails. Returns the combined output.
pub fn run_pod(pod: &Pod, volume: &Path, tools: &Path) -> String {
    let spec = pod.spec.as_ref().expect("spec");
    let mut log = String::new();
    for container in spec
        .init_containers
        .iter()
        .flatten()
        .chain(spec.containers.iter())
    {
        log.push_str(&run_container(container, volume, tools));
    }
    log
}

fn run_container(container: &Container, volume: &Path, tools: &Path) -> String {
    let command = container.command.as_ref().expect("command");
    let map = |arg: &str| -> String {
        if arg == POD_ETCD || arg == format!("--etcd-binary={POD_ETCD}") {
            return arg.replace(POD_ETCD, &etcd_bin("etcd").display().to_string());
        }
        arg.replace(POD_DATA_MOUNT, &volume.display().to_string())
            .replace(POD_TOOLS, &tools.display().to_string())
    };
    let program = match command[0].as_str() {
        POD_OPERATOR => PathBuf::from(env!("CARGO_BIN_EXE_etcd-operator")),
        POD_ETCDUTL => etcd_bin("etcdutl"),
        other => PathBuf::from(map(other)),
    };
    let args: Vec<String> = command[1..]
        .iter()
        .chain(container.args.iter().flatten())
        .map(|a| map(a))
        .collect();
    let output = Command::new(&program)
        .args(&args)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("{}: {e}", program.display()));
    let text = format!(
        "--- {} ({} {})\n{}{}",
        container.name,
        program.display(),
        args.join(" "),
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        output.status.success(),
        "step {} failed:\n{text}",
        container.name
    );
    text
}

/// A read at `revision` is refused as compacted.
pub async fn assert_compacted_read(client: &mut Client, revision: i64) {
    let error = client
        .get(key(0), Some(GetOptions::new().with_revision(revision)))
        .await
        .err()
        .unwrap_or_else(|| panic!("a read at old revision {revision} was served"));
    assert!(
        error.to_string().contains("compacted"),
        "a read at old revision {revision}: {error}"
    );
}

/// A watch from `revision` is cancelled as compacted (the client relists).
pub async fn assert_compacted_watch(client: &mut Client, revision: i64) {
    let mut stream = client
        .watch(
            "key-",
            Some(
                WatchOptions::new()
                    .with_prefix()
                    .with_start_revision(revision),
            ),
        )
        .await
        .expect("watch");
    let response = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            let response = stream.message().await.expect("watch stream").expect("open");
            if !response.created() || response.canceled() || !response.events().is_empty() {
                return response;
            }
            if response.compact_revision() > 0 {
                return response;
            }
        }
    })
    .await
    .unwrap_or_else(|_| panic!("a watch from old revision {revision}: no answer"));
    assert!(
        response.compact_revision() > 0 && response.events().is_empty(),
        "a watch from old revision {revision} was served: compact revision {}, {} events",
        response.compact_revision(),
        response.events().len()
    );
}

/// Every key of `range` is there with its value.
pub async fn assert_keys(client: &mut Client, range: std::ops::Range<usize>) {
    let response = client
        .get("key-", Some(GetOptions::new().with_prefix()))
        .await
        .expect("get");
    let held: BTreeMap<String, String> = response
        .kvs()
        .iter()
        .map(|kv| {
            (
                String::from_utf8_lossy(kv.key()).into_owned(),
                String::from_utf8_lossy(kv.value()).into_owned(),
            )
        })
        .collect();
    let missing: Vec<String> = range
        .clone()
        .filter(|&i| held.get(&key(i)) != Some(&value(i)))
        .map(key)
        .collect();
    assert!(
        missing.is_empty(),
        "{} of {} keys missing or wrong after the restore, first {:?}",
        missing.len(),
        range.len(),
        missing.first()
    );
}
