//! A pass that stops before it can plan (an object it cannot read,
//! certificates it cannot issue) still says why on the object: one
//! condition set `True` with a reason and a message, merged over the
//! conditions of the status that was read, so a person sees it in
//! `kubectl get`/`describe` and not only in the operator's log.

use k8s_openapi::jiff::Timestamp;
use kube::api::{ApiResource, DynamicObject, Patch, PatchParams};
use kube::{Api, ResourceExt};
use serde_json::{Value, json};

/// Sets condition `type_` `True` with `reason` and `message` on `object`,
/// over the status that was read (the API server refuses the patch when
/// the object changed since; the next pass reports again). A failure to
/// write is logged, never an error: the pass fails for its own reason.
pub async fn set_condition(
    objects: &Api<DynamicObject>,
    resource: &ApiResource,
    object: &DynamicObject,
    type_: &str,
    reason: &str,
    message: &str,
) {
    let Some(conditions) = conditions_with(
        object.data.get("status"),
        type_,
        reason,
        message,
        object.metadata.generation,
        Timestamp::now(),
    ) else {
        return;
    };
    let name = object.name_any();
    let patch = json!({
        "metadata": { "resourceVersion": object.metadata.resource_version },
        "status": { "conditions": conditions },
    });
    if let Err(error) = objects
        .patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        tracing::debug!(kind = %resource.kind, %name, "cannot set condition {type_}: {error}");
    }
}

/// The current conditions of `status` with `type_` set `True`. `None` when
/// nothing would change, or when the current conditions are not a list
/// this operator understands (it never overwrites what it cannot read).
/// The transition time is kept while the condition was already `True`.
pub fn conditions_with(
    status: Option<&Value>,
    type_: &str,
    reason: &str,
    message: &str,
    generation: Option<i64>,
    now: Timestamp,
) -> Option<Vec<Value>> {
    let current = match status.and_then(|s| s.get("conditions")) {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(conditions)) => conditions.clone(),
        Some(_) => return None,
    };
    let old = current
        .iter()
        .find(|c| c.get("type").and_then(Value::as_str) == Some(type_));
    let field = |c: &Value, name: &str| c.get(name).and_then(Value::as_str).map(str::to_owned);
    if let Some(old) = old
        && field(old, "status").as_deref() == Some("True")
        && field(old, "reason").as_deref() == Some(reason)
        && field(old, "message").as_deref() == Some(message)
    {
        return None;
    }
    let since = old
        .filter(|c| field(c, "status").as_deref() == Some("True"))
        .and_then(|c| field(c, "lastTransitionTime"))
        .unwrap_or_else(|| now.to_string());
    let mut condition = json!({
        "type": type_,
        "status": "True",
        "reason": reason,
        "message": message,
        "lastTransitionTime": since,
    });
    if let Some(generation) = generation {
        condition["observedGeneration"] = json!(generation);
    }
    let mut conditions: Vec<Value> = current
        .into_iter()
        .filter(|c| c.get("type").and_then(Value::as_str) != Some(type_))
        .collect();
    conditions.push(condition);
    Some(conditions)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn now() -> Timestamp {
        "2030-01-01T00:00:00Z".parse().expect("time")
    }

    #[test]
    fn the_condition_is_set_over_the_others_and_keeps_its_transition_time() {
        let status = json!({ "conditions": [
            { "type": "Available", "status": "True", "reason": "QuorumReachable", "message": "ok",
              "lastTransitionTime": "2029-01-01T00:00:00Z" },
            { "type": "Degraded", "status": "True", "reason": "MembersUnhealthy", "message": "x",
              "lastTransitionTime": "2029-06-01T00:00:00Z" },
        ]});
        let set = conditions_with(
            Some(&status),
            "Degraded",
            "CertificatesFailed",
            "why",
            Some(4),
            now(),
        )
        .expect("a change");
        assert_eq!(set.len(), 2);
        assert_eq!(set[0]["type"], "Available");
        assert_eq!(set[1]["reason"], "CertificatesFailed");
        assert_eq!(set[1]["lastTransitionTime"], "2029-06-01T00:00:00Z");
        assert_eq!(set[1]["observedGeneration"], 4);
        let again = json!({ "conditions": set });
        assert_eq!(
            conditions_with(
                Some(&again),
                "Degraded",
                "CertificatesFailed",
                "why",
                Some(4),
                now()
            ),
            None,
            "nothing to write twice"
        );
    }

    #[test]
    fn conditions_it_cannot_read_are_left_alone() {
        let status = json!({ "conditions": "garbled" });
        assert_eq!(
            conditions_with(Some(&status), "Degraded", "R", "m", None, now()),
            None
        );
        let fresh = conditions_with(None, "Degraded", "R", "m", None, now()).expect("set");
        assert_eq!(fresh[0]["lastTransitionTime"], "2030-01-01T00:00:00Z");
    }
}
