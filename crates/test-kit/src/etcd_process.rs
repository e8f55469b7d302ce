//! Real etcd processes of the pinned 3.6 build on loopback: one member
//! ([`EtcdProcess`]) started, killed (SIGKILL, a crash), stopped cleanly
//! (SIGTERM), frozen or started again on its data, by the same or another
//! `etcd` binary; a cluster of them in a temporary directory
//! ([`LocalCluster`]); and a snapshot restored with `etcdutl` and served.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use etcd_client::Client;

use crate::loopback::free_url;
use crate::poll::eventually;
use crate::upstream::{built_etcd_bin, etcd_bin};

/// Generous: the test machine may have two busy cores.
pub const READY_TIMEOUT: Duration = Duration::from_secs(90);

/// One etcd member on fresh loopback ports; SIGKILLed when dropped.
pub struct EtcdProcess {
    pub name: String,
    pub client_url: String,
    pub peer_url: String,
    /// `--listen-metrics-urls`, when asked for with [`Self::with_metrics`].
    pub metrics_url: Option<String>,
    pub data_dir: PathBuf,
    /// etcd's output, appended to at every start.
    pub log: PathBuf,
    /// The `etcd` binary; the pinned 3.6 one when none.
    binary: Option<PathBuf>,
    args: Vec<String>,
    /// A program etcd starts through (`program args... -- etcd ...`).
    launcher: Option<(PathBuf, Vec<String>)>,
    child: Option<Child>,
}

impl EtcdProcess {
    /// A member named `name` with its data in `root/<name>` and its log in
    /// `root/<name>.log`; not started.
    pub fn new(root: &Path, name: &str) -> Self {
        Self {
            name: name.to_owned(),
            client_url: free_url(),
            peer_url: free_url(),
            metrics_url: None,
            data_dir: root.join(name),
            log: root.join(format!("{name}.log")),
            binary: None,
            args: Vec::new(),
            launcher: None,
            child: None,
        }
    }

    /// Starts etcd through `program` (`program args... -- etcd <flags>`),
    /// as a member Pod starts it through the member guard; signals go to
    /// `program`.
    pub fn with_launcher(mut self, program: &Path, args: &[&str]) -> Self {
        let args = args.iter().map(|a| (*a).to_owned()).collect();
        self.launcher = Some((program.to_owned(), args));
        self
    }

    /// Its data in `data_dir` instead.
    pub fn with_data_dir(mut self, data_dir: &Path) -> Self {
        self.data_dir = data_dir.to_owned();
        self
    }

    /// This peer URL instead of a fresh one (the one a restored data dir
    /// was written for).
    pub fn with_peer_url(mut self, peer_url: &str) -> Self {
        self.peer_url = peer_url.to_owned();
        self
    }

    /// Also serves `/metrics` on a port of its own from the start (etcd
    /// serves clients only once it has joined).
    pub fn with_metrics(mut self) -> Self {
        self.metrics_url = Some(free_url());
        self
    }

    /// Runs this `etcd` binary from the next start on (another release, for
    /// an upgrade on the same data dir).
    pub fn set_binary(&mut self, binary: &Path) {
        self.binary = Some(binary.to_owned());
    }

    /// More flags at every start.
    pub fn with_args(mut self, args: &[&str]) -> Self {
        self.args.extend(args.iter().map(|a| (*a).to_owned()));
        self
    }

    /// Starts etcd as a member of `initial_cluster` (`name=peer,...`), in
    /// cluster state `state` (`new` or `existing`) with cluster token
    /// `token`; on a data dir that holds a member already, etcd goes by
    /// that instead.
    pub fn start(&mut self, initial_cluster: &str, state: &str, token: &str) -> Result<(), String> {
        assert!(self.child.is_none(), "{} already runs", self.name);
        let binary = match &self.binary {
            Some(binary) => binary.clone(),
            None => built_etcd_bin("etcd")?,
        };
        let log = File::options()
            .create(true)
            .append(true)
            .open(&self.log)
            .map_err(|e| format!("{}: {e}", self.log.display()))?;
        let mut command = match &self.launcher {
            Some((program, args)) => {
                let mut command = Command::new(program);
                command.args(args).arg("--").arg(&binary);
                command
            }
            None => Command::new(&binary),
        };
        command
            .args(["--name", &self.name])
            .arg("--data-dir")
            .arg(&self.data_dir)
            .args(["--listen-client-urls", &self.client_url])
            .args(["--advertise-client-urls", &self.client_url])
            .args(["--listen-peer-urls", &self.peer_url])
            .args(["--initial-advertise-peer-urls", &self.peer_url])
            .args(["--initial-cluster", initial_cluster])
            .args(["--initial-cluster-state", state])
            .args(["--initial-cluster-token", token])
            .args(["--log-level", "warn"]);
        if let Some(metrics_url) = &self.metrics_url {
            command.args(["--listen-metrics-urls", metrics_url]);
        }
        let child = command
            .args(&self.args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .map_err(|e| format!("start {}: {e}", binary.display()))?;
        self.child = Some(child);
        Ok(())
    }

    /// Starts a member on a data dir that already holds its membership (a
    /// restored one) and waits until it serves.
    pub async fn start_on(root: &Path, name: &str, data_dir: &Path) -> Self {
        let mut member = Self::new(root, name).with_data_dir(data_dir);
        member.start_restored().await;
        member
    }

    async fn start_restored(&mut self) {
        let initial = initial_cluster([&*self]);
        self.start(&initial, "new", "restored")
            .unwrap_or_else(|e| panic!("{e}"));
        self.wait_serving(READY_TIMEOUT)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
    }

    /// SIGKILL: no flush, no clean shutdown (a crash).
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// A clean shutdown: SIGTERM, then waits until the process has exited;
    /// SIGKILL and an error after `timeout`.
    pub async fn stop(&mut self, timeout: Duration) -> Result<(), String> {
        let Some(mut child) = self.child.take() else {
            return Ok(());
        };
        let pid = nix::unistd::Pid::from_raw(
            i32::try_from(child.id()).map_err(|e| format!("pid of {}: {e}", self.name))?,
        );
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
        let deadline = std::time::Instant::now() + timeout;
        loop {
            if child.try_wait().ok().flatten().is_some() {
                return Ok(());
            }
            if std::time::Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!("{} did not stop within {timeout:?}", self.name));
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Sends `signal` (SIGSTOP freezes it: it accepts connections but never
    /// answers; SIGCONT thaws it). After SIGSTOP it returns only once every
    /// thread has stopped: the kernel stops a process's threads one by one,
    /// and on a busy machine the others can still answer requests meanwhile.
    pub fn signal(&self, signal: nix::sys::signal::Signal) {
        let raw = self.child.as_ref().expect("running").id();
        let pid = nix::unistd::Pid::from_raw(i32::try_from(raw).expect("pid"));
        nix::sys::signal::kill(pid, signal).expect("signal etcd");
        if signal == nix::sys::signal::Signal::SIGSTOP {
            let deadline = std::time::Instant::now() + Duration::from_secs(10);
            while !every_thread_stopped(raw) {
                assert!(
                    std::time::Instant::now() < deadline,
                    "{} did not stop within 10 s of SIGSTOP",
                    self.name
                );
                std::thread::sleep(Duration::from_millis(5));
            }
        }
    }

    /// Whether the process has ended (or was never started).
    pub fn has_exited(&mut self) -> bool {
        match self.child.as_mut() {
            Some(child) => child.try_wait().ok().flatten().is_some(),
            None => true,
        }
    }

    /// The last 15 lines of its log.
    pub fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(15)..].join("\n")
    }

    /// A client on this member alone.
    pub async fn client(&self) -> Client {
        Client::connect([self.client_url.as_str()], None)
            .await
            .expect("etcd client")
    }

    /// Waits until this member answers a linearizable read; the error has
    /// its log.
    pub async fn wait_serving(&self, timeout: Duration) -> Result<(), String> {
        let endpoint = self.client_url.clone();
        eventually(&format!("{} serves", self.name), timeout, || {
            let endpoint = endpoint.clone();
            async move {
                let mut client = Client::connect([endpoint], None).await?;
                client.get("health", None).await?;
                Ok::<_, etcd_client::Error>(())
            }
        })
        .await
        .map_err(|e| format!("{e}\n--- {}\n{}", self.name, self.log_tail()))
    }
}

impl Drop for EtcdProcess {
    fn drop(&mut self) {
        // A frozen process still dies on SIGKILL.
        self.kill();
    }
}

/// `name=peer,...` of these members.
pub fn initial_cluster<'a>(members: impl IntoIterator<Item = &'a EtcdProcess>) -> String {
    members
        .into_iter()
        .map(|m| format!("{}={}", m.name, m.peer_url))
        .collect::<Vec<_>>()
        .join(",")
}

/// A cluster of real etcd processes (`m0`, `m1`...) in a temporary
/// directory, removed after the processes are gone.
pub struct LocalCluster {
    /// The cluster token, for members that join or start again.
    pub token: String,
    pub members: Vec<EtcdProcess>,
    // Dropped last, after the processes are gone.
    dir: tempfile::TempDir,
}

impl LocalCluster {
    /// Starts `size` members as a new cluster and waits until every member
    /// answers a linearizable read; panics with their logs when one does not.
    pub async fn start(size: usize) -> Self {
        Self::start_with(size, &[]).await
    }

    /// [`Self::start`] with more flags on every member.
    pub async fn start_with(size: usize, args: &[&str]) -> Self {
        Self::try_start_in(&std::env::temp_dir(), size, args)
            .await
            .unwrap_or_else(|e| panic!("{e}"))
    }

    /// [`Self::start_with`] in a directory under `parent`, failing instead
    /// of panicking.
    pub async fn try_start_in(parent: &Path, size: usize, args: &[&str]) -> Result<Self, String> {
        let cluster = Self::spawn_in(parent, size, args)?;
        cluster.wait_serving().await?;
        Ok(cluster)
    }

    /// Starts `size` members as a new cluster without waiting for them.
    pub fn spawn(size: usize, args: &[&str]) -> Result<Self, String> {
        Self::spawn_in(&std::env::temp_dir(), size, args)
    }

    fn spawn_in(parent: &Path, size: usize, args: &[&str]) -> Result<Self, String> {
        let dir = tempfile::tempdir_in(parent).map_err(|e| format!("temp dir: {e}"))?;
        let token = format!("test-{}", dir.path().display()).replace('/', "-");
        let mut members: Vec<EtcdProcess> = (0..size)
            .map(|i| EtcdProcess::new(dir.path(), &format!("m{i}")).with_args(args))
            .collect();
        let initial = initial_cluster(&members);
        for member in &mut members {
            member.start(&initial, "new", &token)?;
        }
        Ok(Self {
            token,
            members,
            dir,
        })
    }

    /// The directory of the members' data and logs.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The members' client URLs.
    pub fn endpoints(&self) -> Vec<String> {
        self.members.iter().map(|m| m.client_url.clone()).collect()
    }

    /// A client over every member.
    pub async fn client(&self) -> Client {
        Client::connect(self.endpoints(), None)
            .await
            .expect("etcd client")
    }

    /// Waits until every member answers a linearizable read; the error
    /// has the logs of the members.
    pub async fn wait_serving(&self) -> Result<(), String> {
        for member in &self.members {
            member
                .wait_serving(READY_TIMEOUT)
                .await
                .map_err(|e| format!("cluster does not serve: {e}\n{}", self.logs()))?;
        }
        Ok(())
    }

    /// The end of every member's log, for a failure message.
    pub fn logs(&self) -> String {
        self.members
            .iter()
            .map(|m| format!("--- {}\n{}", m.name, m.log_tail()))
            .collect::<Vec<_>>()
            .join("\n")
    }
}

/// Restores `snapshot` with the pinned `etcdutl` into `root/restored.etcd`,
/// starts one etcd (`r0`) on it and waits until it serves.
pub async fn restore_and_start(snapshot: &Path, root: &Path) -> EtcdProcess {
    let data_dir = root.join("restored.etcd");
    let peer_url = free_url();
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
    let mut member = EtcdProcess::new(root, "r0")
        .with_data_dir(&data_dir)
        .with_peer_url(&peer_url);
    member.start_restored().await;
    member
}

/// Whether every thread of process `pid` is stopped (state `T` in
/// `/proc/<pid>/task/<tid>/stat`).
fn every_thread_stopped(pid: u32) -> bool {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return false;
    };
    tasks.flatten().all(|task| {
        std::fs::read_to_string(task.path().join("stat")).is_ok_and(|stat| {
            // The state follows the command name, which is in parentheses.
            stat.rsplit_once(')')
                .and_then(|(_, rest)| rest.split_whitespace().next())
                .is_some_and(|state| state == "T" || state == "t")
        })
    })
}
