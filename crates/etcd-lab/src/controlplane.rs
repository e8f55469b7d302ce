//! The control plane: backing etcd, kube-apiserver, kube-controller-manager
//! and kube-scheduler, each a detached process in the host network namespace.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::Path;
use std::time::{Duration, Instant};

use etcd_lab_common::IoContext;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::cgroup::LabCgroups;
use crate::client::HealthError;
use crate::error::{LabError, Result};
use crate::paths::LabPaths;
use crate::pki::Pki;
use crate::process::{self, ProcessSpec};
use crate::upstream::Binaries;

/// Starts of a component whose port is still in use.
const PORT_BUSY_ATTEMPTS: u32 = 10;

/// Client URL of the backing etcd.
pub const BACKING_ETCD_CLIENT: &str = "http://127.0.0.1:2479";
/// Peer URL of the backing etcd.
pub const BACKING_ETCD_PEER: &str = "http://127.0.0.1:2480";
/// The Service ClusterIP range.
pub const SERVICE_CIDR: &str = "10.96.0.0/16";
/// The API server's address on the lab network.
pub const ADVERTISE_ADDRESS: &str = "10.244.0.1";

/// A control-plane component.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Component {
    BackingEtcd,
    ApiServer,
    ControllerManager,
    Scheduler,
}

impl Component {
    /// In start order.
    pub const ALL: [Component; 4] = [
        Component::BackingEtcd,
        Component::ApiServer,
        Component::ControllerManager,
        Component::Scheduler,
    ];

    /// Name of its log file, pid file and cgroup.
    pub fn name(self) -> &'static str {
        match self {
            Component::BackingEtcd => "backing-etcd",
            Component::ApiServer => "kube-apiserver",
            Component::ControllerManager => "kube-controller-manager",
            Component::Scheduler => "kube-scheduler",
        }
    }

    /// Its cgroup below `etcd-lab/`.
    pub fn cgroup(self) -> String {
        format!("control-plane/{}", self.name())
    }
}

/// Everything needed to build the control plane's command lines.
pub struct ControlPlane<'a> {
    pub paths: &'a LabPaths,
    pub pki: &'a Pki,
    pub binaries: &'a Binaries,
    pub cgroups: &'a LabCgroups,
    /// `--flag` -> value overrides for kube-controller-manager (without `--`).
    pub controller_manager_flags: &'a BTreeMap<String, String>,
}

fn flag(name: &str, value: impl AsRef<std::ffi::OsStr>) -> OsString {
    let mut arg = OsString::from(format!("--{name}="));
    arg.push(value.as_ref());
    arg
}

impl ControlPlane<'_> {
    /// The process spec of a component.
    pub fn spec(&self, component: Component) -> ProcessSpec {
        let (program, args) = match component {
            Component::BackingEtcd => (self.binaries.etcd(), self.etcd_args()),
            Component::ApiServer => (self.binaries.kube("kube-apiserver"), self.apiserver_args()),
            Component::ControllerManager => (
                self.binaries.kube("kube-controller-manager"),
                self.controller_manager_args(),
            ),
            Component::Scheduler => (self.binaries.kube("kube-scheduler"), self.scheduler_args()),
        };
        ProcessSpec {
            name: component.name().to_owned(),
            program,
            args,
            log: self.paths.log(component.name()),
            pid_file: self.paths.pid_file(component.name()),
            cgroup: component.cgroup(),
            netns: None,
            // kube-scheduler exits on purpose when it finds its cache
            // corrupted (after an API server restart, for one), and
            // counts on its kubelet to start it again; so may the
            // controller manager. The backing etcd and the API server stop
            // only when a test stops them.
            restart_on_exit: matches!(
                component,
                Component::Scheduler | Component::ControllerManager
            ),
        }
    }

    fn etcd_args(&self) -> Vec<OsString> {
        vec![
            flag("name", "backing"),
            flag("data-dir", self.paths.backing_etcd()),
            flag("listen-client-urls", BACKING_ETCD_CLIENT),
            flag("advertise-client-urls", BACKING_ETCD_CLIENT),
            flag("listen-peer-urls", BACKING_ETCD_PEER),
            flag("initial-advertise-peer-urls", BACKING_ETCD_PEER),
            flag("initial-cluster", format!("backing={BACKING_ETCD_PEER}")),
            flag("initial-cluster-state", "new"),
        ]
    }

    fn apiserver_args(&self) -> Vec<OsString> {
        let pki = self.pki;
        let kubelet_client = pki.client("apiserver-kubelet-client");
        vec![
            flag("etcd-servers", BACKING_ETCD_CLIENT),
            flag("bind-address", "0.0.0.0"),
            flag("secure-port", "6443"),
            flag("advertise-address", ADVERTISE_ADDRESS),
            flag("service-cluster-ip-range", SERVICE_CIDR),
            flag("authorization-mode", "Node,RBAC"),
            // The default admission chain (including DefaultTolerationSeconds)
            // plus NodeRestriction, as kubeadm clusters run it.
            flag("enable-admission-plugins", "NodeRestriction"),
            flag("allow-privileged", "true"),
            flag("client-ca-file", &pki.ca().cert),
            flag("tls-cert-file", &pki.apiserver().cert),
            flag("tls-private-key-file", &pki.apiserver().key),
            flag(
                "service-account-issuer",
                "https://kubernetes.default.svc.cluster.local",
            ),
            flag("service-account-key-file", pki.service_account_pub()),
            flag(
                "service-account-signing-key-file",
                pki.service_account_key(),
            ),
            flag("kubelet-client-certificate", &kubelet_client.cert),
            flag("kubelet-client-key", &kubelet_client.key),
            flag("kubelet-certificate-authority", &pki.ca().cert),
            flag("kubelet-preferred-address-types", "InternalIP"),
            flag("profiling", "false"),
        ]
    }

    fn controller_manager_args(&self) -> Vec<OsString> {
        let pki = self.pki;
        let kubeconfig = self.paths.kubeconfigs().join("controller-manager");
        let mut flags: BTreeMap<String, OsString> = [
            ("kubeconfig", kubeconfig.clone().into_os_string()),
            ("authentication-kubeconfig", kubeconfig.clone().into()),
            ("authorization-kubeconfig", kubeconfig.into()),
            ("bind-address", "127.0.0.1".into()),
            ("controllers", "*".into()),
            // One instance: no election, so a restart takes over at once.
            ("leader-elect", "false".into()),
            ("use-service-account-credentials", "true".into()),
            ("cluster-signing-cert-file", pki.ca().cert.into()),
            ("cluster-signing-key-file", pki.ca().key.into()),
            ("root-ca-file", pki.ca().cert.into()),
            (
                "service-account-private-key-file",
                pki.service_account_key().into(),
            ),
            ("service-cluster-ip-range", SERVICE_CIDR.into()),
            ("profiling", "false".into()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect();
        for (name, value) in self.controller_manager_flags {
            flags.insert(name.clone(), value.into());
        }
        flags.iter().map(|(k, v)| flag(k, v)).collect()
    }

    fn scheduler_args(&self) -> Vec<OsString> {
        let kubeconfig = self.paths.kubeconfigs().join("scheduler");
        vec![
            flag("kubeconfig", &kubeconfig),
            flag("authentication-kubeconfig", &kubeconfig),
            flag("authorization-kubeconfig", &kubeconfig),
            flag("bind-address", "127.0.0.1"),
            flag("leader-elect", "false"),
            flag("profiling", "false"),
        ]
    }

    /// Starts a component (unless it already runs) and waits until it is ready.
    /// A component that exits at once because its port is still held (a
    /// process of a killed lab on its way out) is started again, up to
    /// [`PORT_BUSY_ATTEMPTS`] times, a second apart.
    pub async fn start(&self, component: Component, timeout: Duration) -> Result<i32> {
        let spec = self.spec(component);
        let mut attempt = 1;
        loop {
            let pid = match process::running(&spec.pid_file, self.cgroups, &spec.cgroup) {
                Some(pid) => pid,
                None => process::spawn(&spec, self.cgroups)?,
            };
            match self.wait_ready(component, pid, &spec.log, timeout).await {
                Err(LabError::Exited { tail, .. })
                    if attempt < PORT_BUSY_ATTEMPTS && tail.contains("address already in use") =>
                {
                    attempt += 1;
                    tracing::warn!(
                        component = component.name(),
                        attempt,
                        "port still in use; starting again"
                    );
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
                result => return result.map(|()| pid),
            }
        }
    }

    async fn wait_ready(
        &self,
        component: Component,
        pid: i32,
        log: &Path,
        timeout: Duration,
    ) -> Result<()> {
        let started = Instant::now();
        let mut reason;
        loop {
            if !process::alive(pid) {
                return Err(LabError::Exited {
                    component: component.name().to_owned(),
                    status: format!("pid {pid} is gone"),
                    log: log.to_owned(),
                    tail: process::log_tail(log, 30),
                });
            }
            match self.probe(component).await {
                Ok(()) => return Ok(()),
                Err(e) => reason = e.to_string(),
            }
            if started.elapsed() > timeout {
                return Err(LabError::NotReady {
                    component: component.name().to_owned(),
                    seconds: timeout.as_secs(),
                    reason,
                    log: log.to_owned(),
                    tail: process::log_tail(log, 30),
                });
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    /// One readiness probe; the error says why it is not ready.
    pub async fn probe(&self, component: Component) -> std::result::Result<(), HealthError> {
        match component {
            Component::BackingEtcd => {
                let body = http_get_plain("127.0.0.1:2479", "/health").await?;
                if body.contains("\"health\":\"true\"") {
                    Ok(())
                } else {
                    Err(HealthError::Unhealthy {
                        url: "127.0.0.1:2479/health".into(),
                        body,
                    })
                }
            }
            Component::ApiServer => {
                let client = crate::client::admin_client(&self.paths.kubeconfig()).await?;
                crate::client::get_text(&client, "/readyz")
                    .await
                    .map(|_| ())
            }
            Component::ControllerManager => {
                crate::client::insecure_healthz("https://127.0.0.1:10257").await
            }
            Component::Scheduler => {
                crate::client::insecure_healthz("https://127.0.0.1:10259").await
            }
        }
    }
}

/// A plain HTTP/1.0 GET on loopback; returns the body of a 200 answer.
async fn http_get_plain(address: &str, path: &str) -> std::result::Result<String, HealthError> {
    let url = format!("{address}{path}");
    let exchange = async {
        let mut stream = tokio::net::TcpStream::connect(address).await?;
        stream
            .write_all(format!("GET {path} HTTP/1.0\r\nHost: {address}\r\n\r\n").as_bytes())
            .await?;
        let mut answer = String::new();
        stream.read_to_string(&mut answer).await?;
        Ok::<_, std::io::Error>(answer)
    };
    let answer = tokio::time::timeout(Duration::from_secs(2), exchange)
        .await
        .map_err(|_| HealthError::Timeout { url: url.clone() })?
        .context(|| format!("GET {url}"))?;
    let (head, body) = answer.split_once("\r\n\r\n").unwrap_or((&answer, ""));
    if head.starts_with("HTTP/1.0 200") || head.starts_with("HTTP/1.1 200") {
        Ok(body.to_owned())
    } else {
        Err(HealthError::Status {
            url,
            status_line: head.lines().next().unwrap_or_default().to_owned(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args_of(component: Component, overrides: &[(&str, &str)]) -> Vec<String> {
        let dir = tempfile::tempdir().unwrap();
        let paths = LabPaths::new(dir.path());
        let pki = Pki::ensure(&paths.pki()).unwrap();
        let binaries = Binaries {
            kubernetes: "/k8s".into(),
            etcd_3_6: "/etcd".into(),
            etcd_images: Default::default(),
        };
        let cgroups = LabCgroups::at("/sys/fs/cgroup");
        let flags: BTreeMap<String, String> = overrides
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let control_plane = ControlPlane {
            paths: &paths,
            pki: &pki,
            binaries: &binaries,
            cgroups: &cgroups,
            controller_manager_flags: &flags,
        };
        control_plane
            .spec(component)
            .args
            .iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect()
    }

    #[test]
    fn apiserver_runs_as_a_real_cluster_does() {
        let args = args_of(Component::ApiServer, &[]);
        for expected in [
            "--authorization-mode=Node,RBAC",
            "--enable-admission-plugins=NodeRestriction",
            "--secure-port=6443",
            "--bind-address=0.0.0.0",
            "--advertise-address=10.244.0.1",
            "--service-cluster-ip-range=10.96.0.0/16",
            "--kubelet-preferred-address-types=InternalIP",
            "--etcd-servers=http://127.0.0.1:2479",
        ] {
            assert!(args.iter().any(|a| a == expected), "{expected} in {args:?}");
        }
        // DefaultTolerationSeconds stays on: no plugin is disabled.
        assert!(
            !args
                .iter()
                .any(|a| a.starts_with("--disable-admission-plugins"))
        );
    }

    #[test]
    fn controller_manager_keeps_defaults_unless_overridden() {
        let defaults = args_of(Component::ControllerManager, &[]);
        assert!(defaults.iter().any(|a| a == "--controllers=*"));
        assert!(
            !defaults
                .iter()
                .any(|a| a.starts_with("--node-monitor-grace-period"))
        );
        let shortened = args_of(
            Component::ControllerManager,
            &[("node-monitor-grace-period", "20s")],
        );
        assert_eq!(
            shortened
                .iter()
                .filter(|a| a.starts_with("--node-monitor-grace-period"))
                .collect::<Vec<_>>(),
            ["--node-monitor-grace-period=20s"]
        );
    }
}
