//! What happens to a pod: the inputs of its lifecycle.

use std::net::Ipv4Addr;
use std::time::Duration;

use super::effect::ContainerRef;
use crate::probe::ProbeEvent;

/// One thing that happened to the pod or one of its containers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Input {
    /// Time passed: a requested wake-up or the worker's periodic tick.
    Tick,
    /// The sandbox (address, network namespace) and volumes are ready.
    SandboxReady { pod_ip: Ipv4Addr },
    /// The sandbox or volumes could not be prepared yet (e.g. a claim not
    /// yet bound or attached).
    SandboxFailed { message: String },
    /// The run `run` of a container is running.
    ContainerStarted {
        container: ContainerRef,
        run: u64,
        image_id: String,
    },
    /// A container could not be started.
    StartFailed {
        container: ContainerRef,
        failure: StartFailure,
    },
    /// The run `run` of a container exited. `exit_code` is `128 + signal`
    /// when a signal ended it; `message` is its termination message.
    ContainerExited {
        container: ContainerRef,
        run: u64,
        exit_code: i32,
        signal: Option<i32>,
        message: Option<String>,
    },
    /// A probe result of the run `run` of an app container.
    Probe {
        container: ContainerRef,
        run: u64,
        event: ProbeEvent,
    },
    /// The pod was deleted gracefully: its containers get `grace` to stop.
    DeletionRequested { grace: Duration },
    /// The pod object is gone from the API: stop at once, report nothing.
    PodGone,
}

/// Why a container did not start; each is retried after a delay.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StartFailure {
    /// The image is not in the lab's catalog (`ErrImagePull`, then
    /// `ImagePullBackOff`).
    ImagePull(String),
    /// Environment, volume mounts or command are not valid
    /// (`CreateContainerConfigError`).
    Config(String),
    /// The process could not be spawned (`RunContainerError`).
    Run(String),
}
