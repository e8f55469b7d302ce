//! Admission rules of `EtcdCluster.spec.pod` (the member Pod template,
//! `pod_template.rs`): what the API server would refuse later in each member
//! Pod, refused at `kubectl apply` instead, with a message that says which
//! field and why. They sit on the `pod` field of the spec, so that the
//! template's own type stays a plain schema.

use kube::core::Rule;

use super::rules::{DNS1123_SUBDOMAIN, LABEL_VALUE, QUALIFIED_NAME, rule};

/// Every quantity in `requests` and `limits` of `map` (a CEL path) is a
/// non-negative quantity.
fn quantities(map: &str) -> String {
    format!(
        "(!has(self.resources.{map}) || self.resources.{map}.all(k, isQuantity(string(self.resources.{map}[k])) && !quantity(string(self.resources.{map}[k])).isLessThan(quantity('0'))))"
    )
}

/// `pod.resources.requests` and `.limits` hold quantities such as `500m` or
/// `1Gi`, none negative.
pub fn resources_are_quantities() -> Rule {
    rule(
        format!(
            "!has(self.resources) || ({} && {})",
            quantities("requests"),
            quantities("limits")
        ),
        "pod.resources requests and limits must be non-negative quantities such as 500m, 2 or 1Gi",
    )
}

/// A request is never above the limit of the same resource.
pub fn requests_within_limits() -> Rule {
    rule(
        "!has(self.resources) || !has(self.resources.requests) || !has(self.resources.limits) || self.resources.requests.all(k, !(k in self.resources.limits) || !isQuantity(string(self.resources.requests[k])) || !isQuantity(string(self.resources.limits[k])) || quantity(string(self.resources.requests[k])).compareTo(quantity(string(self.resources.limits[k]))) <= 0)",
        "pod.resources: a request may not be greater than the limit of the same resource",
    )
}

fn labels(field: &str) -> Rule {
    rule(
        format!(
            "!has(self.{field}) || self.{field}.all(k, k.matches('{QUALIFIED_NAME}') && self.{field}[k].matches('{LABEL_VALUE}'))"
        ),
        format!(
            "pod.{field}: keys must be label keys (an optional DNS prefix and '/', then at most 63 letters, digits, '-', '_' or '.') and values at most 63 such characters, starting and ending with a letter or digit"
        ),
    )
}

/// `pod.labels` are valid label keys and values.
pub fn labels_are_valid() -> Rule {
    labels("labels")
}

/// `pod.nodeSelector` holds valid label keys and values.
pub fn node_selector_is_valid() -> Rule {
    labels("nodeSelector")
}

/// `pod.annotations` keys are valid keys.
pub fn annotation_keys_are_valid() -> Rule {
    rule(
        format!("!has(self.annotations) || self.annotations.all(k, k.matches('{QUALIFIED_NAME}'))"),
        "pod.annotations: keys must be an optional DNS prefix and '/', then at most 63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit",
    )
}

/// `pod.priorityClassName` names a PriorityClass.
pub fn priority_class_name() -> Rule {
    rule(
        format!(
            "!has(self.priorityClassName) || (self.priorityClassName.size() <= 253 && self.priorityClassName.matches('{DNS1123_SUBDOMAIN}'))"
        ),
        "pod.priorityClassName must be the name of a PriorityClass: lower-case letters, digits, '-' and '.', at most 253 characters",
    )
}

/// `pod.tolerations` as the API server checks them in a Pod.
pub fn tolerations_are_valid() -> Rule {
    rule(
        format!(
            "!has(self.tolerations) || self.tolerations.all(t, \
             (!has(t.operator) || t.operator in ['Exists', 'Equal']) \
             && (!has(t.effect) || t.effect in ['', 'NoSchedule', 'PreferNoSchedule', 'NoExecute']) \
             && (!has(t.key) || t.key == '' || t.key.matches('{QUALIFIED_NAME}')) \
             && ((has(t.key) && t.key != '') || (has(t.operator) && t.operator == 'Exists')) \
             && (!has(t.operator) || t.operator != 'Exists' || !has(t.value) || t.value == '') \
             && (!has(t.tolerationSeconds) || (has(t.effect) && t.effect == 'NoExecute')))"
        ),
        "pod.tolerations: operator must be Exists or Equal (Exists, without a value, when the key is empty), effect NoSchedule, PreferNoSchedule or NoExecute, and tolerationSeconds needs effect NoExecute",
    )
}

/// `pod.topologySpreadConstraints` as the API server checks them in a Pod.
pub fn spread_constraints_are_valid() -> Rule {
    rule(
        "!has(self.topologySpreadConstraints) || self.topologySpreadConstraints.all(c, c.maxSkew >= 1 && c.topologyKey != '' && c.whenUnsatisfiable in ['DoNotSchedule', 'ScheduleAnyway'] && (!has(c.minDomains) || (c.minDomains >= 1 && c.whenUnsatisfiable == 'DoNotSchedule')))",
        "pod.topologySpreadConstraints: maxSkew must be at least 1, topologyKey set, whenUnsatisfiable DoNotSchedule or ScheduleAnyway, and minDomains at least 1 and only with DoNotSchedule",
    )
}

/// Bounds on the sizes of the template's maps and lists, so that the API
/// server's estimate of the rules' cost stays within its budget (it assumes
/// an unbounded map or string may fill a whole request). Generous: far more
/// than a member Pod needs.
pub fn bound_sizes(schema: &mut schemars::Schema) {
    use serde_json::{Value, json};

    /// The schema itself and, for an `Option`, each `anyOf` branch.
    fn branches(schema: &mut Value) -> Vec<&mut Value> {
        match schema.get("anyOf").is_some() {
            true => schema["anyOf"]
                .as_array_mut()
                .map(|a| a.iter_mut().collect())
                .unwrap_or_default(),
            false => vec![schema],
        }
    }
    fn map(schema: &mut Value, max_properties: u64, value_max_length: Option<u64>) {
        for branch in branches(schema) {
            if let Some(object) = branch.as_object_mut() {
                object.insert("maxProperties".into(), json!(max_properties));
                if let (Some(length), Some(Value::Object(values))) =
                    (value_max_length, object.get_mut("additionalProperties"))
                {
                    values.insert("maxLength".into(), json!(length));
                }
            }
        }
    }
    fn list(schema: &mut Value, max_items: u64, lengths: &[(&str, u64)]) {
        for branch in branches(schema) {
            if let Some(object) = branch.as_object_mut() {
                object.insert("maxItems".into(), json!(max_items));
                let Some(properties) = object
                    .get_mut("items")
                    .and_then(|items| items.get_mut("properties"))
                else {
                    continue;
                };
                for (field, length) in lengths {
                    if let Some(Value::Object(field)) = properties.get_mut(*field) {
                        field.insert("maxLength".into(), json!(length));
                    }
                }
            }
        }
    }

    let Some(properties) = schema.get_mut("properties") else {
        return;
    };
    if let Some(resources) = properties.get_mut("resources") {
        for branch in branches(resources) {
            if let Some(properties) = branch.get_mut("properties") {
                for name in ["requests", "limits"] {
                    if let Some(quantities) = properties.get_mut(name) {
                        map(quantities, 32, Some(64));
                    }
                }
            }
        }
    }
    for name in ["labels", "nodeSelector"] {
        if let Some(labels) = properties.get_mut(name) {
            map(labels, 64, Some(63));
        }
    }
    if let Some(annotations) = properties.get_mut("annotations") {
        map(annotations, 64, None);
    }
    if let Some(tolerations) = properties.get_mut("tolerations") {
        list(
            tolerations,
            32,
            &[
                ("key", 316),
                ("value", 63),
                ("operator", 16),
                ("effect", 32),
            ],
        );
    }
    if let Some(constraints) = properties.get_mut("topologySpreadConstraints") {
        list(constraints, 16, &[("topologyKey", 316)]);
    }
    if let Some(Value::Object(name)) = properties.get_mut("priorityClassName") {
        name.insert("maxLength".into(), json!(253));
    }
}
