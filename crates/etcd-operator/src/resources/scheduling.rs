//! Where member Pods go: by default spread softly across nodes and zones,
//! so that one node or zone failure takes at most one member when the
//! cluster has room, and still schedulable when it has not (a replacement
//! on a cluster with fewer nodes than members). `spec.pod.affinity` and
//! `spec.pod.topologySpreadConstraints` replace the defaults.

use k8s_openapi::api::core::v1::{
    Affinity, PodAffinityTerm, PodAntiAffinity, TopologySpreadConstraint, WeightedPodAffinityTerm,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

use super::objects::selector_labels;
use crate::api::MemberPodTemplate;

/// The node label of a node's name.
pub const HOSTNAME_TOPOLOGY: &str = "kubernetes.io/hostname";
/// The node label of a node's zone.
pub const ZONE_TOPOLOGY: &str = "topology.kubernetes.io/zone";

fn members(cluster: &str) -> LabelSelector {
    LabelSelector {
        match_labels: Some(selector_labels(cluster)),
        ..LabelSelector::default()
    }
}

/// The affinity of the member Pods: the template's, else soft
/// anti-affinity between members per node (weight 100) and per zone (50).
pub fn affinity(cluster: &str, template: &MemberPodTemplate) -> Affinity {
    if let Some(affinity) = &template.affinity {
        return affinity.clone();
    }
    let term = |topology: &str, weight: i32| WeightedPodAffinityTerm {
        weight,
        pod_affinity_term: PodAffinityTerm {
            label_selector: Some(members(cluster)),
            topology_key: topology.to_string(),
            ..PodAffinityTerm::default()
        },
    };
    Affinity {
        pod_anti_affinity: Some(PodAntiAffinity {
            preferred_during_scheduling_ignored_during_execution: Some(vec![
                term(HOSTNAME_TOPOLOGY, 100),
                term(ZONE_TOPOLOGY, 50),
            ]),
            ..PodAntiAffinity::default()
        }),
        ..Affinity::default()
    }
}

/// The topology spread of the member Pods: the template's, else a soft
/// spread across zones (`ScheduleAnyway`, skew 1).
pub fn topology_spread(
    cluster: &str,
    template: &MemberPodTemplate,
) -> Vec<TopologySpreadConstraint> {
    if !template.topology_spread_constraints.is_empty() {
        return template.topology_spread_constraints.clone();
    }
    vec![TopologySpreadConstraint {
        max_skew: 1,
        topology_key: ZONE_TOPOLOGY.to_string(),
        when_unsatisfiable: "ScheduleAnyway".to_string(),
        label_selector: Some(members(cluster)),
        ..TopologySpreadConstraint::default()
    }]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_soft_across_nodes_and_zones() {
        let template = MemberPodTemplate::default();
        let affinity = affinity("main", &template);
        let anti = affinity.pod_anti_affinity.expect("anti-affinity");
        assert!(
            anti.required_during_scheduling_ignored_during_execution
                .is_none()
        );
        let keys: Vec<String> = anti
            .preferred_during_scheduling_ignored_during_execution
            .unwrap_or_default()
            .into_iter()
            .map(|t| t.pod_affinity_term.topology_key)
            .collect();
        assert_eq!(keys, [HOSTNAME_TOPOLOGY, ZONE_TOPOLOGY]);
        let spread = topology_spread("main", &template);
        assert_eq!(spread.len(), 1);
        assert_eq!(spread[0].when_unsatisfiable, "ScheduleAnyway");
    }

    #[test]
    fn the_template_replaces_the_defaults() {
        let template = MemberPodTemplate {
            affinity: Some(Affinity::default()),
            topology_spread_constraints: vec![TopologySpreadConstraint {
                max_skew: 2,
                topology_key: HOSTNAME_TOPOLOGY.to_string(),
                when_unsatisfiable: "DoNotSchedule".to_string(),
                ..TopologySpreadConstraint::default()
            }],
            ..MemberPodTemplate::default()
        };
        assert_eq!(affinity("main", &template), Affinity::default());
        assert_eq!(topology_spread("main", &template)[0].max_skew, 2);
    }
}
