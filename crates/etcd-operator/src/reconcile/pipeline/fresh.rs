//! What a pass plans from, and when it may act on it.
//!
//! The controller watches `EtcdCluster`s as untyped objects: the watch is
//! only a trigger. Each pass reads the object fresh from the API server
//! (durability rule 8: the operator re-observes before it acts; a cached
//! copy may lack the status the previous pass wrote), then decodes it here.
//! An object this operator cannot decode (a newer CRD version, a field of
//! another type) is reported on that object alone, with the path of the
//! field: it never stops the watch of every other cluster.
//!
//! Before a disruptive step the pass reads the object once more and acts
//! only if nothing the planner reads changed meanwhile ([`compare`]);
//! otherwise it plans again from the new object.

use std::fmt;

use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube::api::{ApiResource, DynamicObject};
use serde_json::{Value, json};

use crate::api::EtcdCluster;
use crate::reconcile::{Child, Step};
use crate::resources::restore::restore_pod_name;

/// Condition type set on an object this operator cannot read.
pub const UNREADABLE_CONDITION: &str = "Unreadable";

/// The `EtcdCluster` resource, for untyped API calls.
pub fn cluster_resource() -> ApiResource {
    ApiResource::erase::<EtcdCluster>(&())
}

/// Part of an object that could not be decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part {
    /// `spec` (or a field outside spec and status).
    Spec,
    /// `status`: e.g. written by a newer version of the operator.
    Status,
}

/// An object this operator cannot decode into its `EtcdCluster` type.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{path}: {message}")]
pub struct Unreadable {
    /// JSON path of the field that failed, e.g. `spec.storage.retentionPolicy`.
    pub path: String,
    /// What serde said about it.
    pub message: String,
}

impl Unreadable {
    /// The part of the object at fault.
    pub fn part(&self) -> Part {
        if self.path == "status" || self.path.starts_with("status.") {
            Part::Status
        } else {
            Part::Spec
        }
    }

    /// Reason of its Event and condition.
    pub fn reason(&self) -> &'static str {
        match self.part() {
            Part::Spec => "UnreadableSpec",
            Part::Status => "UnreadableStatus",
        }
    }
}

/// Decodes a fresh object. The error names the path of the field at fault.
pub fn decode(object: &DynamicObject) -> Result<EtcdCluster, Unreadable> {
    let text = serde_json::to_string(object).map_err(|error| Unreadable {
        path: String::new(),
        message: error.to_string(),
    })?;
    serde_json::from_str(&text).map_err(|error| {
        // Compact JSON is one line: the column is the byte offset + 1.
        let offset = error.column().saturating_sub(1).min(text.len());
        let mut path = json_path_at(&text, offset);
        let message = strip_position(&error.to_string());
        // serde reports a missing field at the end of its object, whose last
        // key is some other field.
        if message.starts_with("missing field") {
            path.pop();
        }
        Unreadable {
            path: render_path(&path),
            message,
        }
    })
}

/// serde_json appends " at line L column C", meaningless to a reader of the
/// object: the path replaces it.
fn strip_position(message: &str) -> String {
    match message.rfind(" at line ") {
        Some(at) => message[..at].to_owned(),
        None => message.to_owned(),
    }
}

/// One step of a JSON path.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Segment {
    Key(String),
    Index(usize),
}

fn render_path(path: &[Segment]) -> String {
    let mut out = String::new();
    for segment in path {
        match segment {
            Segment::Key(key) => {
                if !out.is_empty() {
                    out.push('.');
                }
                out.push_str(key);
            }
            Segment::Index(index) => out.push_str(&format!("[{index}]")),
        }
    }
    out
}

/// The path of the value being read at byte `offset` of compact JSON
/// `text`: a scan of the containers opened and the keys read before it.
fn json_path_at(text: &str, offset: usize) -> Vec<Segment> {
    enum Frame {
        Object(Option<String>),
        Array(usize),
    }
    let bytes = text.as_bytes();
    let mut stack: Vec<Frame> = Vec::new();
    let mut i = 0;
    while i < offset.min(bytes.len()) {
        match bytes[i] {
            b'{' => stack.push(Frame::Object(None)),
            b'[' => stack.push(Frame::Array(0)),
            b'}' | b']' => {
                stack.pop();
            }
            b',' => match stack.last_mut() {
                Some(Frame::Array(index)) => *index += 1,
                Some(Frame::Object(key)) => *key = None,
                None => {}
            },
            b'"' => {
                let start = i + 1;
                let mut end = start;
                while end < bytes.len() && bytes[end] != b'"' {
                    end += if bytes[end] == b'\\' { 2 } else { 1 };
                }
                if let Some(Frame::Object(key @ None)) = stack.last_mut() {
                    let raw = text.get(start..end.min(bytes.len())).unwrap_or_default();
                    *key = Some(
                        serde_json::from_str(&format!("\"{raw}\""))
                            .unwrap_or_else(|_| raw.to_owned()),
                    );
                }
                i = end;
            }
            _ => {}
        }
        i += 1;
    }
    stack
        .into_iter()
        .filter_map(|frame| match frame {
            Frame::Object(key) => key.map(Segment::Key),
            Frame::Array(index) => Some(Segment::Index(index)),
        })
        .collect()
}

/// Whether the planned object still holds, as far as the planner reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Freshness {
    /// Nothing the planner reads changed: act.
    Unchanged,
    /// Something changed (named): do not act, plan again from the new object.
    Changed(&'static str),
}

/// Compares the object a plan was made from with a fresh read of it: the
/// identity (UID), the spec (generation and content), the deletion mark and
/// the status, i.e. everything the planner reads of the object. Labels and
/// annotations the planner does not read may change freely.
pub fn compare(planned_from: &EtcdCluster, fresh: Option<&EtcdCluster>) -> Freshness {
    let Some(fresh) = fresh else {
        return Freshness::Changed("the object is gone or unreadable");
    };
    if planned_from.uid() != fresh.uid() {
        Freshness::Changed("the object was recreated")
    } else if planned_from.metadata.deletion_timestamp != fresh.metadata.deletion_timestamp {
        Freshness::Changed("the object is being deleted")
    } else if planned_from.metadata.generation != fresh.metadata.generation
        || planned_from.spec != fresh.spec
    {
        Freshness::Changed("the spec")
    } else if planned_from.status != fresh.status {
        Freshness::Changed("the status")
    } else {
        Freshness::Unchanged
    }
}

/// Whether a step destroys or replaces something (a member, a volume, a
/// Pod, a restore record): such a step is taken only after a second fresh
/// read agrees with the one it was planned from.
pub fn is_disruptive(step: &Step, cluster: &str) -> bool {
    match step {
        Step::DeletePod { .. }
        | Step::DeletePvc { .. }
        | Step::RemoveMember { .. }
        | Step::RecordRestore
        | Step::ResetPvcIdentity { .. } => true,
        // The restore Pod writes a member's volume.
        Step::Apply(Child::Pod(pod)) => pod.name_any() == restore_pod_name(cluster),
        Step::Apply(_)
        | Step::AnnotatePvc { .. }
        | Step::RestoreLabels { .. }
        | Step::AddLearner { .. }
        | Step::PromoteLearner { .. }
        | Step::AdvanceRaftLog { .. }
        | Step::MoveLeader { .. } => false,
    }
}

/// The `status.conditions` to write on an unreadable object: its current
/// conditions with [`UNREADABLE_CONDITION`] set. `None` when nothing would
/// change, or when the current conditions are not a list this operator
/// understands (it never overwrites what it cannot read).
pub fn unreadable_conditions(
    status: Option<&Value>,
    unreadable: &Unreadable,
    generation: Option<i64>,
    now: Timestamp,
) -> Option<Vec<Value>> {
    let current = match status.and_then(|s| s.get("conditions")) {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(conditions)) => conditions.clone(),
        Some(_) => return None,
    };
    let message = truncate(&format!(
        "this operator cannot read {}: {}; it takes no action on this cluster until the object changes",
        unreadable.path, unreadable.message
    ));
    let reason = unreadable.reason();
    let old = current
        .iter()
        .find(|c| c.get("type").and_then(Value::as_str) == Some(UNREADABLE_CONDITION));
    let field = |c: &Value, name: &str| c.get(name).and_then(Value::as_str).map(str::to_owned);
    if let Some(old) = old
        && field(old, "status").as_deref() == Some("True")
        && field(old, "reason").as_deref() == Some(reason)
        && field(old, "message").as_deref() == Some(message.as_str())
    {
        return None;
    }
    let since = old
        .filter(|c| field(c, "status").as_deref() == Some("True"))
        .and_then(|c| field(c, "lastTransitionTime"))
        .unwrap_or_else(|| now.to_string());
    let mut condition = json!({
        "type": UNREADABLE_CONDITION,
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
        .filter(|c| c.get("type").and_then(Value::as_str) != Some(UNREADABLE_CONDITION))
        .collect();
    conditions.push(condition);
    Some(conditions)
}

fn truncate(text: &str) -> String {
    const LIMIT: usize = 1000;
    if text.len() <= LIMIT {
        return text.to_owned();
    }
    let mut end = LIMIT;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}

impl fmt::Display for Part {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Part::Spec => "spec",
            Part::Status => "status",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn object(value: Value) -> DynamicObject {
        serde_json::from_value(value).expect("a dynamic object")
    }

    fn cluster_json(spec: Value) -> Value {
        json!({
            "apiVersion": "durable-etcd.io/v1alpha1",
            "kind": "EtcdCluster",
            "metadata": {
                "name": "main", "namespace": "default", "uid": "u-1",
                "resourceVersion": "7", "generation": 2,
                "annotations": { "durable-etcd.io/note": "a \"quoted\", value" }
            },
            "spec": spec,
        })
    }

    fn cluster(spec: Value) -> EtcdCluster {
        decode(&object(cluster_json(spec))).expect("readable")
    }

    #[test]
    fn a_readable_object_decodes() {
        let cluster = cluster(json!({ "replicas": 3 }));
        assert_eq!(cluster.spec.replicas, 3);
        assert_eq!(cluster.metadata.resource_version.as_deref(), Some("7"));
    }

    #[test]
    fn an_unknown_enum_value_is_reported_with_its_path() {
        let error = decode(&object(cluster_json(json!({
            "replicas": 3,
            "storage": { "size": "1Gi", "retentionPolicy": "Archive" }
        }))))
        .expect_err("unreadable");
        assert_eq!(error.path, "spec.storage.retentionPolicy");
        assert!(
            error.message.contains("unknown variant `Archive`"),
            "{error}"
        );
        assert!(!error.message.contains("line"), "{error}");
        assert_eq!(error.reason(), "UnreadableSpec");
    }

    #[test]
    fn a_field_of_another_type_is_reported_with_its_path() {
        let error = decode(&object(cluster_json(json!({
            "replicas": "three",
        }))))
        .expect_err("unreadable");
        assert_eq!(error.path, "spec.replicas");

        let mut value = cluster_json(json!({ "replicas": 3 }));
        value["status"] = json!({ "members": [ { "name": "main-0" }, { "name": 5 } ] });
        let error = decode(&object(value)).expect_err("unreadable");
        assert_eq!(error.path, "status.members[1].name");
        assert_eq!(error.reason(), "UnreadableStatus");
    }

    #[test]
    fn paths_skip_keys_and_strings_already_read() {
        let text = r#"{"a":{"b":"x,}]\"{","c":[1,{"d":true},"#;
        assert_eq!(
            json_path_at(text, text.len()),
            vec![
                Segment::Key("a".into()),
                Segment::Key("c".into()),
                Segment::Index(2)
            ]
        );
        assert_eq!(
            render_path(&json_path_at(r#"{"a":[{"b":1},{"c":"#, 19)),
            "a[1].c"
        );
    }

    #[test]
    fn a_plan_is_acted_on_only_while_what_the_planner_reads_is_unchanged() {
        let planned = cluster(json!({ "replicas": 3 }));
        assert_eq!(compare(&planned, Some(&planned)), Freshness::Unchanged);

        // Labels and annotations the planner does not read may change.
        let mut labelled = planned.clone();
        labelled.metadata.resource_version = Some("8".into());
        labelled
            .labels_mut()
            .insert("team".into(), "storage".into());
        assert_eq!(compare(&planned, Some(&labelled)), Freshness::Unchanged);

        // The status another writer (or this operator's previous pass) wrote.
        let mut newer_status = labelled.clone();
        newer_status.status = Some(crate::api::EtcdClusterStatus {
            cluster_token: Some("main-other".into()),
            ..Default::default()
        });
        assert_eq!(
            compare(&planned, Some(&newer_status)),
            Freshness::Changed("the status")
        );

        let mut new_spec = planned.clone();
        new_spec.spec.replicas = 1;
        new_spec.metadata.generation = Some(3);
        assert_eq!(
            compare(&planned, Some(&new_spec)),
            Freshness::Changed("the spec")
        );

        let mut recreated = planned.clone();
        recreated.metadata.uid = Some("u-2".into());
        assert_eq!(
            compare(&planned, Some(&recreated)),
            Freshness::Changed("the object was recreated")
        );

        assert!(matches!(compare(&planned, None), Freshness::Changed(_)));
    }

    #[test]
    fn destructive_steps_need_a_second_read() {
        let delete = Step::DeletePod {
            name: "main-0".into(),
            uid: None,
            force: false,
        };
        assert!(is_disruptive(&delete, "main"));
        assert!(is_disruptive(
            &Step::RemoveMember {
                name: "main-1".into(),
                id: 1
            },
            "main"
        ));
        assert!(is_disruptive(&Step::RecordRestore, "main"));
        assert!(!is_disruptive(
            &Step::AddLearner {
                name: "main-3".into(),
                peer_urls: Vec::new()
            },
            "main"
        ));
        let pod = |name: &str| {
            Step::Apply(Child::Pod(Box::new(k8s_openapi::api::core::v1::Pod {
                metadata: kube::api::ObjectMeta {
                    name: Some(name.to_owned()),
                    ..Default::default()
                },
                ..Default::default()
            })))
        };
        assert!(is_disruptive(&pod(&restore_pod_name("main")), "main"));
        assert!(!is_disruptive(&pod("main-0"), "main"));
    }

    #[test]
    fn the_unreadable_condition_joins_the_others_once() {
        let error = Unreadable {
            path: "spec.storage.retentionPolicy".into(),
            message: "unknown variant `Archive`".into(),
        };
        let now = Timestamp::from_second(1_000).expect("time");
        let status = json!({ "conditions": [
            { "type": "Available", "status": "True", "reason": "QuorumHealthy",
              "message": "", "lastTransitionTime": "1970-01-01T00:00:10Z" }
        ] });
        let conditions = unreadable_conditions(Some(&status), &error, Some(4), now)
            .expect("a condition to write");
        assert_eq!(conditions.len(), 2);
        assert_eq!(conditions[0]["type"], "Available");
        assert_eq!(conditions[1]["type"], UNREADABLE_CONDITION);
        assert_eq!(conditions[1]["reason"], "UnreadableSpec");
        assert_eq!(conditions[1]["observedGeneration"], 4);
        assert!(
            conditions[1]["message"]
                .as_str()
                .is_some_and(|m| m.contains("spec.storage.retentionPolicy")),
        );

        // Written once: the same condition again changes nothing.
        let written = json!({ "conditions": conditions });
        let later = Timestamp::from_second(2_000).expect("time");
        assert_eq!(
            unreadable_conditions(Some(&written), &error, Some(4), later),
            None
        );

        // Conditions of a shape this operator does not know are left alone.
        let foreign = json!({ "conditions": { "Available": true } });
        assert_eq!(
            unreadable_conditions(Some(&foreign), &error, Some(4), now),
            None
        );
        assert!(unreadable_conditions(None, &error, None, now).is_some());
    }
}
