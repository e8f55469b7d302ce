//! One task per pod: sandbox, volumes, init then app containers, restarts
//! with back-off, probes, status writes, graceful deletion.

use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Container, Pod, PodStatus, Service};
use k8s_openapi::jiff::Timestamp;
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams, Preconditions};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use tokio::sync::{mpsc, watch};

use super::backoff::Backoff;
use super::env::{EnvInputs, KeyedObjects, container_env, expand, referenced_objects};
use super::sandbox::{self, Sandbox};
use super::status::{ContainerView, PodView, RunState, build_status};
use crate::cgroup;
use crate::container::{BindMount, ContainerSpec};
use crate::image::resolve_image;
use crate::node_context::NodeContext;
use crate::probe::{ExecTarget, ProbeEvent, ProbeTarget, run_probes};
use crate::volume::{self, PreparedVolumes, VolumeContext};

/// Handle the agent keeps per pod: send the latest object, or `None` when
/// the pod is gone from the API.
pub(crate) struct PodHandle {
    pub updates: watch::Sender<Option<Arc<Pod>>>,
    pub task: tokio::task::JoinHandle<()>,
}

/// Starts the worker of `pod`.
pub(crate) fn spawn(ctx: Arc<NodeContext>, pod: Arc<Pod>) -> PodHandle {
    let (tx, rx) = watch::channel(Some(pod.clone()));
    let task = tokio::spawn(async move {
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        let mut worker = Worker::new(ctx, pod, rx);
        worker.run().await;
        tracing::info!(pod = %worker.key, %uid, "pod worker finished");
    });
    PodHandle { updates: tx, task }
}

enum Event {
    Exited {
        init: bool,
        index: usize,
        generation: u64,
        code: i32,
        signal: Option<i32>,
    },
    Probe {
        index: usize,
        generation: u64,
        event: ProbeEvent,
    },
}

struct Process {
    pid: i32,
    container_id: String,
    started_at: Timestamp,
    started: Instant,
    probes: Option<tokio::task::JoinHandle<()>>,
}

struct Slot {
    spec: Container,
    view: ContainerView,
    backoff: Backoff,
    process: Option<Process>,
    next_start: Option<Instant>,
    generation: u64,
    runs: u32,
}

impl Slot {
    fn new(spec: &Container, reason: &str) -> Self {
        Self {
            view: ContainerView::new(&spec.name, spec.image.as_deref().unwrap_or(""), reason),
            spec: spec.clone(),
            backoff: Backoff::default(),
            process: None,
            next_start: Some(Instant::now()),
            generation: 0,
            runs: 0,
        }
    }
}

struct Worker {
    ctx: Arc<NodeContext>,
    pod: Arc<Pod>,
    rx: watch::Receiver<Option<Arc<Pod>>>,
    uid: String,
    key: String,
    dir: PathBuf,
    sandbox: Option<Sandbox>,
    volumes: PreparedVolumes,
    volumes_at: Option<Instant>,
    init: Vec<Slot>,
    app: Vec<Slot>,
    init_failed: bool,
    message: Option<(String, String)>,
    start_time: Timestamp,
    events_tx: mpsc::Sender<Event>,
    events_rx: mpsc::Receiver<Event>,
    last_written: Option<PodStatus>,
    gone: bool,
}

const TICK: Duration = Duration::from_secs(1);
/// Projected volumes (tokens) are refreshed this often.
const VOLUME_REFRESH: Duration = Duration::from_secs(600);
/// Retry period while the sandbox or volumes are not ready (unbound claim,
/// volume not yet attached): the kubelet's volume manager checks every
/// 300 ms; each check here reads the VolumeAttachment from the API server.
const PREPARE_RETRY: Duration = Duration::from_millis(500);

impl Worker {
    fn new(ctx: Arc<NodeContext>, pod: Arc<Pod>, rx: watch::Receiver<Option<Arc<Pod>>>) -> Self {
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        let key = format!(
            "{}/{}",
            pod.metadata.namespace.as_deref().unwrap_or("default"),
            pod.metadata.name.as_deref().unwrap_or("")
        );
        let dir = ctx.config.pods_dir().join(&uid);
        let spec = pod.spec.clone().unwrap_or_default();
        let mut init: Vec<Slot> = spec
            .init_containers
            .iter()
            .flatten()
            .map(|c| Slot::new(c, "PodInitializing"))
            .collect();
        let mut app: Vec<Slot> = spec
            .containers
            .iter()
            .map(|c| {
                Slot::new(
                    c,
                    if init.is_empty() {
                        "ContainerCreating"
                    } else {
                        "PodInitializing"
                    },
                )
            })
            .collect();
        // After a node restart: keep restart counts, the earlier run becomes lastState.
        let previous = pod.status.as_ref();
        for (slots, statuses) in [
            (
                &mut init,
                previous.and_then(|s| s.init_container_statuses.as_ref()),
            ),
            (
                &mut app,
                previous.and_then(|s| s.container_statuses.as_ref()),
            ),
        ] {
            for slot in slots.iter_mut() {
                if let Some(old) = statuses
                    .into_iter()
                    .flatten()
                    .find(|s| s.name == slot.spec.name)
                {
                    slot.view.restart_count = old.restart_count;
                    let ran = old
                        .state
                        .as_ref()
                        .is_some_and(|s| s.running.is_some() || s.terminated.is_some());
                    if ran {
                        slot.runs = 1;
                        slot.view.last_state = Some(RunState::Terminated {
                            exit_code: 255,
                            signal: None,
                            reason: "Unknown".into(),
                            message: Some("the node restarted".into()),
                            started_at: None,
                            finished_at: Timestamp::now(),
                            container_id: old.container_id.clone(),
                        });
                    }
                }
            }
        }
        let start_time = previous
            .and_then(|s| s.start_time.as_ref())
            .map(|t| t.0)
            .unwrap_or_else(Timestamp::now);
        let (events_tx, events_rx) = mpsc::channel(64);
        Self {
            ctx,
            pod,
            rx,
            uid,
            key,
            dir,
            sandbox: None,
            volumes: PreparedVolumes::default(),
            volumes_at: None,
            init,
            app,
            init_failed: false,
            message: None,
            start_time,
            events_tx,
            events_rx,
            last_written: None,
            gone: false,
        }
    }

    fn restart_policy(&self) -> &str {
        self.pod
            .spec
            .as_ref()
            .and_then(|s| s.restart_policy.as_deref())
            .unwrap_or("Always")
    }

    fn deleting(&self) -> bool {
        self.pod.metadata.deletion_timestamp.is_some()
    }

    fn previously_terminal(&self) -> bool {
        matches!(
            self.pod.status.as_ref().and_then(|s| s.phase.as_deref()),
            Some("Succeeded" | "Failed")
        )
    }

    async fn run(&mut self) {
        if self.previously_terminal() {
            // A finished pod is not run again; wait for its deletion.
            while !self.gone && !self.deleting() {
                if !self.wait_for_change(Duration::from_secs(3600)).await {
                    break;
                }
            }
            self.finish().await;
            return;
        }
        // Sandbox and volumes.
        while self.sandbox.is_none() {
            if self.gone || self.deleting() {
                self.finish().await;
                return;
            }
            match self.prepare().await {
                Ok(()) => self.message = None,
                Err(message) => {
                    tracing::info!(pod = %self.key, "not ready to start: {message}");
                    for slot in self.init.iter_mut().chain(self.app.iter_mut()) {
                        slot.view.state =
                            RunState::waiting("ContainerCreating", Some(message.clone()));
                    }
                    self.write_status().await;
                    self.wait_for_change(PREPARE_RETRY).await;
                }
            }
        }
        loop {
            if self.gone || self.deleting() {
                self.finish().await;
                return;
            }
            self.refresh_volumes().await;
            self.start_due_containers().await;
            self.write_status().await;
            tokio::select! {
                changed = self.rx.changed() => self.on_pod_change(changed.is_ok()),
                Some(event) = self.events_rx.recv() => self.on_event(event).await,
                _ = tokio::time::sleep(TICK) => {}
            }
        }
    }

    fn on_pod_change(&mut self, ok: bool) {
        let latest = if ok {
            self.rx.borrow_and_update().clone()
        } else {
            None
        };
        match latest {
            Some(pod) => self.pod = pod,
            None => self.gone = true,
        }
    }

    /// Waits for a pod change or the timeout; false when the sender is gone.
    async fn wait_for_change(&mut self, timeout: Duration) -> bool {
        tokio::select! {
            changed = self.rx.changed() => {
                let ok = changed.is_ok();
                self.on_pod_change(ok);
                ok
            }
            _ = tokio::time::sleep(timeout) => true,
        }
    }

    fn volume_context(&self) -> VolumeContextOwned {
        VolumeContextOwned {
            network_volumes_dir: self.ctx.config.network_volumes_dir(),
        }
    }

    async fn prepare(&mut self) -> Result<(), String> {
        let owned = self.volume_context();
        let vctx = VolumeContext {
            client: &self.ctx.client,
            node_name: &self.ctx.config.node_name,
            pod_dir: &self.dir,
            network_volumes_dir: &owned.network_volumes_dir,
            ca_cert: &self.ctx.config.ca_cert,
        };
        let attachable = volume::attachable_volumes(&vctx, &self.pod).await;
        self.ctx.set_volumes_in_use(&self.uid, attachable);
        let volumes = volume::prepare(&vctx, &self.pod)
            .await
            .map_err(|e| e.to_string())?;
        self.ctx
            .set_volumes_in_use(&self.uid, volumes.in_use.clone());
        self.volumes = volumes;
        self.volumes_at = Some(Instant::now());
        let config = self.ctx.config.clone();
        let pod = self.pod.clone();
        let uid = self.uid.clone();
        let dir = self.dir.clone();
        let sandbox =
            tokio::task::spawn_blocking(move || sandbox::create(&config, &pod, &uid, &dir))
                .await
                .map_err(|e| e.to_string())?
                .map_err(|e| e.to_string())?;
        tracing::info!(pod = %self.key, ip = %sandbox.ip, "sandbox ready");
        self.sandbox = Some(sandbox);
        Ok(())
    }

    /// Re-writes file volumes (service-account tokens expire).
    async fn refresh_volumes(&mut self) {
        if self
            .volumes_at
            .is_some_and(|t| t.elapsed() < VOLUME_REFRESH)
        {
            return;
        }
        let owned = self.volume_context();
        let vctx = VolumeContext {
            client: &self.ctx.client,
            node_name: &self.ctx.config.node_name,
            pod_dir: &self.dir,
            network_volumes_dir: &owned.network_volumes_dir,
            ca_cert: &self.ctx.config.ca_cert,
        };
        match volume::prepare(&vctx, &self.pod).await {
            Ok(v) => {
                self.volumes = v;
                self.volumes_at = Some(Instant::now());
            }
            Err(e) => tracing::warn!(pod = %self.key, "refreshing volumes: {e}"),
        }
    }

    async fn start_due_containers(&mut self) {
        if self.init_failed {
            return;
        }
        let now = Instant::now();
        // Init containers: one at a time, in order.
        if let Some(index) = self.init.iter().position(|s| !s.view.state.succeeded()) {
            let slot = &self.init[index];
            if slot.process.is_none() && slot.next_start.is_some_and(|t| t <= now) {
                self.start(true, index).await;
            }
            return;
        }
        for index in 0..self.app.len() {
            let slot = &self.app[index];
            if slot.process.is_none()
                && !slot.view.finished
                && slot.next_start.is_some_and(|t| t <= now)
            {
                self.start(false, index).await;
            }
        }
    }

    fn slot(&mut self, init: bool, index: usize) -> &mut Slot {
        if init {
            &mut self.init[index]
        } else {
            &mut self.app[index]
        }
    }

    async fn kubernetes_service(&self) -> Option<(String, i32)> {
        let svc = Api::<Service>::namespaced(self.ctx.client.clone(), "default")
            .get_opt("kubernetes")
            .await
            .ok()
            .flatten()?;
        let spec = svc.spec?;
        let ip = spec.cluster_ip?;
        let port = spec.ports?.first()?.port;
        Some((ip, port))
    }

    async fn keyed_objects(&self, container: &Container) -> KeyedObjects {
        use k8s_openapi::api::core::v1::{ConfigMap, Secret};
        let ns = self
            .pod
            .metadata
            .namespace
            .clone()
            .unwrap_or_else(|| "default".into());
        let (cms, secrets) = referenced_objects(&[container]);
        let mut out = KeyedObjects::default();
        for name in cms {
            if let Ok(Some(cm)) = Api::<ConfigMap>::namespaced(self.ctx.client.clone(), &ns)
                .get_opt(&name)
                .await
            {
                out.config_maps.insert(name, cm.data.unwrap_or_default());
            }
        }
        for name in secrets {
            if let Ok(Some(s)) = Api::<Secret>::namespaced(self.ctx.client.clone(), &ns)
                .get_opt(&name)
                .await
            {
                let data = s
                    .data
                    .unwrap_or_default()
                    .into_iter()
                    .map(|(k, v)| (k, String::from_utf8_lossy(&v.0).into_owned()))
                    .collect();
                out.secrets.insert(name, data);
            }
        }
        out
    }

    fn container_spec(
        &self,
        container: &Container,
        env: Vec<(String, String)>,
        image_files: Vec<crate::container::ImageFile>,
    ) -> Result<ContainerSpec, String> {
        let sandbox = self.sandbox.as_ref().ok_or("no sandbox")?;
        let pod_sc = self
            .pod
            .spec
            .as_ref()
            .and_then(|s| s.security_context.as_ref());
        let sc = container.security_context.as_ref();
        let to_u32 = |v: Option<i64>| v.and_then(|v| u32::try_from(v).ok());
        let uid = to_u32(
            sc.and_then(|s| s.run_as_user)
                .or(pod_sc.and_then(|s| s.run_as_user)),
        );
        let gid = to_u32(
            sc.and_then(|s| s.run_as_group)
                .or(pod_sc.and_then(|s| s.run_as_group)),
        );
        let mut groups: Vec<u32> = pod_sc
            .and_then(|s| s.supplemental_groups.clone())
            .unwrap_or_default()
            .into_iter()
            .filter_map(|g| u32::try_from(g).ok())
            .collect();
        if let Some(fs) = to_u32(pod_sc.and_then(|s| s.fs_group)) {
            groups.push(fs);
        }
        let mut mounts = Vec::new();
        for m in container.volume_mounts.iter().flatten() {
            let base = self
                .volumes
                .paths
                .get(&m.name)
                .ok_or_else(|| format!("volume {:?} is not defined in the pod", m.name))?;
            let source = match m.sub_path.as_deref() {
                Some(sub) if !sub.is_empty() => {
                    let p = base.join(sub);
                    std::fs::create_dir_all(&p).map_err(|e| e.to_string())?;
                    p
                }
                _ => base.clone(),
            };
            mounts.push(BindMount {
                source,
                target: PathBuf::from(&m.mount_path),
                read_only: m.read_only.unwrap_or(false),
            });
        }
        let vars: std::collections::BTreeMap<String, String> = env.iter().cloned().collect();
        let mut argv: Vec<String> = container.command.clone().unwrap_or_default();
        argv.extend(container.args.clone().unwrap_or_default());
        let argv: Vec<String> = argv.iter().map(|a| expand(a, &vars)).collect();
        if argv.is_empty() {
            return Err("container has no command: lab images have no entrypoint".into());
        }
        Ok(ContainerSpec {
            netns: sandbox.netns.clone(),
            hostname: Some(super::dns::pod_hostname(&self.pod)),
            root_dir: self.dir.join("rootfs").join(&container.name),
            cgroup: Some(self.ctx.cgroups.container(&self.uid, &container.name)),
            hosts_file: sandbox.hosts_file.clone(),
            resolv_conf: sandbox.resolv_conf.clone(),
            image_files,
            mounts,
            argv,
            env,
            working_dir: container.working_dir.clone().map(PathBuf::from),
            uid,
            gid,
            supplementary_groups: groups,
        })
    }

    /// `terminationMessagePolicy: FallbackToLogsOnError`: the tail of the
    /// container's log (the kubelet's limits: 80 lines, 2048 bytes) becomes
    /// the termination message of a failed run. The termination message
    /// file is not read.
    fn fallback_termination_message(&self, init: bool, index: usize) -> Option<String> {
        let spec = self.pod.spec.as_ref()?;
        let container = if init {
            spec.init_containers.as_ref()?.get(index)?
        } else {
            spec.containers.get(index)?
        };
        if container.termination_message_policy.as_deref() != Some("FallbackToLogsOnError") {
            return None;
        }
        let log = std::fs::read(self.log_path(&container.name)).ok()?;
        let tail = &log[log.len().saturating_sub(2048)..];
        let text = String::from_utf8_lossy(tail);
        let lines: Vec<&str> = text.trim_end().lines().collect();
        let message = lines[lines.len().saturating_sub(80)..].join("\n");
        (!message.is_empty()).then_some(message)
    }

    fn log_path(&self, container: &str) -> PathBuf {
        let ns = self.pod.metadata.namespace.as_deref().unwrap_or("default");
        let name = self.pod.metadata.name.as_deref().unwrap_or("");
        self.ctx
            .config
            .node_log_dir()
            .join("pods")
            .join(format!("{ns}_{name}_{}", self.uid))
            .join(format!("{container}.log"))
    }

    async fn start(&mut self, init: bool, index: usize) {
        let container = self.slot(init, index).spec.clone();
        let image = container.image.clone().unwrap_or_default();
        let config = &self.ctx.config;
        let resolved =
            match resolve_image(&image, &config.etcd_images, &config.etcd_operator_binary) {
                Ok(r) => r,
                Err(e) => {
                    let slot = self.slot(init, index);
                    let reason = if slot.view.state
                        == RunState::waiting("ErrImagePull", Some(e.to_string()))
                    {
                        "ImagePullBackOff"
                    } else {
                        "ErrImagePull"
                    };
                    let delay = slot
                        .backoff
                        .next_delay(Duration::ZERO)
                        .max(Duration::from_secs(5));
                    slot.view.state = RunState::waiting(reason, Some(e.to_string()));
                    slot.next_start = Some(Instant::now() + delay);
                    return;
                }
            };
        let Some(sandbox) = self.sandbox.clone() else {
            return;
        };
        let objects = self.keyed_objects(&container).await;
        let kubernetes_service = self.kubernetes_service().await;
        let hostname = super::dns::pod_hostname(&self.pod);
        let inputs = EnvInputs {
            pod: &self.pod,
            pod_ip: sandbox.ip,
            host_ip: self.ctx.config.node_ip,
            hostname: &hostname,
            kubernetes_service,
            objects: &objects,
        };
        let spec = container_env(&container, &inputs)
            .map_err(|e| e.to_string())
            .and_then(|env| self.container_spec(&container, env, resolved.files.clone()));
        let spec = match spec {
            Ok(s) => s,
            Err(message) => {
                let slot = self.slot(init, index);
                slot.view.state = RunState::waiting("CreateContainerConfigError", Some(message));
                slot.next_start = Some(Instant::now() + Duration::from_secs(5));
                return;
            }
        };
        match self
            .spawn_process(init, index, &spec, &resolved.image_id)
            .await
        {
            Ok(()) => {}
            Err(message) => {
                tracing::warn!(pod = %self.key, container = %container.name, "start failed: {message}");
                let slot = self.slot(init, index);
                slot.view.state = RunState::waiting("RunContainerError", Some(message));
                slot.next_start = Some(Instant::now() + Duration::from_secs(10));
            }
        }
    }

    async fn spawn_process(
        &mut self,
        init: bool,
        index: usize,
        spec: &ContainerSpec,
        image_id: &str,
    ) -> Result<(), String> {
        let name = spec_name(spec);
        let containers_dir = self.dir.join("containers");
        std::fs::create_dir_all(&containers_dir).map_err(|e| e.to_string())?;
        let spec_path = containers_dir.join(format!("{name}.json"));
        std::fs::write(
            &spec_path,
            serde_json::to_vec(spec).map_err(|e| e.to_string())?,
        )
        .map_err(|e| e.to_string())?;
        let log_path = self.log_path(&name);
        if let Some(parent) = log_path.parent() {
            std::fs::create_dir_all(parent).map_err(|e| e.to_string())?;
        }
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)
            .map_err(|e| format!("open {}: {e}", log_path.display()))?;
        let log2 = log.try_clone().map_err(|e| e.to_string())?;
        // A leftover cgroup from an earlier run is emptied first.
        let cg = self.ctx.cgroups.container(&self.uid, &name);
        if cgroup::is_populated(&cg) {
            cgroup::kill_and_remove(&cg).await;
        }
        let mut child = tokio::process::Command::new(&self.ctx.config.etcd_lab_binary)
            .arg("run-container")
            .arg("--spec")
            .arg(&spec_path)
            .stdin(std::process::Stdio::null())
            .stdout(log)
            .stderr(log2)
            .spawn()
            .map_err(|e| format!("spawn {}: {e}", self.ctx.config.etcd_lab_binary.display()))?;
        let pid = child
            .id()
            .and_then(|p| i32::try_from(p).ok())
            .ok_or("child has no pid")?;
        let events = self.events_tx.clone();
        let slot = self.slot(init, index);
        slot.generation += 1;
        let generation = slot.generation;
        tokio::spawn(async move {
            use std::os::unix::process::ExitStatusExt;
            let (code, signal) = match child.wait().await {
                Ok(status) => match status.signal() {
                    Some(sig) => (128 + sig, Some(sig)),
                    None => (status.code().unwrap_or(255), None),
                },
                Err(_) => (255, None),
            };
            let _ = events
                .send(Event::Exited {
                    init,
                    index,
                    generation,
                    code,
                    signal,
                })
                .await;
        });
        let pod_ip = self
            .sandbox
            .as_ref()
            .map(|s| s.ip)
            .unwrap_or(Ipv4Addr::UNSPECIFIED);
        let lab_binary = self.ctx.config.etcd_lab_binary.clone();
        let probe_spec_path = containers_dir.join(format!("{name}.probe.json"));
        let key = self.key.clone();
        let events = self.events_tx.clone();
        let uid_short = self.uid_short();
        let slot = self.slot(init, index);
        if slot.runs > 0 {
            slot.view.restart_count += 1;
        }
        slot.runs += 1;
        let container_id = format!("lab://{uid_short}-{name}-{}", slot.view.restart_count);
        slot.view.container_id = Some(container_id.clone());
        slot.view.image_id = Some(image_id.to_owned());
        let started_at = Timestamp::now();
        slot.view.state = RunState::Running { started_at };
        slot.view.ready = false;
        slot.view.started = false;
        slot.next_start = None;
        let has_probes = !init
            && (slot.spec.startup_probe.is_some()
                || slot.spec.liveness_probe.is_some()
                || slot.spec.readiness_probe.is_some());
        let probes = if init {
            None
        } else if has_probes {
            let target = ProbeTarget {
                pod_ip,
                container: slot.spec.clone(),
                exec: ExecTarget {
                    lab_binary,
                    spec: spec.clone(),
                    spec_path: probe_spec_path,
                },
            };
            let (ptx, mut prx) = mpsc::channel(8);
            let handle = tokio::spawn(async move {
                let forward = async {
                    while let Some(event) = prx.recv().await {
                        if events
                            .send(Event::Probe {
                                index,
                                generation,
                                event,
                            })
                            .await
                            .is_err()
                        {
                            break;
                        }
                    }
                };
                tokio::join!(run_probes(target, ptx), forward);
            });
            Some(handle)
        } else {
            slot.view.started = true;
            slot.view.ready = true;
            None
        };
        tracing::info!(pod = %key, container = %name, pid, "container started");
        slot.process = Some(Process {
            pid,
            container_id,
            started_at,
            started: Instant::now(),
            probes,
        });
        Ok(())
    }

    fn uid_short(&self) -> String {
        self.uid.chars().take(8).collect()
    }

    async fn on_event(&mut self, event: Event) {
        match event {
            Event::Exited {
                init,
                index,
                generation,
                code,
                signal,
            } => {
                let policy = self.restart_policy().to_owned();
                let uid = self.uid.clone();
                let key = self.key.clone();
                let message = if code != 0 {
                    self.fallback_termination_message(init, index)
                } else {
                    None
                };
                let slot = self.slot(init, index);
                if slot.generation != generation {
                    return;
                }
                let Some(process) = slot.process.take() else {
                    return;
                };
                if let Some(p) = process.probes {
                    p.abort();
                }
                let name = slot.spec.name.clone();
                let terminated = RunState::Terminated {
                    exit_code: code,
                    signal,
                    reason: if code == 0 {
                        "Completed".into()
                    } else {
                        "Error".into()
                    },
                    message,
                    started_at: Some(process.started_at),
                    finished_at: Timestamp::now(),
                    container_id: Some(process.container_id),
                };
                tracing::info!(pod = %key, container = %name, code, "container exited");
                slot.view.ready = false;
                slot.view.state = terminated.clone();
                let restart = match policy.as_str() {
                    "Never" => false,
                    "OnFailure" => code != 0,
                    _ => !(init && code == 0),
                };
                if init && code == 0 {
                    // Done; the next init container (or the apps) start on the next tick.
                } else if restart {
                    let delay = slot.backoff.next_delay(process.started.elapsed());
                    slot.view.last_state = Some(terminated);
                    if !delay.is_zero() {
                        slot.view.state = RunState::waiting(
                            "CrashLoopBackOff",
                            Some(format!(
                                "back-off {}s restarting failed container={name} pod={key}",
                                delay.as_secs()
                            )),
                        );
                    }
                    slot.next_start = Some(Instant::now() + delay);
                } else {
                    slot.view.finished = true;
                    if init {
                        self.init_failed = true;
                    }
                }
                let cg = self.ctx.cgroups.container(&uid, &name);
                cgroup::kill_and_remove(&cg).await;
            }
            Event::Probe {
                index,
                generation,
                event,
            } => {
                let grace = self.grace_seconds(false);
                let key = self.key.clone();
                let slot = &mut self.app[index];
                if slot.generation != generation || slot.process.is_none() {
                    return;
                }
                match event {
                    ProbeEvent::Started => {
                        slot.view.started = true;
                        if slot.spec.readiness_probe.is_none() {
                            slot.view.ready = true;
                        }
                    }
                    ProbeEvent::Ready(ready) => slot.view.ready = ready && slot.view.started,
                    ProbeEvent::Unhealthy(kind, message) => {
                        tracing::info!(pod = %key, container = %slot.spec.name, ?kind, "probe failed, restarting: {message}");
                        slot.view.ready = false;
                        if let Some(p) = &slot.process {
                            stop_process(
                                p.pid,
                                self.ctx.cgroups.container(&self.uid, &slot.spec.name),
                                grace,
                            );
                        }
                    }
                }
            }
        }
    }

    fn grace_seconds(&self, deleting: bool) -> u64 {
        let from_delete = if deleting {
            self.pod.metadata.deletion_grace_period_seconds
        } else {
            None
        };
        let v = from_delete
            .or(self
                .pod
                .spec
                .as_ref()
                .and_then(|s| s.termination_grace_period_seconds))
            .unwrap_or(30);
        u64::try_from(v.max(0)).unwrap_or(0)
    }

    fn build(&self) -> PodStatus {
        let view = PodView {
            init: self.init.iter().map(|s| s.view.clone()).collect(),
            app: self.app.iter().map(|s| s.view.clone()).collect(),
            pod_ip: self.sandbox.as_ref().map(|s| s.ip),
            host_ip: self.ctx.config.node_ip,
            start_time: self.start_time,
            sandbox_ready: self.sandbox.is_some(),
            init_failed: self.init_failed,
            message: self.message.clone(),
        };
        build_status(&view, self.pod.status.as_ref(), Timestamp::now())
    }

    async fn write_status(&mut self) {
        if self.gone {
            return;
        }
        let status = self.build();
        if self.last_written.as_ref() == Some(&status) {
            return;
        }
        let ns = self
            .pod
            .metadata
            .namespace
            .clone()
            .unwrap_or_else(|| "default".into());
        let name = self.pod.metadata.name.clone().unwrap_or_default();
        let mut value = match serde_json::to_value(&status) {
            Ok(v) => v,
            Err(_) => return,
        };
        if let Some(obj) = value.as_object_mut() {
            for field in ["reason", "message"] {
                obj.entry(field).or_insert(serde_json::Value::Null);
            }
        }
        let patch = serde_json::json!({ "status": value });
        let api = Api::<Pod>::namespaced(self.ctx.client.clone(), &ns);
        match api
            .patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(pod) => {
                self.last_written = Some(status);
                if pod.metadata.uid.as_deref() == Some(self.uid.as_str()) {
                    self.pod = Arc::new(pod);
                }
            }
            Err(kube::Error::Api(e)) if e.code == 404 => self.gone = true,
            Err(e) => tracing::warn!(pod = %self.key, "status update failed: {e}"),
        }
    }

    /// Stops every container (gracefully unless the pod is gone), reports the
    /// final status, deletes the pod object and tears down the sandbox.
    async fn finish(&mut self) {
        let grace = if self.gone {
            0
        } else {
            self.grace_seconds(true)
        };
        let deadline = Instant::now() + Duration::from_secs(grace);
        let mut running: Vec<(bool, usize)> = Vec::new();
        for (init, slots) in [(true, &self.init), (false, &self.app)] {
            for (i, s) in slots.iter().enumerate() {
                if let Some(p) = &s.process {
                    let _ = kill(
                        Pid::from_raw(p.pid),
                        if grace == 0 {
                            Signal::SIGKILL
                        } else {
                            Signal::SIGTERM
                        },
                    );
                    running.push((init, i));
                }
            }
        }
        tracing::info!(pod = %self.key, grace, containers = running.len(), "stopping pod");
        let mut killed = grace == 0;
        while self
            .init
            .iter()
            .chain(self.app.iter())
            .any(|s| s.process.is_some())
        {
            let wait = if killed {
                Duration::from_secs(10)
            } else {
                deadline.saturating_duration_since(Instant::now())
            };
            match tokio::time::timeout(wait, self.events_rx.recv()).await {
                Ok(Some(event @ Event::Exited { .. })) => self.on_event(event).await,
                Ok(Some(_)) => {}
                Ok(None) => break,
                Err(_) if !killed => {
                    killed = true;
                    for s in self.init.iter().chain(self.app.iter()) {
                        if s.process.is_some() {
                            let cg = self.ctx.cgroups.container(&self.uid, &s.spec.name);
                            cgroup::kill_and_remove(&cg).await;
                        }
                    }
                }
                Err(_) => break,
            }
        }
        for s in self.init.iter().chain(self.app.iter()) {
            let cg = self.ctx.cgroups.container(&self.uid, &s.spec.name);
            cgroup::kill_and_remove(&cg).await;
        }
        for slot in self.app.iter_mut() {
            slot.view.finished = true;
            slot.view.ready = false;
            if let RunState::Waiting { .. } = slot.view.state
                && let Some(last) = slot.view.last_state.clone()
            {
                slot.view.state = last;
            }
        }
        let uid = self.uid.clone();
        tokio::task::spawn_blocking(move || sandbox::destroy(&uid))
            .await
            .ok();
        self.ctx.set_volumes_in_use(&self.uid, Vec::new());
        if !self.gone {
            self.write_status().await;
            if self.deleting() {
                let ns = self
                    .pod
                    .metadata
                    .namespace
                    .clone()
                    .unwrap_or_else(|| "default".into());
                let name = self.pod.metadata.name.clone().unwrap_or_default();
                let params = DeleteParams {
                    grace_period_seconds: Some(0),
                    preconditions: Some(Preconditions {
                        uid: Some(self.uid.clone()),
                        resource_version: None,
                    }),
                    ..Default::default()
                };
                match Api::<Pod>::namespaced(self.ctx.client.clone(), &ns)
                    .delete(&name, &params)
                    .await
                {
                    Ok(_) => tracing::info!(pod = %self.key, "pod deleted"),
                    Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => {}
                    Err(e) => tracing::warn!(pod = %self.key, "final delete failed: {e}"),
                }
            }
        }
        if let Err(e) = std::fs::remove_dir_all(&self.dir)
            && e.kind() != std::io::ErrorKind::NotFound
        {
            tracing::warn!(pod = %self.key, "removing {}: {e}", self.dir.display());
        }
    }
}

struct VolumeContextOwned {
    network_volumes_dir: PathBuf,
}

fn spec_name(spec: &ContainerSpec) -> String {
    spec.root_dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// SIGTERM now, and `cgroup.kill` after the grace period if still running.
fn stop_process(pid: i32, cgroup_dir: PathBuf, grace: u64) {
    let _ = kill(Pid::from_raw(pid), Signal::SIGTERM);
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_secs(grace)).await;
        if kill(Pid::from_raw(pid), None).is_ok() {
            cgroup::kill_and_remove(&cgroup_dir).await;
        }
    });
}
