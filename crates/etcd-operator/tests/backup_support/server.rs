//! An object-store server for the backup tests (the S3, GCS and Azure
//! servers of `tools/`), started on a free loopback port with its data and
//! log in a temporary directory, and killed when dropped.

use std::fs::File;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use super::{eventually, free_port};

/// A running server process.
pub struct ServerProcess {
    /// What it is, for messages.
    pub name: &'static str,
    /// `127.0.0.1:<port>`.
    pub address: String,
    child: Child,
    dir: tempfile::TempDir,
}

impl ServerProcess {
    /// Runs the command `build(address, data dir)` returns, with stdout and
    /// stderr in `<data dir>/server.log`, and waits until the address
    /// accepts connections.
    pub async fn start(name: &'static str, build: impl FnOnce(&str, &Path) -> Command) -> Self {
        let dir = tempfile::tempdir().expect("server dir");
        let address = format!("127.0.0.1:{}", free_port());
        let log = File::create(dir.path().join("server.log")).expect("server log");
        let child = build(&address, dir.path())
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log"))
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("start {name}: {e}"));
        let server = Self {
            name,
            address,
            child,
            dir,
        };
        let address = server.address.clone();
        if let Err(error) = eventually(
            &format!("{name} listens"),
            Duration::from_secs(60),
            || async { tokio::net::TcpStream::connect(&address).await },
        )
        .await
        {
            panic!("{error}\n{}", server.log());
        }
        server
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
