//! Pure: the agent's view of a pod -> the `PodStatus` a kubelet would write.

use std::net::Ipv4Addr;

use k8s_openapi::api::core::v1::{
    ContainerState, ContainerStateRunning, ContainerStateTerminated, ContainerStateWaiting,
    ContainerStatus, HostIP, PodCondition, PodIP, PodStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;

/// State of one container run.
#[derive(Debug, Clone, PartialEq)]
pub enum RunState {
    Waiting {
        reason: String,
        message: Option<String>,
    },
    Running {
        started_at: Timestamp,
    },
    Terminated {
        exit_code: i32,
        signal: Option<i32>,
        reason: String,
        message: Option<String>,
        started_at: Option<Timestamp>,
        finished_at: Timestamp,
        container_id: Option<String>,
    },
}

impl RunState {
    /// `Waiting` with a reason.
    pub fn waiting(reason: &str, message: Option<String>) -> Self {
        Self::Waiting {
            reason: reason.into(),
            message,
        }
    }

    /// Whether the state is `Terminated` with exit code 0.
    pub fn succeeded(&self) -> bool {
        matches!(self, Self::Terminated { exit_code: 0, .. })
    }

    fn to_api(&self) -> ContainerState {
        match self {
            Self::Waiting { reason, message } => ContainerState {
                waiting: Some(ContainerStateWaiting {
                    reason: Some(reason.clone()),
                    message: message.clone(),
                }),
                ..Default::default()
            },
            Self::Running { started_at } => ContainerState {
                running: Some(ContainerStateRunning {
                    started_at: Some(Time(*started_at)),
                }),
                ..Default::default()
            },
            Self::Terminated {
                exit_code,
                signal,
                reason,
                message,
                started_at,
                finished_at,
                container_id,
            } => ContainerState {
                terminated: Some(ContainerStateTerminated {
                    exit_code: *exit_code,
                    signal: *signal,
                    reason: Some(reason.clone()),
                    message: message.clone(),
                    started_at: started_at.map(Time),
                    finished_at: Some(Time(*finished_at)),
                    container_id: container_id.clone(),
                }),
                ..Default::default()
            },
        }
    }
}

/// The agent's view of one container.
#[derive(Debug, Clone, PartialEq)]
pub struct ContainerView {
    pub name: String,
    pub image: String,
    pub image_id: Option<String>,
    pub container_id: Option<String>,
    pub state: RunState,
    pub last_state: Option<RunState>,
    pub restart_count: i32,
    pub ready: bool,
    pub started: bool,
    /// Terminated for good: no restart will follow.
    pub finished: bool,
}

impl ContainerView {
    /// A container that has not started yet.
    pub fn new(name: &str, image: &str, reason: &str) -> Self {
        Self {
            name: name.into(),
            image: image.into(),
            image_id: None,
            container_id: None,
            state: RunState::waiting(reason, None),
            last_state: None,
            restart_count: 0,
            ready: false,
            started: false,
            finished: false,
        }
    }

    fn to_api(&self) -> ContainerStatus {
        ContainerStatus {
            name: self.name.clone(),
            image: self.image.clone(),
            image_id: self.image_id.clone().unwrap_or_default(),
            container_id: self.container_id.clone(),
            state: Some(self.state.to_api()),
            last_state: Some(
                self.last_state
                    .as_ref()
                    .map(RunState::to_api)
                    .unwrap_or_default(),
            ),
            restart_count: self.restart_count,
            ready: self.ready,
            started: Some(self.started),
            ..Default::default()
        }
    }
}

/// The agent's view of a pod.
#[derive(Debug, Clone, PartialEq)]
pub struct PodView {
    pub init: Vec<ContainerView>,
    pub app: Vec<ContainerView>,
    pub pod_ip: Option<Ipv4Addr>,
    pub host_ip: Ipv4Addr,
    pub start_time: Timestamp,
    pub sandbox_ready: bool,
    /// restartPolicy Never and an init container failed.
    pub init_failed: bool,
    /// A message shown on the pod (e.g. why volumes are not ready).
    pub message: Option<(String, String)>,
}

/// Pod phase from the containers' states.
pub fn phase(view: &PodView) -> &'static str {
    if view.init_failed {
        return "Failed";
    }
    if !view.init.iter().all(|c| c.state.succeeded()) {
        return "Pending";
    }
    if !view.app.is_empty() && view.app.iter().all(|c| c.finished) {
        return if view.app.iter().all(|c| c.state.succeeded()) {
            "Succeeded"
        } else {
            "Failed"
        };
    }
    let ever_ran =
        |c: &ContainerView| c.restart_count > 0 || !matches!(c.state, RunState::Waiting { .. });
    if view.app.iter().any(ever_ran) {
        "Running"
    } else {
        "Pending"
    }
}

/// Builds the status, keeping `lastTransitionTime` of conditions whose
/// status did not change and conditions that other writers own.
pub fn build_status(view: &PodView, previous: Option<&PodStatus>, now: Timestamp) -> PodStatus {
    let phase = phase(view);
    let terminal = phase == "Succeeded" || phase == "Failed";
    let initialized =
        view.init.iter().all(|c| c.state.succeeded()) || (terminal && !view.init_failed);
    let containers_ready = !terminal && view.app.iter().all(|c| c.ready);
    let ours = [
        ("PodReadyToStartContainers", view.sandbox_ready && !terminal),
        ("Initialized", initialized),
        ("ContainersReady", containers_ready),
        ("Ready", containers_ready),
    ];
    let old_conditions = previous
        .and_then(|p| p.conditions.clone())
        .unwrap_or_default();
    let mut conditions: Vec<PodCondition> = old_conditions
        .iter()
        .filter(|c| !ours.iter().any(|(t, _)| *t == c.type_))
        .cloned()
        .collect();
    for (type_, ok) in ours {
        let status = if ok { "True" } else { "False" };
        let old = old_conditions.iter().find(|c| c.type_ == type_);
        let last_transition_time = match old {
            Some(o) if o.status == status => o.last_transition_time.clone(),
            _ => Some(Time(now)),
        };
        let reason = if ok {
            None
        } else if type_ == "Initialized" {
            Some("ContainersNotInitialized".to_owned())
        } else if type_ == "PodReadyToStartContainers" {
            None
        } else if terminal {
            Some("PodCompleted".to_owned())
        } else {
            Some("ContainersNotReady".to_owned())
        };
        conditions.push(PodCondition {
            type_: type_.into(),
            status: status.into(),
            last_transition_time,
            reason,
            ..Default::default()
        });
    }
    let ips = view.pod_ip.map(|ip| ip.to_string());
    PodStatus {
        phase: Some(phase.into()),
        conditions: Some(conditions),
        host_ip: Some(view.host_ip.to_string()),
        host_ips: Some(vec![HostIP {
            ip: view.host_ip.to_string(),
        }]),
        pod_ip: ips.clone(),
        pod_ips: ips.map(|ip| vec![PodIP { ip }]),
        start_time: Some(Time(view.start_time)),
        init_container_statuses: (!view.init.is_empty())
            .then(|| view.init.iter().map(ContainerView::to_api).collect()),
        container_statuses: Some(view.app.iter().map(ContainerView::to_api).collect()),
        qos_class: previous.and_then(|p| p.qos_class.clone()),
        reason: view.message.as_ref().map(|(r, _)| r.clone()),
        message: view.message.as_ref().map(|(_, m)| m.clone()),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view() -> PodView {
        PodView {
            init: vec![ContainerView::new(
                "guard",
                "lab.local/host",
                "PodInitializing",
            )],
            app: vec![ContainerView::new(
                "etcd",
                "quay.io/coreos/etcd:v3.6.5",
                "PodInitializing",
            )],
            pod_ip: Some(Ipv4Addr::new(10, 244, 1, 10)),
            host_ip: Ipv4Addr::new(10, 244, 1, 2),
            start_time: Timestamp::UNIX_EPOCH,
            sandbox_ready: true,
            init_failed: false,
            message: None,
        }
    }

    fn condition<'a>(s: &'a PodStatus, t: &str) -> &'a PodCondition {
        s.conditions
            .as_ref()
            .and_then(|c| c.iter().find(|c| c.type_ == t))
            .expect("condition")
    }

    #[test]
    fn pending_until_init_containers_succeed_then_running_and_ready() {
        let mut v = view();
        let now = Timestamp::UNIX_EPOCH;
        let s = build_status(&v, None, now);
        assert_eq!(s.phase.as_deref(), Some("Pending"));
        assert_eq!(condition(&s, "Initialized").status, "False");
        assert_eq!(s.pod_ip.as_deref(), Some("10.244.1.10"));

        v.init[0].state = RunState::Terminated {
            exit_code: 0,
            signal: None,
            reason: "Completed".into(),
            message: None,
            started_at: None,
            finished_at: now,
            container_id: None,
        };
        v.app[0].state = RunState::Running { started_at: now };
        v.app[0].ready = true;
        v.app[0].started = true;
        let later = Timestamp::from_second(100).expect("ts");
        let s2 = build_status(&v, Some(&s), later);
        assert_eq!(s2.phase.as_deref(), Some("Running"));
        assert_eq!(condition(&s2, "Ready").status, "True");
        assert_eq!(
            condition(&s2, "Ready").last_transition_time,
            Some(Time(later))
        );
        // Unchanged conditions keep their transition time.
        let s3 = build_status(&v, Some(&s2), Timestamp::from_second(200).expect("ts"));
        assert_eq!(
            condition(&s3, "Ready").last_transition_time,
            Some(Time(later))
        );
        let cs = &s3.container_statuses.as_ref().expect("statuses")[0];
        assert!(cs.ready);
        assert!(cs.state.as_ref().and_then(|s| s.running.as_ref()).is_some());
    }

    #[test]
    fn keeps_conditions_owned_by_others_and_reports_terminal_phases() {
        let previous = PodStatus {
            conditions: Some(vec![PodCondition {
                type_: "PodScheduled".into(),
                status: "True".into(),
                ..Default::default()
            }]),
            ..Default::default()
        };
        let mut v = view();
        v.init.clear();
        v.app[0].state = RunState::Terminated {
            exit_code: 1,
            signal: None,
            reason: "Error".into(),
            message: None,
            started_at: None,
            finished_at: Timestamp::UNIX_EPOCH,
            container_id: None,
        };
        v.app[0].finished = true;
        let s = build_status(&v, Some(&previous), Timestamp::UNIX_EPOCH);
        assert_eq!(s.phase.as_deref(), Some("Failed"));
        assert_eq!(condition(&s, "PodScheduled").status, "True");
        assert_eq!(
            condition(&s, "Ready").reason.as_deref(),
            Some("PodCompleted")
        );
    }
}
