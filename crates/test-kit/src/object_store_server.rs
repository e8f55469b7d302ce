//! An object-store server of `tools/` (the S3, GCS and Azure servers the
//! backup tests write to) on a free loopback port, with its data and log in
//! a temporary directory; killed when dropped.

use std::fs::File;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::loopback::free_port;
use crate::poll::eventually;
use crate::upstream::built_set;

/// A running server process.
pub struct ServerProcess {
    /// What it is, for messages.
    pub name: &'static str,
    /// `<host>:<port>`.
    pub address: String,
    child: Child,
    dir: tempfile::TempDir,
}

impl ServerProcess {
    /// Runs the command `build(address, data dir)` returns on a free
    /// loopback port, with stdout and stderr in `<data dir>/server.log`, and
    /// waits until the address accepts connections; panics with the log
    /// when it does not.
    pub async fn start(name: &'static str, build: impl FnOnce(&str, &Path) -> Command) -> Self {
        let address = format!("127.0.0.1:{}", free_port());
        Self::try_start_at(name, &address, build)
            .await
            .unwrap_or_else(|e| panic!("{e}"))
    }

    /// [`Self::start`] on `address`, failing instead of panicking.
    pub async fn try_start_at(
        name: &'static str,
        address: &str,
        build: impl FnOnce(&str, &Path) -> Command,
    ) -> Result<Self, String> {
        let dir = tempfile::tempdir().map_err(|e| format!("server dir: {e}"))?;
        let log =
            File::create(dir.path().join("server.log")).map_err(|e| format!("server log: {e}"))?;
        let child = build(address, dir.path())
            .stdin(Stdio::null())
            .stdout(log.try_clone().map_err(|e| format!("server log: {e}"))?)
            .stderr(log)
            .spawn()
            .map_err(|e| format!("start {name}: {e}"))?;
        let server = Self {
            name,
            address: address.to_owned(),
            child,
            dir,
        };
        if let Err(error) = eventually(
            &format!("{name} listens"),
            Duration::from_secs(60),
            || async { tokio::net::TcpStream::connect(address).await },
        )
        .await
        {
            return Err(format!("{error}\n{}", server.log()));
        }
        Ok(server)
    }

    /// `http://<address>`.
    pub fn url(&self) -> String {
        format!("http://{}", self.address)
    }

    /// What the server printed so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("server.log")).unwrap_or_default()
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A Go object-store server of `tools/<set>` (`s3-server`, gofakes3 in
/// memory; `gcs-server`, fake-gcs-server) on a free loopback port, with the
/// bucket `bucket` created at start.
pub async fn bucket_server(set: &'static str, bucket: &str) -> ServerProcess {
    let address = format!("127.0.0.1:{}", free_port());
    try_bucket_server_at(set, &address, bucket)
        .await
        .unwrap_or_else(|e| panic!("{e}"))
}

/// [`bucket_server`] on `address`, failing instead of panicking.
pub async fn try_bucket_server_at(
    set: &'static str,
    address: &str,
    bucket: &str,
) -> Result<ServerProcess, String> {
    let binary = built_set(set)?.join(set);
    ServerProcess::try_start_at(set, address, |address, _| {
        let mut command = Command::new(&binary);
        command.args(["-addr", address, "-buckets", bucket]);
        command
    })
    .await
}
