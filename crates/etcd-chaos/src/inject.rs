//! Injecting a step's faults on the lab, and healing them when their time
//! is up. Only what a real failure does is done: processes killed or
//! stopped, packets dropped, a volume emptied or filled, the operator or the API
//! server gone; the operator and the upstream controllers do the rest.

use std::time::{Duration, Instant};

use etcd_lab_node::network::PartitionKind;
use kube::api::DeleteParams;
use test_kit::TestResult;
use test_kit::e2e::Harness;

use crate::fault::{Cut, Fault, Target};
use crate::schedule::Step;

/// What heals an injected fault.
#[derive(Debug)]
enum Undo {
    Nothing,
    StartNodes(Vec<String>),
    Thaw(String),
    Heal(Vec<String>),
    StartOperator,
    StartApiServer,
    /// The claim whose volume was filled.
    Unfill(String),
}

/// How a step went on the lab.
#[derive(Debug, Default)]
pub struct Injected {
    /// Each fault as injected (targets resolved), or why it could not be.
    pub notes: Vec<String>,
    /// Whether the step's first fault was injected.
    pub injected: bool,
}

/// Injects `step` on cluster `cluster`, waits out the faults' durations
/// and heals them. Returns when the last fault is healed.
pub async fn run_step(h: &mut Harness, cluster: &str, step: &Step) -> Injected {
    let started = Instant::now();
    let mut result = Injected::default();
    // (when to heal, what heals it), in injection order.
    let mut pending: Vec<(Duration, Undo)> = Vec::new();
    match inject(h, cluster, &step.fault).await {
        Ok((note, undo)) => {
            result.injected = true;
            result.notes.push(note);
            pending.push((Duration::from_secs(step.fault.lasts_seconds()), undo));
        }
        Err(error) => result
            .notes
            .push(format!("{} not injected: {error}", step.fault)),
    }
    if let Some(overlap) = &step.overlapping {
        let at = Duration::from_millis(overlap.after_ms);
        tokio::time::sleep(at.saturating_sub(started.elapsed())).await;
        match inject(h, cluster, &overlap.fault).await {
            Ok((note, undo)) => {
                result.notes.push(format!("overlapping: {note}"));
                pending.push((
                    at + Duration::from_secs(overlap.fault.lasts_seconds()),
                    undo,
                ));
            }
            Err(error) => result.notes.push(format!(
                "overlapping {} not injected: {error}",
                overlap.fault
            )),
        }
    }
    pending.sort_by_key(|(at, _)| *at);
    for (at, undo) in pending {
        tokio::time::sleep(at.saturating_sub(started.elapsed())).await;
        if let Err(error) = heal(h, undo).await {
            result.notes.push(format!("healing failed: {error}"));
        }
    }
    result
}

async fn inject(h: &mut Harness, cluster: &str, fault: &Fault) -> TestResult<(String, Undo)> {
    match fault {
        Fault::PodKill { target } => {
            let pod = member_pod(h, cluster, *target).await?;
            h.lab.pod_kill(&h.namespace, &pod, Some("etcd")).await?;
            Ok((
                format!("{}: killed etcd of {pod}", fault.kind()),
                Undo::Nothing,
            ))
        }
        Fault::PodDelete { target } => {
            let pod = member_pod(h, cluster, *target).await?;
            h.pods.delete(&pod, &DeleteParams::default()).await?;
            Ok((format!("pod-delete: deleted {pod}"), Undo::Nothing))
        }
        Fault::NodeReboot { target, .. } => {
            let (pod, node) = member_node(h, cluster, *target).await?;
            h.lab.node_stop(&node)?;
            Ok((
                format!("{fault}: {node} (of {pod}) powered off"),
                Undo::StartNodes(vec![node]),
            ))
        }
        Fault::NodeFreeze { target, .. } => {
            let (pod, node) = member_node(h, cluster, *target).await?;
            h.lab.node_freeze(&node)?;
            Ok((
                format!("{fault}: {node} (of {pod}) frozen"),
                Undo::Thaw(node),
            ))
        }
        Fault::Partition { target, cut, .. } => {
            let (pod, node) = member_node(h, cluster, *target).await?;
            let kind = match cut {
                Cut::Peers => PartitionKind::Peers,
                Cut::ApiServer => PartitionKind::Apiserver,
                Cut::All => PartitionKind::All,
            };
            h.lab.node_partition(&node, kind)?;
            Ok((
                format!("{fault}: {node} (of {pod}) cut"),
                Undo::Heal(vec![node]),
            ))
        }
        Fault::MajorityNodesDown { members, .. } => {
            let nodes = member_nodes(h, cluster, members).await?;
            for node in &nodes {
                h.lab.node_stop(node)?;
            }
            Ok((
                format!("{fault}: {nodes:?} powered off"),
                Undo::StartNodes(nodes),
            ))
        }
        Fault::MajorityPartition { members, .. } => {
            let nodes = member_nodes(h, cluster, members).await?;
            for node in &nodes {
                h.lab.node_partition(node, PartitionKind::All)?;
            }
            Ok((format!("{fault}: {nodes:?} cut"), Undo::Heal(nodes)))
        }
        Fault::VolumeWipe { member } => {
            let pod = format!("{cluster}-{member}");
            let dir = h
                .lab
                .volume_wipe(&h.namespace, &format!("data-{pod}"))
                .await?;
            h.lab.pod_kill(&h.namespace, &pod, Some("etcd")).await?;
            Ok((
                format!(
                    "volume-wipe: {} of {pod} emptied, its etcd killed",
                    dir.display()
                ),
                Undo::Nothing,
            ))
        }
        Fault::VolumeFull { member, .. } => {
            let claim = format!("data-{cluster}-{member}");
            let filled = h.lab.volume_fill(&h.namespace, &claim, 0).await?;
            Ok((
                format!(
                    "{fault}: {claim} filled ({} bytes, {} left)",
                    filled.fill_bytes, filled.available
                ),
                Undo::Unfill(claim),
            ))
        }
        Fault::OperatorKill { .. } => {
            h.stop_operator();
            Ok((format!("{fault}: operator killed"), Undo::StartOperator))
        }
        Fault::ApiServerOutage { .. } => {
            h.lab.apiserver_stop()?;
            Ok((format!("{fault}: API server stopped"), Undo::StartApiServer))
        }
    }
}

async fn heal(h: &mut Harness, undo: Undo) -> TestResult {
    match undo {
        Undo::Nothing => {}
        Undo::StartNodes(nodes) => {
            for node in nodes {
                h.lab.node_start(&node)?;
            }
        }
        Undo::Thaw(node) => h.lab.node_thaw(&node)?,
        Undo::Heal(nodes) => {
            for node in nodes {
                h.lab.node_heal(&node)?;
            }
        }
        Undo::StartOperator => h.start_operator()?,
        Undo::StartApiServer => h.lab.apiserver_start().await?,
        Undo::Unfill(claim) => {
            h.lab.volume_unfill(&h.namespace, &claim).await?;
        }
    }
    Ok(())
}

/// The Pod of the member `target` names (the leader: asked of etcd).
async fn member_pod(h: &Harness, cluster: &str, target: Target) -> TestResult<String> {
    match target {
        Target::Member(n) => Ok(format!("{cluster}-{n}")),
        Target::Leader => leader(h).await,
    }
}

async fn member_node(h: &Harness, cluster: &str, target: Target) -> TestResult<(String, String)> {
    let pod = member_pod(h, cluster, target).await?;
    let node = h.node_of(&pod).await?;
    Ok((pod, node))
}

async fn member_nodes(h: &Harness, cluster: &str, members: &[usize]) -> TestResult<Vec<String>> {
    let mut nodes = Vec::new();
    for member in members {
        let node = h.node_of(&format!("{cluster}-{member}")).await?;
        if !nodes.contains(&node) {
            nodes.push(node);
        }
    }
    Ok(nodes)
}

/// The name of the member that leads now.
pub async fn leader(h: &Harness) -> TestResult<String> {
    let mut etcd = h.etcd().await?;
    let leader = etcd.status().await?.leader();
    let members = etcd.member_list().await?;
    members
        .members()
        .iter()
        .find(|m| m.id() == leader)
        .map(|m| m.name().to_owned())
        .ok_or_else(|| format!("no member leads (leader ID {leader:x})").into())
}
