//! A small model of the world the planner acts on, with a checker of the
//! durability rules applied to every action.

use std::collections::BTreeMap;

use k8s_openapi::jiff::{SignedDuration, Timestamp};

use crate::api::identity::MemberIdentity;
use crate::api::{EtcdClusterSpec, EtcdClusterStatus};
use crate::etcd::{MemberHealth, ObservedEtcd, ObservedMember};
use crate::planner::{
    Action, Bootstrap, Children, GuardRefusal, NodeState, Observed, OrdinalObjects, Plan, PodPhase,
    PodState, PvcPhase, PvcState, VolumeKind, plan, quorum,
};
use crate::pod_contract::Refusal;
use crate::transport::Transport;

pub const CLUSTER: &str = "demo";

/// The member guard's refusal of an emptied data dir.
fn data_lost() -> GuardRefusal {
    GuardRefusal {
        kind: Some(Refusal::DataLost),
        detail: "data dir is empty but the marker says etcd ran here: its data is lost".into(),
    }
}

#[derive(Clone, Debug)]
pub struct SimNode {
    pub up: bool,
    pub out_of_service: bool,
    pub not_ready_since: Option<Timestamp>,
}

#[derive(Clone, Debug)]
pub struct SimPvc {
    pub deleting: bool,
    pub identity: MemberIdentity,
    pub local_node: Option<String>,
    /// Ground truth: the member whose data the volume holds.
    pub data: Option<u64>,
    /// The restore Pod wrote a new incarnation (this token) on the volume;
    /// its member starts with `new` for that token.
    pub restored: Option<String>,
    /// Ground truth: the highest raft index committed in the data the
    /// volume holds (also its revision in this model).
    pub index: u64,
    /// Ground truth: the last entry its write-ahead log holds when that is
    /// beyond `index` (entries acknowledged by the leader whose commit this
    /// member had not learnt); 0 when the log ends at `index`.
    pub log_index: u64,
    /// A person released the data it holds (the release annotation).
    pub released: bool,
    /// Someone removed the operator's labels: it is found by name only.
    pub labels_missing: bool,
    /// Its PersistentVolume object was deleted (under `Retain` the disk
    /// lives on and stays mounted): Kubernetes reports the claim `Lost`.
    pub pv_object_deleted: bool,
    /// The size it asks for and its filesystem's, in bytes; the
    /// filesystem grows at the next mount (offline expansion).
    pub requested: u64,
    pub capacity: u64,
    pub filesystem_resize_pending: bool,
    /// Its PersistentVolume is set aside as damaged data (`Retain`):
    /// deleting the claim keeps the volume.
    pub set_aside: bool,
}

#[derive(Clone, Debug)]
pub struct SimRestorePod {
    pub ordinal: u32,
    pub token: String,
    pub done: bool,
    /// `prepare` found no db (the survivor's data vanished meanwhile).
    pub failed: bool,
    /// The data comes from a backup, not from the volume.
    pub from_backup: bool,
}

#[derive(Clone, Debug)]
pub struct SimPod {
    pub node: Option<String>,
    pub deleting: bool,
    pub bootstrap: Bootstrap,
    pub refusal: Option<GuardRefusal>,
    pub running: bool,
    /// The Pod template it was built from, and the etcd release it runs.
    pub template: String,
    pub version: String,
    /// The labels and annotations of `spec.pod` it carries.
    pub metadata: crate::planner::TemplateMetadata,
    /// What it listens on.
    pub transport: Transport,
}

#[derive(Clone, Debug)]
pub struct SimMember {
    pub id: u64,
    pub ordinal: u32,
    pub learner: bool,
    pub started: bool,
    /// Its peer URL in the member list.
    pub peer_url: String,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Volumes {
    Network,
    Local,
}

#[derive(Clone, Debug)]
pub struct Sim {
    pub now: Timestamp,
    pub spec: EtcdClusterSpec,
    pub status: EtcdClusterStatus,
    pub children: Children,
    pub nodes: BTreeMap<String, SimNode>,
    pub pvcs: BTreeMap<u32, SimPvc>,
    pub pods: BTreeMap<u32, SimPod>,
    pub members: Vec<SimMember>,
    pub cluster_id: Option<u64>,
    pub formed: bool,
    pub next_id: u64,
    pub next_node: u32,
    pub volumes: Volumes,
    /// Ground truth: the data of a majority of voters was lost at some point.
    pub majority_ever_lost: bool,
    pub violations: Vec<String>,
    pub actions: Vec<Action>,
    pub last_plan: Option<Plan>,
    pub restore_pod: Option<SimRestorePod>,
    /// Tokens every `--initial-cluster-state=new` start used.
    pub new_tokens: Vec<String>,
    /// Every restore Pod from a backup fails (unreachable store, corrupt
    /// backup).
    pub fail_restores: bool,
    /// An idle cluster where a member that joins from a snapshot does not
    /// start serving until an entry is committed after it (seen on the lab).
    pub idle: bool,
    /// Joined members waiting for a committed entry.
    pub stalled: Vec<u64>,
    /// A learner whose Pod runs never starts serving, whatever is committed
    /// (a crash-looping or misconfigured learner).
    pub learners_never_start: bool,
    /// Ground truth: the highest index acknowledged to a client.
    pub acknowledged: u64,
    /// Nodes whose Node object was deleted while the machine and its disks
    /// live on (a kubelet re-registers it).
    pub machines_alive: std::collections::BTreeSet<String>,
    /// Members whose etcd runs but does not answer on its client port (it
    /// restarted without quorum and cannot publish itself).
    pub silent: std::collections::BTreeSet<u64>,
    /// Ordinals whose Pod's sidecar does not read the log (an older
    /// sidecar, a volume it cannot read).
    pub logs_unread: std::collections::BTreeSet<u32>,
    /// The minor release of the members' data (etcd's storage version): a
    /// release older than it refuses to start.
    pub storage: crate::planner::Release,
    /// The target of etcd's downgrade, once enabled.
    pub downgrade: Option<crate::planner::Release>,
    /// Releases that fail to start (a broken build, a bad flag).
    pub broken_releases: Vec<String>,
    /// The member leadership was moved to, while it is a healthy voter.
    pub leader: Option<u64>,
    /// The StorageClass allows volume expansion.
    pub expansion_allowed: bool,
    /// Stopped nodes whose Node object still says Ready (the node lease
    /// has not expired yet).
    pub stale_node_status: std::collections::BTreeSet<String>,
    /// Each member's database file, by member ID (members absent report
    /// an empty one).
    pub db: BTreeMap<u64, SimDb>,
    /// The quota the members run with (bytes).
    pub quota: i64,
    /// Space of the history a compaction frees in every member's file.
    pub history: i64,
    /// The members etcd's NOSPACE alarm names: writes are refused while
    /// it is raised, until disarmed.
    pub nospace: Vec<u64>,
    /// etcd's CORRUPT alarm names this member.
    pub corrupt: Option<u64>,
    /// A TLS cluster's certificates: the revision members must run and the
    /// CA rotation step pending (each step taken gives a new revision).
    pub tls: Option<crate::planner::TlsObservation>,
    /// The members' Pods running each step's revision when it was taken
    /// (checked: a CA rotation step only once every member runs the last).
    pub ca_steps: Vec<(crate::tls::CaRotationStep, bool)>,
    /// The revision the backups of `spec.recovery.backup` reach, as a
    /// schedule writing there reports it (`None`: no schedule says).
    pub backup_reach: Option<i64>,
    /// Joins etcd refused (reported once each).
    pub refused_joins: Vec<(u32, Bootstrap)>,
    /// Members whose data is damaged: etcd's initial corruption check
    /// refuses to serve it.
    pub damaged: std::collections::BTreeSet<u64>,
    /// Ground truth: the data of volumes set aside whose claims were
    /// deleted (their PersistentVolumes are `Released` and kept).
    pub kept_aside: Vec<u64>,
    /// The restore Pod cannot run (unschedulable, image not pullable),
    /// with Kubernetes' reason.
    pub restore_pod_stuck: Option<String>,
}

/// A member's database file.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SimDb {
    /// File size, free pages included.
    pub size: i64,
    /// Bytes that hold data (history included until compacted).
    pub in_use: i64,
}

impl Sim {
    pub fn new(replicas: i32, nodes: u32, volumes: Volumes) -> Self {
        let spec = EtcdClusterSpec {
            replicas,
            ..EtcdClusterSpec::default()
        };
        let mut sim = Self {
            now: Timestamp::from_second(1_700_000_000).expect("valid time"),
            spec,
            status: EtcdClusterStatus::default(),
            children: Children::default(),
            nodes: BTreeMap::new(),
            pvcs: BTreeMap::new(),
            pods: BTreeMap::new(),
            members: Vec::new(),
            cluster_id: None,
            formed: false,
            next_id: 0x100,
            next_node: 0,
            volumes,
            majority_ever_lost: false,
            violations: Vec::new(),
            actions: Vec::new(),
            last_plan: None,
            restore_pod: None,
            new_tokens: Vec::new(),
            fail_restores: false,
            idle: false,
            learners_never_start: false,
            acknowledged: 0,
            machines_alive: std::collections::BTreeSet::new(),
            silent: std::collections::BTreeSet::new(),
            logs_unread: std::collections::BTreeSet::new(),
            stalled: Vec::new(),
            storage: release_line(crate::api::version::DEFAULT),
            downgrade: None,
            broken_releases: Vec::new(),
            leader: None,
            expansion_allowed: true,
            stale_node_status: std::collections::BTreeSet::new(),
            db: BTreeMap::new(),
            tls: None,
            ca_steps: Vec::new(),
            quota: 0,
            history: 0,
            nospace: Vec::new(),
            corrupt: None,
            backup_reach: None,
            refused_joins: Vec::new(),
            damaged: std::collections::BTreeSet::new(),
            kept_aside: Vec::new(),
            restore_pod_stuck: None,
        };
        for _ in 0..nodes {
            sim.add_node();
        }
        sim
    }

    pub fn add_node(&mut self) -> String {
        let name = format!("node-{}", self.next_node);
        self.next_node += 1;
        self.nodes.insert(
            name.clone(),
            SimNode {
                up: true,
                out_of_service: false,
                not_ready_since: None,
            },
        );
        name
    }

    // ----- ground truth -------------------------------------------------

    /// Whether the process of a member runs: its Pod runs on its data.
    pub fn member_healthy(&self, m: &SimMember) -> bool {
        self.pods.get(&m.ordinal).is_some_and(|p| {
            p.running
                && !p.deleting
                && self.release_starts(&p.version)
                && p.node
                    .as_ref()
                    .is_some_and(|n| self.nodes.get(n).is_some_and(|n| n.up))
        }) && self
            .pvcs
            .get(&m.ordinal)
            .is_some_and(|p| p.data == Some(m.id))
    }

    /// Whether etcd of `version` starts on the members' data: not older
    /// than its storage version, and not a broken release.
    pub fn release_starts(&self, version: &str) -> bool {
        release_line(version) >= self.storage && !self.broken_releases.iter().any(|b| b == version)
    }

    pub fn voters(&self) -> impl Iterator<Item = &SimMember> {
        self.members.iter().filter(|m| !m.learner)
    }

    pub fn healthy_voters(&self) -> usize {
        self.voters().filter(|m| self.member_healthy(m)).count()
    }

    pub fn has_quorum(&self) -> bool {
        let voters = self.voters().count();
        voters > 0 && self.healthy_voters() >= quorum(voters)
    }

    /// Whether the data of a member still exists somewhere.
    pub fn data_exists(&self, id: u64) -> bool {
        self.pvcs.values().any(|p| {
            p.data == Some(id)
                && p.local_node
                    .as_ref()
                    .is_none_or(|n| self.nodes.contains_key(n))
        })
    }

    /// Whether a majority of the voters hold data they can serve (damaged
    /// data exists but etcd refuses it).
    pub fn majority_data_exists(&self) -> bool {
        let voters: Vec<u64> = self.voters().map(|m| m.id).collect();
        !voters.is_empty()
            && voters
                .iter()
                .filter(|id| self.data_exists(**id) && !self.damaged.contains(id))
                .count()
                >= quorum(voters.len())
    }

    // ----- the world moves ----------------------------------------------

    pub fn advance(&mut self, secs: i64) {
        self.now = self
            .now
            .saturating_add(SignedDuration::from_secs(secs))
            .expect("time");
        self.settle();
    }

    /// Kubernetes and etcd react: scheduling, kubelets, eviction, GC.
    pub fn settle(&mut self) {
        // Node loss of local volumes.
        for pvc in self.pvcs.values_mut() {
            if pvc
                .local_node
                .as_ref()
                .is_some_and(|n| !self.nodes.contains_key(n) && !self.machines_alive.contains(n))
            {
                pvc.data = None;
            }
        }
        let all_not_ready = self.nodes.values().all(|n| !n.up);
        let now = self.now;
        let mut gone = Vec::new();
        for (ordinal, pod) in self.pods.iter_mut() {
            match pod.node.as_ref().map(|n| self.nodes.get(n)) {
                // Node deleted: pod GC deletes the Pod.
                Some(None) => gone.push(*ordinal),
                Some(Some(node)) => {
                    if pod.deleting && (node.up || node.out_of_service) {
                        gone.push(*ordinal);
                    }
                    // Eviction of pods on a node NotReady for 300 s.
                    if !node.up
                        && !all_not_ready
                        && node
                            .not_ready_since
                            .is_some_and(|s| now.duration_since(s).as_secs() >= 300)
                    {
                        pod.deleting = true;
                    }
                }
                None => {
                    if pod.deleting {
                        gone.push(*ordinal);
                    }
                }
            }
        }
        for ordinal in gone {
            self.pods.remove(&ordinal);
        }
        // The storage provider expands volumes at once; the filesystem
        // grows at the next mount.
        for pvc in self.pvcs.values_mut() {
            if pvc.requested > pvc.capacity {
                pvc.filesystem_resize_pending = true;
            }
        }
        // PVCs whose deletion waited for their Pod.
        let pods = &self.pods;
        let kept = &mut self.kept_aside;
        self.pvcs.retain(|ordinal, pvc| {
            let gone = pvc.deleting && !pods.contains_key(ordinal);
            if gone && pvc.set_aside {
                kept.extend(pvc.data);
            }
            !gone
        });
        // The restore Pod runs on the survivor's volume once it is free.
        let stuck = self.restore_pod_stuck.is_some();
        if let Some(restore) = self.restore_pod.as_mut()
            && !restore.done
            && !restore.failed
            && !stuck
            && !self.pods.contains_key(&restore.ordinal)
            && let Some(pvc) = self.pvcs.get_mut(&restore.ordinal)
            // A Pod cannot mount a claim whose volume is lost.
            && !pvc.pv_object_deleted
        {
            if restore.from_backup && !self.fail_restores {
                // The backup's member data: not any member's of this
                // cluster until it starts as the new incarnation.
                restore.done = true;
                pvc.data = Some(0);
                pvc.restored = Some(restore.token.clone());
            } else if !restore.from_backup && pvc.data.is_some() {
                restore.done = true;
                pvc.restored = Some(restore.token.clone());
                // The restore commits the survivor's log tail first.
                pvc.index = pvc.index.max(pvc.log_index);
                pvc.log_index = 0;
            } else {
                restore.failed = true;
            }
        }
        // Scheduling and starting.
        let ordinals: Vec<u32> = self.pods.keys().copied().collect();
        for ordinal in ordinals {
            self.schedule(ordinal);
            self.start(ordinal);
        }
        if self.has_quorum() && !self.formed {
            self.formed = true;
        }
        self.settle_versions();
        if self.formed && !self.majority_data_exists() {
            self.majority_ever_lost = true;
        }
    }

    /// etcd's cluster version: it follows the lowest release the members
    /// run once all run it (the storage version with it); a downgrade ends
    /// once every member runs its target. Like etcd's leader, it asks every
    /// member, learners too, and decides nothing while one does not answer.
    fn settle_versions(&mut self) {
        if !self.has_quorum() {
            return;
        }
        let lines: Vec<crate::planner::Release> = self
            .members
            .iter()
            .filter(|m| self.member_healthy(m))
            .filter_map(|m| self.pods.get(&m.ordinal))
            .map(|p| release_line(&p.version))
            .collect();
        if lines.len() != self.members.len() {
            return;
        }
        let Some(lowest) = lines.iter().copied().min() else {
            return;
        };
        match self.downgrade {
            Some(target) if lines.iter().all(|l| *l == target) => self.downgrade = None,
            Some(_) => {}
            None if lowest > self.storage => self.storage = lowest,
            None => {}
        }
    }

    fn schedule(&mut self, ordinal: u32) {
        let Some(pod) = self.pods.get(&ordinal) else {
            return;
        };
        if pod.node.is_some() || pod.deleting {
            return;
        }
        let Some(pvc) = self.pvcs.get(&ordinal) else {
            return;
        };
        let usable = |name: &String, n: &SimNode| n.up && !n.out_of_service && !name.is_empty();
        let node = match &pvc.local_node {
            Some(n) => self
                .nodes
                .get(n)
                .filter(|s| usable(n, s))
                .map(|_| n.clone()),
            None => {
                let busy: Vec<&String> =
                    self.pods.values().filter_map(|p| p.node.as_ref()).collect();
                let mut candidates: Vec<&String> = self
                    .nodes
                    .iter()
                    .filter(|(n, s)| usable(n, s))
                    .map(|(n, _)| n)
                    .collect();
                candidates.sort_by_key(|n| busy.contains(n));
                candidates.first().map(|n| (*n).clone())
            }
        };
        if let Some(node) = node {
            if self.volumes == Volumes::Local
                && let Some(pvc) = self.pvcs.get_mut(&ordinal)
            {
                pvc.local_node.get_or_insert(node.clone());
            }
            if let Some(pod) = self.pods.get_mut(&ordinal) {
                pod.node = Some(node);
            }
        }
    }

    /// The size `spec.storage.size` asks for, in bytes.
    pub fn spec_bytes(&self) -> u64 {
        crate::api::quantity::bytes(&self.spec.storage.size).unwrap_or(0)
    }

    /// The kubelet starts the Pod: `member-guard`, then etcd.
    fn start(&mut self, ordinal: u32) {
        let Some(pod) = self.pods.get(&ordinal).cloned() else {
            return;
        };
        // A mount grows a filesystem whose volume was expanded.
        if !pod.running
            && !pod.deleting
            && pod.node.is_some()
            && let Some(pvc) = self.pvcs.get_mut(&ordinal)
            && pvc.filesystem_resize_pending
        {
            pvc.capacity = pvc.requested;
            pvc.filesystem_resize_pending = false;
        }
        let node_up = pod
            .node
            .as_ref()
            .and_then(|n| self.nodes.get(n))
            .is_some_and(|n| n.up);
        if !node_up || pod.deleting {
            if let Some(p) = self.pods.get_mut(&ordinal) {
                p.running = false;
            }
            return;
        }
        let Some(pvc) = self.pvcs.get(&ordinal).cloned() else {
            return;
        };
        if let Some(restored) = &pvc.restored
            && restored == pod.bootstrap.token()
        {
            let token = restored;
            // The first start of a restored incarnation: one member, new
            // cluster ID, the survivor's data.
            let id = static_id(token, ordinal);
            self.members = vec![SimMember {
                id,
                ordinal,
                learner: false,
                started: true,
                peer_url: pod.transport.new_member_peer_url(&host(ordinal)),
            }];
            self.cluster_id = Some(static_id(token, 999));
            if let Some(p) = self.pvcs.get_mut(&ordinal) {
                p.data = Some(id);
                p.restored = None;
            }
            if let Some(p) = self.pods.get_mut(&ordinal) {
                p.running = true;
                p.refusal = None;
            }
            return;
        }
        let member_of_ordinal = self.members.iter().find(|m| m.ordinal == ordinal).cloned();
        let (running, refusal, data) = match (pvc.data, &pod.bootstrap) {
            (Some(d), _) => {
                if self.damaged.contains(&d) && !pod.running {
                    // etcd's initial corruption check: it exits (a process
                    // that ran when its data was damaged runs on).
                    (false, None, Some(d))
                } else if member_of_ordinal.as_ref().is_some_and(|m| m.id == d) {
                    (true, None, Some(d))
                } else {
                    (
                        false,
                        Some(GuardRefusal {
                            kind: Some(Refusal::ForeignMember),
                            detail: format!("member {d:x}"),
                        }),
                        Some(d),
                    )
                }
            }
            (
                None,
                Bootstrap::New {
                    token,
                    initial_members,
                },
            ) => {
                if self.members.is_empty() {
                    for &o in initial_members {
                        let peer_url = self.transport().stage.new_member_peer_url(&host(o));
                        self.members.push(SimMember {
                            id: static_id(token, o),
                            ordinal: o,
                            learner: false,
                            started: false,
                            peer_url,
                        });
                    }
                    self.cluster_id = Some(static_id(token, 999));
                }
                match self.members.iter_mut().find(|m| m.ordinal == ordinal) {
                    Some(m) if !m.started => {
                        m.started = true;
                        (true, None, Some(m.id))
                    }
                    Some(_) => (false, Some(data_lost()), None),
                    None => (false, None, None),
                }
            }
            (None, Bootstrap::Existing { .. })
                if self
                    .members
                    .iter()
                    .any(|m| m.ordinal == ordinal && !m.started)
                    && !self.join_matches_member_list(ordinal) =>
            {
                // etcd compares a joining member's --initial-cluster with the
                // member list it fetches from its peers, and refuses to start
                // when a listed member's peer URLs differ.
                if !self
                    .refused_joins
                    .iter()
                    .any(|(o, b)| *o == ordinal && pod.bootstrap == *b)
                {
                    self.violations.push(format!(
                        "a join etcd refuses: demo-{ordinal}'s --initial-cluster ({:?}) differs from the member list ({:?})",
                        pod.bootstrap,
                        self.members.iter().map(|m| (m.ordinal, m.peer_url.clone())).collect::<Vec<_>>()
                    ));
                    self.refused_joins.push((ordinal, pod.bootstrap.clone()));
                }
                (false, None, None)
            }
            (None, Bootstrap::Existing { .. }) => {
                let idle = self.idle;
                match self.members.iter_mut().find(|m| m.ordinal == ordinal) {
                    Some(m) if !m.started && idle => {
                        // The snapshot is applied; serving waits for an entry.
                        if !self.stalled.contains(&m.id) {
                            self.stalled.push(m.id);
                        }
                        (true, None, Some(m.id))
                    }
                    Some(m) if !m.started => {
                        m.started = true;
                        (true, None, Some(m.id))
                    }
                    Some(_) => (false, Some(data_lost()), None),
                    None => (false, None, None),
                }
            }
        };
        if let Some(p) = self.pvcs.get_mut(&ordinal) {
            p.data = data;
        }
        if let Some(p) = self.pods.get_mut(&ordinal) {
            p.running = running;
            p.refusal = refusal;
        }
    }

    // ----- faults -------------------------------------------------------

    pub fn delete_pod(&mut self, ordinal: u32) {
        if let Some(p) = self.pods.get_mut(&ordinal) {
            p.deleting = true;
        }
        self.settle();
    }

    pub fn stop_node(&mut self, node: &str) {
        let now = self.now;
        if let Some(n) = self.nodes.get_mut(node)
            && n.up
        {
            n.up = false;
            n.not_ready_since = Some(now);
        }
        self.settle();
    }

    pub fn start_node(&mut self, node: &str) {
        if let Some(n) = self.nodes.get_mut(node) {
            n.up = true;
            n.not_ready_since = None;
            n.out_of_service = false;
        }
        self.settle();
    }

    pub fn delete_node(&mut self, node: &str) {
        self.nodes.remove(node);
        self.settle();
    }

    /// Someone deletes the Node object; the machine, its processes' disks
    /// and its local volumes live on (Pods bound to it are collected).
    pub fn delete_node_object(&mut self, node: &str) {
        self.machines_alive.insert(node.to_string());
        self.nodes.remove(node);
        self.settle();
    }

    /// The kubelet of a live machine registers its Node again.
    pub fn reregister_node(&mut self, node: &str) {
        self.machines_alive.remove(node);
        self.nodes.insert(
            node.to_string(),
            SimNode {
                up: true,
                out_of_service: false,
                not_ready_since: None,
            },
        );
        self.settle();
    }

    pub fn taint_out_of_service(&mut self, node: &str) {
        if let Some(n) = self.nodes.get_mut(node)
            && !n.up
        {
            n.out_of_service = true;
        }
        self.settle();
    }

    pub fn delete_pvc(&mut self, ordinal: u32) {
        if let Some(p) = self.pvcs.get_mut(&ordinal) {
            p.deleting = true;
        }
        self.settle();
    }

    pub fn wipe(&mut self, ordinal: u32) {
        if let Some(p) = self.pvcs.get_mut(&ordinal) {
            p.data = None;
        }
        if let Some(p) = self.pods.get_mut(&ordinal) {
            p.running = false;
        }
        self.settle();
    }

    /// The data of `ordinal`'s member is damaged while its etcd runs, and
    /// etcd's compaction hash check raises CORRUPT naming it: the member
    /// keeps serving its damaged data until it is stopped (a restart would
    /// be refused by the initial check).
    pub fn damage_while_running(&mut self, ordinal: u32) {
        if let Some(d) = self.pvcs.get(&ordinal).and_then(|p| p.data) {
            self.damaged.insert(d);
            self.corrupt = Some(d);
        }
        self.settle();
    }

    /// Whether a member whose data is damaged is in the cluster and runs:
    /// it answers reads from that data.
    pub fn damaged_member_serves(&self) -> bool {
        self.members
            .iter()
            .any(|m| self.damaged.contains(&m.id) && self.member_healthy(m))
    }

    /// What the operator's comparison of the voters' keyspace hashes says
    /// while CORRUPT is raised: damaged data hashes differently.
    fn keyspaces(&self) -> Option<crate::etcd::agreement::KeyspaceComparison> {
        self.corrupt?;
        type Hashes = Vec<(u64, Result<crate::etcd::agreement::KeyspaceHash, String>)>;
        let hashes = |learners: bool| -> Hashes {
            self.members
                .iter()
                .filter(|m| m.learner == learners)
                .map(|m| {
                    let hash = if self.member_healthy(m) {
                        Ok(crate::etcd::agreement::KeyspaceHash {
                            hash: if self.damaged.contains(&m.id) {
                                0xbad
                            } else {
                                0x900d
                            },
                            compact_revision: 1,
                        })
                    } else {
                        Err("down".to_string())
                    };
                    (m.id, hash)
                })
                .collect()
        };
        Some(crate::etcd::agreement::KeyspaceComparison {
            revision: i64::try_from(self.newest_index()).unwrap_or(i64::MAX),
            members: crate::etcd::agreement::compare_with_learners(&hashes(false), &hashes(true)),
        })
    }

    /// The data of `ordinal`'s member is damaged; its etcd restarts and its
    /// initial corruption check refuses it.
    pub fn damage(&mut self, ordinal: u32) {
        if let Some(d) = self.pvcs.get(&ordinal).and_then(|p| p.data) {
            self.damaged.insert(d);
        }
        if let Some(p) = self.pods.get_mut(&ordinal) {
            p.running = false;
        }
        self.settle();
    }

    pub fn node_of(&self, ordinal: u32) -> Option<String> {
        self.pods.get(&ordinal).and_then(|p| p.node.clone())
    }

    // ----- the operator ---------------------------------------------------

    pub fn observe(&self) -> Observed {
        let mut ordinals: BTreeMap<u32, OrdinalObjects> = BTreeMap::new();
        for (o, pvc) in &self.pvcs {
            ordinals.entry(*o).or_default().pvc = Some(PvcState {
                phase: if pvc.pv_object_deleted {
                    PvcPhase::Lost
                } else {
                    PvcPhase::Bound
                },
                deleting: pvc.deleting,
                identity: pvc.identity.clone(),
                volume_name: Some(format!("pv-{o}")),
                set_aside: pvc.set_aside,
                volume: match &pvc.local_node {
                    Some(node) => VolumeKind::Local { node: node.clone() },
                    None if self.volumes == Volumes::Local => VolumeKind::Unknown,
                    None => VolumeKind::Network,
                },
                labels_missing: pvc.labels_missing,
                released: pvc.released,
                requested: Some(pvc.requested),
                capacity: Some(pvc.capacity),
                filesystem_resize_pending: pvc.filesystem_resize_pending,
            });
        }
        for (o, pod) in &self.pods {
            // A stopped node whose Node object still says Ready: its Pod
            // keeps the last state its kubelet reported.
            let stale = pod
                .node
                .as_ref()
                .is_some_and(|n| self.stale_node_status.contains(n));
            ordinals.entry(*o).or_default().pod = Some(PodState {
                phase: if pod.running || stale {
                    PodPhase::Running
                } else {
                    PodPhase::Pending
                },
                ready: pod.running && self.pod_member_healthy(*o),
                deleting: pod.deleting,
                node: pod.node.clone(),
                guard_refusal: pod.refusal.clone(),
                version: Some(pod.version.clone()),
                template_hash: Some(pod.template.clone()),
                labels_missing: false,
                template_metadata: Some(pod.metadata.clone()),
                etcd_not_running: pod.running && !self.release_starts(&pod.version),
                damaged_data: self
                    .pvcs
                    .get(o)
                    .and_then(|p| p.data)
                    .filter(|d| self.damaged.contains(d) && !pod.running)
                    .map(|d| format!("member {d:x}: found data inconsistency with peers")),
            });
        }
        let nodes = self
            .nodes
            .iter()
            .map(|(name, n)| {
                (
                    name.clone(),
                    NodeState {
                        ready: n.up || self.stale_node_status.contains(name),
                        not_ready_since: n.not_ready_since,
                        out_of_service: n.out_of_service,
                    },
                )
            })
            .collect();
        Observed {
            name: CLUSTER.to_string(),
            uid: "0123456789abcdef".to_string(),
            generation: Some(1),
            spec: self.spec.clone(),
            status: self.status.clone(),
            now: self.now,
            children: self.children,
            etcd: self.etcd_view(),
            ordinals,
            nodes,
            unowned: Vec::new(),
            damaged_volumes_kept: self
                .kept_aside
                .iter()
                .map(|d| format!("PersistentVolume of member {d:x}"))
                .collect(),
            members_may_share_a_node: false,
            volume_expansion_allowed: Some(self.expansion_allowed),
            volume_usage: std::collections::BTreeMap::new(),
            log_tails: self.log_tails(),
            keyspaces: self.keyspaces(),
            backup_schedules: self
                .backup_reach
                .map(|reach| crate::planner::ScheduleSummary {
                    name: "continuous".to_string(),
                    ready: Some(true),
                    durable_revision: Some(reach),
                    destination: self
                        .spec
                        .recovery
                        .backup
                        .as_ref()
                        .map(|b| b.destination.clone()),
                    ..crate::planner::ScheduleSummary::default()
                })
                .into_iter()
                .collect(),
            tls: self.tls.clone(),
            transport: self.transport(),
            restore_pod: self.restore_pod.as_ref().map(|r| {
                if r.done {
                    crate::planner::RestorePodState::Succeeded
                } else if r.failed {
                    crate::planner::RestorePodState::Failed("no db".to_string())
                } else if let Some(why) = &self.restore_pod_stuck {
                    crate::planner::RestorePodState::CannotRun(why.clone())
                } else {
                    crate::planner::RestorePodState::Running
                }
            }),
        }
    }

    /// The raft leader: the voter leadership was moved to while it is
    /// healthy, else the first healthy voter.
    pub fn current_leader(&self) -> Option<u64> {
        self.leader
            .filter(|id| self.voters().any(|m| m.id == *id && self.member_healthy(m)))
            .or_else(|| self.voters().find(|m| self.member_healthy(m)).map(|m| m.id))
    }

    fn pod_member_healthy(&self, ordinal: u32) -> bool {
        self.members
            .iter()
            .any(|m| m.ordinal == ordinal && self.member_healthy(m))
    }

    fn etcd_view(&self) -> ObservedEtcd {
        let any_running = self.members.iter().any(|m| self.member_healthy(m));
        if !any_running {
            return ObservedEtcd::nothing_observed();
        }
        let quorum = self.has_quorum();
        let leader = if quorum { self.current_leader() } else { None };
        ObservedEtcd {
            cluster_id: self.cluster_id,
            members: self
                .members
                .iter()
                .map(|m| ObservedMember {
                    id: m.id,
                    name: if m.started {
                        format!("{CLUSTER}-{}", m.ordinal)
                    } else {
                        String::new()
                    },
                    peer_urls: vec![m.peer_url.clone()],
                    client_urls: Vec::new(),
                    is_learner: m.learner,
                    endpoint: None,
                    status: self.member_status(m),
                    health: if self.member_healthy(m) {
                        match self.corrupt {
                            // Every member reports the alarm.
                            Some(id) => MemberHealth::Unhealthy(format!(
                                "reports memberID:{id} alarm:CORRUPT"
                            )),
                            None => MemberHealth::Healthy,
                        }
                    } else {
                        MemberHealth::Unreachable("down".to_string())
                    },
                })
                .collect(),
            members_reported_by: None,
            leader,
            quorum_reachable: quorum,
            quorum_error: None,
            max_revision: None,
            endpoints: self
                .members
                .iter()
                .filter_map(|m| self.member_status(m))
                .map(|status| crate::etcd::EndpointObservation {
                    endpoint: status.endpoint.clone(),
                    status: Some(status),
                    health: MemberHealth::Healthy,
                    error: None,
                })
                .collect(),
        }
    }

    /// What a member's endpoint reports about itself: only a member whose
    /// Pod runs on its data answers (with or without quorum).
    fn member_status(&self, m: &SimMember) -> Option<crate::etcd::EndpointStatus> {
        let pod = self.pods.get(&m.ordinal)?;
        let pvc = self.pvcs.get(&m.ordinal)?;
        let node_up = pod
            .node
            .as_ref()
            .and_then(|n| self.nodes.get(n))
            .is_some_and(|n| n.up);
        if !pod.running
            || !node_up
            || pvc.data != Some(m.id)
            || self.silent.contains(&m.id)
            || !self.release_starts(&pod.version)
        {
            return None;
        }
        Some(crate::etcd::EndpointStatus {
            endpoint: format!("{CLUSTER}-{}", m.ordinal),
            member_id: m.id,
            cluster_id: self.cluster_id.unwrap_or_default(),
            leader_id: None,
            revision: i64::try_from(pvc.index).unwrap_or(i64::MAX),
            raft_term: 1,
            raft_index: pvc.index,
            raft_applied_index: pvc.index,
            db_size: self.db.get(&m.id).map_or(0, |d| d.size),
            db_size_in_use: self.db.get(&m.id).map_or(0, |d| d.in_use),
            db_size_quota: self.quota,
            version: pod.version.clone(),
            storage_version: format!("{}.0", self.storage.line()),
            downgrade_target: self.downgrade.map(|d| format!("{}.0", d.line())),
            is_learner: m.learner,
            errors: self.alarm_errors(),
        })
    }

    /// The alarms every member reports, as etcd words them.
    fn alarm_errors(&self) -> Vec<String> {
        let mut errors = Vec::new();
        for id in &self.nospace {
            errors.push(format!("memberID:{id} alarm:NOSPACE "));
        }
        if let Some(id) = self.corrupt {
            errors.push(format!("memberID:{id} alarm:CORRUPT "));
        }
        errors
    }

    /// Clients write while a quorum works: every healthy member commits the
    /// next index (the others keep what they had).
    pub fn write(&mut self) {
        if !self.has_quorum() || !self.nospace.is_empty() || self.corrupt.is_some() {
            return;
        }
        let healthy: Vec<(u32, u64)> = self
            .members
            .iter()
            .filter(|m| self.member_healthy(m))
            .map(|m| (m.ordinal, m.id))
            .collect();
        let next = self.newest_index() + 1;
        for (ordinal, id) in healthy {
            if let Some(pvc) = self.pvcs.get_mut(&ordinal)
                && pvc.data == Some(id)
            {
                pvc.index = next;
                if pvc.log_index <= next {
                    pvc.log_index = 0;
                }
            }
        }
        self.acknowledged = self.acknowledged.max(next);
    }

    /// A person releases every PVC a restore kept (data of a lost
    /// incarnation): the operator may then replace those members.
    pub fn release_retained(&mut self) -> usize {
        let token = self.status.cluster_token.clone().unwrap_or_default();
        let mut released = 0;
        for pvc in self.pvcs.values_mut() {
            if !pvc.identity.cluster_token.is_empty() && pvc.identity.cluster_token != token {
                pvc.released = true;
                released += 1;
            }
        }
        released
    }

    /// Whether deleting the PVC of `ordinal` destroys a survivor's data:
    /// the volume physically holds a member of an earlier incarnation
    /// (its disk exists: no node, a node that exists, or a machine that
    /// lives on without its Node object), no person released it, and no
    /// restore recorded that member's data as lost.
    fn kept_survivor_deleted(&self, ordinal: u32) -> Option<String> {
        let pvc = self.pvcs.get(&ordinal)?;
        pvc.data?;
        let newest_token = self
            .status
            .restore
            .as_ref()
            .map(|r| r.incarnation.clone())
            .or_else(|| self.status.cluster_token.clone())?;
        let token = &pvc.identity.cluster_token;
        if token.is_empty() || *token == newest_token || pvc.released {
            return None;
        }
        let disk_exists = pvc
            .local_node
            .as_ref()
            .is_none_or(|n| self.nodes.contains_key(n) || self.machines_alive.contains(n));
        let name = format!("{CLUSTER}-{ordinal}");
        let recorded_lost = self
            .status
            .restore
            .as_ref()
            .is_some_and(|r| r.from_incarnation == *token && r.lost_members.contains(&name));
        (disk_exists && !recorded_lost).then(|| {
            format!(
                "the PVC of {name}, a survivor of incarnation {token} whose disk exists, deleted"
            )
        })
    }

    /// Whether the `--initial-cluster` of `ordinal`'s Pod (built as the
    /// operator's resources build it) lists every member it names with the
    /// peer URL etcd's member list holds.
    fn join_matches_member_list(&self, ordinal: u32) -> bool {
        let Some(pod) = self.pods.get(&ordinal) else {
            return true;
        };
        let addressing = crate::addressing::MemberAddressing {
            transport: pod.transport,
            ..crate::addressing::MemberAddressing::new(CLUSTER, "ns")
        };
        let flag = addressing.initial_cluster(
            pod.bootstrap.initial_members(),
            pod.bootstrap.known_peer_urls(),
        );
        pod.bootstrap.initial_members().iter().all(|o| {
            self.members
                .iter()
                .find(|m| m.ordinal == *o)
                .is_none_or(|m| flag.contains(&format!("{CLUSTER}-{o}={}", m.peer_url)))
        })
    }

    /// The newest index a voter's volume holds, whose disk exists.
    pub fn newest_survivor_index(&self) -> Option<u64> {
        let voters: Vec<u64> = self.voters().map(|m| m.id).collect();
        self.pvcs
            .values()
            .filter(|p| p.data.is_some_and(|d| voters.contains(&d)))
            .filter(|p| {
                p.local_node
                    .as_ref()
                    .is_none_or(|n| self.nodes.contains_key(n) || self.machines_alive.contains(n))
            })
            // Damaged data whose claim a person deleted is given up.
            .filter(|p| !(p.deleting && p.data.is_some_and(|d| self.damaged.contains(&d))))
            .map(|p| p.index)
            .max()
    }

    /// A person approved the loss the status shows (`approvedLoss`).
    pub fn loss_approved_by_a_person(&self) -> bool {
        self.spec.recovery.approved_loss.is_some()
            && self.spec.recovery.approved_loss
                == self.status.data_loss.as_ref().map(|d| d.approval.clone())
    }

    /// A person approves a restore from the backups of the loss the status
    /// shows: this incarnation and this loss.
    pub fn approve_loss(&mut self) -> bool {
        let Some(loss) = self.status.data_loss.as_ref() else {
            return false;
        };
        self.spec.recovery.approved_loss = Some(loss.approval.clone());
        self.spec.recovery.approved_incarnation = self.status.cluster_token.clone();
        true
    }

    /// The newest index held by any volume that still has data.
    pub fn newest_index(&self) -> u64 {
        self.pvcs
            .values()
            .filter(|p| p.data.is_some())
            .map(|p| p.index.max(p.log_index))
            .max()
            .unwrap_or(0)
    }

    /// The last entry of the most up-to-date log a voter's volume holds
    /// (node-local volumes on deleted machines and damaged data excluded).
    pub fn newest_survivor_log(&self) -> Option<u64> {
        let voters: Vec<u64> = self.voters().map(|m| m.id).collect();
        self.pvcs
            .values()
            .filter(|p| {
                p.data
                    .is_some_and(|d| voters.contains(&d) && !self.damaged.contains(&d))
            })
            .filter(|p| {
                p.local_node
                    .as_ref()
                    .is_none_or(|n| self.nodes.contains_key(n) || self.machines_alive.contains(n))
            })
            .map(|p| p.index.max(p.log_index))
            .max()
    }

    /// The write-ahead log of `ordinal`'s member holds `entries` more
    /// entries than it knows committed: the leader had them acknowledged by
    /// the other members, which learnt the commit (they are lost next).
    pub fn log_ahead_of_commit(&mut self, ordinal: u32, entries: u64, learnt_by: &[u32]) {
        let end = self.newest_index() + entries;
        if let Some(p) = self.pvcs.get_mut(&ordinal) {
            p.log_index = end;
        }
        for o in learnt_by {
            if let Some(p) = self.pvcs.get_mut(o) {
                p.index = end;
            }
        }
        self.acknowledged = self.acknowledged.max(end);
    }

    /// What each member's sidecar reads from its volume's log: only while
    /// quorum is lost (as the operator asks), for a Pod on a running node.
    fn log_tails(&self) -> BTreeMap<u32, crate::planner::LogTail> {
        if self.has_quorum() {
            return BTreeMap::new();
        }
        self.pods
            .iter()
            .filter(|(_, pod)| {
                pod.node
                    .as_ref()
                    .and_then(|n| self.nodes.get(n))
                    .is_some_and(|n| n.up)
            })
            .filter(|(ordinal, _)| !self.logs_unread.contains(ordinal))
            .filter_map(|(ordinal, _)| {
                let pvc = self.pvcs.get(ordinal)?;
                pvc.data?;
                Some((
                    *ordinal,
                    crate::planner::LogTail {
                        last_index: pvc.index.max(pvc.log_index),
                        last_term: 1,
                        persisted_commit: pvc.index,
                    },
                ))
            })
            .collect()
    }

    /// One reconcile: observe, plan, check the action against the rules,
    /// apply it, write the status.
    pub fn reconcile(&mut self) -> Option<Action> {
        self.write();
        let plan = plan(&self.observe());
        let action = plan.action.clone();
        // The status goes through what the reconciler does with it: the
        // action's outcome recorded as the last operation, then `finalize`.
        let mut desired = plan.status.clone();
        if let Some(action) = &action {
            desired.last_operation = Some(crate::api::LastOperation {
                type_: action.kind().to_string(),
                description: action.describe(CLUSTER),
                state: crate::api::OperationState::Succeeded,
                time: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(self.now),
            });
        }
        self.status =
            crate::reconcile::status::finalize(Some(&self.status), desired, Some(1), true);
        self.last_plan = Some(plan);
        if let Some(action) = &action {
            self.check_and_apply(action.clone());
            self.actions.push(action.clone());
        }
        self.settle();
        action
    }

    /// A person approves the restore the status proposes: this incarnation,
    /// the newest survivor and its revision, as the planner named them.
    pub fn approve_newest_survivor(&mut self) -> bool {
        let plan = plan(&self.observe());
        let Some(crate::planner::Waiting::MajorityDataLost {
            survivor: crate::planner::SurvivorChoice::Newest(survivor),
            ..
        }) = plan.waiting
        else {
            return false;
        };
        self.spec.recovery.approved_incarnation = self.status.cluster_token.clone();
        self.spec.recovery.approved_survivor = Some(survivor.name);
        self.spec.recovery.approved_revision = survivor.revision;
        true
    }

    /// Reconciles with time passing until nothing more happens.
    pub fn run(&mut self, passes: usize) {
        for _ in 0..passes {
            self.reconcile();
            self.advance(3);
        }
    }

    fn violation(&mut self, rule: &str, action: &Action) {
        self.violations.push(format!("{rule}: {action:?}"));
    }

    /// Applies an action and checks that it destroyed no newer data than
    /// what is left (rule 11: the newest committed index survives every
    /// action; a restore from a backup replaces data by a person's choice).
    fn check_and_apply(&mut self, action: Action) {
        let newest_before = self.newest_index();
        let from_backup = matches!(
            action,
            Action::RunRestore {
                from_backup: true,
                ..
            } | Action::RestoreFromBackup { .. }
        ) || self.restore_pod.as_ref().is_some_and(|r| r.from_backup);
        self.apply_action(action.clone());
        if !from_backup && self.newest_index() < newest_before {
            self.violation(
                &format!(
                    "rule 11: the newest data (index {newest_before}) was destroyed, {} left",
                    self.newest_index()
                ),
                &action,
            );
        }
    }

    /// The TLS revision the members must run, for a TLS cluster.
    pub fn tls_revision(&self) -> Option<&str> {
        self.tls.as_ref().map(|t| t.revision.as_str())
    }

    /// The template hash the members must run.
    pub fn desired_template(&self) -> String {
        crate::api::pod_revision::template_hash(
            &self.spec,
            self.observe().quota_backend_bytes(),
            self.transport().stage,
            self.tls_revision(),
        )
    }

    /// The transport the members run and must run, as the reconciler
    /// derives it: the stage status recorded (else the Pods', else the
    /// spec's), moved on by the member list's peer URLs.
    pub fn transport(&self) -> crate::planner::TransportObservation {
        let running = crate::api::transport_choice::running(
            self.status.transport,
            self.pods.values().map(|p| p.transport),
            self.spec.tls.as_ref(),
            crate::api::transport_choice::bootstrapped(Some(&self.status)),
        );
        let intent = crate::api::transport_choice::intent(self.spec.tls.as_ref(), running);
        let urls =
            (!self.members.is_empty()).then(|| self.members.iter().map(|m| m.peer_url.as_str()));
        crate::planner::TransportObservation {
            stage: crate::transport::desired(&intent, running, urls),
            refused: intent.refused,
        }
    }

    fn apply_action(&mut self, action: Action) {
        let quorum_before = self.has_quorum();
        match &action {
            Action::CreatePeerService => self.children.peer_service = true,
            Action::CreateClientService => self.children.client_service = true,
            Action::ApplyPodDisruptionBudget { min_available } => {
                self.children.pdb = true;
                self.children.pdb_min_available = i32::try_from(*min_available).ok();
            }
            Action::RestoreLabels { ordinal, pvc, .. } => {
                if *pvc && let Some(p) = self.pvcs.get_mut(ordinal) {
                    p.labels_missing = false;
                }
            }
            Action::CreatePvc {
                ordinal,
                identity,
                size,
            } => {
                let size = crate::api::quantity::bytes(
                    &k8s_openapi::apimachinery::pkg::api::resource::Quantity(size.clone()),
                )
                .unwrap_or_else(|| self.spec_bytes());
                if self.pvcs.contains_key(ordinal) {
                    self.violation("PVC created twice", &action);
                }
                self.pvcs.insert(
                    *ordinal,
                    SimPvc {
                        deleting: false,
                        identity: identity.clone(),
                        local_node: None,
                        data: None,
                        restored: None,
                        index: 0,
                        log_index: 0,
                        released: false,
                        labels_missing: false,
                        pv_object_deleted: false,
                        requested: size,
                        capacity: size,
                        filesystem_resize_pending: false,
                        set_aside: false,
                    },
                );
            }
            Action::CreatePod {
                ordinal,
                bootstrap,
                release,
                ..
            } => {
                if self.pods.contains_key(ordinal) {
                    self.violation("rule 4: a second Pod for a member", &action);
                }
                let restored_here = self.pvcs.get(ordinal).and_then(|p| p.restored.as_deref())
                    == Some(bootstrap.token());
                if bootstrap.is_new() && self.formed && !restored_here {
                    self.violation(
                        "rule 6: --initial-cluster-state=new after the first bootstrap",
                        &action,
                    );
                }
                if bootstrap.is_new() {
                    if self.formed && self.new_tokens.iter().any(|t| t == bootstrap.token()) {
                        self.violation("rule 6: a token used for two incarnations", &action);
                    }
                    self.new_tokens.push(bootstrap.token().to_string());
                }
                let mut built_from = self.spec.clone();
                if let Some(release) = release {
                    built_from.version = release.clone();
                }
                if release_line(&built_from.version) < self.storage {
                    self.violation(
                        "a Pod of a release older than the members' storage version",
                        &action,
                    );
                }
                let stage = self.transport().stage;
                if let Some(member) = self.members.iter().find(|m| m.ordinal == *ordinal)
                    && !listens_on(stage, &member.peer_url)
                {
                    self.violation(
                        &format!(
                            "a Pod of stage {stage:?} does not listen on its peer URL {}",
                            member.peer_url
                        ),
                        &action,
                    );
                }
                self.pods.insert(
                    *ordinal,
                    SimPod {
                        node: None,
                        deleting: false,
                        bootstrap: bootstrap.clone(),
                        refusal: None,
                        running: false,
                        template: crate::api::pod_revision::template_hash(
                            &built_from,
                            self.observe().quota_backend_bytes(),
                            self.transport().stage,
                            self.tls_revision(),
                        ),
                        version: built_from.version.clone(),
                        metadata: desired_metadata(&self.spec),
                        transport: self.transport().stage,
                    },
                );
            }
            Action::DeletePod { ordinal, force, .. } => {
                let Some(pod) = self.pods.get(ordinal).cloned() else {
                    self.violation("deleting a Pod that does not exist", &action);
                    return;
                };
                let node_gone = pod
                    .node
                    .as_ref()
                    .is_none_or(|n| self.nodes.get(n).is_none_or(|s| s.out_of_service));
                if *force && !node_gone {
                    self.violation(
                        "rule 4: force-deleting a Pod whose node may still run it",
                        &action,
                    );
                }
                let healthy_voter = self
                    .members
                    .iter()
                    .any(|m| m.ordinal == *ordinal && !m.learner && self.member_healthy(m));
                // An approved restore stops the survivor of an incarnation
                // that has no quorum left to lose.
                let restoring = self
                    .status
                    .restore
                    .as_ref()
                    .is_some_and(|r| r.in_progress());
                if healthy_voter && (quorum_before || !restoring) {
                    let voters = self.voters().count();
                    if self.healthy_voters() - 1 < quorum(voters) {
                        self.violation(
                            "rule 5: deleting a Pod leaves fewer than a quorum of healthy voters",
                            &action,
                        );
                    }
                }
                if *force {
                    self.pods.remove(ordinal);
                } else if let Some(p) = self.pods.get_mut(ordinal) {
                    p.deleting = true;
                }
            }
            Action::DeletePvc { ordinal, .. } => {
                let restoring = self
                    .status
                    .restore
                    .as_ref()
                    .is_some_and(|r| r.in_progress());
                if !restoring
                    && let Some(pvc) = self.pvcs.get(ordinal)
                    && let Some(d) = pvc.data
                    && self.members.iter().any(|m| m.id == d)
                {
                    self.violation(
                        "rule 2: deleting the PVC of a current member's data",
                        &action,
                    );
                }
                if let Some(why) = self.kept_survivor_deleted(*ordinal) {
                    self.violation(&format!("rule 11: {why}"), &action);
                }
                if let Some(pvc) = self.pvcs.get(ordinal)
                    && pvc.data.is_some_and(|d| self.damaged.contains(&d))
                    && !pvc.set_aside
                    && !pvc.released
                {
                    self.violation(
                        "rule 15: deleting damaged data that was neither set aside nor released",
                        &action,
                    );
                }
                if let Some(p) = self.pvcs.get_mut(ordinal) {
                    p.deleting = true;
                }
            }
            Action::SetVolumeAside { ordinal, .. } => {
                let damaged = self
                    .pvcs
                    .get(ordinal)
                    .and_then(|p| p.data)
                    .is_some_and(|d| self.damaged.contains(&d));
                if !damaged {
                    self.violation("setting aside a volume whose data is not damaged", &action);
                }
                if let Some(p) = self.pvcs.get_mut(ordinal) {
                    p.set_aside = true;
                }
            }
            Action::AnnotatePvcIdentity { ordinal, identity } => {
                if let Some(p) = self.pvcs.get_mut(ordinal) {
                    if identity.member_id != p.data {
                        self.violations.push(format!(
                            "rule 1: PVC annotated with a member that is not its data: {action:?}"
                        ));
                    }
                    p.identity = identity.clone();
                }
            }
            Action::AddLearner { ordinal } => {
                if !quorum_before {
                    self.violation("rule 3: membership change without quorum", &action);
                    return;
                }
                if self.members.iter().any(|m| m.learner) {
                    self.violation("rule 3: a second learner", &action);
                }
                let id = self.next_id;
                self.next_id += 1;
                let peer_url = self.transport().stage.new_member_peer_url(&host(*ordinal));
                self.members.push(SimMember {
                    id,
                    ordinal: *ordinal,
                    learner: true,
                    started: false,
                    peer_url,
                });
            }
            Action::PromoteLearner { id, .. } => {
                if !quorum_before {
                    self.violation("rule 3: membership change without quorum", &action);
                    return;
                }
                let ready = self
                    .members
                    .iter()
                    .any(|m| m.id == *id && m.learner && self.member_healthy(m));
                if let Some(m) = self.members.iter_mut().find(|m| m.id == *id)
                    && ready
                {
                    m.learner = false;
                }
            }
            Action::RemoveMember { id, ordinal, .. } => {
                if !quorum_before {
                    self.violation("rule 3: membership change without quorum", &action);
                    return;
                }
                let wanted = ordinal.is_some_and(|o| i64::from(o) < i64::from(self.spec.replicas));
                // Damaged data set aside or released is replaced (rule 15).
                let damaged_and_released = self.damaged.contains(id)
                    && self
                        .pvcs
                        .values()
                        .any(|p| p.data == Some(*id) && (p.released || p.set_aside || p.deleting));
                if wanted
                    && self.data_exists(*id)
                    && !damaged_and_released
                    && self
                        .members
                        .iter()
                        .any(|m| m.id == *id && self.member_healthy(m))
                {
                    self.violation(
                        "rule 2: removing a wanted member whose data exists and runs",
                        &action,
                    );
                }
                if wanted && self.data_exists(*id) && !damaged_and_released {
                    self.violation(
                        "rule 2: removing a wanted member whose data exists",
                        &action,
                    );
                }
                self.members.retain(|m| m.id != *id);
                if self.voters().count() > 0 && quorum_before && !self.has_quorum() {
                    self.violation(
                        "rule 5: removal leaves fewer than a quorum of healthy voters",
                        &action,
                    );
                }
            }
            Action::TransferLeadership { to, .. } => {
                if !self.voters().any(|m| m.id == *to && self.member_healthy(m)) {
                    self.violation("leadership moved to a member that cannot lead", &action);
                }
                self.leader = Some(*to);
            }
            Action::RollMember { ordinal, .. } => {
                let Some(pod) = self.pods.get(ordinal).cloned() else {
                    self.violation("rolling a Pod that does not exist", &action);
                    return;
                };
                if !quorum_before {
                    self.violation("a rollout step without quorum", &action);
                }
                let resize_pending = self
                    .pvcs
                    .get(ordinal)
                    .is_some_and(|p| p.filesystem_resize_pending);
                if pod.template == self.desired_template() && !resize_pending {
                    self.violation("rolling a Pod that is up to date", &action);
                }
                let others_down = self
                    .voters()
                    .filter(|m| m.ordinal != *ordinal && !self.member_healthy(m))
                    .count();
                if others_down > 0 {
                    self.violation(
                        "a rollout takes a member down while another is down",
                        &action,
                    );
                }
                if self.members.iter().any(|m| m.learner) {
                    self.violation("a rollout step while a learner joins", &action);
                }
                if let Some(p) = self.pods.get_mut(ordinal) {
                    p.deleting = true;
                }
            }
            Action::ExpandVolume { ordinal, size } => {
                let size = crate::api::quantity::bytes(
                    &k8s_openapi::apimachinery::pkg::api::resource::Quantity(size.clone()),
                )
                .unwrap_or(0);
                match self.pvcs.get_mut(ordinal) {
                    Some(pvc) if size > pvc.requested => pvc.requested = size,
                    Some(_) => self.violation("shrinking or re-asking a volume", &action),
                    None => self.violation("expanding a PVC that does not exist", &action),
                }
                if !self.expansion_allowed {
                    self.violation("expanding a volume its class does not allow", &action);
                }
            }
            Action::UpdatePodMetadata { ordinal } => {
                let metadata = desired_metadata(&self.spec);
                match self.pods.get_mut(ordinal) {
                    Some(pod) => pod.metadata = metadata,
                    None => self.violation("labelling a Pod that does not exist", &action),
                }
            }
            Action::EnableDowngrade { target } => {
                if !quorum_before {
                    self.violation("etcd's downgrade enabled without quorum", &action);
                    return;
                }
                let target = release_line(&format!("{target}.0"));
                if target.minor + 1 != self.storage.minor || self.downgrade.is_some() {
                    // etcd refuses it (validation); the operator asked wrongly.
                    self.violation("a downgrade etcd would refuse", &action);
                    return;
                }
                self.downgrade = Some(target);
                self.storage = target;
            }
            Action::DefragmentMember { id, .. } => {
                // The member serves nothing while it runs: the others must
                // keep a quorum.
                let voters = self.members.iter().filter(|m| !m.learner).count();
                let target_healthy = self
                    .members
                    .iter()
                    .any(|m| m.id == *id && !m.learner && self.member_healthy(m));
                let others = self
                    .healthy_voters()
                    .saturating_sub(usize::from(target_healthy));
                if !quorum_before || others < voters / 2 + 1 {
                    self.violation("a defragmentation that leaves no quorum", &action);
                }
                if voters > 1 && self.current_leader() == Some(*id) {
                    self.violation(
                        "the leader defragmented without moving leadership first",
                        &action,
                    );
                }
                if self.corrupt.is_some() {
                    self.violation("a defragmentation while CORRUPT is raised", &action);
                }
                if let Some(db) = self.db.get_mut(id) {
                    db.size = db.in_use;
                }
            }
            Action::CompactHistory { .. } => {
                if !quorum_before {
                    self.violation("a compaction without quorum", &action);
                }
                let history = std::mem::take(&mut self.history);
                for db in self.db.values_mut() {
                    db.in_use = (db.in_use - history).max(0);
                }
            }
            Action::UpdatePeerUrl { id, to, .. } => {
                if !quorum_before {
                    self.violation("rule 3: membership change without quorum", &action);
                    return;
                }
                let deaf: Vec<u32> = self
                    .pods
                    .iter()
                    .filter(|(_, p)| !listens_on(p.transport, to))
                    .map(|(o, _)| *o)
                    .collect();
                if !deaf.is_empty() {
                    self.violation(
                        &format!("a peer URL moved where members {deaf:?} do not listen"),
                        &action,
                    );
                }
                match self.members.iter_mut().find(|m| m.id == *id) {
                    Some(member) => member.peer_url = to.clone(),
                    None => self.violation("updating a member that does not exist", &action),
                }
            }
            Action::RotateCa { step, .. } => {
                let desired = self.desired_template();
                let all_on_it = self.pods.values().all(|p| p.template == desired);
                if !all_on_it {
                    self.violation(
                        "a CA rotation step before every member runs the last",
                        &action,
                    );
                }
                self.ca_steps.push((*step, all_on_it));
                if let Some(tls) = &mut self.tls {
                    use crate::tls::CaRotationStep::{RetireOldCa, SignWithNewCa, TrustNewCa};
                    let request = tls.rotation.take().map(|(_, r)| r).unwrap_or_default();
                    tls.revision = format!("{}+{step}", tls.revision);
                    tls.rotation = match step {
                        TrustNewCa => Some((SignWithNewCa, request)),
                        SignWithNewCa => Some((RetireOldCa, request)),
                        RetireOldCa => {
                            tls.status.ca_rotated_for = Some(request);
                            None
                        }
                    };
                }
            }
            Action::DisarmCorrupt { .. } => {
                if !quorum_before {
                    self.violation("a disarm without quorum", &action);
                }
                if self.corrupt.is_none() {
                    self.violation("disarming CORRUPT that is not raised", &action);
                }
                if self.damaged_member_serves() {
                    self.violation(
                        "rule 15: CORRUPT disarmed while a member serves damaged data",
                        &action,
                    );
                }
                self.corrupt = None;
            }
            Action::DisarmNoSpace { .. } => {
                if !quorum_before {
                    self.violation("a disarm without quorum", &action);
                }
                if self.db.values().any(|d| d.in_use * 10 > self.quota * 9) {
                    self.violation("NOSPACE disarmed while the data fills the quota", &action);
                }
                self.nospace.clear();
            }
            Action::CancelDowngrade { .. } => {
                if self.downgrade.is_none() {
                    self.violation("cancelling a downgrade that is not enabled", &action);
                }
                self.downgrade = None;
            }
            Action::AdvanceRaftLog { .. } => {
                if !quorum_before {
                    self.violation("a raft entry proposed without quorum", &action);
                    return;
                }
                if self.learners_never_start {
                    return;
                }
                let stalled = std::mem::take(&mut self.stalled);
                for m in self.members.iter_mut().filter(|m| stalled.contains(&m.id)) {
                    m.started = true;
                }
            }
            Action::RestoreFromSurvivor { ordinal, .. } => {
                if self.majority_data_exists() {
                    self.violation("rule 7: restore while a majority's data exists", &action);
                }
                // Rule 11: without a person's choice, the survivor whose
                // log holds the most is the one restored.
                let chosen = self.pvcs.get(ordinal).map(|p| p.index.max(p.log_index));
                if self.spec.recovery.policy == crate::api::RecoveryPolicy::NewestSurvivor
                    && chosen < self.newest_survivor_log()
                {
                    self.violation(
                        &format!(
                            "rule 11: restoring from a survivor whose log ends at {chosen:?} while another's ends at {:?}",
                            self.newest_survivor_log()
                        ),
                        &action,
                    );
                }
            }
            Action::RestoreFromBackup { .. } => {
                // After the cluster formed, only as a disaster recovery.
                if self.formed && self.majority_data_exists() {
                    self.violation("rule 7: restore while a majority's data exists", &action);
                }
                // Rule 11 holds for backups: a survivor's newer data is
                // given up only by a person who approved this very loss.
                if self.formed
                    && !self.loss_approved_by_a_person()
                    && let Some(newest) = self.newest_survivor_index()
                    && i64::try_from(newest).unwrap_or(i64::MAX) > self.backup_reach.unwrap_or(0)
                {
                    self.violation(
                        &format!(
                            "rule 11: a backup restore (reaching {:?}) while a survivor holds index {newest}",
                            self.backup_reach
                        ),
                        &action,
                    );
                }
                if self.formed && self.spec.recovery.backup.is_none() {
                    self.violation("a restore from a backup nobody named", &action);
                }
            }
            Action::RunRestore {
                ordinal,
                token,
                from_backup,
            } => {
                if !self.pods.is_empty() {
                    self.violation(
                        "rule 4: restoring while a Pod of the lost incarnation may run",
                        &action,
                    );
                }
                if self.restore_pod.is_some() {
                    self.violation("a second restore Pod", &action);
                }
                self.restore_pod = Some(SimRestorePod {
                    ordinal: *ordinal,
                    token: token.clone(),
                    done: false,
                    failed: false,
                    from_backup: *from_backup,
                });
            }
            Action::DeleteRestorePod { .. } => {
                self.restore_pod = None;
            }
            Action::AdoptRestoredVolume { ordinal, token } => {
                if !self.restore_pod.as_ref().is_some_and(|r| r.done) {
                    self.violation("adopting a volume the restore has not finished", &action);
                }
                if let Some(p) = self.pvcs.get_mut(ordinal) {
                    p.identity = MemberIdentity {
                        cluster_token: token.clone(),
                        cluster_id: None,
                        member_id: None,
                    };
                }
            }
        }
    }
}

/// The labels and annotations of `spec.pod` a Pod built now carries.
pub fn desired_metadata(spec: &crate::api::EtcdClusterSpec) -> crate::planner::TemplateMetadata {
    crate::planner::TemplateMetadata {
        labels: crate::api::pod_revision::user_labels(spec),
        annotations: spec.pod.annotations.clone(),
    }
}

/// The minor line of a release (`3.6.16` → 3.6.0).
pub fn release_line(version: &str) -> crate::planner::Release {
    crate::planner::Release::parse(version)
        .map(|r| crate::planner::Release { patch: 0, ..r })
        .unwrap_or(crate::planner::Release {
            major: 0,
            minor: 0,
            patch: 0,
        })
}

/// The member ID etcd derives from the static bootstrap (a stand-in).
/// The stable DNS name of a member of the simulated cluster.
fn host(ordinal: u32) -> String {
    format!("{CLUSTER}-{ordinal}.{CLUSTER}-peer.ns.svc.cluster.local")
}

/// Whether a member Pod of `stage` accepts peers dialling `url`.
pub fn listens_on(stage: Transport, url: &str) -> bool {
    let Some((scheme, rest)) = url.split_once("://") else {
        return false;
    };
    let port = rest.rsplit(':').next().unwrap_or_default();
    stage
        .listen_peer_urls()
        .split(',')
        .any(|listen| listen == format!("{scheme}://0.0.0.0:{port}"))
}

fn static_id(token: &str, ordinal: u32) -> u64 {
    token.bytes().fold(u64::from(ordinal) + 1, |h, b| {
        h.wrapping_mul(31).wrapping_add(u64::from(b))
    })
}
