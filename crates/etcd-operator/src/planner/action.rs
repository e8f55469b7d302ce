//! The actions the planner can ask for: at most one per pass.

use crate::api::identity::{MemberIdentity, format_id};
use crate::etcd::MemberId;

/// Every kind of action, each with its one row in [`ActionKind::row`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ActionKind {
    CreatePeerService,
    CreateClientService,
    ApplyPodDisruptionBudget,
    RestoreLabels,
    CreatePvc,
    CreatePod,
    DeletePod,
    /// A Pod deleted without its grace period (its node is confirmed gone).
    ForceDeletePod,
    DeletePvc,
    AnnotatePvcIdentity,
    AddLearner,
    PromoteLearner,
    RemoveMember,
    TransferLeadership,
    RestoreFromSurvivor,
    RestoreFromBackup,
    AdvanceRaftLog,
    RunRestore,
    DeleteRestorePod,
    AdoptRestoredVolume,
    /// A member's Pod replaced because it runs an older Pod template.
    RollMember,
    /// The labels and annotations of `spec.pod` set on a Pod in place.
    UpdatePodMetadata,
    /// A member's PVC asked for the size of `spec.storage.size`.
    ExpandVolume,
    EnableDowngrade,
    CancelDowngrade,
    /// One member's database file rewritten without its free pages.
    DefragmentMember,
    /// The key-value history compacted to free the space NOSPACE needs.
    CompactHistory,
    /// etcd's NOSPACE alarm disarmed once the space is back.
    DisarmNoSpace,
    /// etcd's CORRUPT alarm disarmed once every member it names whose data
    /// differed is out of the cluster.
    DisarmCorrupt,
    /// A volume holding damaged data kept for a person (its
    /// PersistentVolume reclaimed by `Retain`) before its member is rebuilt.
    SetVolumeAside,
    /// One step of a CA rotation taken (the members then restart onto it).
    RotateCa,
    /// One member's peer URL changed in etcd while TLS is turned on.
    UpdatePeerUrl,
}

/// What a kind of action publishes when it is taken.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ActionEvent {
    /// A Normal Event.
    Normal,
    /// A Warning Event: the action removes or replaces something.
    Warning,
    /// No Event: the action repeats every pass while something converges
    /// (status and the log say it; an Event each time would be noise).
    Quiet,
}

/// One row of the table of action kinds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ActionRow {
    /// PascalCase and stable: status `lastOperation.type`, the Event's
    /// action, the `action` label of the actions metric.
    pub name: &'static str,
    /// What happened, PascalCase: the reason of the Event published once
    /// the action is taken.
    pub reason: &'static str,
    /// The Event the action publishes when it is taken.
    pub event: ActionEvent,
    /// Whether it changes etcd's membership.
    pub changes_membership: bool,
}

impl ActionKind {
    /// Every kind, in the order of the table.
    pub const ALL: [ActionKind; 32] = [
        Self::CreatePeerService,
        Self::CreateClientService,
        Self::ApplyPodDisruptionBudget,
        Self::RestoreLabels,
        Self::CreatePvc,
        Self::CreatePod,
        Self::DeletePod,
        Self::ForceDeletePod,
        Self::DeletePvc,
        Self::AnnotatePvcIdentity,
        Self::AddLearner,
        Self::PromoteLearner,
        Self::RemoveMember,
        Self::TransferLeadership,
        Self::RestoreFromSurvivor,
        Self::RestoreFromBackup,
        Self::AdvanceRaftLog,
        Self::RunRestore,
        Self::DeleteRestorePod,
        Self::AdoptRestoredVolume,
        Self::RollMember,
        Self::UpdatePodMetadata,
        Self::ExpandVolume,
        Self::EnableDowngrade,
        Self::CancelDowngrade,
        Self::DefragmentMember,
        Self::CompactHistory,
        Self::DisarmNoSpace,
        Self::DisarmCorrupt,
        Self::SetVolumeAside,
        Self::RotateCa,
        Self::UpdatePeerUrl,
    ];

    /// The table: the one place that names a kind of action and says what
    /// it publishes.
    pub const fn row(self) -> ActionRow {
        use ActionEvent::{Normal, Quiet, Warning};
        let (name, reason, event, changes_membership) = match self {
            Self::CreatePeerService => ("CreatePeerService", "PeerServiceCreated", Normal, false),
            Self::CreateClientService => {
                ("CreateClientService", "ClientServiceCreated", Normal, false)
            }
            Self::ApplyPodDisruptionBudget => (
                "ApplyPodDisruptionBudget",
                "DisruptionBudgetApplied",
                Normal,
                false,
            ),
            Self::RestoreLabels => ("RestoreLabels", "LabelsRestored", Normal, false),
            Self::CreatePvc => ("CreatePvc", "VolumeClaimCreated", Normal, false),
            Self::CreatePod => ("CreatePod", "PodCreated", Normal, false),
            Self::DeletePod => ("DeletePod", "PodDeleted", Normal, false),
            Self::ForceDeletePod => ("ForceDeletePod", "PodForceDeleted", Warning, false),
            Self::DeletePvc => ("DeletePvc", "VolumeClaimDeleted", Warning, false),
            Self::AnnotatePvcIdentity => ("AnnotatePvcIdentity", "IdentityRecorded", Normal, false),
            Self::AddLearner => ("AddLearner", "LearnerAdded", Normal, true),
            Self::PromoteLearner => ("PromoteLearner", "LearnerPromoted", Normal, true),
            Self::RemoveMember => ("RemoveMember", "MemberRemoved", Warning, true),
            Self::TransferLeadership => ("TransferLeadership", "LeaderMoved", Normal, false),
            Self::RestoreFromSurvivor => (
                "RestoreFromSurvivor",
                "RestoreFromSurvivorStarted",
                Warning,
                false,
            ),
            Self::RestoreFromBackup => (
                "RestoreFromBackup",
                "RestoreFromBackupStarted",
                Normal,
                false,
            ),
            Self::AdvanceRaftLog => ("AdvanceRaftLog", "RaftLogAdvanced", Quiet, false),
            Self::RunRestore => ("RunRestore", "RestorePodStarted", Normal, false),
            Self::DeleteRestorePod => ("DeleteRestorePod", "RestorePodDeleted", Normal, false),
            Self::AdoptRestoredVolume => {
                ("AdoptRestoredVolume", "VolumeClaimAdopted", Normal, false)
            }
            Self::RollMember => ("RollMember", "MemberRolled", Normal, false),
            Self::UpdatePodMetadata => ("UpdatePodMetadata", "PodMetadataUpdated", Normal, false),
            Self::ExpandVolume => ("ExpandVolume", "VolumeExpansionRequested", Normal, false),
            Self::EnableDowngrade => ("EnableDowngrade", "DowngradeEnabled", Normal, false),
            Self::CancelDowngrade => ("CancelDowngrade", "DowngradeCancelled", Normal, false),
            Self::DefragmentMember => ("DefragmentMember", "MemberDefragmented", Normal, false),
            Self::CompactHistory => ("CompactHistory", "HistoryCompacted", Warning, false),
            Self::DisarmNoSpace => ("DisarmNoSpace", "NoSpaceDisarmed", Normal, false),
            Self::DisarmCorrupt => ("DisarmCorrupt", "CorruptDisarmed", Warning, false),
            Self::SetVolumeAside => ("SetVolumeAside", "DamagedVolumeSetAside", Warning, false),
            Self::RotateCa => ("RotateCa", "CaRotationStepTaken", Normal, false),
            Self::UpdatePeerUrl => ("UpdatePeerUrl", "PeerUrlUpdated", Normal, true),
        };
        ActionRow {
            name,
            reason,
            event,
            changes_membership,
        }
    }

    /// The kind's stable name.
    pub const fn name(self) -> &'static str {
        self.row().name
    }

    /// The reason of the Event the kind publishes when taken.
    pub const fn reason(self) -> &'static str {
        self.row().reason
    }

    /// What the kind publishes when taken.
    pub const fn event(self) -> ActionEvent {
        self.row().event
    }

    /// Whether the kind changes etcd's membership.
    pub const fn changes_membership(self) -> bool {
        self.row().changes_membership
    }
}

impl std::fmt::Display for ActionKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// How a member Pod starts etcd.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Bootstrap {
    /// `--initial-cluster-state=new`: only for the members of the first
    /// bootstrap of an incarnation, before the cluster has ever formed.
    New {
        /// `--initial-cluster-token`, unique to the incarnation.
        token: String,
        /// Ordinals listed in `--initial-cluster`.
        initial_members: Vec<u32>,
    },
    /// `--initial-cluster-state=existing`: every other start. A member with
    /// data ignores it; an empty member joins the membership it was added to.
    Existing {
        /// `--initial-cluster-token` of the incarnation.
        token: String,
        /// Ordinals listed in `--initial-cluster` (the membership plus this
        /// member).
        initial_members: Vec<u32>,
        /// The peer URLs etcd's member list holds for the listed members it
        /// knows. A joining member's `--initial-cluster` must match that
        /// list exactly (etcd refuses the join otherwise), and while a
        /// transport change moves peer URLs one member at a time, they are
        /// not what the current stage would give a new member.
        peer_urls: std::collections::BTreeMap<u32, Vec<String>>,
    },
}

impl Bootstrap {
    /// Whether this is `--initial-cluster-state=new`.
    pub fn is_new(&self) -> bool {
        matches!(self, Self::New { .. })
    }

    /// The incarnation token.
    pub fn token(&self) -> &str {
        match self {
            Self::New { token, .. } | Self::Existing { token, .. } => token,
        }
    }

    /// Ordinals of `--initial-cluster`.
    /// The peer URLs the member list holds for the listed members (none for
    /// a first bootstrap: nothing exists yet).
    pub fn known_peer_urls(&self) -> Option<&std::collections::BTreeMap<u32, Vec<String>>> {
        match self {
            Self::New { .. } => None,
            Self::Existing { peer_urls, .. } => Some(peer_urls),
        }
    }

    pub fn initial_members(&self) -> &[u32] {
        match self {
            Self::New {
                initial_members, ..
            }
            | Self::Existing {
                initial_members, ..
            } => initial_members,
        }
    }
}

/// One step of the operator.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// Create the headless peer Service (`publishNotReadyAddresses`).
    CreatePeerService,
    /// Create the client Service.
    CreateClientService,
    /// Create or update the PodDisruptionBudget: evictions may leave no
    /// fewer than `min_available` members, the quorum of the current voters.
    ApplyPodDisruptionBudget {
        /// Its `minAvailable`.
        min_available: u32,
    },
    /// Put back the labels the operator selects a member's objects by, on
    /// its PVC and/or Pod that were found by name without them.
    RestoreLabels {
        /// The ordinal.
        ordinal: u32,
        /// The PVC lost its labels.
        pvc: bool,
        /// The Pod lost its labels.
        pod: bool,
    },
    /// Create the PVC of an ordinal, annotated with the identity known so far.
    CreatePvc {
        /// The ordinal.
        ordinal: u32,
        /// Identity annotations.
        identity: MemberIdentity,
        /// The size it asks for: `storage.size`, or the members' largest
        /// volume when the spec went below it (volumes never shrink).
        size: String,
    },
    /// Create the Pod of an ordinal on its existing PVC.
    CreatePod {
        /// The ordinal.
        ordinal: u32,
        /// How etcd starts.
        bootstrap: Bootstrap,
        /// The identity its data must carry (checked by `member-guard`).
        identity: MemberIdentity,
        /// The etcd release it runs when not `spec.version`: while the
        /// members' data is of a newer minor release than the spec's (until
        /// etcd's downgrade lowers it), a Pod runs the newest pinned release
        /// of the data's line, which starts on it.
        release: Option<String>,
    },
    /// Delete the Pod of an ordinal.
    DeletePod {
        /// The ordinal.
        ordinal: u32,
        /// Delete with grace period 0: only when its node is confirmed gone,
        /// so nothing of it can still run.
        force: bool,
        /// Why.
        reason: String,
    },
    /// Delete the PVC of an ordinal: its data is known gone, or its member
    /// was removed by scale-down and the retention policy says `Delete`.
    DeletePvc {
        /// The ordinal.
        ordinal: u32,
        /// Why.
        reason: String,
    },
    /// Record on the PVC which etcd member its data belongs to.
    AnnotatePvcIdentity {
        /// The ordinal.
        ordinal: u32,
        /// The identity to record.
        identity: MemberIdentity,
    },
    /// Add the member of an ordinal to etcd as a learner.
    AddLearner {
        /// The ordinal.
        ordinal: u32,
    },
    /// Promote a learner that has caught up to a voter.
    PromoteLearner {
        /// etcd member ID.
        id: MemberId,
        /// Its ordinal.
        ordinal: u32,
    },
    /// Remove a member from etcd.
    RemoveMember {
        /// etcd member ID.
        id: MemberId,
        /// Its ordinal, if it has one.
        ordinal: Option<u32>,
        /// Why.
        reason: String,
    },
    /// Commit a raft entry that changes no key (a lease granted and
    /// revoked), so that a learner that joined from a snapshot applies an
    /// entry after it and starts serving: on an idle cluster nothing else
    /// would be committed.
    AdvanceRaftLog {
        /// The learner waiting for an entry.
        learner: MemberId,
        /// Its ordinal.
        ordinal: u32,
    },
    /// Move raft leadership to another voter.
    TransferLeadership {
        /// The current leader.
        from: MemberId,
        /// The voter to lead.
        to: MemberId,
    },
    /// Start a new incarnation from the data of the surviving member with the
    /// newest revision. Only ever planned after the data of a majority is
    /// known lost and the recovery policy allows it.
    RestoreFromSurvivor {
        /// The survivor's ordinal.
        ordinal: u32,
        /// The survivor's member ID.
        id: MemberId,
        /// Its revision, the newest data that will be kept.
        revision: Option<i64>,
        /// Token of the new incarnation.
        new_token: String,
    },
    /// Start a new cluster from a backup (`spec.bootstrap.fromBackup`):
    /// records the restore; the next passes carry it out on the volume of
    /// `ordinal`.
    RestoreFromBackup {
        /// The member whose volume receives the backup.
        ordinal: u32,
        /// Token of the new incarnation.
        new_token: String,
    },
    /// Run the restore Pod on the target member's volume: `etcdutl snapshot
    /// restore` of the survivor's db (or of a downloaded, verified backup,
    /// with its incremental segments replayed) into the new incarnation (one
    /// member, new cluster ID), the old data dir kept beside it.
    RunRestore {
        /// The target member's ordinal.
        ordinal: u32,
        /// Token of the new incarnation.
        token: String,
        /// Restore the backup named by the spec rather than the survivor's
        /// own db.
        from_backup: bool,
    },
    /// Delete the restore Pod (done, or to run it again).
    DeleteRestorePod {
        /// Why.
        reason: String,
    },
    /// Record on the survivor's PVC that it now holds the new incarnation's
    /// data (the old member and cluster IDs are cleared).
    AdoptRestoredVolume {
        /// The survivor's ordinal.
        ordinal: u32,
        /// Token of the new incarnation.
        token: String,
    },
    /// Replace the Pod of a member that runs an older Pod template: its
    /// Pod is deleted (gracefully) and recreated from the current spec on
    /// the same PVC, as the same member.
    RollMember {
        /// The ordinal.
        ordinal: u32,
        /// What the member runs and what it will run, in words.
        change: String,
        /// Members already on the current template, and the voters.
        updated: usize,
        /// The voters.
        of: usize,
    },
    /// Set the labels and annotations of `spec.pod` on a member's Pod in
    /// place (removing those the spec no longer has): no restart.
    UpdatePodMetadata {
        /// The ordinal.
        ordinal: u32,
    },
    /// Ask a member's PVC for the size of `spec.storage.size`; the storage
    /// provider expands the volume.
    ExpandVolume {
        /// The ordinal.
        ordinal: u32,
        /// The new size, e.g. `2Gi`.
        size: String,
    },
    /// Start etcd's downgrade to a minor release (`3.6`): lowers the
    /// cluster's and the members' storage version so that the older release
    /// can start on their data.
    EnableDowngrade {
        /// The minor release, e.g. `3.6`.
        target: String,
    },
    /// Cancel etcd's downgrade in progress (the spec went back up).
    CancelDowngrade {
        /// The downgrade's target, as etcd reports it.
        target: String,
    },
    /// Defragment one member: its database file is rewritten without free
    /// pages; it serves nothing meanwhile.
    DefragmentMember {
        /// The ordinal.
        ordinal: u32,
        /// Its member ID.
        id: MemberId,
        /// Why now, in words.
        reason: String,
    },
    /// Compact the key-value history up to `revision`: the space NOSPACE
    /// needs back (history before it is gone; the keys are kept).
    CompactHistory {
        /// The newest revision.
        revision: i64,
    },
    /// Disarm the NOSPACE alarms of these members: writes are taken again.
    DisarmNoSpace {
        /// The members the alarms name.
        members: Vec<MemberId>,
    },
    /// Disarm the CORRUPT alarms of these members: every one of them whose
    /// data differed from its agreeing peers' is out of the cluster, and
    /// writes are taken again.
    DisarmCorrupt {
        /// The members the alarms name.
        members: Vec<MemberId>,
    },
    /// Keep the volume of a member whose data etcd found damaged for a
    /// person: its PersistentVolume is reclaimed by `Retain` and annotated
    /// with the evidence, so the member can be rebuilt on a new volume.
    SetVolumeAside {
        /// The member's ordinal.
        ordinal: u32,
        /// The PersistentVolume.
        volume: String,
        /// What etcd said of the data.
        evidence: String,
    },
    /// Take the next step of a CA rotation (every member runs what the last
    /// one asked for).
    RotateCa {
        /// The step.
        step: crate::tls::CaRotationStep,
        /// The request (annotation value) it carries out.
        request: String,
    },
    /// Change a member's peer URL in etcd (every member listens on both).
    UpdatePeerUrl {
        /// Its member ID.
        id: MemberId,
        /// Its name (its ID in hex when it has none).
        name: String,
        /// Its peer URLs now.
        from: Vec<String>,
        /// Its peer URL after.
        to: String,
    },
}

impl Action {
    /// The kind of action: its name, its Event and its metric label.
    pub fn kind(&self) -> ActionKind {
        match self {
            Self::CreatePeerService => ActionKind::CreatePeerService,
            Self::CreateClientService => ActionKind::CreateClientService,
            Self::ApplyPodDisruptionBudget { .. } => ActionKind::ApplyPodDisruptionBudget,
            Self::RestoreLabels { .. } => ActionKind::RestoreLabels,
            Self::CreatePvc { .. } => ActionKind::CreatePvc,
            Self::CreatePod { .. } => ActionKind::CreatePod,
            Self::DeletePod { force: false, .. } => ActionKind::DeletePod,
            Self::DeletePod { force: true, .. } => ActionKind::ForceDeletePod,
            Self::DeletePvc { .. } => ActionKind::DeletePvc,
            Self::AnnotatePvcIdentity { .. } => ActionKind::AnnotatePvcIdentity,
            Self::AddLearner { .. } => ActionKind::AddLearner,
            Self::PromoteLearner { .. } => ActionKind::PromoteLearner,
            Self::RemoveMember { .. } => ActionKind::RemoveMember,
            Self::TransferLeadership { .. } => ActionKind::TransferLeadership,
            Self::RestoreFromSurvivor { .. } => ActionKind::RestoreFromSurvivor,
            Self::RestoreFromBackup { .. } => ActionKind::RestoreFromBackup,
            Self::AdvanceRaftLog { .. } => ActionKind::AdvanceRaftLog,
            Self::RunRestore { .. } => ActionKind::RunRestore,
            Self::DeleteRestorePod { .. } => ActionKind::DeleteRestorePod,
            Self::AdoptRestoredVolume { .. } => ActionKind::AdoptRestoredVolume,
            Self::RollMember { .. } => ActionKind::RollMember,
            Self::UpdatePodMetadata { .. } => ActionKind::UpdatePodMetadata,
            Self::ExpandVolume { .. } => ActionKind::ExpandVolume,
            Self::EnableDowngrade { .. } => ActionKind::EnableDowngrade,
            Self::CancelDowngrade { .. } => ActionKind::CancelDowngrade,
            Self::DefragmentMember { .. } => ActionKind::DefragmentMember,
            Self::CompactHistory { .. } => ActionKind::CompactHistory,
            Self::DisarmNoSpace { .. } => ActionKind::DisarmNoSpace,
            Self::DisarmCorrupt { .. } => ActionKind::DisarmCorrupt,
            Self::SetVolumeAside { .. } => ActionKind::SetVolumeAside,
            Self::RotateCa { .. } => ActionKind::RotateCa,
            Self::UpdatePeerUrl { .. } => ActionKind::UpdatePeerUrl,
        }
    }

    /// Whether the action changes etcd membership.
    pub fn changes_membership(&self) -> bool {
        self.kind().changes_membership()
    }

    /// A sentence for status and Events.
    pub fn describe(&self, cluster: &str) -> String {
        let member = |o: &u32| format!("{cluster}-{o}");
        match self {
            Self::CreatePeerService => "creating the headless peer Service".to_string(),
            Self::CreateClientService => "creating the client Service".to_string(),
            Self::ApplyPodDisruptionBudget { min_available } => format!(
                "setting the PodDisruptionBudget to keep at least {min_available} members available"
            ),
            Self::RestoreLabels { ordinal, pvc, pod } => format!(
                "putting back the labels of {}{}{} (found by name without them)",
                if *pvc { "the PVC" } else { "" },
                if *pvc && *pod { " and " } else { "" },
                if *pod {
                    format!("Pod {}", member(ordinal))
                } else {
                    format!(" of {}", member(ordinal))
                }
            ),
            Self::CreatePvc { ordinal, .. } => format!("creating the PVC of {}", member(ordinal)),
            Self::CreatePod {
                ordinal,
                bootstrap,
                release,
                ..
            } => format!(
                "creating Pod {} (--initial-cluster-state={}){}",
                member(ordinal),
                if bootstrap.is_new() {
                    "new"
                } else {
                    "existing"
                },
                release
                    .as_ref()
                    .map(|r| format!(
                        " on etcd {r}: the members' data is of a newer minor release than spec.version until etcd's downgrade lowers it"
                    ))
                    .unwrap_or_default()
            ),
            Self::DeletePod {
                ordinal,
                force,
                reason,
            } => format!(
                "deleting Pod {}{}: {reason}",
                member(ordinal),
                if *force {
                    " (force, node confirmed gone)"
                } else {
                    ""
                }
            ),
            Self::DeletePvc { ordinal, reason } => {
                format!("deleting the PVC of {}: {reason}", member(ordinal))
            }
            Self::AnnotatePvcIdentity { ordinal, identity } => format!(
                "recording member {} on the PVC of {}",
                identity.member_id.map(format_id).unwrap_or_default(),
                member(ordinal)
            ),
            Self::AddLearner { ordinal } => format!("adding {} as a learner", member(ordinal)),
            Self::PromoteLearner { id, ordinal } => {
                format!(
                    "promoting learner {} ({}) to voter",
                    member(ordinal),
                    format_id(*id)
                )
            }
            Self::RemoveMember {
                id,
                ordinal,
                reason,
            } => format!(
                "removing member {}{}: {reason}",
                format_id(*id),
                ordinal
                    .map(|o| format!(" ({})", member(&o)))
                    .unwrap_or_default()
            ),
            Self::AdvanceRaftLog { learner, ordinal } => format!(
                "committing a raft entry for learner {} ({}), which has not started serving yet",
                member(ordinal),
                format_id(*learner)
            ),
            Self::TransferLeadership { from, to } => format!(
                "transferring leadership from {} to {}",
                format_id(*from),
                format_id(*to)
            ),
            Self::RestoreFromSurvivor {
                ordinal,
                revision,
                new_token,
                ..
            } => format!(
                "restoring a new incarnation {new_token} from survivor {} at revision {}",
                member(ordinal),
                revision
                    .map(|r| r.to_string())
                    .unwrap_or_else(|| "unknown".to_string())
            ),
            Self::RestoreFromBackup { ordinal, new_token } => format!(
                "bootstrapping incarnation {new_token} from a backup restored into {}",
                member(ordinal)
            ),
            Self::RunRestore {
                ordinal,
                token,
                from_backup: false,
            } => format!(
                "restoring the data of {} into incarnation {token}",
                member(ordinal)
            ),
            Self::RunRestore {
                ordinal,
                token,
                from_backup: true,
            } => format!(
                "restoring a backup into {} as incarnation {token}",
                member(ordinal)
            ),
            Self::DeleteRestorePod { reason } => format!("deleting the restore Pod: {reason}"),
            Self::AdoptRestoredVolume { ordinal, token } => format!(
                "recording incarnation {token} on the PVC of {}",
                member(ordinal)
            ),
            Self::RollMember {
                ordinal,
                change,
                updated,
                of,
            } => format!(
                "replacing the Pod of {} ({change}); {updated} of {of} members updated",
                member(ordinal)
            ),
            Self::UpdatePodMetadata { ordinal } => format!(
                "setting the labels and annotations of spec.pod on Pod {} in place",
                member(ordinal)
            ),
            Self::ExpandVolume { ordinal, size } => {
                format!("expanding the volume of {} to {size}", member(ordinal))
            }
            Self::EnableDowngrade { target } => format!(
                "enabling etcd's downgrade to {target}: the cluster and storage versions go down before members run {target}"
            ),
            Self::CancelDowngrade { target } => {
                format!("cancelling etcd's downgrade to {target}: the spec no longer asks for it")
            }
            Self::DefragmentMember { ordinal, reason, .. } => {
                format!("defragmenting {} ({reason})", member(ordinal))
            }
            Self::CompactHistory { revision } => format!(
                "compacting the history up to revision {revision}: NOSPACE is raised and the space of older revisions is needed back (every key keeps its newest value)"
            ),
            Self::RotateCa { step, request } => {
                format!("CA rotation {request:?}: {}", step.describe())
            }
            Self::UpdatePeerUrl { name, from, to, .. } => format!(
                "turning TLS on: changing the peer URL of {name} from {} to {to}",
                from.join(",")
            ),
            Self::SetVolumeAside {
                ordinal,
                volume,
                evidence,
            } => format!(
                "keeping volume {volume} of {} for a person (reclaim policy Retain): etcd found its data damaged ({evidence}); the member is rebuilt from its healthy peers on a new volume",
                member(ordinal)
            ),
            Self::DisarmCorrupt { members } => format!(
                "disarming CORRUPT ({}): no member whose data differed from its agreeing peers' is left in the cluster, so writes are taken again",
                members
                    .iter()
                    .map(|m| format_id(*m))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            Self::DisarmNoSpace { members } => format!(
                "disarming NOSPACE ({}): the space is back and writes are taken again",
                members
                    .iter()
                    .map(|m| format_id(*m))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        }
    }
}

#[cfg(test)]
mod table_tests {
    use std::collections::BTreeSet;

    use super::*;

    #[test]
    fn every_kind_has_its_own_name_and_reason_and_is_listed_once() {
        let names: BTreeSet<&str> = ActionKind::ALL.iter().map(|k| k.name()).collect();
        assert_eq!(names.len(), ActionKind::ALL.len());
        let reasons: BTreeSet<&str> = ActionKind::ALL.iter().map(|k| k.reason()).collect();
        assert_eq!(reasons.len(), ActionKind::ALL.len());
        let kinds: BTreeSet<ActionKind> = ActionKind::ALL.into_iter().collect();
        assert_eq!(kinds.len(), ActionKind::ALL.len());
    }

    #[test]
    fn destructive_kinds_warn_and_membership_kinds_are_marked() {
        for kind in [
            ActionKind::RemoveMember,
            ActionKind::DeletePvc,
            ActionKind::RestoreFromSurvivor,
            ActionKind::ForceDeletePod,
        ] {
            assert_eq!(kind.event(), ActionEvent::Warning, "{kind}");
        }
        let membership: Vec<ActionKind> = ActionKind::ALL
            .into_iter()
            .filter(|k| k.changes_membership())
            .collect();
        assert_eq!(
            membership,
            [
                ActionKind::AddLearner,
                ActionKind::PromoteLearner,
                ActionKind::RemoveMember,
                ActionKind::UpdatePeerUrl
            ]
        );
    }

    #[test]
    fn a_forced_pod_deletion_is_its_own_kind() {
        let delete = |force| Action::DeletePod {
            ordinal: 0,
            force,
            reason: "node gone".into(),
        };
        assert_eq!(delete(false).kind(), ActionKind::DeletePod);
        assert_eq!(delete(true).kind(), ActionKind::ForceDeletePod);
    }
}
