//! The `Lab` handle: bring the whole lab up, look at it, take it down.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use etcd_lab_common::IoContext;
use k8s_openapi::api::core::v1::{Node, ServiceAccount};
use kube::api::{Api, ListParams};
use tracing::info;

use crate::cgroup::LabCgroups;
use crate::config::LabConfig;
use crate::controlplane::{Component, ControlPlane};
use crate::error::{LabError, Result};
use crate::kubeconfig;
use crate::nodes;
use crate::paths::LabPaths;
use crate::pki::Pki;
use crate::process;
use crate::registry;
use crate::services;
use crate::teardown;
use crate::upstream::{Binaries, CRANE};

/// How to bring the lab up.
#[derive(Debug, Clone)]
pub struct LabOptions {
    /// Number of nodes (`lab-node-1..N`).
    pub nodes: u8,
    /// Number of zones (`zone-a, zone-b, ...`), assigned round robin.
    pub zones: u8,
    /// kube-controller-manager flags (without `--`) that tests shorten,
    /// e.g. `node-monitor-grace-period` -> `20s`. Empty keeps the defaults.
    pub controller_manager_flags: BTreeMap<String, String>,
    /// State directory; `$ETCD_LAB_DIR` or `/var/lib/etcd-lab` when `None`.
    pub lab_dir: Option<PathBuf>,
    /// The `etcd-lab` binary that runs node agents, services and containers;
    /// the running executable when `None` (tests pass `CARGO_BIN_EXE_etcd-lab`).
    pub etcd_lab_binary: Option<PathBuf>,
    /// How long to wait for each component and for the nodes to be Ready.
    pub ready_timeout: Duration,
    /// The images of `make image` (a directory with `images.tsv`); when
    /// `None`, `$ETCD_LAB_IMAGES` or `target/images` beside the build of
    /// the `etcd-lab` binary. Without images the pods run host files.
    pub images_dir: Option<PathBuf>,
}

impl Default for LabOptions {
    fn default() -> Self {
        Self {
            nodes: 3,
            zones: 3,
            controller_manager_flags: BTreeMap::new(),
            lab_dir: None,
            etcd_lab_binary: None,
            ready_timeout: Duration::from_secs(120),
            images_dir: None,
        }
    }
}

/// Starts the image registry and fills it when images were built; `None`
/// (pods run host files) otherwise.
async fn start_registry(
    options: &LabOptions,
    paths: &LabPaths,
    cgroups: &LabCgroups,
    etcd_lab_binary: &Path,
) -> Result<Option<etcd_lab_node::config::RegistryConfig>> {
    let Some(dir) = options
        .images_dir
        .clone()
        .or_else(|| registry::default_images_dir(etcd_lab_binary))
    else {
        return Ok(None);
    };
    let Some(images) = registry::read_image_list(&dir)? else {
        tracing::warn!(
            dir = %dir.display(),
            "no images (make image writes them): pods run files of this machine instead"
        );
        return Ok(None);
    };
    let crane = CRANE.built_dir()?.join("crane");
    let config = registry::start(paths, cgroups, &crane, &images).await?;
    info!(images = images.len(), address = %config.address, "image registry ready");
    Ok(Some(config))
}

/// A running lab.
#[derive(Debug, Clone)]
pub struct Lab {
    paths: LabPaths,
    config: LabConfig,
    cgroups: LabCgroups,
    was_already_up: bool,
}

impl Lab {
    /// Brings the lab up (or finds it up and healthy with the same shape).
    /// Pieces of an earlier run that crashed are stopped first; their data is
    /// kept when the shape is the same.
    pub async fn up(options: LabOptions) -> Result<Self> {
        let paths = options
            .lab_dir
            .clone()
            .map(LabPaths::new)
            .unwrap_or_else(LabPaths::from_env);
        let binaries = Binaries::locate()?;
        let cgroups = LabCgroups::detect()?;
        let etcd_lab_binary = match &options.etcd_lab_binary {
            Some(path) => path.clone(),
            None => std::env::current_exe().context(|| "locate the etcd-lab binary".into())?,
        };
        let mut config = LabConfig::new(
            options.nodes,
            options.zones,
            options.controller_manager_flags.clone(),
        )?;
        config.etcd_lab_binary = Some(etcd_lab_binary.clone());

        crate::current::ensure_not_other(paths.root(), &cgroups)?;
        if let Ok(existing) = LabConfig::load(&paths.config_json()) {
            let lab = Self {
                paths: paths.clone(),
                config: existing.clone(),
                cgroups: cgroups.clone(),
                was_already_up: true,
            };
            let healthy = lab.status().await.is_healthy();
            if healthy && existing.same_shape(&config) {
                info!("the lab is already up and healthy");
                return Ok(lab);
            }
            if healthy {
                return Err(LabError::Invalid(format!(
                    "the lab is up with another shape ({} nodes, {} zones, controller-manager flags {:?}); run `etcd-lab down` first",
                    existing.nodes.len(),
                    existing.zones,
                    existing.controller_manager_flags
                )));
            }
            let keep_data = existing.same_shape(&config);
            info!(
                keep_data,
                "cleaning up the pieces of an earlier run that is not healthy"
            );
            teardown::down(&paths, &cgroups, keep_data)?;
        } else if teardown::has_leftovers(&paths, &cgroups) {
            info!("cleaning up the pieces of an earlier run");
            teardown::down(&paths, &cgroups, false)?;
        }

        let started = Instant::now();
        for dir in [
            paths.root().to_owned(),
            paths.logs(),
            paths.run(),
            paths.configs(),
            paths.kubeconfigs(),
            paths.nodes(),
            paths.network_volumes(),
        ] {
            std::fs::create_dir_all(&dir).context(|| format!("create {}", dir.display()))?;
        }
        crate::current::set(paths.root())?;
        let pki = Pki::ensure(&paths.pki())?;
        write_control_plane_kubeconfigs(&paths, &pki)?;
        config.save(&paths.config_json())?;

        let control_plane = ControlPlane {
            paths: &paths,
            pki: &pki,
            binaries: &binaries,
            cgroups: &cgroups,
            controller_manager_flags: &config.controller_manager_flags,
        };
        for component in Component::ALL {
            let pid = control_plane
                .start(component, options.ready_timeout)
                .await?;
            info!(component = component.name(), pid, elapsed = ?started.elapsed(), "ready");
        }

        nodes::setup_network(&config)?;
        info!(elapsed = ?started.elapsed(), "network ready");
        services::start(&paths, &cgroups, &etcd_lab_binary)?;
        config.registry = start_registry(&options, &paths, &cgroups, &etcd_lab_binary).await?;
        config.save(&paths.config_json())?;
        for node in &config.nodes {
            nodes::start_agent(
                &paths,
                &pki,
                &cgroups,
                &binaries,
                &etcd_lab_binary,
                config.registry.as_ref(),
                node,
            )?;
        }
        let lab = Self {
            paths,
            config,
            cgroups,
            was_already_up: false,
        };
        lab.wait_nodes_ready(options.ready_timeout).await?;
        info!(elapsed = ?started.elapsed(), "nodes ready");
        lab.wait_default_service_account(options.ready_timeout)
            .await?;
        info!(elapsed = ?started.elapsed(), "the lab is up");
        Ok(lab)
    }

    /// The lab described by the state directory (`$ETCD_LAB_DIR` when `None`).
    pub fn open(lab_dir: Option<PathBuf>) -> Result<Self> {
        let paths = lab_dir
            .map(LabPaths::new)
            .unwrap_or_else(LabPaths::from_env);
        let config_path = paths.config_json();
        if !config_path.is_file() {
            return Err(LabError::NotUp(config_path));
        }
        Ok(Self {
            config: LabConfig::load(&config_path)?,
            paths,
            cgroups: LabCgroups::detect()?,
            was_already_up: true,
        })
    }

    /// Whether `up` found the lab already running.
    pub fn was_already_up(&self) -> bool {
        self.was_already_up
    }

    pub fn paths(&self) -> &LabPaths {
        &self.paths
    }

    pub fn config(&self) -> &LabConfig {
        &self.config
    }

    pub(crate) fn set_config(&mut self, config: LabConfig) {
        self.config = config;
    }

    pub fn cgroups(&self) -> &LabCgroups {
        &self.cgroups
    }

    /// The admin kubeconfig (server `https://127.0.0.1:6443`).
    pub fn kubeconfig_path(&self) -> PathBuf {
        self.paths.kubeconfig()
    }

    /// An admin client of the lab's API server.
    pub async fn kube_client(&self) -> Result<kube::Client> {
        Ok(crate::client::admin_client(&self.kubeconfig_path()).await?)
    }

    /// Stops everything and removes the state directory unless `keep_data`.
    pub fn down(&self, keep_data: bool) -> Result<()> {
        teardown::down(&self.paths, &self.cgroups, keep_data)
    }

    /// What runs and how the nodes are.
    pub async fn status(&self) -> LabStatus {
        let mut processes = Vec::new();
        for component in Component::ALL {
            let pid = process::running(
                &self.paths.pid_file(component.name()),
                &self.cgroups,
                &component.cgroup(),
            );
            processes.push((component.name().to_owned(), pid));
        }
        processes.push((
            services::NAME.to_owned(),
            process::running(
                &self.paths.pid_file(services::NAME),
                &self.cgroups,
                services::NAME,
            ),
        ));
        if self.config.registry.is_some() {
            processes.push((
                registry::NAME.to_owned(),
                process::running(
                    &self.paths.pid_file(registry::NAME),
                    &self.cgroups,
                    registry::NAME,
                ),
            ));
        }
        for node in &self.config.nodes {
            let name = nodes::agent_name(&node.name);
            let pid = process::running(
                &self.paths.pid_file(&name),
                &self.cgroups,
                &nodes::agent_cgroup(&node.name),
            );
            processes.push((name, pid));
        }
        let (api, node_ready) = match self.node_readiness().await {
            Ok(ready) => (Ok(()), ready),
            Err(e) => (Err(Arc::new(e)), BTreeMap::new()),
        };
        let nodes = self
            .config
            .nodes
            .iter()
            .map(|n| (n.name.clone(), node_ready.get(&n.name).copied()))
            .collect();
        LabStatus {
            lab_dir: self.paths.root().to_owned(),
            processes,
            api,
            nodes,
        }
    }

    /// Node name -> Ready condition is True.
    async fn node_readiness(&self) -> Result<BTreeMap<String, bool>> {
        let client = self.kube_client().await?;
        let nodes: Api<Node> = Api::all(client);
        let list = nodes.list(&ListParams::default()).await?;
        Ok(list
            .items
            .into_iter()
            .filter_map(|node| {
                let name = node.metadata.name?;
                let ready = node
                    .status
                    .and_then(|s| s.conditions)
                    .unwrap_or_default()
                    .iter()
                    .any(|c| c.type_ == "Ready" && c.status == "True");
                Some((name, ready))
            })
            .collect())
    }

    /// Waits until the controller-manager has created the `default`
    /// ServiceAccount of namespace `default`: pods are refused until then.
    pub async fn wait_default_service_account(&self, timeout: Duration) -> Result<()> {
        let accounts: Api<ServiceAccount> = Api::namespaced(self.kube_client().await?, "default");
        let started = Instant::now();
        loop {
            match accounts.get_opt("default").await {
                Ok(Some(_)) => return Ok(()),
                Ok(None) | Err(_) if started.elapsed() < timeout => {
                    tokio::time::sleep(Duration::from_millis(250)).await;
                }
                Ok(None) => {
                    let log = self.paths.log(Component::ControllerManager.name());
                    return Err(LabError::NotReady {
                        component: "ServiceAccount default/default".into(),
                        seconds: timeout.as_secs(),
                        reason: "kube-controller-manager has not created it".into(),
                        tail: process::log_tail(&log, 30),
                        log,
                    });
                }
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// Waits until every node of the lab is Ready.
    pub async fn wait_nodes_ready(&self, timeout: Duration) -> Result<()> {
        let started = Instant::now();
        loop {
            let status = self.status().await;
            let not_ready: Vec<&str> = status
                .nodes
                .iter()
                .filter(|(_, ready)| *ready != Some(true))
                .map(|(name, _)| name.as_str())
                .collect();
            if not_ready.is_empty() {
                return Ok(());
            }
            if let Some((name, _)) = status.processes.iter().find(|(_, pid)| pid.is_none()) {
                let log = self.paths.log(name);
                return Err(LabError::Exited {
                    component: name.clone(),
                    status: "not running while waiting for the nodes".into(),
                    tail: process::log_tail(&log, 30),
                    log,
                });
            }
            if started.elapsed() > timeout {
                let node = not_ready[0];
                let log = self.paths.log(&nodes::agent_name(node));
                return Err(LabError::NotReady {
                    component: format!("nodes {}", not_ready.join(", ")),
                    seconds: timeout.as_secs(),
                    reason: match status.api {
                        Ok(()) => "no Ready=True condition".into(),
                        Err(e) => e.to_string(),
                    },
                    tail: process::log_tail(&log, 30),
                    log,
                });
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }
}

fn write_control_plane_kubeconfigs(paths: &LabPaths, pki: &Pki) -> Result<()> {
    let ca = pki.ca().cert;
    kubeconfig::write(
        &paths.kubeconfig(),
        kubeconfig::SERVER_LOCAL,
        &ca,
        "admin",
        &pki.client("admin"),
    )?;
    for name in ["controller-manager", "scheduler"] {
        kubeconfig::write(
            &paths.kubeconfigs().join(name),
            kubeconfig::SERVER_LOCAL,
            &ca,
            name,
            &pki.client(name),
        )?;
    }
    Ok(())
}

/// A snapshot of the lab.
#[derive(Debug, Clone)]
pub struct LabStatus {
    pub lab_dir: PathBuf,
    /// Process name -> pid when running.
    pub processes: Vec<(String, Option<i32>)>,
    /// Whether the API server answered (the error otherwise).
    pub api: std::result::Result<(), Arc<LabError>>,
    /// Node name -> Ready (None when the Node object is missing).
    pub nodes: Vec<(String, Option<bool>)>,
}

impl LabStatus {
    /// Every process runs, the API answers and every node is Ready.
    pub fn is_healthy(&self) -> bool {
        self.processes.iter().all(|(_, pid)| pid.is_some())
            && self.api.is_ok()
            && self.nodes.iter().all(|(_, ready)| *ready == Some(true))
    }
}

impl std::fmt::Display for LabStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(f, "lab dir: {}", self.lab_dir.display())?;
        for (name, pid) in &self.processes {
            match pid {
                Some(pid) => writeln!(f, "  {name:<28} running (pid {pid})")?,
                None => writeln!(f, "  {name:<28} NOT RUNNING")?,
            }
        }
        match &self.api {
            Ok(()) => writeln!(f, "api server: reachable")?,
            Err(e) => writeln!(f, "api server: {e}")?,
        }
        for (name, ready) in &self.nodes {
            let state = match ready {
                Some(true) => "Ready",
                Some(false) => "NotReady",
                None => "not registered",
            };
            writeln!(f, "  node {name:<23} {state}")?;
        }
        write!(
            f,
            "{}",
            if self.is_healthy() {
                "healthy"
            } else {
                "NOT healthy"
            }
        )
    }
}
