//! What a pass derives once from its observation: the [`Context`] every
//! step reads.

use super::evidence::{damaged_data, data_gone, local_volume_on_deleted_node};
use super::membership::{KnownMember, Membership, Source};
use super::observed::{Observed, PodPhase};
use crate::api::identity::{MemberIdentity, parse_id};

/// Everything derived once per pass.
pub struct Context<'a> {
    /// The observation.
    pub o: &'a Observed,
    /// The membership.
    pub membership: Membership,
    /// Token of the current incarnation.
    pub token: String,
    /// The cluster has formed at least once (quorum was reached): from now
    /// on, never `--initial-cluster-state=new`.
    pub formed: bool,
    /// The etcd cluster ID, when known.
    pub cluster_id: Option<u64>,
    /// Voters of the first bootstrap.
    pub bootstrap_replicas: u32,
    /// Desired voters.
    pub replicas: u32,
    /// The restore into a new incarnation in progress, if any.
    pub restoring: Option<crate::api::RestoreStatus>,
    /// The hash of the member Pod template the spec asks for.
    pub desired_template: String,
    /// The target of etcd's downgrade in progress (`3.6.0`), as any
    /// answering member reports it.
    pub downgrade_target: Option<String>,
    /// The alarms etcd has raised, as any answering member reports them.
    pub alarms: Vec<crate::etcd::Alarm>,
}

impl<'a> Context<'a> {
    /// Derives the context of an observation.
    pub fn new(o: &'a Observed) -> Self {
        let membership = Membership::from_observed(o);
        let status_cluster_id = o.status.cluster_id.as_deref().and_then(parse_id);
        let pvc_cluster_id = o
            .ordinals
            .values()
            .filter_map(|objects| objects.pvc.as_ref()?.identity.cluster_id)
            .next();
        let live_cluster_id = if o.etcd.quorum_reachable {
            o.etcd.cluster_id
        } else {
            None
        };
        let restoring = o.status.restore.clone().filter(|r| r.in_progress());
        // While a restore runs, only the new incarnation serving tells its
        // cluster ID; the lost incarnation's IDs (status, PVCs) are history.
        let cluster_id = match &restoring {
            Some(restore) => {
                let lost = restore.from_cluster_id.as_deref().and_then(parse_id);
                live_cluster_id.filter(|id| Some(*id) != lost)
            }
            None => live_cluster_id.or(status_cluster_id).or(pvc_cluster_id),
        };
        let token = match &restoring {
            Some(restore) => restore.incarnation.clone(),
            None => o
                .status
                .cluster_token
                .clone()
                .unwrap_or_else(|| first_token(o)),
        };
        let replicas = o.spec.replica_count();
        let bootstrap_replicas = o
            .status
            .bootstrap_replicas
            .and_then(|r| u32::try_from(r).ok())
            .unwrap_or(replicas);
        Self {
            o,
            membership,
            token,
            formed: cluster_id.is_some(),
            cluster_id,
            bootstrap_replicas,
            replicas,
            restoring,
            desired_template: crate::api::pod_revision::template_hash(
                &o.spec,
                o.quota_backend_bytes(),
                o.transport.stage,
                o.tls.as_ref().map(|t| t.revision.as_str()),
            ),
            downgrade_target: o
                .etcd
                .endpoints
                .iter()
                .filter_map(|e| e.status.as_ref()?.downgrade_target.clone())
                .next(),
            alarms: alarms(o),
        }
    }

    pub(crate) fn name(&self, ordinal: u32) -> String {
        crate::addressing::member_name(&self.o.name, ordinal)
    }

    pub(super) fn identity_of(&self, ordinal: u32) -> MemberIdentity {
        let objects = self.o.objects(ordinal);
        let from_pvc = objects.pvc.map(|p| p.identity).unwrap_or_default();
        MemberIdentity {
            cluster_token: self.token.clone(),
            cluster_id: from_pvc.cluster_id.or(self.cluster_id),
            member_id: from_pvc.member_id,
        }
    }

    /// Data-loss evidence of an ordinal: the one judgement of "this data
    /// is gone" (rule 10) that every step goes through, for members and for
    /// volumes kept aside alike.
    pub fn data_gone(&self, ordinal: u32) -> Option<String> {
        let member = self.membership.of_ordinal(ordinal);
        // Rule 15: damaged data is gone for the member once it is kept
        // for a person (its volume set aside) or a person released it.
        if let Some(damage) = self.damage(ordinal)
            && let Some(pvc) = self.o.objects(ordinal).pvc
        {
            if pvc.set_aside {
                return Some(format!(
                    "its data is damaged ({damage}); its volume is set aside for a person"
                ));
            }
            if pvc.released || pvc.deleting {
                return Some(format!(
                    "its data is damaged ({damage}) and a person released its volume"
                ));
            }
        }
        // Rule 10: a member whose etcd answers healthy from its own data is
        // never lost, whatever the objects around it say (stripped labels,
        // a deleted Node object, a PV deleted under Retain, a stale
        // annotation).
        if self.serves_from_own_data(ordinal) {
            return None;
        }
        let objects = self.o.objects(ordinal);
        if let Some(evidence) = data_gone(self.o, &objects, member.is_some()) {
            let node_deleted_only =
                local_volume_on_deleted_node(self.o, &objects).as_ref() == Some(&evidence);
            if node_deleted_only && !self.node_deletion_is_evidence(ordinal) {
                return None;
            }
            return Some(evidence);
        }
        // A PVC that records another member than the one etcd knows for
        // this ordinal holds that other member's data.
        let recorded = objects.pvc.as_ref().and_then(|p| p.identity.member_id);
        match (member, recorded) {
            (Some(m), Some(recorded))
                if self.membership.source == Source::Live && recorded != m.id =>
            {
                Some(format!(
                    "its PVC holds the data of removed member {recorded:x}"
                ))
            }
            _ => None,
        }
    }

    /// Rule 15: what etcd said of the data of `ordinal`'s member if it found
    /// it damaged: its initial corruption check refused the data at start
    /// (the data differs from its peers' at the same revision). A member a
    /// CORRUPT alarm names while it runs is handled by its own step
    /// (`corrupt.rs`): every member answers unhealthy under the alarm.
    pub fn damage(&self, ordinal: u32) -> Option<String> {
        damaged_data(&self.o.objects(ordinal)).map(str::to_string)
    }

    /// Whether a deleted Node counts as the loss of the node-local volume of
    /// `ordinal`. A Node object deleted while its machine lives is
    /// registered again by its kubelet, disks and all, so the deletion alone
    /// proves nothing. It counts for a member of this incarnation once that
    /// member has been down for `memberFailureTimeout`, and at once for a
    /// volume that records no member (it holds nothing to lose). It never
    /// counts for the data of another incarnation (a survivor that a restore
    /// kept aside): that data may be the newest there is, so it is gone only
    /// on other evidence (its claim or volume gone, the guard's refusal) or
    /// when a person releases it.
    fn node_deletion_is_evidence(&self, ordinal: u32) -> bool {
        let Some(pvc) = self.o.objects(ordinal).pvc else {
            return true;
        };
        let token = &pvc.identity.cluster_token;
        if !token.is_empty() && *token != self.token {
            return false;
        }
        match self.membership.of_ordinal(ordinal) {
            Some(member) => self.down_long_enough(member),
            None => pvc.identity.member_id.is_none(),
        }
    }

    /// Whether a member has been down for `memberFailureTimeout`.
    fn down_long_enough(&self, member: &KnownMember) -> bool {
        !member.healthy
            && self
                .o
                .now
                .duration_since(member.healthy_since)
                .unsigned_abs()
                >= self.o.spec.member_failure_timeout()
    }

    /// Whether the member of `ordinal` answers healthy right now, from the
    /// data of the volume its Pod runs on: etcd itself says so.
    pub fn serves_from_own_data(&self, ordinal: u32) -> bool {
        self.membership.source == Source::Live
            && self
                .membership
                .of_ordinal(ordinal)
                .is_some_and(|m| m.started && m.healthy)
            && self
                .o
                .objects(ordinal)
                .pod
                .is_some_and(|p| p.phase == PodPhase::Running)
    }

    /// Why the PVC of `ordinal` is kept although its member is gone: it
    /// holds a member's data of an earlier incarnation (a survivor that a
    /// restore did not start from), not known lost and not released by a
    /// person.
    pub fn retained(&self, ordinal: u32) -> Option<String> {
        let objects = self.o.objects(ordinal);
        let pvc = objects.pvc.as_ref()?;
        let token = &pvc.identity.cluster_token;
        let member = pvc.identity.member_id?;
        if token.is_empty() || *token == self.token || pvc.released || pvc.deleting {
            return None;
        }
        if self.restoring.is_none() && self.serves_from_own_data(ordinal) {
            return None;
        }
        let name = self.name(ordinal);
        let known_lost = self
            .o
            .status
            .restore
            .as_ref()
            .is_some_and(|r| r.from_incarnation == *token && r.lost_members.contains(&name));
        if known_lost || self.data_gone(ordinal).is_some() {
            return None;
        }
        Some(format!(
            "the PVC of {name} keeps the data of member {member:x} of incarnation {token}"
        ))
    }

    /// Voters whose data is known gone: they will never be healthy again, so
    /// they do not hold up the changes that replace them.
    pub fn lost_voters(&self) -> Vec<u64> {
        self.membership
            .voters()
            .filter(|m| m.ordinal.and_then(|o| self.data_gone(o)).is_some())
            .map(|m| m.id)
            .collect()
    }

    /// The ordinals considered in this pass.
    pub fn ordinals(&self) -> Vec<u32> {
        let mut all: Vec<u32> = (0..self.replicas)
            .chain(self.o.ordinals.keys().copied())
            .chain(self.membership.ordinals())
            .collect();
        all.sort_unstable();
        all.dedup();
        all
    }
}

/// The alarms any answering member reports, each once.
fn alarms(o: &Observed) -> Vec<crate::etcd::Alarm> {
    let mut alarms: Vec<crate::etcd::Alarm> = Vec::new();
    for status in o.etcd.endpoints.iter().filter_map(|e| e.status.as_ref()) {
        for alarm in crate::etcd::parse_alarms(&status.errors) {
            if !alarms.contains(&alarm) {
                alarms.push(alarm);
            }
        }
    }
    alarms
}

/// The first incarnation token: unique to this `EtcdCluster` object, and the
/// same on every pass, so an operator restart never invents another one.
fn first_token(o: &Observed) -> String {
    first_token_of(&o.name, &o.uid)
}

/// The first incarnation token of the cluster `name` with UID `uid`.
pub fn first_token_of(name: &str, uid: &str) -> String {
    let uid: String = uid
        .chars()
        .filter(|c| c.is_ascii_alphanumeric())
        .take(12)
        .collect();
    format!("{name}-{uid}")
}
