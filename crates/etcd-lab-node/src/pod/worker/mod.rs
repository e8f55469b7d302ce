//! One task per pod: runs the effects of the pod's [`PodLifecycle`] for
//! real (sandbox, volumes, container processes, probes, status writes, the
//! final delete) and feeds back what happened as its inputs.

mod container_config;
mod error;
mod prepare;
mod probes;
mod process;
mod status_writer;
mod termination_message;

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use tokio::sync::{mpsc, watch};

use super::lifecycle::{ContainerRef, Effect, Input, Moment, PodLifecycle, deletion_grace};
use super::sandbox::Sandbox;
use crate::node_context::NodeContext;
use crate::volume::PreparedVolumes;
use process::RunningProcess;
use status_writer::StatusWriter;

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

/// The periodic tick: volume refresh and a safety net for timers.
const TICK: Duration = Duration::from_secs(1);

struct Worker {
    ctx: Arc<NodeContext>,
    pod: Arc<Pod>,
    rx: watch::Receiver<Option<Arc<Pod>>>,
    uid: String,
    key: String,
    dir: PathBuf,
    network_volumes_dir: PathBuf,
    lifecycle: PodLifecycle,
    sandbox: Option<Sandbox>,
    volumes: PreparedVolumes,
    volumes_at: Option<Instant>,
    processes: HashMap<ContainerRef, RunningProcess>,
    probes: HashMap<ContainerRef, tokio::task::JoinHandle<()>>,
    /// Exits and probe results of the containers, already as inputs.
    events_tx: mpsc::Sender<Input>,
    events_rx: mpsc::Receiver<Input>,
    wake_ups: BTreeSet<Instant>,
    status: StatusWriter,
    deletion_sent: bool,
}

impl Worker {
    fn new(ctx: Arc<NodeContext>, pod: Arc<Pod>, rx: watch::Receiver<Option<Arc<Pod>>>) -> Self {
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        let key = format!(
            "{}/{}",
            pod.metadata.namespace.as_deref().unwrap_or("default"),
            pod.metadata.name.as_deref().unwrap_or("")
        );
        let dir = ctx.config.pods_dir().join(&uid);
        let lifecycle = PodLifecycle::new(&pod, ctx.config.node_ip, Moment::now());
        let (events_tx, events_rx) = mpsc::channel(64);
        Self {
            pod,
            rx,
            uid,
            key,
            dir,
            network_volumes_dir: ctx.config.network_volumes_dir(),
            ctx,
            lifecycle,
            sandbox: None,
            volumes: PreparedVolumes::default(),
            volumes_at: None,
            processes: HashMap::new(),
            probes: HashMap::new(),
            events_tx,
            events_rx,
            wake_ups: BTreeSet::new(),
            status: StatusWriter::default(),
            deletion_sent: false,
        }
    }

    async fn run(&mut self) {
        let pod = self.pod.clone();
        self.on_pod(Some(pod)).await;
        self.step(Input::Tick).await;
        while !self.lifecycle.is_done() {
            let now = Instant::now();
            self.wake_ups.retain(|t| *t > now);
            let wake = self
                .wake_ups
                .first()
                .copied()
                .map_or(now + TICK, |t| t.min(now + TICK));
            tokio::select! {
                changed = self.rx.changed() => {
                    let latest = match changed {
                        Ok(()) => self.rx.borrow_and_update().clone(),
                        Err(_) => None,
                    };
                    self.on_pod(latest).await;
                }
                Some(input) = self.events_rx.recv() => self.on_container_event(input).await,
                _ = tokio::time::sleep_until(wake.into()) => {
                    if !self.lifecycle.is_stopping() {
                        self.refresh_volumes().await;
                    }
                    self.step(Input::Tick).await;
                }
            }
        }
    }

    /// A new version of the pod object (`None`: gone from the API).
    async fn on_pod(&mut self, latest: Option<Arc<Pod>>) {
        match latest {
            Some(pod) => {
                self.pod = pod;
                if self.pod.metadata.deletion_timestamp.is_some() && !self.deletion_sent {
                    self.deletion_sent = true;
                    let grace = deletion_grace(&self.pod);
                    self.step(Input::DeletionRequested { grace }).await;
                }
            }
            None => {
                self.status.pod_gone();
                self.step(Input::PodGone).await;
            }
        }
    }

    /// An exit or probe result from a container's tasks.
    async fn on_container_event(&mut self, input: Input) {
        match &input {
            Input::ContainerExited {
                container,
                run,
                exit_code,
                ..
            } => {
                if self.processes.get(container).is_some_and(|p| p.run == *run) {
                    self.processes.remove(container);
                }
                tracing::info!(pod = %self.key, container = %self.name_of(*container), code = exit_code, "container exited");
            }
            Input::Probe {
                container,
                event: crate::probe::ProbeEvent::Unhealthy(kind, message),
                ..
            } => {
                tracing::info!(pod = %self.key, container = %self.name_of(*container), ?kind, "probe failed, restarting: {message}");
            }
            _ => {}
        }
        self.step(input).await;
    }

    /// Hands one input to the lifecycle and runs the effects, feeding the
    /// answers of effects (sandbox ready, container started, ...) back in
    /// the same step. The status is written once, at the end of the step
    /// (or before the pod object is deleted).
    async fn step(&mut self, input: Input) {
        let mut inputs = VecDeque::from([input]);
        while let Some(input) = inputs.pop_front() {
            let effects = self.lifecycle.handle(input, Moment::now());
            for effect in effects {
                if let Some(answer) = self.run_effect(effect).await {
                    inputs.push_back(answer);
                }
            }
        }
        self.status
            .flush(&self.ctx, &mut self.pod, &self.uid, &self.key)
            .await;
    }

    async fn run_effect(&mut self, effect: Effect) -> Option<Input> {
        match effect {
            Effect::PrepareSandbox => Some(match self.prepare().await {
                Ok(pod_ip) => Input::SandboxReady { pod_ip },
                Err(e) => {
                    let message = e.to_string();
                    tracing::info!(pod = %self.key, "not ready to start: {message}");
                    Input::SandboxFailed { message }
                }
            }),
            Effect::StartContainer { container, run } => Some(self.start(container, run).await),
            Effect::RunProbes { container, run } => {
                self.run_probes(container, run);
                None
            }
            Effect::StopProbes { container } => {
                if let Some(probes) = self.probes.remove(&container) {
                    probes.abort();
                }
                None
            }
            Effect::Stop { container, signal } => {
                if let Some(process) = self.processes.get(&container) {
                    let cgroup = self.cgroup_of(container);
                    process.stop(signal, &cgroup).await;
                }
                None
            }
            Effect::ReleaseCgroup { container } => {
                etcd_lab_common::cgroup::kill_and_remove(&self.cgroup_of(container)).await;
                None
            }
            Effect::SetStatus(view) => {
                self.status.set(view);
                None
            }
            Effect::WakeAt(at) => {
                self.wake_ups.insert(at);
                None
            }
            Effect::TearDown { delete_pod } => {
                self.tear_down(delete_pod).await;
                None
            }
        }
    }

    /// Removes the sandbox, unmounts the pod's claims, forgets the volumes,
    /// writes the last status, deletes the pod object when asked and
    /// removes the pod's directory (kept, with a warning, while anything is
    /// still mounted under it: removing it would reach into a volume).
    async fn tear_down(&mut self, delete_pod: bool) {
        tracing::info!(pod = %self.key, "stopping pod");
        for (_, probes) in self.probes.drain() {
            probes.abort();
        }
        let uid = self.uid.clone();
        tokio::task::spawn_blocking(move || super::sandbox::destroy(&uid))
            .await
            .ok();
        let unmounted = crate::volume::unmount_claims(&self.dir).await;
        if let Err(e) = &unmounted {
            tracing::warn!(pod = %self.key, "unmounting the pod's volumes: {e}");
        }
        self.ctx.set_volumes_in_use(&self.uid, Vec::new());
        self.status
            .flush(&self.ctx, &mut self.pod, &self.uid, &self.key)
            .await;
        if delete_pod {
            status_writer::delete_pod(&self.ctx, &self.pod, &self.uid, &self.key).await;
        }
        let mounted = crate::volume::disk::mountinfo::read()
            .map(|mounts| crate::volume::disk::mountinfo::under(&mounts, &self.dir));
        match mounted {
            Ok(mounts) if mounts.is_empty() => {
                if let Err(e) = std::fs::remove_dir_all(&self.dir)
                    && e.kind() != std::io::ErrorKind::NotFound
                {
                    tracing::warn!(pod = %self.key, "removing {}: {e}", self.dir.display());
                }
            }
            Ok(mounts) => {
                tracing::warn!(pod = %self.key, ?mounts, "still mounted: {} kept", self.dir.display());
            }
            Err(e) => tracing::warn!(pod = %self.key, "{e}: {} kept", self.dir.display()),
        }
    }

    fn container(&self, container: ContainerRef) -> Option<&k8s_openapi::api::core::v1::Container> {
        let spec = self.pod.spec.as_ref()?;
        match container {
            ContainerRef::Init(i) => spec.init_containers.as_ref()?.get(i),
            ContainerRef::App(i) => spec.containers.get(i),
        }
    }

    fn name_of(&self, container: ContainerRef) -> String {
        self.container(container)
            .map(|c| c.name.clone())
            .unwrap_or_default()
    }

    fn cgroup_of(&self, container: ContainerRef) -> PathBuf {
        self.ctx
            .cgroups
            .container(&self.uid, &self.name_of(container))
    }

    /// `LAB_DIR/logs/nodes/NODE/pods/NS_NAME_UID/CONTAINER.log`.
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
}
