//! What the lifecycle asks the worker to do: its outputs.

use std::time::Instant;

use crate::pod::status::PodView;

/// One container of the pod: the index into its init or app containers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ContainerRef {
    Init(usize),
    App(usize),
}

/// How to stop a container.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopSignal {
    /// SIGTERM to the container's process: it may shut down cleanly.
    Terminate,
    /// SIGKILL to the container's process and every process of its cgroup.
    Kill,
}

/// One action for the worker, in the order given.
#[derive(Debug, Clone, PartialEq)]
pub enum Effect {
    /// Prepare the sandbox and volumes; answer with `SandboxReady` or
    /// `SandboxFailed`.
    PrepareSandbox,
    /// Start run `run` of a container; answer with `ContainerStarted` or
    /// `StartFailed`, and tag its exit and probe results with `run`.
    StartContainer { container: ContainerRef, run: u64 },
    /// Run the startup, liveness and readiness probes of run `run`.
    RunProbes { container: ContainerRef, run: u64 },
    /// Stop the probes of a container whose run ended.
    StopProbes { container: ContainerRef },
    /// Signal a running container.
    Stop {
        container: ContainerRef,
        signal: StopSignal,
    },
    /// Empty and remove the cgroup of a container that is not running.
    ReleaseCgroup { container: ContainerRef },
    /// Report this view as the pod's status.
    SetStatus(PodView),
    /// Send a `Tick` at this instant.
    WakeAt(Instant),
    /// The pod is finished on this node: remove its sandbox and directory,
    /// forget its volumes, and delete the pod object when `delete_pod`
    /// (after the last status is written). No input follows.
    TearDown { delete_pod: bool },
}
