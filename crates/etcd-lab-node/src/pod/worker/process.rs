//! Container processes: `etcd-lab run-container --spec FILE` with its
//! output appended to the container's log, watched until it exits, and
//! stopped with a signal.

use std::path::Path;

use etcd_lab_common::IoContext;
use etcd_lab_common::cgroup;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use super::Worker;
use super::error::{SpawnError, StartError};
use super::termination_message;
use crate::container::ContainerSpec;
use crate::image::resolve_image;
use crate::pod::lifecycle::{ContainerRef, Input, StartFailure, StopSignal};

/// A container process that has not exited yet.
pub(super) struct RunningProcess {
    pub pid: i32,
    pub run: u64,
    /// What it runs with; exec probes run with the same.
    pub spec: ContainerSpec,
}

impl RunningProcess {
    /// SIGTERM to the process; or SIGKILL to it and every process of its
    /// cgroup (`cgroup.kill`, the group removed once empty).
    pub async fn stop(&self, signal: StopSignal, cgroup_dir: &Path) {
        match signal {
            StopSignal::Terminate => {
                let _ = kill(Pid::from_raw(self.pid), Signal::SIGTERM);
            }
            StopSignal::Kill => {
                let _ = kill(Pid::from_raw(self.pid), Signal::SIGKILL);
                cgroup::kill_and_remove(cgroup_dir).await;
            }
        }
    }
}

impl Worker {
    /// Starts run `run` of a container; answers with the input that says
    /// how it went.
    pub(super) async fn start(&mut self, container: ContainerRef, run: u64) -> Input {
        match self.try_start(container, run).await {
            Ok(image_id) => Input::ContainerStarted {
                container,
                run,
                image_id,
            },
            Err(e) => {
                let message = e.to_string();
                let failure = match e {
                    StartError::Image(_) => StartFailure::ImagePull(message),
                    StartError::Config(_) => StartFailure::Config(message),
                    StartError::Spawn(_) => {
                        tracing::warn!(pod = %self.key, container = %self.name_of(container), "start failed: {message}");
                        StartFailure::Run(message)
                    }
                };
                Input::StartFailed { container, failure }
            }
        }
    }

    /// Resolves the image, builds the spec and spawns the process; returns
    /// the image id.
    async fn try_start(&mut self, container: ContainerRef, run: u64) -> Result<String, StartError> {
        let Some(spec) = self.container(container).cloned() else {
            return Err(SpawnError::UnknownContainer.into());
        };
        let always = spec.image_pull_policy.as_deref() == Some("Always");
        let resolved = resolve_image(
            spec.image.as_deref().unwrap_or_default(),
            always,
            &self.ctx.config,
        )
        .await?;
        let runner_spec = self.container_spec(&spec, &resolved).await?;
        let pid = self
            .spawn_process(container, run, &spec, &runner_spec)
            .await?;
        tracing::info!(pod = %self.key, container = %spec.name, pid, "container started");
        self.processes.insert(
            container,
            RunningProcess {
                pid,
                run,
                spec: runner_spec,
            },
        );
        Ok(resolved.image_id)
    }

    /// Spawns the runner and a task that reports its exit (with the
    /// termination message) as an input tagged with `run`.
    async fn spawn_process(
        &mut self,
        container: ContainerRef,
        run: u64,
        spec: &k8s_openapi::api::core::v1::Container,
        runner_spec: &ContainerSpec,
    ) -> Result<i32, SpawnError> {
        let name = &spec.name;
        let containers_dir = self.dir.join("containers");
        std::fs::create_dir_all(&containers_dir)
            .context(|| format!("create {}", containers_dir.display()))?;
        let spec_path = containers_dir.join(format!("{name}.json"));
        std::fs::write(&spec_path, serde_json::to_vec(runner_spec)?)
            .context(|| format!("write {}", spec_path.display()))?;
        let log_path = self.log_path(name);
        if let Some(parent) = log_path.parent() {
            std::fs::create_dir_all(parent).context(|| format!("create {}", parent.display()))?;
        }
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)
            .context(|| format!("open {}", log_path.display()))?;
        let log2 = log
            .try_clone()
            .context(|| format!("open {}", log_path.display()))?;
        // A leftover cgroup from an earlier run is emptied first.
        let cg = self.ctx.cgroups.container(&self.uid, name);
        if cgroup::is_populated(&cg) {
            cgroup::kill_and_remove(&cg).await;
        }
        let binary = &self.ctx.config.etcd_lab_binary;
        let mut child = tokio::process::Command::new(binary)
            .arg("run-container")
            .arg("--spec")
            .arg(&spec_path)
            .stdin(std::process::Stdio::null())
            .stdout(log)
            .stderr(log2)
            .spawn()
            .context(|| format!("spawn {}", binary.display()))?;
        let pid = child
            .id()
            .and_then(|p| i32::try_from(p).ok())
            .ok_or(SpawnError::NoPid)?;
        let events = self.events_tx.clone();
        let policy = spec.termination_message_policy.clone();
        tokio::spawn(async move {
            use std::os::unix::process::ExitStatusExt;
            let (exit_code, signal) = match child.wait().await {
                Ok(status) => match status.signal() {
                    Some(sig) => (128 + sig, Some(sig)),
                    None => (status.code().unwrap_or(255), None),
                },
                Err(_) => (255, None),
            };
            let message =
                termination_message::fallback_to_log(policy.as_deref(), exit_code, &log_path);
            let _ = events
                .send(Input::ContainerExited {
                    container,
                    run,
                    exit_code,
                    signal,
                    message,
                })
                .await;
        });
        Ok(pid)
    }
}
