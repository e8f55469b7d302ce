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

/// The address the operator logged in `log` as serving `/metrics` (the
/// last one: a restarted operator logs a new port).
pub fn metrics_address(log: &Path) -> TestResult<String> {
    let text = std::fs::read_to_string(log)?;
    text.lines()
        .rev()
        .filter(|line| line.contains("serving /metrics"))
        .find_map(|line| {
            let plain = strip_ansi(line);
            let (_, rest) = plain.split_once("address=")?;
            rest.split_whitespace().next().map(str::to_owned)
        })
        .ok_or_else(|| format!("{} names no metrics address", log.display()).into())
}

/// `line` without terminal colour sequences (`ESC [ … m`).
fn strip_ansi(line: &str) -> String {
    let mut plain = String::with_capacity(line.len());
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            plain.push(c);
        }
    }
    plain
}

/// The operator's `/metrics` text, read over plain HTTP/1.0 from `address`.
pub async fn scrape(address: &str) -> TestResult<String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(address).await?;
    stream
        .write_all(format!("GET /metrics HTTP/1.0\r\nHost: {address}\r\n\r\n").as_bytes())
        .await?;
    let mut response = String::new();
    stream.read_to_string(&mut response).await?;
    let (head, body) = response
        .split_once("\r\n\r\n")
        .ok_or("no end of headers in the metrics response")?;
    if !head.starts_with("HTTP/1.0 200") && !head.starts_with("HTTP/1.1 200") {
        return Err(format!("metrics answered {head:?}").into());
    }
    Ok(body.to_owned())
}

/// The sum of every sample of `metric` whose labels contain each of
/// `labels` (`name="value"`), in Prometheus text `metrics`.
pub fn metric_sum(metrics: &str, metric: &str, labels: &[&str]) -> f64 {
    metrics
        .lines()
        .filter(|line| !line.starts_with('#'))
        .filter_map(|line| {
            let (series, value) = line.rsplit_once(' ')?;
            let (name, rest) = series.split_once('{').unwrap_or((series, ""));
            (name == metric && labels.iter().all(|l| rest.contains(l)))
                .then(|| value.parse::<f64>().ok())
                .flatten()
        })
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_logged_address_and_samples_are_read() {
        let dir = tempfile::tempdir().expect("tempdir");
        let log = dir.path().join("operator.log");
        std::fs::write(
            &log,
            "\u{1b}[2m2026\u{1b}[0m INFO serving /metrics, /healthz and /readyz \u{1b}[3maddress\u{1b}[0m\u{1b}[2m=\u{1b}[0m127.0.0.1:4100\n\
             INFO serving /metrics, /healthz and /readyz address=127.0.0.1:4200\n",
        )
        .expect("write");
        assert_eq!(metrics_address(&log).expect("address"), "127.0.0.1:4200");
        let metrics = "# HELP x\nx_total{reads=\"copies\",ns=\"a\"} 3\nx_total{reads=\"api\"} 2\nx_total{reads=\"copies\",ns=\"b\"} 4\ny 1\n";
        assert_eq!(metric_sum(metrics, "x_total", &["reads=\"copies\""]), 7.0);
        assert_eq!(metric_sum(metrics, "x_total", &[]), 9.0);
        assert_eq!(metric_sum(metrics, "y", &[]), 1.0);
    }
}
