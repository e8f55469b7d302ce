//! The processes the backup bench runs on loopback: a 3-member etcd cluster
//! of the pinned 3.6 set (quota raised for a large database) and the pinned
//! S3-compatible server (`tools/s3-server`, in-memory), both from the sets
//! `tools/build-upstream.sh` builds; killed when dropped. The same rules as
//! the integration tests' `tests/backup_support`, kept to what a bench needs.

use std::fs::File;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};

use crate::figures::BenchResult;

/// Backend quota of the bench's members: far above the database it fills.
const QUOTA_BYTES: u64 = 8 * 1024 * 1024 * 1024;
/// Generous: the machine may have two busy cores.
const READY_TIMEOUT: Duration = Duration::from_secs(120);
/// The bucket the S3 server creates at start.
pub const BUCKET: &str = "etcd-backups";

/// `$ETCD_LAB_CACHE/upstream/<set>-<first 12 hex of sha256(...)>` over
/// `go.mod`, `go.sum` and the module's own `.go` files in byte order (the
/// rule of `tools/build-upstream.sh`), once the set is completely built.
pub fn upstream_set(set: &str) -> BenchResult<PathBuf> {
    let tools = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tools")
        .join(set);
    let mut sources: Vec<String> = std::fs::read_dir(&tools)?
        .filter_map(|entry| entry.ok())
        .map(|entry| entry.file_name().to_string_lossy().into_owned())
        .filter(|name| name.ends_with(".go"))
        .collect();
    sources.sort();
    let mut pins = Vec::new();
    for file in ["go.mod", "go.sum"]
        .into_iter()
        .chain(sources.iter().map(String::as_str))
    {
        pins.extend(std::fs::read(tools.join(file))?);
    }
    let hash: String = Sha256::digest(&pins)
        .iter()
        .take(6)
        .map(|b| format!("{b:02x}"))
        .collect();
    let dir = etcd_lab::upstream::cache_dir().join(format!("upstream/{set}-{hash}"));
    if !dir.join(".complete").is_file() {
        return Err(format!("{} is missing: run tools/build-upstream.sh", dir.display()).into());
    }
    Ok(dir)
}

/// A binary of the pinned etcd 3.6 set (`etcd`, `etcdctl`, `etcdutl`).
pub fn etcd_bin(name: &str) -> BenchResult<PathBuf> {
    Ok(upstream_set("etcd-3.6")?.join(name))
}

/// A loopback port below the ephemeral range (as the integration tests
/// pick them), so that no outgoing connection takes it before it is bound.
pub fn free_port() -> u16 {
    use std::sync::atomic::{AtomicU16, Ordering};
    static NEXT: AtomicU16 = AtomicU16::new(0);
    let base = 20_000 + (std::process::id() % 40) as u16 * 300;
    loop {
        let port = base + NEXT.fetch_add(1, Ordering::Relaxed) % 300;
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
}

/// A child process killed and reaped when dropped.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Three etcd members on loopback in a temporary directory.
pub struct EtcdCluster {
    /// Client URLs of the members.
    pub endpoints: Vec<String>,
    _members: Vec<Killed>,
    /// Data dirs and logs; removed when dropped (after the members).
    _dir: tempfile::TempDir,
}

impl EtcdCluster {
    /// Starts 3 members as a new cluster under `parent` and waits until
    /// each answers a linearizable read.
    pub async fn start(parent: &Path) -> BenchResult<Self> {
        let dir = tempfile::tempdir_in(parent)?;
        let names = ["m0", "m1", "m2"];
        let peers: Vec<String> = names
            .iter()
            .map(|_| format!("http://127.0.0.1:{}", free_port()))
            .collect();
        let initial = names
            .iter()
            .zip(&peers)
            .map(|(n, p)| format!("{n}={p}"))
            .collect::<Vec<_>>()
            .join(",");
        let mut members = Vec::new();
        let mut endpoints = Vec::new();
        for (name, peer) in names.iter().zip(&peers) {
            let client = format!("http://127.0.0.1:{}", free_port());
            let log = File::create(dir.path().join(format!("{name}.log")))?;
            let child = Command::new(etcd_bin("etcd")?)
                .args(["--name", name])
                .arg("--data-dir")
                .arg(dir.path().join(name))
                .args(["--listen-client-urls", &client])
                .args(["--advertise-client-urls", &client])
                .args(["--listen-peer-urls", peer])
                .args(["--initial-advertise-peer-urls", peer])
                .args(["--initial-cluster", &initial])
                .args(["--initial-cluster-state", "new"])
                .args(["--initial-cluster-token", "backup-bench"])
                .args(["--quota-backend-bytes", &QUOTA_BYTES.to_string()])
                .args(["--log-level", "warn"])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(log)
                .spawn()?;
            members.push(Killed(child));
            endpoints.push(client);
        }
        let cluster = Self {
            endpoints,
            _members: members,
            _dir: dir,
        };
        let deadline = Instant::now() + READY_TIMEOUT;
        for endpoint in &cluster.endpoints {
            loop {
                let answered = async {
                    let mut client = etcd_client::Client::connect([endpoint], None).await?;
                    client.get("health", None).await
                }
                .await;
                match answered {
                    Ok(_) => break,
                    Err(error) if Instant::now() > deadline => {
                        return Err(format!("etcd at {endpoint} does not serve: {error}").into());
                    }
                    Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
                }
            }
        }
        Ok(cluster)
    }

    /// A client over every member.
    pub async fn client(&self) -> BenchResult<etcd_client::Client> {
        Ok(etcd_client::Client::connect(&self.endpoints, None).await?)
    }
}

/// The pinned S3-compatible server (gofakes3, in memory) with [`BUCKET`].
pub struct S3Server {
    /// `http://127.0.0.1:<port>`.
    pub url: String,
    _child: Killed,
}

impl S3Server {
    /// Starts the server and waits until it accepts connections.
    pub async fn start(log: &Path) -> BenchResult<Self> {
        let address = format!("127.0.0.1:{}", free_port());
        let log = File::create(log)?;
        let child = Command::new(upstream_set("s3-server")?.join("s3-server"))
            .args(["-addr", &address, "-buckets", BUCKET])
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()?;
        let server = Self {
            url: format!("http://{address}"),
            _child: Killed(child),
        };
        let deadline = Instant::now() + Duration::from_secs(60);
        while tokio::net::TcpStream::connect(&address).await.is_err() {
            if Instant::now() > deadline {
                return Err(format!("the S3 server does not listen on {address}").into());
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Ok(server)
    }
}
