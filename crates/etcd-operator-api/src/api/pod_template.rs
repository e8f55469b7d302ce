//! Scheduling and metadata of the member Pods.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Affinity, PodSecurityContext, ResourceRequirements, Toleration, TopologySpreadConstraint,
};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Overrides for the member Pods. Unset fields keep the operator's defaults:
/// members spread across nodes and zones (`memberSpreading`), non-root
/// security context.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct MemberPodTemplate {
    /// Compute resources of the etcd container.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<ResourceRequirements>,

    /// Node labels a member Pod requires.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub node_selector: BTreeMap<String, String>,

    /// Affinity of the member Pods. Its node affinity and pod affinity are
    /// used as given; its pod anti-affinity terms are added to the
    /// operator's spreading of members (`memberSpreading`), which only
    /// `memberSpreading: Preferred` relaxes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub affinity: Option<Affinity>,

    /// How strictly members are kept apart, so that one machine or one zone
    /// never holds the data of a majority:
    ///
    /// - `Auto` (default): with node-local volumes (local PVs, local-path
    ///   provisioners) or when the operator cannot tell, two members never
    ///   share a node (required anti-affinity on `kubernetes.io/hostname`),
    ///   and never share a zone (`topology.kubernetes.io/zone`, required)
    ///   when the nodes span at least as many zones as there are members;
    ///   with fewer zones, members spread across zones as evenly as the
    ///   scheduler can. With network-attached volumes, members prefer
    ///   separate nodes and zones but may share them when nothing else fits.
    /// - `RequiredPerNode`: two members never share a node, whatever the
    ///   volumes; zones are preferred.
    /// - `Preferred`: separate nodes and zones are only preferred. An
    ///   explicit opt-out, e.g. for more members than nodes: with node-local
    ///   volumes one node can then hold a majority's data, and status warns.
    #[serde(default)]
    pub member_spreading: MemberSpreading,

    /// Tolerations of the member Pods.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tolerations: Vec<Toleration>,

    /// Topology spread of the member Pods, added to the operator's spread of
    /// members across zones (see `memberSpreading`); a constraint here on
    /// `topology.kubernetes.io/zone` replaces the operator's.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub topology_spread_constraints: Vec<TopologySpreadConstraint>,

    /// Extra labels of the member Pods. The operator's own labels win.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,

    /// Extra annotations of the member Pods.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,

    /// PriorityClass of the member Pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority_class_name: Option<String>,

    /// Pod security context, merged field by field over the defaults: a
    /// field set here wins, every other field keeps its default
    /// (`runAsNonRoot: true`, `runAsUser`, `runAsGroup` and `fsGroup` 1000,
    /// `seccompProfile: RuntimeDefault`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub security_context: Option<PodSecurityContext>,
}

/// How strictly the members of a cluster are kept on separate nodes and
/// zones. See `MemberPodTemplate::member_spreading`.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum MemberSpreading {
    /// Required per node with node-local (or unknown) volumes, per zone too
    /// when there are enough zones; preferred with network-attached volumes.
    #[default]
    Auto,
    /// Two members never share a node; zones are preferred.
    RequiredPerNode,
    /// Separate nodes and zones are only preferred (explicit opt-out).
    Preferred,
}

impl MemberSpreading {
    /// Whether two members must never share a node. `volumes_may_be_node_local`:
    /// the members' volumes are node-local, or the operator cannot tell.
    pub fn separate_nodes_required(self, volumes_may_be_node_local: bool) -> bool {
        match self {
            MemberSpreading::Auto => volumes_may_be_node_local,
            MemberSpreading::RequiredPerNode => true,
            MemberSpreading::Preferred => false,
        }
    }

    /// Whether two members must never share a zone. `enough_zones`: the
    /// nodes span at least as many zones as there are members.
    pub fn separate_zones_required(
        self,
        volumes_may_be_node_local: bool,
        enough_zones: bool,
    ) -> bool {
        match self {
            MemberSpreading::Auto => volumes_may_be_node_local && enough_zones,
            MemberSpreading::RequiredPerNode | MemberSpreading::Preferred => false,
        }
    }
}
