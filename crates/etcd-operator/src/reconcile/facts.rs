//! Pure readings of Kubernetes objects that the planner's input is made of:
//! node readiness and out-of-service taint, where a volume lives, what the
//! member guard said. Kept apart from I/O so each is tested on plain objects.

use k8s_openapi::api::core::v1::{Node, PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;

use crate::api::identity::{
    CLUSTER_ID_ANNOTATION, CLUSTER_LABEL, CLUSTER_TOKEN_ANNOTATION, DAMAGED_DATA_ANNOTATION,
    MEMBER_ID_ANNOTATION, MemberIdentity, ORDINAL_LABEL, RELEASE_DATA_ANNOTATION,
    SET_ASIDE_FROM_ANNOTATION, parse_id,
};
use crate::planner::{
    GuardRefusal, NodeState, PodPhase, PodState, PvcPhase, PvcState, RestorePodState, VolumeKind,
};
use crate::pod_contract::{
    LEGACY_REFUSAL_PREFIX, Outcome, Program, REFUSAL_EXIT_CODE, Reading, Report,
};

/// The taint by which a person confirms a node is shut down.
pub const OUT_OF_SERVICE_TAINT: &str = "node.kubernetes.io/out-of-service";
/// Name of the init container that checks a member's data identity.
pub const MEMBER_GUARD_CONTAINER: &str = "member-guard";
/// Name of the etcd container (which starts etcd through the guard).
pub const ETCD_CONTAINER: &str = "etcd";

/// Whether the node's Ready condition is True, and since when it is not.
pub fn node_readiness(node: &Node) -> (bool, Option<Timestamp>) {
    let ready = node
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == "Ready"));
    match ready {
        Some(c) if c.status == "True" => (true, None),
        Some(c) => (false, c.last_transition_time.as_ref().map(|t| t.0)),
        None => (false, None),
    }
}

/// Whether the node carries the out-of-service taint.
pub fn out_of_service(node: &Node) -> bool {
    node.spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .is_some_and(|t| t.iter().any(|t| t.key == OUT_OF_SERVICE_TAINT))
}

/// The node a volume is pinned to by its required node affinity (a local
/// volume), or `None` for a volume attachable anywhere.
pub fn pinned_node(volume: &PersistentVolume) -> Option<String> {
    let terms = &volume
        .spec
        .as_ref()?
        .node_affinity
        .as_ref()?
        .required
        .as_ref()?
        .node_selector_terms;
    terms
        .iter()
        .flat_map(|t| t.match_expressions.iter().flatten())
        .find(|e| e.key == "kubernetes.io/hostname" && e.operator == "In")
        .and_then(|e| e.values.as_ref()?.first().cloned())
}

/// The refusal of the member guard, if its last run exited with
/// [`REFUSAL_EXIT_CODE`], as its report says. A guard that has since
/// passed (its current run exited 0) refuses nothing. The guard runs twice
/// per Pod: as the init container, and before every start of etcd in the
/// etcd container (whose message must be the guard's, told apart from
/// etcd's own exits).
pub fn guard_refusal(pod: &Pod) -> Option<GuardRefusal> {
    init_guard_refusal(pod)
        .or_else(|| etcd_guard_refusal(pod))
        .map(refusal_of)
}

fn init_guard_refusal(pod: &Pod) -> Option<Reading> {
    let statuses = pod.status.as_ref()?.init_container_statuses.as_ref()?;
    let guard = statuses.iter().find(|s| s.name == MEMBER_GUARD_CONTAINER)?;
    let current = guard.state.as_ref().and_then(|s| s.terminated.as_ref());
    if current.is_some_and(|t| t.exit_code == 0) {
        return None;
    }
    [guard.state.as_ref(), guard.last_state.as_ref()]
        .into_iter()
        .flatten()
        .filter_map(|s| s.terminated.as_ref())
        .find(|t| t.exit_code == i32::from(REFUSAL_EXIT_CODE))
        .map(|t| Reading::of_termination_message(t.message.as_deref().unwrap_or_default()))
}

/// The etcd container's last refusal stands while the container runs again
/// but has not passed its startup probe: each restart runs the guard first,
/// which refuses again a moment later, and a refusal that blinked out for
/// that moment would turn `MajorityDataLost` off and on. Once etcd passes
/// its startup probe, a later start got past the guard.
fn etcd_guard_refusal(pod: &Pod) -> Option<Reading> {
    etcd_exits_since_it_served(pod)?
        .filter(|t| t.exit_code == i32::from(REFUSAL_EXIT_CODE))
        .map(|t| Reading::of_termination_message(t.message.as_deref().unwrap_or_default()))
        // Without a termination message (a runtime that gives none), the
        // refusal code alone: etcd itself never exits with it.
        .find(|reading| *reading == Reading::Empty || reading.is_from(Program::MemberGuard))
}

/// The etcd container's current and last terminations, while etcd has not
/// passed its startup probe since (`None` once a start served, or without
/// a status).
fn etcd_exits_since_it_served(
    pod: &Pod,
) -> Option<impl Iterator<Item = &k8s_openapi::api::core::v1::ContainerStateTerminated>> {
    let statuses = pod.status.as_ref()?.container_statuses.as_ref()?;
    let etcd = statuses.iter().find(|s| s.name == ETCD_CONTAINER)?;
    let running = etcd.state.as_ref().is_some_and(|s| s.running.is_some());
    if running && etcd.started == Some(true) {
        return None;
    }
    Some(
        [etcd.state.as_ref(), etcd.last_state.as_ref()]
            .into_iter()
            .flatten()
            .filter_map(|s| s.terminated.as_ref()),
    )
}

/// What etcd logs when its initial corruption check finds that this
/// member's data differs from its peers' at the same revision (it then
/// exits; the container's termination message ends with its log).
const INITIAL_CORRUPTION_CHECK_FAILED: &str = "found data inconsistency with peers";

/// The line in which the etcd container's last exit reported its data
/// damaged (etcd's initial corruption check), while etcd is not serving
/// since: `None` once a later start passed the startup probe.
fn etcd_found_damage(pod: &Pod) -> Option<String> {
    etcd_exits_since_it_served(pod)?
        .filter_map(|t| t.message.as_deref())
        .flat_map(str::lines)
        .find(|line| line.contains(INITIAL_CORRUPTION_CHECK_FAILED))
        .map(|line| line.trim().chars().take(400).collect())
}

/// What a refusal of the member guard says, from the reading of its
/// termination message (the refusal code is already known).
fn refusal_of(reading: Reading) -> GuardRefusal {
    let unread = |detail: String| GuardRefusal { kind: None, detail };
    match reading {
        Reading::Report(Report {
            outcome: Outcome::Refused(kind),
            detail,
            ..
        }) => GuardRefusal {
            kind: Some(kind),
            detail,
        },
        Reading::Report(report) => unread(report.text_line()),
        Reading::Unrecognised(report) => unread(report.to_string()),
        // A guard from before reports: its own words.
        Reading::Text(line) => unread(
            line.strip_prefix(LEGACY_REFUSAL_PREFIX)
                .map_or(line.as_str(), str::trim)
                .to_owned(),
        ),
        Reading::Empty => unread(format!(
            "exit code {REFUSAL_EXIT_CODE} without a termination message"
        )),
    }
}

/// The planner's view of a Node.
pub fn node_state(node: &Node) -> NodeState {
    let (ready, not_ready_since) = node_readiness(node);
    NodeState {
        ready,
        not_ready_since,
        out_of_service: out_of_service(node),
    }
}

/// Where a PersistentVolume keeps its data: a `local` volume or one pinned
/// to a node by its node affinity lives on that node; anything else (the
/// lab's CSI driver `network.etcd-lab.dev`, cloud disks) can be attached
/// elsewhere. `None` (not bound, or the PV is missing) is unknown.
pub fn volume_kind(volume: Option<&PersistentVolume>) -> VolumeKind {
    let Some(volume) = volume else {
        return VolumeKind::Unknown;
    };
    match pinned_node(volume) {
        Some(node) => VolumeKind::Local { node },
        None if volume.spec.as_ref().is_some_and(|s| s.local.is_some()) => VolumeKind::Unknown,
        None => VolumeKind::Network,
    }
}

/// A PersistentVolume the operator set aside as damaged data (rule 15):
/// annotated with the damage and reclaimed by `Retain`, so that deleting
/// its claim keeps it.
pub fn set_aside_as_damaged(volume: &PersistentVolume) -> bool {
    volume.annotations().contains_key(DAMAGED_DATA_ANNOTATION)
        && volume
            .spec
            .as_ref()
            .and_then(|s| s.persistent_volume_reclaim_policy.as_deref())
            == Some("Retain")
}

/// One line on a volume set aside as damaged data: its name, where it came
/// from, its phase and what etcd said.
pub fn describe_set_aside(volume: &PersistentVolume) -> String {
    let annotations = volume.annotations();
    format!(
        "PersistentVolume {} from {} ({}): {}",
        volume.name_any(),
        annotations
            .get(SET_ASIDE_FROM_ANNOTATION)
            .map_or("an unknown claim", String::as_str),
        volume
            .status
            .as_ref()
            .and_then(|s| s.phase.as_deref())
            .unwrap_or("phase unknown"),
        annotations
            .get(DAMAGED_DATA_ANNOTATION)
            .map_or("", String::as_str),
    )
}

/// The identity recorded in a PVC's annotations.
pub fn pvc_identity(pvc: &PersistentVolumeClaim) -> MemberIdentity {
    let annotations = pvc.annotations();
    MemberIdentity {
        cluster_token: annotations
            .get(CLUSTER_TOKEN_ANNOTATION)
            .cloned()
            .unwrap_or_default(),
        cluster_id: annotations
            .get(CLUSTER_ID_ANNOTATION)
            .and_then(|v| parse_id(v)),
        member_id: annotations
            .get(MEMBER_ID_ANNOTATION)
            .and_then(|v| parse_id(v)),
    }
}

/// Whether an object of member `ordinal` of `cluster` lacks the labels the
/// operator selects it by (it was found by its name).
pub fn labels_missing(object: &impl ResourceExt, cluster: &str, ordinal: u32) -> bool {
    let labels = object.labels();
    labels.get(CLUSTER_LABEL).map(String::as_str) != Some(cluster)
        || labels.get(ORDINAL_LABEL) != Some(&ordinal.to_string())
}

/// The planner's view of a member's PVC and its volume.
pub fn pvc_state(pvc: &PersistentVolumeClaim, volume: Option<&PersistentVolume>) -> PvcState {
    let phase = match pvc.status.as_ref().and_then(|s| s.phase.as_deref()) {
        Some("Bound") => PvcPhase::Bound,
        Some("Lost") => PvcPhase::Lost,
        _ => PvcPhase::Pending,
    };
    PvcState {
        phase,
        deleting: pvc.metadata.deletion_timestamp.is_some(),
        identity: pvc_identity(pvc),
        volume: volume_kind(volume),
        volume_name: pvc.spec.as_ref().and_then(|s| s.volume_name.clone()),
        set_aside: volume.is_some_and(set_aside_as_damaged),
        labels_missing: false,
        released: pvc
            .annotations()
            .get(RELEASE_DATA_ANNOTATION)
            .is_some_and(|v| v == "true"),
        requested: requested_bytes(pvc),
        capacity: pvc
            .status
            .as_ref()
            .and_then(|s| s.capacity.as_ref()?.get("storage"))
            .and_then(crate::api::quantity::bytes),
        filesystem_resize_pending: pvc
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|c| {
                c.iter()
                    .any(|c| c.type_ == "FileSystemResizePending" && c.status == "True")
            }),
    }
}

/// The size a PVC asks for (`spec.resources.requests.storage`), in bytes.
pub fn requested_bytes(pvc: &PersistentVolumeClaim) -> Option<u64> {
    pvc.spec
        .as_ref()
        .and_then(|s| s.resources.as_ref()?.requests.as_ref()?.get("storage"))
        .and_then(crate::api::quantity::bytes)
}

/// The planner's view of a member's Pod.
pub fn pod_state(pod: &Pod) -> PodState {
    let status = pod.status.as_ref();
    let phase = match status.and_then(|s| s.phase.as_deref()) {
        Some("Running") => PodPhase::Running,
        Some("Succeeded" | "Failed") => PodPhase::Finished,
        Some("Pending") | None => PodPhase::Pending,
        Some(_) => PodPhase::Unknown,
    };
    let ready = status
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
    let spec = pod.spec.as_ref();
    PodState {
        phase,
        ready,
        deleting: pod.metadata.deletion_timestamp.is_some(),
        node: spec.and_then(|s| s.node_name.clone()),
        guard_refusal: guard_refusal(pod),
        damaged_data: etcd_found_damage(pod),
        version: spec
            .and_then(|s| s.containers.iter().find(|c| c.name == "etcd"))
            .and_then(|c| c.image.as_deref())
            .and_then(image_version),
        template_hash: pod
            .annotations()
            .get(crate::api::pod_revision::TEMPLATE_HASH_ANNOTATION)
            .cloned(),
        labels_missing: false,
        etcd_not_running: status
            .and_then(|s| s.container_statuses.as_ref())
            .and_then(|c| c.iter().find(|c| c.name == "etcd"))
            .is_some_and(|c| c.state.as_ref().is_none_or(|s| s.running.is_none())),
        template_metadata: template_metadata(pod),
    }
}

/// The labels and annotations of `spec.pod` a Pod carries, by the keys
/// recorded as applied.
fn template_metadata(pod: &Pod) -> Option<crate::planner::TemplateMetadata> {
    use crate::api::pod_revision::{AppliedKeys, TEMPLATE_METADATA_ANNOTATION};
    let keys = AppliedKeys::decode(pod.annotations().get(TEMPLATE_METADATA_ANNOTATION)?)?;
    let pick = |from: &std::collections::BTreeMap<String, String>, keys: &[String]| {
        keys.iter()
            .filter_map(|k| Some((k.clone(), from.get(k)?.clone())))
            .collect()
    };
    Some(crate::planner::TemplateMetadata {
        labels: pick(pod.labels(), &keys.labels),
        annotations: pick(pod.annotations(), &keys.annotations),
    })
}

/// The planner's view of the restore Pod.
pub fn restore_pod_state(pod: &Pod) -> RestorePodState {
    if pod.metadata.deletion_timestamp.is_some() {
        return RestorePodState::Deleting;
    }
    let status = pod.status.as_ref();
    match status.and_then(|s| s.phase.as_deref()) {
        Some("Succeeded") => RestorePodState::Succeeded,
        Some("Failed") => {
            let message = status
                .into_iter()
                .flat_map(|s| {
                    s.init_container_statuses
                        .iter()
                        .flatten()
                        .chain(s.container_statuses.iter().flatten())
                })
                .filter_map(|c| c.state.as_ref()?.terminated.as_ref())
                .filter(|t| t.exit_code != 0)
                .filter_map(|t| t.message.as_deref())
                .map(|message| Reading::of_termination_message(message).text())
                .next()
                .unwrap_or_else(|| "no termination message".to_owned());
            RestorePodState::Failed(message)
        }
        _ => match restore_pod_blocked(pod) {
            Some(why) => RestorePodState::CannotRun(why),
            None => RestorePodState::Running,
        },
    }
}

/// Container waiting reasons that do not pass by themselves.
const STUCK_WAITING_REASONS: [&str; 5] = [
    "ErrImagePull",
    "ImagePullBackOff",
    "InvalidImageName",
    "CreateContainerConfigError",
    "CreateContainerError",
];

/// Why a restore Pod that has not finished cannot run, as Kubernetes
/// says: unschedulable (its `PodScheduled` condition), or a container
/// that waits on an image or its configuration.
fn restore_pod_blocked(pod: &Pod) -> Option<String> {
    let status = pod.status.as_ref()?;
    let unschedulable = status.conditions.iter().flatten().find(|c| {
        c.type_ == "PodScheduled"
            && c.status == "False"
            && c.reason.as_deref() == Some("Unschedulable")
    });
    if let Some(c) = unschedulable {
        return Some(format!(
            "it cannot be scheduled: {}",
            c.message.as_deref().unwrap_or("no reason given")
        ));
    }
    status
        .init_container_statuses
        .iter()
        .flatten()
        .chain(status.container_statuses.iter().flatten())
        .find_map(|c| {
            let waiting = c.state.as_ref()?.waiting.as_ref()?;
            let reason = waiting.reason.as_deref()?;
            STUCK_WAITING_REASONS.contains(&reason).then(|| {
                format!(
                    "container {} waits: {reason}{}",
                    c.name,
                    waiting
                        .message
                        .as_deref()
                        .map(|m| format!(" ({m})"))
                        .unwrap_or_default()
                )
            })
        })
}

/// The etcd version of an image reference like `registry.k8s.io/etcd:3.6.16-0`
/// or `quay.io/coreos/etcd:v3.6.16`.
pub fn image_version(image: &str) -> Option<String> {
    let (_, tag) = image.rsplit_once(':')?;
    let tag = tag.strip_prefix('v').unwrap_or(tag);
    let version = tag.split_once('-').map_or(tag, |(v, _)| v);
    (version.split('.').count() == 3 && version.split('.').all(|p| p.parse::<u32>().is_ok()))
        .then(|| version.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{
        ContainerState, ContainerStateTerminated, ContainerStatus, NodeCondition, NodeSelector,
        NodeSelectorRequirement, NodeSelectorTerm, NodeSpec, NodeStatus, PersistentVolumeSpec,
        PodStatus, Taint, VolumeNodeAffinity,
    };
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    fn node(ready: &str, taints: Vec<Taint>) -> Node {
        Node {
            spec: Some(NodeSpec {
                taints: Some(taints),
                ..Default::default()
            }),
            status: Some(NodeStatus {
                conditions: Some(vec![NodeCondition {
                    type_: "Ready".into(),
                    status: ready.into(),
                    last_transition_time: Some(Time(Timestamp::from_second(1000).expect("ts"))),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn reads_node_readiness_and_the_out_of_service_taint() {
        assert_eq!(node_readiness(&node("True", vec![])), (true, None));
        let (ready, since) = node_readiness(&node("Unknown", vec![]));
        assert!(!ready);
        assert_eq!(since, Some(Timestamp::from_second(1000).expect("ts")));
        assert_eq!(node_readiness(&Node::default()), (false, None));
        let taint = Taint {
            key: OUT_OF_SERVICE_TAINT.into(),
            effect: "NoExecute".into(),
            ..Default::default()
        };
        assert!(out_of_service(&node("False", vec![taint])));
        assert!(!out_of_service(&node("False", vec![])));
    }

    #[test]
    fn local_volumes_are_pinned_to_their_node() {
        let local = PersistentVolume {
            spec: Some(PersistentVolumeSpec {
                node_affinity: Some(VolumeNodeAffinity {
                    required: Some(NodeSelector {
                        node_selector_terms: vec![NodeSelectorTerm {
                            match_expressions: Some(vec![NodeSelectorRequirement {
                                key: "kubernetes.io/hostname".into(),
                                operator: "In".into(),
                                values: Some(vec!["node-2".into()]),
                            }]),
                            ..Default::default()
                        }],
                    }),
                }),
                ..Default::default()
            }),
            ..Default::default()
        };
        assert_eq!(pinned_node(&local).as_deref(), Some("node-2"));
        assert_eq!(pinned_node(&PersistentVolume::default()), None);
    }

    fn terminated(code: i32, message: Option<&str>) -> ContainerState {
        ContainerState {
            terminated: Some(ContainerStateTerminated {
                exit_code: code,
                message: message.map(str::to_owned),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn guard_pod(state: Option<ContainerState>, last_state: ContainerState) -> Pod {
        Pod {
            status: Some(PodStatus {
                init_container_statuses: Some(vec![ContainerStatus {
                    name: MEMBER_GUARD_CONTAINER.into(),
                    state,
                    last_state: Some(last_state),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn etcd_pod(state: ContainerState, last_state: Option<ContainerState>, started: bool) -> Pod {
        Pod {
            status: Some(PodStatus {
                container_statuses: Some(vec![ContainerStatus {
                    name: ETCD_CONTAINER.into(),
                    state: Some(state),
                    last_state,
                    started: Some(started),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    /// etcd's initial corruption check exits with its log as the
    /// termination message: the member's data is reported damaged, in
    /// etcd's words, until a later start serves.
    #[test]
    fn reads_etcds_initial_corruption_check_from_its_last_exit() {
        let log = "{\"level\":\"info\",\"msg\":\"starting initial corruption check\"}\n{\"level\":\"fatal\",\"msg\":\"failed to start etcd\",\"error\":\"8e9e05c52164694d found data inconsistency with peers\"}";
        let waiting = ContainerState {
            waiting: Some(k8s_openapi::api::core::v1::ContainerStateWaiting {
                reason: Some("CrashLoopBackOff".into()),
                ..Default::default()
            }),
            ..Default::default()
        };
        let pod = etcd_pod(waiting, Some(terminated(1, Some(log))), false);
        let damage = etcd_found_damage(&pod).expect("damage reported");
        assert!(
            damage.contains("found data inconsistency with peers"),
            "{damage}"
        );
        assert!(damage.contains("8e9e05c52164694d"), "{damage}");
        // Another failure is not damage; a start that serves ends it.
        let other = etcd_pod(
            terminated(1, Some("bind: address already in use")),
            None,
            false,
        );
        assert_eq!(etcd_found_damage(&other), None);
        let serving = ContainerState {
            running: Some(Default::default()),
            ..Default::default()
        };
        assert_eq!(
            etcd_found_damage(&etcd_pod(serving, Some(terminated(1, Some(log))), true)),
            None
        );
    }

    /// A restore Pod that cannot be scheduled or pulled is reported with
    /// Kubernetes' reason, not as running.
    #[test]
    fn a_restore_pod_that_cannot_run_says_why() {
        use k8s_openapi::api::core::v1::{ContainerStateWaiting, PodCondition};
        let unschedulable = Pod {
            status: Some(PodStatus {
                phase: Some("Pending".into()),
                conditions: Some(vec![PodCondition {
                    type_: "PodScheduled".into(),
                    status: "False".into(),
                    reason: Some("Unschedulable".into()),
                    message: Some(
                        "0/3 nodes are available: 3 node(s) had volume node affinity conflict"
                            .into(),
                    ),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
            ..Default::default()
        };
        assert!(matches!(
            restore_pod_state(&unschedulable),
            RestorePodState::CannotRun(why) if why.contains("volume node affinity conflict")
        ));
        let unpullable = Pod {
            status: Some(PodStatus {
                phase: Some("Pending".into()),
                init_container_statuses: Some(vec![ContainerStatus {
                    name: "etcdutl".into(),
                    state: Some(ContainerState {
                        waiting: Some(ContainerStateWaiting {
                            reason: Some("ImagePullBackOff".into()),
                            message: Some("Back-off pulling image".into()),
                        }),
                        ..Default::default()
                    }),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
            ..Default::default()
        };
        assert!(matches!(
            restore_pod_state(&unpullable),
            RestorePodState::CannotRun(why) if why.contains("etcdutl") && why.contains("ImagePullBackOff")
        ));
        let starting = Pod {
            status: Some(PodStatus {
                phase: Some("Pending".into()),
                ..Default::default()
            }),
            ..Default::default()
        };
        assert_eq!(restore_pod_state(&starting), RestorePodState::Running);
    }

    fn report(refusal: crate::pod_contract::Refusal, detail: &str) -> String {
        Report::new(Program::MemberGuard, Outcome::Refused(refusal), detail).termination_message()
    }

    #[test]
    fn reads_the_kind_of_refusal_from_the_guards_report() {
        use crate::pod_contract::Refusal;
        for refusal in Refusal::ALL {
            let message = report(refusal, "what the guard saw");
            let pod = guard_pod(None, terminated(3, Some(&message)));
            assert_eq!(
                guard_refusal(&pod),
                Some(GuardRefusal {
                    kind: Some(refusal),
                    detail: "what the guard saw".into()
                })
            );
        }
        // Another exit code is no refusal.
        let message = report(Refusal::DataLost, "x");
        assert_eq!(
            guard_refusal(&guard_pod(None, terminated(1, Some(&message)))),
            None
        );
        assert_eq!(guard_refusal(&Pod::default()), None);
    }

    #[test]
    fn a_refusal_without_a_readable_report_stands_on_its_exit_code() {
        let refusal =
            |message: Option<&str>| guard_refusal(&guard_pod(None, terminated(3, message)));
        // A guard from before reports.
        assert_eq!(
            refusal(Some("member-guard refused: foreign data\n")),
            Some(GuardRefusal {
                kind: None,
                detail: "foreign data".into()
            })
        );
        // A guard of a newer version.
        let newer = r#"{"version":2,"program":"member-guard","outcome":"refused","refusal":"data-lost","detail":"gone"}"#;
        let read = refusal(Some(newer)).expect("a refusal");
        assert_eq!(read.kind, None);
        assert!(read.describe().contains("version 2") && read.describe().ends_with("gone"));
        // No message at all.
        let read = refusal(None).expect("a refusal");
        assert_eq!(read.kind, None);
        assert!(read.detail.contains("without a termination message"));
    }

    #[test]
    fn finds_the_refusal_of_the_guard_that_starts_etcd() {
        let etcd = |message: &str, running: bool| Pod {
            status: Some(PodStatus {
                container_statuses: Some(vec![ContainerStatus {
                    name: ETCD_CONTAINER.into(),
                    state: running.then(|| ContainerState {
                        running: Some(Default::default()),
                        ..Default::default()
                    }),
                    started: Some(running),
                    last_state: Some(terminated(3, Some(message))),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
            ..Default::default()
        };
        // The log tail of the container holds etcd's earlier runs first.
        let refused = format!(
            "{{\"level\":\"info\",\"msg\":\"serving\"}}\n{}",
            report(
                crate::pod_contract::Refusal::DataLost,
                "data dir is empty: its data is lost"
            )
        );
        assert_eq!(
            guard_refusal(&etcd(&refused, false)).and_then(|r| r.kind),
            Some(crate::pod_contract::Refusal::DataLost)
        );
        // A guard from before reports.
        let old = "member-guard refused: data dir is empty: its data is lost\n";
        assert!(guard_refusal(&etcd(old, false)).is_some());
        // etcd itself exiting with the same code is no refusal, nor is a
        // report of another program.
        assert_eq!(guard_refusal(&etcd("panic: raft", false)), None);
        let restore = Report::new(Program::RestoreVolume, Outcome::Failed, "x");
        assert_eq!(
            guard_refusal(&etcd(&restore.termination_message(), false)),
            None
        );
        // Running again and past its startup probe: a later start passed
        // the guard.
        assert_eq!(guard_refusal(&etcd(&refused, true)), None);
        // Running again, not yet started: the guard runs again and the
        // last refusal stands.
        let mut rerun = etcd(&refused, true);
        if let Some(status) = rerun
            .status
            .as_mut()
            .and_then(|s| s.container_statuses.as_mut())
            .and_then(|c| c.first_mut())
        {
            status.started = Some(false);
        }
        assert_eq!(
            guard_refusal(&rerun).and_then(|r| r.kind),
            Some(crate::pod_contract::Refusal::DataLost)
        );
    }

    #[test]
    fn a_guard_that_passed_since_refuses_nothing() {
        let pod = guard_pod(Some(terminated(0, None)), terminated(3, None));
        assert_eq!(guard_refusal(&pod), None);
    }

    #[test]
    fn a_failed_restore_pod_says_what_its_step_reported() {
        let failed = |message: &str| Pod {
            status: Some(PodStatus {
                phase: Some("Failed".into()),
                init_container_statuses: Some(vec![ContainerStatus {
                    name: "fetch-backup".into(),
                    state: Some(terminated(1, Some(message))),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
            ..Default::default()
        };
        let report = Report::new(
            Program::RestoreVolume,
            Outcome::Failed,
            "the backup is corrupt: sha256 mismatch",
        );
        assert_eq!(
            restore_pod_state(&failed(&report.termination_message())),
            RestorePodState::Failed(
                "restore-volume failed: the backup is corrupt: sha256 mismatch".into()
            )
        );
        // etcdutl writes no report: its last line.
        assert_eq!(
            restore_pod_state(&failed("starting\nError: snapshot file has wrong hash\n")),
            RestorePodState::Failed("Error: snapshot file has wrong hash".into())
        );
    }

    #[test]
    fn network_volumes_move_and_local_ones_stay() {
        use k8s_openapi::api::core::v1::CSIPersistentVolumeSource;
        let csi = PersistentVolume {
            spec: Some(PersistentVolumeSpec {
                csi: Some(CSIPersistentVolumeSource {
                    driver: "network.etcd-lab.dev".into(),
                    volume_handle: "v".into(),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        };
        assert_eq!(volume_kind(Some(&csi)), VolumeKind::Network);
        assert_eq!(volume_kind(None), VolumeKind::Unknown);
    }

    #[test]
    fn reads_versions_from_etcd_images() {
        assert_eq!(
            image_version("registry.k8s.io/etcd:3.6.16-0").as_deref(),
            Some("3.6.16")
        );
        assert_eq!(
            image_version("quay.io/coreos/etcd:v3.7.3").as_deref(),
            Some("3.7.3")
        );
        assert_eq!(image_version("etcd:latest"), None);
    }
}
