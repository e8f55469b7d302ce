//! Where member Pods go. Members are kept apart so that one machine or one
//! zone never holds the data of a majority (`spec.pod.memberSpreading`):
//!
//! | `memberSpreading` | volumes | nodes | zones |
//! | --- | --- | --- | --- |
//! | `Auto` | node-local or unknown | required | required when the nodes span ≥ as many zones as members, else preferred |
//! | `Auto` | network-attached | preferred | preferred |
//! | `RequiredPerNode` | any | required | preferred |
//! | `Preferred` | any | preferred | preferred |
//!
//! "Required per node" is a required pod anti-affinity on the hostname: a
//! member is never scheduled beside another, and waits (Pending) instead.
//! "Required per zone" is a topology spread on the zone with `maxSkew: 1`
//! and `DoNotSchedule`, rather than an anti-affinity: with at least as many
//! zones as members it allows one member per zone, and unlike a required
//! anti-affinity (which the scheduler also enforces for the Pods already
//! placed) it does not lock out the extra members of a later scale-up past
//! the number of zones. Preferred spreading is a weighted anti-affinity per
//! node (100) and zone (50) and a `ScheduleAnyway` spread across zones.
//!
//! `spec.pod.affinity` and `spec.pod.topologySpreadConstraints` are added to
//! these; only `memberSpreading: Preferred` relaxes them.

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::{
    Affinity, Node, PodAffinityTerm, PodAntiAffinity, TopologySpreadConstraint,
    WeightedPodAffinityTerm,
};
use k8s_openapi::api::storage::v1::{CSIDriver, StorageClass};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

use super::labels::selector_labels;
use crate::api::MemberPodTemplate;
use crate::planner::VolumeKind;

/// The node label of a node's name.
pub const HOSTNAME_TOPOLOGY: &str = "kubernetes.io/hostname";
/// The node label of a node's zone.
pub const ZONE_TOPOLOGY: &str = "topology.kubernetes.io/zone";

/// Provisioners whose volumes live on one node's disk.
const NODE_LOCAL_PROVISIONERS: &[&str] = &[
    // Statically provisioned `local` PersistentVolumes.
    "kubernetes.io/no-provisioner",
    "rancher.io/local-path",
    "openebs.io/local",
    "local.csi.openebs.io",
    "topolvm.io",
    "topolvm.cybozu.com",
    "lvm.csi.metal-stack.io",
    "hostpath.csi.k8s.io",
];

/// Where the members' volumes keep their data, as far as the operator knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum VolumeLocality {
    /// On the disk of one node: lost with that node.
    NodeLocal,
    /// Attachable from other nodes (cloud disks, network storage).
    NetworkAttached,
    /// Not known (an unrecognised provisioner, no volume bound yet). Treated
    /// like node-local: sharing a node is what loses data.
    #[default]
    Unknown,
}

impl VolumeLocality {
    /// Node-local, or not known not to be.
    pub fn may_be_node_local(self) -> bool {
        self != VolumeLocality::NetworkAttached
    }
}

/// What the member Pod builder knows of the cluster it places members on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PlacementFacts {
    /// Where the members' volumes keep their data.
    pub volumes: VolumeLocality,
    /// Distinct zones among the nodes members may run on; `None` when not
    /// known (zones are then only preferred).
    pub zones: Option<usize>,
}

/// Whether one rule of spreading is enforced by the scheduler or only
/// preferred.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Requirement {
    Required,
    Preferred,
}

/// How strictly members are kept apart, resolved for one cluster.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Spreading {
    pub nodes: Requirement,
    pub zones: Requirement,
}

fn requirement(required: bool) -> Requirement {
    if required {
        Requirement::Required
    } else {
        Requirement::Preferred
    }
}

/// The spreading of the members of a cluster of `replicas` members: see the
/// module table.
pub fn spreading(template: &MemberPodTemplate, replicas: u32, facts: &PlacementFacts) -> Spreading {
    let node_local = facts.volumes.may_be_node_local();
    let enough_zones = facts
        .zones
        .is_some_and(|zones| u32::try_from(zones).unwrap_or(u32::MAX) >= replicas.max(1));
    let policy = template.member_spreading;
    Spreading {
        nodes: requirement(policy.separate_nodes_required(node_local)),
        zones: requirement(policy.separate_zones_required(node_local, enough_zones)),
    }
}

/// True when two members may share a node although their volumes are, or
/// may be, node-local: one machine could then hold a majority's data. Only
/// an explicit `memberSpreading: Preferred` leads here; status shows it as
/// a warning.
pub fn members_may_share_a_node_with_their_data(
    template: &MemberPodTemplate,
    volumes: VolumeLocality,
) -> bool {
    volumes.may_be_node_local() && !template.member_spreading.separate_nodes_required(true)
}

/// Where the volumes of a StorageClass keep their data. `driver` is the
/// CSIDriver object named like the class's provisioner, when there is one:
/// a driver that needs attaching (`attachRequired`) attaches a volume to
/// whichever node the Pod runs on.
pub fn storage_class_locality(class: &StorageClass, driver: Option<&CSIDriver>) -> VolumeLocality {
    let pinned_to_a_node = class
        .allowed_topologies
        .iter()
        .flatten()
        .flat_map(|term| term.match_label_expressions.iter().flatten())
        .any(|expression| expression.key == HOSTNAME_TOPOLOGY);
    if pinned_to_a_node || NODE_LOCAL_PROVISIONERS.contains(&class.provisioner.as_str()) {
        return VolumeLocality::NodeLocal;
    }
    // Kubernetes' default for `attachRequired` is true.
    let attachable = driver
        .filter(|d| d.metadata.name.as_deref() == Some(class.provisioner.as_str()))
        .is_some_and(|d| d.spec.attach_required.unwrap_or(true));
    if attachable {
        VolumeLocality::NetworkAttached
    } else {
        VolumeLocality::Unknown
    }
}

/// The locality of a cluster's volumes: what its bound volumes show (a
/// PersistentVolume pinned to a node is node-local whatever its class says),
/// else what its StorageClass says.
pub fn volume_locality<'a>(
    storage_class: VolumeLocality,
    bound: impl IntoIterator<Item = &'a VolumeKind>,
) -> VolumeLocality {
    let mut seen_network = false;
    for kind in bound {
        match kind {
            VolumeKind::Local { .. } => return VolumeLocality::NodeLocal,
            VolumeKind::Network => seen_network = true,
            VolumeKind::Unknown => {}
        }
    }
    if seen_network {
        VolumeLocality::NetworkAttached
    } else {
        storage_class
    }
}

/// The number of distinct zones (`topology.kubernetes.io/zone`) among
/// `nodes`. The caller passes the nodes members may run on (Ready, not
/// cordoned, matching `spec.pod.nodeSelector`).
pub fn zone_count<'a>(nodes: impl IntoIterator<Item = &'a Node>) -> usize {
    nodes
        .into_iter()
        .filter_map(|node| node.metadata.labels.as_ref()?.get(ZONE_TOPOLOGY))
        .collect::<BTreeSet<_>>()
        .len()
}

fn members(cluster: &str) -> LabelSelector {
    LabelSelector {
        match_labels: Some(selector_labels(cluster)),
        ..LabelSelector::default()
    }
}

fn member_term(cluster: &str, topology: &str) -> PodAffinityTerm {
    PodAffinityTerm {
        label_selector: Some(members(cluster)),
        topology_key: topology.to_string(),
        ..PodAffinityTerm::default()
    }
}

/// The affinity of the member Pods: the template's, with the members' anti-
/// affinity added: per node required or weighted 100, per zone weighted 50
/// (a required zone spread is a topology spread constraint).
pub fn affinity(cluster: &str, template: &MemberPodTemplate, spreading: Spreading) -> Affinity {
    let mut affinity = template.affinity.clone().unwrap_or_default();
    let anti = affinity
        .pod_anti_affinity
        .get_or_insert_with(PodAntiAffinity::default);
    let preferred = |topology: &str, weight: i32| WeightedPodAffinityTerm {
        weight,
        pod_affinity_term: member_term(cluster, topology),
    };
    let mut soft = Vec::new();
    match spreading.nodes {
        Requirement::Required => anti
            .required_during_scheduling_ignored_during_execution
            .get_or_insert_with(Vec::new)
            .push(member_term(cluster, HOSTNAME_TOPOLOGY)),
        Requirement::Preferred => soft.push(preferred(HOSTNAME_TOPOLOGY, 100)),
    }
    soft.push(preferred(ZONE_TOPOLOGY, 50));
    anti.preferred_during_scheduling_ignored_during_execution
        .get_or_insert_with(Vec::new)
        .extend(soft);
    affinity
}

/// The topology spread of the member Pods: the template's constraints and,
/// unless one of them is on the zone, the members' spread across zones
/// (`maxSkew: 1`; `DoNotSchedule` when zones are required, else
/// `ScheduleAnyway`).
pub fn topology_spread(
    cluster: &str,
    template: &MemberPodTemplate,
    spreading: Spreading,
) -> Vec<TopologySpreadConstraint> {
    let mut constraints = template.topology_spread_constraints.clone();
    if constraints.iter().any(|c| c.topology_key == ZONE_TOPOLOGY) {
        return constraints;
    }
    constraints.push(TopologySpreadConstraint {
        max_skew: 1,
        topology_key: ZONE_TOPOLOGY.to_string(),
        when_unsatisfiable: match spreading.zones {
            Requirement::Required => "DoNotSchedule",
            Requirement::Preferred => "ScheduleAnyway",
        }
        .to_string(),
        label_selector: Some(members(cluster)),
        ..TopologySpreadConstraint::default()
    });
    constraints
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use k8s_openapi::api::core::v1::{
        NodeAffinity, NodeSelector, TopologySelectorLabelRequirement, TopologySelectorTerm,
    };
    use k8s_openapi::api::storage::v1::CSIDriverSpec;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    use super::*;

    fn template(spreading: &str) -> MemberPodTemplate {
        serde_json::from_value(serde_json::json!({ "memberSpreading": spreading }))
            .expect("a valid memberSpreading")
    }

    fn facts(volumes: VolumeLocality, zones: Option<usize>) -> PlacementFacts {
        PlacementFacts { volumes, zones }
    }

    use Requirement::{Preferred, Required};
    use VolumeLocality::{NetworkAttached, NodeLocal, Unknown};

    fn required_keys(affinity: &Affinity) -> Vec<String> {
        affinity
            .pod_anti_affinity
            .iter()
            .flat_map(|a| {
                a.required_during_scheduling_ignored_during_execution
                    .iter()
                    .flatten()
            })
            .map(|t| t.topology_key.clone())
            .collect()
    }

    fn preferred_keys(affinity: &Affinity) -> Vec<String> {
        affinity
            .pod_anti_affinity
            .iter()
            .flat_map(|a| {
                a.preferred_during_scheduling_ignored_during_execution
                    .iter()
                    .flatten()
            })
            .map(|t| t.pod_affinity_term.topology_key.clone())
            .collect()
    }

    #[test]
    fn auto_is_the_default_and_requires_separate_nodes_unless_volumes_are_network_attached() {
        let auto = MemberPodTemplate::default();
        assert_eq!(auto, template("Auto"));
        for (volumes, nodes) in [
            (NodeLocal, Required),
            (Unknown, Required),
            (NetworkAttached, Preferred),
        ] {
            assert_eq!(
                spreading(&auto, 3, &facts(volumes, None)),
                Spreading {
                    nodes,
                    zones: Preferred
                },
                "{volumes:?}"
            );
        }
    }

    #[test]
    fn auto_requires_separate_zones_with_node_local_volumes_and_enough_zones() {
        let auto = MemberPodTemplate::default();
        let zones =
            |volumes, zones, replicas| spreading(&auto, replicas, &facts(volumes, zones)).zones;
        assert_eq!(zones(NodeLocal, Some(3), 3), Required);
        assert_eq!(zones(NodeLocal, Some(4), 3), Required);
        assert_eq!(zones(Unknown, Some(3), 3), Required);
        assert_eq!(zones(NodeLocal, Some(2), 3), Preferred);
        assert_eq!(zones(NodeLocal, Some(3), 5), Preferred);
        assert_eq!(zones(NodeLocal, None, 3), Preferred);
        assert_eq!(zones(NetworkAttached, Some(5), 3), Preferred);
    }

    #[test]
    fn explicit_choices_override_the_volumes() {
        for volumes in [NodeLocal, Unknown, NetworkAttached] {
            let many_zones = facts(volumes, Some(9));
            assert_eq!(
                spreading(&template("RequiredPerNode"), 3, &many_zones),
                Spreading {
                    nodes: Required,
                    zones: Preferred
                }
            );
            assert_eq!(
                spreading(&template("Preferred"), 3, &many_zones),
                Spreading {
                    nodes: Preferred,
                    zones: Preferred
                }
            );
        }
    }

    #[test]
    fn required_spreading_is_a_required_anti_affinity_and_a_hard_zone_spread() {
        let strict = Spreading {
            nodes: Required,
            zones: Required,
        };
        let built = affinity("main", &MemberPodTemplate::default(), strict);
        assert_eq!(required_keys(&built), [HOSTNAME_TOPOLOGY]);
        assert_eq!(preferred_keys(&built), [ZONE_TOPOLOGY]);
        let term = &built
            .pod_anti_affinity
            .as_ref()
            .and_then(|a| {
                a.required_during_scheduling_ignored_during_execution
                    .clone()
            })
            .unwrap_or_default()[0];
        assert_eq!(
            term.label_selector
                .as_ref()
                .and_then(|s| s.match_labels.clone()),
            Some(selector_labels("main"))
        );
        let spread = topology_spread("main", &MemberPodTemplate::default(), strict);
        assert_eq!(spread.len(), 1);
        assert_eq!(spread[0].topology_key, ZONE_TOPOLOGY);
        assert_eq!(spread[0].when_unsatisfiable, "DoNotSchedule");
        assert_eq!(spread[0].max_skew, 1);
    }

    #[test]
    fn preferred_spreading_is_soft_across_nodes_and_zones() {
        let soft = Spreading {
            nodes: Preferred,
            zones: Preferred,
        };
        let built = affinity("main", &MemberPodTemplate::default(), soft);
        assert!(required_keys(&built).is_empty());
        assert_eq!(preferred_keys(&built), [HOSTNAME_TOPOLOGY, ZONE_TOPOLOGY]);
        let spread = topology_spread("main", &MemberPodTemplate::default(), soft);
        assert_eq!(spread[0].when_unsatisfiable, "ScheduleAnyway");
    }

    #[test]
    fn the_template_adds_to_the_members_spreading() {
        let node_affinity = NodeAffinity {
            required_during_scheduling_ignored_during_execution: Some(NodeSelector::default()),
            ..NodeAffinity::default()
        };
        let user = MemberPodTemplate {
            affinity: Some(Affinity {
                node_affinity: Some(node_affinity.clone()),
                pod_anti_affinity: Some(PodAntiAffinity {
                    required_during_scheduling_ignored_during_execution: Some(vec![
                        PodAffinityTerm {
                            topology_key: "rack".to_string(),
                            ..PodAffinityTerm::default()
                        },
                    ]),
                    ..PodAntiAffinity::default()
                }),
                ..Affinity::default()
            }),
            topology_spread_constraints: vec![TopologySpreadConstraint {
                max_skew: 2,
                topology_key: HOSTNAME_TOPOLOGY.to_string(),
                when_unsatisfiable: "DoNotSchedule".to_string(),
                ..TopologySpreadConstraint::default()
            }],
            ..MemberPodTemplate::default()
        };
        let strict = Spreading {
            nodes: Required,
            zones: Required,
        };
        let built = affinity("main", &user, strict);
        assert_eq!(built.node_affinity, Some(node_affinity));
        assert_eq!(required_keys(&built), ["rack", HOSTNAME_TOPOLOGY]);
        let spread = topology_spread("main", &user, strict);
        let keys: Vec<_> = spread.iter().map(|c| c.topology_key.as_str()).collect();
        assert_eq!(keys, [HOSTNAME_TOPOLOGY, ZONE_TOPOLOGY]);

        // A zone constraint of the template replaces the operator's.
        let zoned = MemberPodTemplate {
            topology_spread_constraints: vec![TopologySpreadConstraint {
                max_skew: 2,
                topology_key: ZONE_TOPOLOGY.to_string(),
                when_unsatisfiable: "ScheduleAnyway".to_string(),
                ..TopologySpreadConstraint::default()
            }],
            ..MemberPodTemplate::default()
        };
        let spread = topology_spread("main", &zoned, strict);
        assert_eq!(spread.len(), 1);
        assert_eq!(spread[0].max_skew, 2);
    }

    #[test]
    fn sharing_a_node_is_flagged_only_for_preferred_spreading_of_local_volumes() {
        let flagged = |spreading: &str, volumes| {
            members_may_share_a_node_with_their_data(&template(spreading), volumes)
        };
        assert!(flagged("Preferred", NodeLocal));
        assert!(flagged("Preferred", Unknown));
        assert!(!flagged("Preferred", NetworkAttached));
        for spreading in ["Auto", "RequiredPerNode"] {
            for volumes in [NodeLocal, Unknown, NetworkAttached] {
                assert!(!flagged(spreading, volumes), "{spreading} {volumes:?}");
            }
        }
    }

    fn class(provisioner: &str) -> StorageClass {
        StorageClass {
            provisioner: provisioner.to_string(),
            ..StorageClass::default()
        }
    }

    fn driver(name: &str, attach_required: Option<bool>) -> CSIDriver {
        CSIDriver {
            metadata: ObjectMeta {
                name: Some(name.to_string()),
                ..ObjectMeta::default()
            },
            spec: CSIDriverSpec {
                attach_required,
                ..CSIDriverSpec::default()
            },
        }
    }

    #[test]
    fn storage_classes_are_node_local_network_attached_or_unknown() {
        assert_eq!(
            storage_class_locality(&class("kubernetes.io/no-provisioner"), None),
            NodeLocal
        );
        assert_eq!(
            storage_class_locality(&class("rancher.io/local-path"), None),
            NodeLocal
        );
        let mut pinned = class("example.com/disks");
        pinned.allowed_topologies = Some(vec![TopologySelectorTerm {
            match_label_expressions: Some(vec![TopologySelectorLabelRequirement {
                key: HOSTNAME_TOPOLOGY.to_string(),
                values: vec!["node-1".to_string()],
            }]),
        }]);
        assert_eq!(storage_class_locality(&pinned, None), NodeLocal);
        let cloud = class("ebs.csi.aws.com");
        assert_eq!(
            storage_class_locality(&cloud, Some(&driver("ebs.csi.aws.com", Some(true)))),
            NetworkAttached
        );
        // Kubernetes' default for attachRequired is true.
        assert_eq!(
            storage_class_locality(&cloud, Some(&driver("ebs.csi.aws.com", None))),
            NetworkAttached
        );
        assert_eq!(
            storage_class_locality(&cloud, Some(&driver("ebs.csi.aws.com", Some(false)))),
            Unknown
        );
        assert_eq!(storage_class_locality(&cloud, None), Unknown);
        assert_eq!(
            storage_class_locality(&cloud, Some(&driver("other.csi", Some(true)))),
            Unknown
        );
    }

    #[test]
    fn bound_volumes_outweigh_the_storage_class() {
        let local = VolumeKind::Local {
            node: "n1".to_string(),
        };
        assert_eq!(
            volume_locality(NetworkAttached, [&VolumeKind::Network, &local]),
            NodeLocal
        );
        assert_eq!(
            volume_locality(Unknown, [&VolumeKind::Unknown, &VolumeKind::Network]),
            NetworkAttached
        );
        assert_eq!(
            volume_locality(NodeLocal, [&VolumeKind::Unknown]),
            NodeLocal
        );
        assert_eq!(volume_locality(Unknown, []), Unknown);
    }

    #[test]
    fn zones_are_counted_once_each() {
        let node = |zone: Option<&str>| Node {
            metadata: ObjectMeta {
                labels: zone.map(|z| BTreeMap::from([(ZONE_TOPOLOGY.to_string(), z.to_string())])),
                ..ObjectMeta::default()
            },
            ..Node::default()
        };
        let nodes = [
            node(Some("a")),
            node(Some("b")),
            node(Some("a")),
            node(None),
        ];
        assert_eq!(zone_count(&nodes), 2);
        assert_eq!(zone_count(&[]), 0);
    }
}
