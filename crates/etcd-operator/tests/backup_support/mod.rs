//! Shared by the backup integration tests: real etcd processes from the
//! pinned build, the pinned upstream sets of `tools/build-upstream.sh`, the
//! object-store servers ([`server`]) and the checks every object-store
//! destination must pass ([`scenarios`]).
#![allow(dead_code)]

pub mod scenarios;
pub mod server;

use std::fs::File;
use std::future::Future;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use etcd_client::Client;
use sha2::{Digest, Sha256};

/// Generous: the test machine may have two busy cores.
pub const READY_TIMEOUT: Duration = Duration::from_secs(90);

/// `$ETCD_LAB_CACHE/upstream/<set>-<pin hash>/`, the rule of
/// `tools/build-upstream.sh`: the hash of `go.mod` + `go.sum` + the
/// module's own `.go` files (byte order) for a Go module, of
/// `package.json` + `package-lock.json` for an npm set
/// (`tools/azurite/install.sh`).
pub fn upstream_set(set: &str) -> PathBuf {
    let tools = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tools")
        .join(set);
    let files: Vec<String> = if tools.join("go.mod").exists() {
        let mut sources: Vec<String> = std::fs::read_dir(&tools)
            .expect("set directory")
            .map(|entry| {
                entry
                    .expect("entry")
                    .file_name()
                    .to_string_lossy()
                    .into_owned()
            })
            .filter(|name| name.ends_with(".go"))
            .collect();
        sources.sort();
        ["go.mod".to_string(), "go.sum".to_string()]
            .into_iter()
            .chain(sources)
            .collect()
    } else {
        vec!["package.json".to_string(), "package-lock.json".to_string()]
    };
    let mut pins = Vec::new();
    for file in &files {
        pins.extend(
            std::fs::read(tools.join(file)).unwrap_or_else(|e| panic!("{file} of {set}: {e}")),
        );
    }
    let hash = hex(&Sha256::digest(&pins));
    let cache = std::env::var_os("ETCD_LAB_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").expect("HOME")).join(".cache/etcd-lab")
        });
    let dir = cache.join(format!("upstream/{set}-{}", &hash[..12]));
    assert!(
        dir.join(".complete").exists(),
        "{} is missing: run tools/build-upstream.sh",
        dir.display()
    );
    dir
}

/// The pinned etcd 3.6 binaries (`etcd`, `etcdctl`, `etcdutl`).
pub fn etcd_bin(name: &str) -> PathBuf {
    if name == "etcd"
        && let Some(path) = std::env::var_os("ETCD_BIN")
    {
        return PathBuf::from(path);
    }
    upstream_set("etcd-3.6").join(name)
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A loopback port below the kernel's ephemeral range (32768+), so that no
/// outgoing connection of a running etcd can take it between this check and
/// the etcd that binds it; a counter keeps the tests of one run apart, the
/// process id keeps concurrent runs apart.
pub fn free_port() -> u16 {
    use std::sync::atomic::{AtomicU16, Ordering};
    static NEXT: AtomicU16 = AtomicU16::new(0);
    let base = 20_000 + (std::process::id() % 40) as u16 * 300;
    loop {
        let offset = NEXT.fetch_add(1, Ordering::Relaxed) % 300;
        let port = base + offset;
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
}

/// One etcd process on loopback; killed when dropped.
pub struct EtcdProcess {
    pub name: String,
    pub client_url: String,
    pub peer_url: String,
    child: Child,
}

impl Drop for EtcdProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A cluster of real etcd processes in a temporary directory.
pub struct EtcdCluster {
    pub members: Vec<EtcdProcess>,
    pub dir: tempfile::TempDir,
}

impl EtcdCluster {
    /// Starts `size` members as a new cluster and waits until it serves.
    pub async fn start(size: usize) -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
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
        let token = format!("backup-test-{}", std::process::id());
        let members = names
            .iter()
            .zip(&peers)
            .map(|(name, peer)| {
                start_etcd(
                    dir.path(),
                    name,
                    peer,
                    &initial,
                    &token,
                    &dir.path().join(name),
                )
            })
            .collect();
        let cluster = Self { members, dir };
        cluster.wait_serving().await;
        cluster
    }

    /// Starts one member on an existing data dir (e.g. restored by
    /// `etcdutl snapshot restore`).
    pub async fn start_on(data_dir: &Path, name: &str, peer_url: &str) -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let initial = format!("{name}={peer_url}");
        let member = start_etcd(dir.path(), name, peer_url, &initial, "restored", data_dir);
        let cluster = Self {
            members: vec![member],
            dir,
        };
        cluster.wait_serving().await;
        cluster
    }

    pub fn endpoints(&self) -> Vec<String> {
        self.members.iter().map(|m| m.client_url.clone()).collect()
    }

    pub async fn client(&self) -> Client {
        Client::connect(self.endpoints(), None)
            .await
            .expect("etcd client")
    }

    async fn wait_serving(&self) {
        let endpoints = self.endpoints();
        let logs = || {
            self.members
                .iter()
                .map(|m| {
                    let log =
                        std::fs::read_to_string(self.dir.path().join(format!("{}.log", m.name)))
                            .unwrap_or_default();
                    format!("--- {}\n{log}", m.name)
                })
                .collect::<Vec<_>>()
                .join("\n")
        };
        eventually("cluster serves", READY_TIMEOUT, || {
            let endpoints = endpoints.clone();
            async move {
                // Every member must answer a linearizable read.
                for endpoint in endpoints {
                    let mut client = Client::connect([endpoint], None).await?;
                    client.get("health", None).await?;
                }
                Ok::<_, etcd_client::Error>(())
            }
        })
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", logs()));
    }
}

fn start_etcd(
    root: &Path,
    name: &str,
    peer_url: &str,
    initial: &str,
    token: &str,
    data_dir: &Path,
) -> EtcdProcess {
    let client_url = format!("http://127.0.0.1:{}", free_port());
    let log = File::create(root.join(format!("{name}.log"))).expect("log file");
    let child = Command::new(etcd_bin("etcd"))
        .args(["--name", name])
        .arg("--data-dir")
        .arg(data_dir)
        .args(["--listen-client-urls", &client_url])
        .args(["--advertise-client-urls", &client_url])
        .args(["--listen-peer-urls", peer_url])
        .args(["--initial-advertise-peer-urls", peer_url])
        .args(["--initial-cluster", initial])
        .args(["--initial-cluster-state", "new"])
        .args(["--initial-cluster-token", token])
        .args(["--log-level", "warn"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("start etcd");
    EtcdProcess {
        name: name.to_string(),
        client_url,
        peer_url: peer_url.to_string(),
        child,
    }
}

/// Polls `check` until it returns `Ok`, or fails with the last error.
pub async fn eventually<T, E, F, Fut>(
    what: &str,
    timeout: Duration,
    mut check: F,
) -> Result<T, String>
where
    E: std::fmt::Display,
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, E>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        match check().await {
            Ok(value) => return Ok(value),
            Err(error) if Instant::now() >= deadline => {
                return Err(format!("{what}: not reached within {timeout:?}: {error}"));
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
}

/// Writes `count` keys `key-<i>` with values of `value_len` bytes; returns
/// the revision of the last write.
pub async fn write_keys(client: &mut Client, count: usize, value_len: usize) -> i64 {
    let mut revision = 0;
    for i in 0..count {
        let value = format!("{i:0width$}", width = value_len);
        let response = client
            .put(format!("key-{i:06}"), value, None)
            .await
            .expect("put");
        revision = response.header().expect("header").revision();
    }
    revision
}

/// Restores `snapshot` with the pinned `etcdutl` into a new data dir,
/// starts one etcd on it and returns it.
pub async fn restore_and_start(snapshot: &Path, root: &Path) -> EtcdCluster {
    let data_dir = root.join("restored.etcd");
    let peer_url = format!("http://127.0.0.1:{}", free_port());
    let output = Command::new(etcd_bin("etcdutl"))
        .args(["snapshot", "restore"])
        .arg(snapshot)
        .args(["--name", "r0"])
        .arg("--data-dir")
        .arg(&data_dir)
        .args(["--initial-cluster", &format!("r0={peer_url}")])
        .args(["--initial-advertise-peer-urls", &peer_url])
        .args(["--initial-cluster-token", "restored"])
        .output()
        .expect("etcdutl");
    assert!(
        output.status.success(),
        "etcdutl snapshot restore failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    EtcdCluster::start_on(&data_dir, "r0", &peer_url).await
}
