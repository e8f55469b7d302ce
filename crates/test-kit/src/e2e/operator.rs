//! The operator binary run outside the cluster against the lab's API
//! server, as in development: leader election off, metrics on a free
//! loopback port, its log appended to a file.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use crate::TestResult;

/// The operator process, killed when dropped.
pub struct OperatorProcess(Child);

impl OperatorProcess {
    /// Runs `binary run` with `kubeconfig`, appending its log to `log`.
    pub fn start(binary: &Path, kubeconfig: &Path, log: &Path) -> TestResult<Self> {
        Self::start_with(
            binary,
            &[
                "run",
                "--leader-election=false",
                "--metrics-address=127.0.0.1:0",
            ],
            kubeconfig,
            log,
        )
    }

    /// Runs `binary` with `args` and `kubeconfig`, appending its log to `log`.
    pub fn start_with(
        binary: &Path,
        args: &[&str],
        kubeconfig: &Path,
        log: &Path,
    ) -> TestResult<Self> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)?;
        let child = Command::new(binary)
            .args(args)
            .env("KUBECONFIG", kubeconfig)
            // `E2E_OPERATOR_LOG` sets the operator's log filter when a
            // scenario needs more than its actions to be understood.
            .env(
                "RUST_LOG",
                std::env::var("E2E_OPERATOR_LOG")
                    .unwrap_or_else(|_| "info,kube_runtime::controller=warn".to_owned()),
            )
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()?;
        Ok(Self(child))
    }

    /// The process id.
    pub fn id(&self) -> u32 {
        self.0.id()
    }
}

impl Drop for OperatorProcess {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Where the operator of namespace `namespace` logs.
pub fn log_path(namespace: &str) -> PathBuf {
    std::env::temp_dir().join(format!("{namespace}-operator.log"))
}
