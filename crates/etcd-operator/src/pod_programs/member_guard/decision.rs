//! The guard's pure decision: what the operator expects, what the volume
//! and the Pod-scoped marker hold, and which pass this is, in; start
//! (writing which marker) or refuse, out. See the table of
//! [`super`].

use super::refusal::{MarkerField, Refusal};
use crate::etcd::format_id;
use crate::pod_programs::identity_marker::MemberMarker;

/// What the operator expects the volume to hold.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExpectedIdentity {
    pub cluster_token: String,
    pub member_name: String,
    pub cluster_id: Option<u64>,
    pub member_id: Option<u64>,
    pub expect_data: bool,
}

/// What the guard found on the volume.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VolumeState {
    pub marker: Option<MemberMarker>,
    /// The data directory exists and has entries.
    pub data_present: bool,
}

/// Which pass of the guard this is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GuardPass {
    /// Only check the volume (the init container): etcd does not start yet.
    Check,
    /// etcd is exec'd right after this pass: the marker written first says
    /// that etcd ran on this volume.
    StartEtcd,
}

/// The guard's verdict.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GuardDecision {
    /// Start etcd; write this marker first when it differs from the one on
    /// disk (new member, or IDs learnt since).
    Start { write_marker: Option<MemberMarker> },
    /// Do not start etcd.
    Refuse(Refusal),
}

/// The pure decision of the guard. See the module table.
pub fn decide(expected: &ExpectedIdentity, volume: &VolumeState, pass: GuardPass) -> GuardDecision {
    let member_name = expected.member_name.clone();
    let starts_etcd = pass == GuardPass::StartEtcd;
    let Some(marker) = &volume.marker else {
        return match (volume.data_present, expected.expect_data) {
            (true, _) => GuardDecision::Refuse(Refusal::DataWithoutMarker { member_name }),
            (false, true) => GuardDecision::Refuse(Refusal::DataLostNoMarker { member_name }),
            (false, false) => GuardDecision::Start {
                write_marker: Some(MemberMarker {
                    cluster_token: expected.cluster_token.clone(),
                    member_name,
                    cluster_id: expected.cluster_id,
                    member_id: expected.member_id,
                    has_had_data: starts_etcd,
                }),
            },
        };
    };

    if let Some(refusal) = mismatch(expected, marker) {
        return GuardDecision::Refuse(refusal);
    }

    if !volume.data_present && (marker.has_had_data || expected.expect_data) {
        return GuardDecision::Refuse(Refusal::DataLost { member_name });
    }

    // Matching marker: complete it with what is known now, and with the
    // start of etcd that follows this pass.
    let completed = MemberMarker {
        cluster_id: marker.cluster_id.or(expected.cluster_id),
        member_id: marker.member_id.or(expected.member_id),
        has_had_data: marker.has_had_data || volume.data_present || starts_etcd,
        ..marker.clone()
    };
    GuardDecision::Start {
        write_marker: (completed != *marker).then_some(completed),
    }
}

fn mismatch(expected: &ExpectedIdentity, marker: &MemberMarker) -> Option<Refusal> {
    let differs = |field: MarkerField, found: String, wanted: String| Refusal::MarkerMismatch {
        member_name: expected.member_name.clone(),
        field,
        found,
        expected: wanted,
    };
    if marker.cluster_token != expected.cluster_token {
        return Some(differs(
            MarkerField::ClusterToken,
            marker.cluster_token.clone(),
            expected.cluster_token.clone(),
        ));
    }
    if marker.member_name != expected.member_name {
        return Some(differs(
            MarkerField::MemberName,
            marker.member_name.clone(),
            expected.member_name.clone(),
        ));
    }
    if let (Some(found), Some(wanted)) = (marker.cluster_id, expected.cluster_id)
        && found != wanted
    {
        return Some(differs(
            MarkerField::ClusterId,
            format_id(found),
            format_id(wanted),
        ));
    }
    if let (Some(found), Some(wanted)) = (marker.member_id, expected.member_id)
        && found != wanted
    {
        return Some(differs(
            MarkerField::MemberId,
            format_id(found),
            format_id(wanted),
        ));
    }
    None
}

/// The decision at a start of a container of a Pod whose earlier container
/// saw `seen` on the volume. Once the guard let etcd start in this Pod (or
/// saw data), the volume's marker must still be there (it only vanishes
/// with the volume's content), with the IDs seen then, and data. A Pod-scoped
/// marker that says etcd never started proves nothing more than the volume.
pub fn decide_in_pod(
    expected: &ExpectedIdentity,
    seen: Option<&MemberMarker>,
    volume: &VolumeState,
    pass: GuardPass,
) -> GuardDecision {
    let Some(seen) = seen else {
        return decide(expected, volume, pass);
    };
    let member_name = expected.member_name.clone();
    let etcd_ran_here = seen.has_had_data || expected.expect_data;
    if volume.marker.is_none() && etcd_ran_here {
        return GuardDecision::Refuse(if volume.data_present {
            Refusal::DataWithoutMarker { member_name }
        } else {
            Refusal::VolumeWipedUnderPod { member_name }
        });
    }
    let sharpened = ExpectedIdentity {
        cluster_id: expected.cluster_id.or(seen.cluster_id),
        member_id: expected.member_id.or(seen.member_id),
        expect_data: etcd_ran_here,
        ..expected.clone()
    };
    decide(&sharpened, volume, pass)
}

#[cfg(test)]
mod tests;
