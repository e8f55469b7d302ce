//! Label selectors as the API server defines them (pure).

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

/// Whether `labels` satisfy `selector`: every `matchLabels` pair and every
/// `matchExpressions` requirement. The empty selector selects everything;
/// a requirement with an unknown operator selects nothing.
pub fn matches(selector: &LabelSelector, labels: &BTreeMap<String, String>) -> bool {
    let pairs = selector
        .match_labels
        .iter()
        .flatten()
        .all(|(key, value)| labels.get(key) == Some(value));
    pairs
        && selector.match_expressions.iter().flatten().all(|r| {
            let values = r.values.as_deref().unwrap_or_default();
            let value = labels.get(&r.key);
            match r.operator.as_str() {
                "In" => value.is_some_and(|v| values.contains(v)),
                "NotIn" => value.is_none_or(|v| !values.contains(v)),
                "Exists" => value.is_some(),
                "DoesNotExist" => value.is_none(),
                _ => false,
            }
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn selector(json: serde_json::Value) -> LabelSelector {
        serde_json::from_value(json).unwrap()
    }

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn the_empty_selector_selects_everything() {
        let all = selector(serde_json::json!({}));
        assert!(matches(&all, &labels(&[])));
        assert!(matches(&all, &labels(&[("app", "x")])));
    }

    #[test]
    fn match_labels_need_every_pair() {
        let s = selector(serde_json::json!({"matchLabels": {"app": "etcd", "tier": "db"}}));
        assert!(matches(
            &s,
            &labels(&[("app", "etcd"), ("tier", "db"), ("x", "y")])
        ));
        assert!(!matches(&s, &labels(&[("app", "etcd")])));
        assert!(!matches(&s, &labels(&[("app", "etcd"), ("tier", "web")])));
    }

    #[test]
    fn expressions_follow_their_operator() {
        let s = |operator: &str, values: &[&str]| {
            selector(serde_json::json!({"matchExpressions": [
                {"key": "env", "operator": operator, "values": values}
            ]}))
        };
        let prod = labels(&[("env", "prod")]);
        let dev = labels(&[("env", "dev")]);
        let none = labels(&[]);
        assert!(matches(&s("In", &["prod", "qa"]), &prod));
        assert!(!matches(&s("In", &["prod", "qa"]), &dev));
        assert!(!matches(&s("In", &["prod"]), &none));
        assert!(!matches(&s("NotIn", &["prod"]), &prod));
        assert!(matches(&s("NotIn", &["prod"]), &dev));
        assert!(
            matches(&s("NotIn", &["prod"]), &none),
            "an absent key is not in"
        );
        assert!(matches(&s("Exists", &[]), &dev));
        assert!(!matches(&s("Exists", &[]), &none));
        assert!(matches(&s("DoesNotExist", &[]), &none));
        assert!(!matches(&s("DoesNotExist", &[]), &prod));
        assert!(
            !matches(&s("Gt", &["1"]), &prod),
            "unknown operators select nothing"
        );
    }

    #[test]
    fn labels_and_expressions_both_hold() {
        let s = selector(serde_json::json!({
            "matchLabels": {"app": "etcd"},
            "matchExpressions": [{"key": "env", "operator": "In", "values": ["prod"]}]
        }));
        assert!(matches(&s, &labels(&[("app", "etcd"), ("env", "prod")])));
        assert!(!matches(&s, &labels(&[("app", "etcd"), ("env", "dev")])));
        assert!(!matches(&s, &labels(&[("app", "web"), ("env", "prod")])));
    }
}
