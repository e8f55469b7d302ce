//! A throwaway etcd on loopback only, on a scratch data dir of the restore
//! Pod, for the two restore steps that use one:
//!
//! - `restore-volume apply-wal`: etcd started with `--force-new-cluster` on
//!   the *copy* of the survivor's data dir replays the survivor's WAL (the
//!   entries its db file lacks), then its snapshot is the restore's source;
//! - `restore-volume replay`: etcd on the data dir restored from a full
//!   backup receives the fetched incremental segments, then its snapshot is
//!   the restore's source.
//!
//! Either way the snapshot keeps the source's revisions, and the last
//! container of the restore Pod (`etcdutl snapshot restore --bump-revision
//! --mark-compacted`) moves the new incarnation past every revision the old
//! cluster may have served. The etcd is stopped before the step ends; no
//! client but the step's reaches it (loopback, ports of its own), and with
//! `block_peers` no old peer either (see [`LoopbackEtcd::start`]).

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use tokio::io::AsyncWriteExt;
use tokio::process::{Child, Command};

use crate::backup::{SnapshotCheckError, SnapshotVerifier};
use crate::pod_programs::file_error::{FileError, io};

/// How long etcd may take to serve a data dir (a large WAL to replay).
const START_TIMEOUT: Duration = Duration::from_secs(300);

/// The scratch etcd's backend quota: far above any member's (etcd
/// suggests at most 8 GiB), so that neither a large survivor nor a replay
/// on a large backup stops on NOSPACE. Only a limit: nothing is allocated.
const SCRATCH_QUOTA_BYTES: u64 = 64 * 1024 * 1024 * 1024;

/// Longest wait for the next message of the snapshot stream.
const SNAPSHOT_MESSAGE_TIMEOUT: Duration = Duration::from_secs(60);

/// Why the throwaway etcd failed; each `Display` is one line.
#[derive(Debug, thiserror::Error)]
pub enum LoopbackError {
    #[error("no free loopback port: {0}")]
    Port(std::io::Error),
    #[error("etcd exited on {data_dir} ({status})")]
    Exited {
        data_dir: PathBuf,
        status: std::process::ExitStatus,
    },
    #[error("etcd did not serve {data_dir} within {timeout:?}")]
    NotServing {
        data_dir: PathBuf,
        timeout: Duration,
    },
    #[error("etcd on {data_dir}: {what}: {message}")]
    Request {
        data_dir: PathBuf,
        what: &'static str,
        message: String,
    },
    #[error("the snapshot of {data_dir} is unusable: {source}")]
    Snapshot {
        data_dir: PathBuf,
        source: SnapshotCheckError,
    },
    #[error("the snapshot of {data_dir} is unusable: no data for {waited:?}")]
    SnapshotStalled { data_dir: PathBuf, waited: Duration },
    #[error(
        "the snapshot of {data_dir} holds revision {before}, but etcd moved to {after} while it was taken"
    )]
    Moved {
        data_dir: PathBuf,
        before: i64,
        after: i64,
    },
    #[error(transparent)]
    Io(#[from] FileError),
}

/// One etcd process serving a scratch data dir on loopback only; killed
/// when dropped, stopped cleanly by [`LoopbackEtcd::stop`].
pub struct LoopbackEtcd {
    child: Child,
    data_dir: PathBuf,
    client: etcd_client::Client,
}

impl LoopbackEtcd {
    /// Starts `etcd_binary` on `data_dir` as `member_name` with loopback
    /// client and peer URLs and `extra` flags, and waits until it serves.
    ///
    /// `block_peers`: the data dir lists other members (a copy of a
    /// survivor of a larger cluster) whose peer URLs are real addresses.
    /// `--force-new-cluster` removes them in the first entries it applies,
    /// but etcd's peer transport is set up from the old membership just
    /// before. Every non-loopback peer connection is then sent to a closed
    /// loopback port as its HTTP proxy (etcd's peer transport honours
    /// `HTTP(S)_PROXY`; Go never proxies loopback addresses), so this etcd
    /// cannot reach, vote with or send entries to a member of the old
    /// cluster that still runs.
    pub async fn start(
        etcd_binary: &Path,
        member_name: &str,
        data_dir: &Path,
        extra: &[String],
        block_peers: bool,
    ) -> Result<Self, LoopbackError> {
        let client_url = format!("http://127.0.0.1:{}", free_loopback_port()?);
        let peer_url = format!("http://127.0.0.1:{}", free_loopback_port()?);
        let mut command = Command::new(etcd_binary);
        command
            .arg(format!("--name={member_name}"))
            .arg(format!("--data-dir={}", data_dir.display()))
            .arg(format!("--listen-client-urls={client_url}"))
            .arg(format!("--advertise-client-urls={client_url}"))
            .arg(format!("--listen-peer-urls={peer_url}"))
            .arg(format!("--initial-advertise-peer-urls={peer_url}"))
            .arg(format!("--initial-cluster={member_name}={peer_url}"))
            .arg(format!("--quota-backend-bytes={SCRATCH_QUOTA_BYTES}"))
            .arg("--log-level=warn")
            .args(extra)
            .stdin(Stdio::null())
            .kill_on_drop(true);
        if block_peers {
            let nowhere = format!("http://127.0.0.1:{}", free_loopback_port()?);
            for name in ["NO_PROXY", "no_proxy"] {
                command.env_remove(name);
            }
            for name in ["HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"] {
                command.env(name, &nowhere);
            }
        }
        let mut child = command.spawn().map_err(io("starting", etcd_binary))?;
        let client = match connect(&client_url, &mut child, data_dir).await {
            Ok(client) => client,
            Err(error) => {
                stop_child(&mut child).await;
                return Err(error);
            }
        };
        Ok(Self {
            child,
            data_dir: data_dir.to_path_buf(),
            client,
        })
    }

    /// A client of this etcd.
    pub fn client(&self) -> etcd_client::Client {
        self.client.clone()
    }

    /// The current revision (a linearizable read).
    pub async fn revision(&self) -> Result<i64, LoopbackError> {
        let mut client = self.client.clone();
        let response = client
            .get(
                vec![0u8],
                Some(etcd_client::GetOptions::new().with_count_only()),
            )
            .await
            .map_err(|e| self.request("read the revision", e))?;
        Ok(response.header().map_or(0, |h| h.revision()))
    }

    /// Streams a snapshot into `path` (through a temporary file, synced,
    /// renamed into place), checked against its SHA-256 trailer, and
    /// returns the revision it holds. The revision must not move while the
    /// snapshot is taken (nothing but this step writes to this etcd).
    pub async fn snapshot_to(&self, path: &Path) -> Result<i64, LoopbackError> {
        let before = self.revision().await?;
        let temporary = path.with_extension("part");
        let mut file = tokio::fs::File::create(&temporary)
            .await
            .map_err(io("creating", &temporary))?;
        let mut stream = self
            .client
            .maintenance_client()
            .snapshot()
            .await
            .map_err(|e| self.request("open the snapshot stream", e))?;
        let mut verifier = SnapshotVerifier::new();
        loop {
            let message = tokio::time::timeout(SNAPSHOT_MESSAGE_TIMEOUT, stream.message())
                .await
                .map_err(|_| LoopbackError::SnapshotStalled {
                    data_dir: self.data_dir.clone(),
                    waited: SNAPSHOT_MESSAGE_TIMEOUT,
                })?
                .map_err(|e| self.request("read the snapshot stream", e))?;
            let Some(message) = message else { break };
            verifier.update(message.blob());
            file.write_all(message.blob())
                .await
                .map_err(io("writing", &temporary))?;
        }
        verifier
            .finish()
            .map_err(|source| LoopbackError::Snapshot {
                data_dir: self.data_dir.clone(),
                source,
            })?;
        file.sync_all().await.map_err(io("syncing", &temporary))?;
        drop(file);
        let after = self.revision().await?;
        if after != before {
            return Err(LoopbackError::Moved {
                data_dir: self.data_dir.clone(),
                before,
                after,
            });
        }
        tokio::fs::rename(&temporary, path)
            .await
            .map_err(io("renaming into", path))?;
        Ok(before)
    }

    /// SIGTERM (etcd flushes and exits), then SIGKILL after a grace period.
    pub async fn stop(mut self) {
        stop_child(&mut self.child).await;
    }

    fn request(&self, what: &'static str, error: etcd_client::Error) -> LoopbackError {
        LoopbackError::Request {
            data_dir: self.data_dir.clone(),
            what,
            message: error.to_string(),
        }
    }
}

/// A client once etcd answers; fails early when etcd exits.
async fn connect(
    client_url: &str,
    etcd: &mut Child,
    data_dir: &Path,
) -> Result<etcd_client::Client, LoopbackError> {
    let started = Instant::now();
    loop {
        if let Ok(Some(status)) = etcd.try_wait() {
            return Err(LoopbackError::Exited {
                data_dir: data_dir.to_path_buf(),
                status,
            });
        }
        let options = etcd_client::ConnectOptions::new()
            .with_connect_timeout(Duration::from_secs(2))
            .with_timeout(Duration::from_secs(30));
        if let Ok(mut client) = etcd_client::Client::connect([client_url], Some(options)).await
            && client.get(vec![0u8], None).await.is_ok()
        {
            return Ok(client);
        }
        if started.elapsed() > START_TIMEOUT {
            return Err(LoopbackError::NotServing {
                data_dir: data_dir.to_path_buf(),
                timeout: START_TIMEOUT,
            });
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn stop_child(etcd: &mut Child) {
    if let Some(pid) = etcd.id().and_then(|p| i32::try_from(p).ok()) {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGTERM,
        );
    }
    if tokio::time::timeout(Duration::from_secs(30), etcd.wait())
        .await
        .is_err()
    {
        let _ = etcd.kill().await;
    }
}

fn free_loopback_port() -> Result<u16, LoopbackError> {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(LoopbackError::Port)
}
