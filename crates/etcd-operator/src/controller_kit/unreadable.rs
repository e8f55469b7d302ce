//! Objects this operator cannot decode into its own types, reported on that
//! object alone.
//!
//! A controller that lists or watches typed objects fails as a whole when
//! one object does not decode (a newer CRD version that allows a value
//! this operator does not know, a field of another type): then no object
//! of that kind is reconciled at all. The controllers therefore watch
//! untyped objects (`DynamicObject`) and each pass decodes its own with
//! [`decode`]. An object that does not decode gets a Warning Event
//! (`UnreadableSpec` or `UnreadableStatus`, naming the field's path) and,
//! where its status allows, an [`UNREADABLE_CONDITION`] condition
//! ([`report`]); every other object goes on.
//!
//! Used by the `EtcdCluster`, `EtcdBackup` and `EtcdBackupSchedule`
//! controllers. [`decode`] is also how the backup controllers read the
//! `EtcdCluster` a backup is of.

use std::fmt;

use k8s_openapi::jiff::Timestamp;
use kube::api::{ApiResource, DynamicObject};
use kube::runtime::events::{Event, Recorder};
use kube::{Api, Resource, ResourceExt};
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::events::{self, truncate};

/// Condition type set on an object this operator cannot read.
pub const UNREADABLE_CONDITION: &str = "Unreadable";

/// Part of an object that could not be decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part {
    /// `spec` (or a field outside spec and status).
    Spec,
    /// `status`: e.g. written by a newer version of the operator.
    Status,
}

/// An object this operator cannot decode into its own type.
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

/// Decodes an untyped object into `K`. The error names the path of the
/// field at fault.
pub fn decode<K: DeserializeOwned>(object: &DynamicObject) -> Result<K, Unreadable> {
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

/// The Warning Event of an unreadable object: `kind` as the API names it
/// (`EtcdCluster`), `noun` as a person does (`cluster`).
pub fn event(kind: &str, noun: &str, name: &str, unreadable: &Unreadable) -> Event {
    events::warning(
        "Read",
        unreadable.reason(),
        &format!(
            "this operator cannot read the {} of {kind} {name} at {}: {}; it takes no action on this {noun} until the object changes (other {noun}s are not affected)",
            unreadable.part(),
            unreadable.path,
            unreadable.message
        ),
    )
}

/// Tells about an object this operator cannot read, on that object only: a
/// Warning Event ([`event`]), and where its status allows, the
/// [`UNREADABLE_CONDITION`] condition, merged over the status that was read
/// (the API server refuses it when the object changed since).
pub async fn report(
    recorder: &Recorder,
    objects: &Api<DynamicObject>,
    resource: &ApiResource,
    noun: &str,
    object: &DynamicObject,
    unreadable: &Unreadable,
) {
    let name = object.name_any();
    let reference = object.object_ref(resource);
    let event = event(&resource.kind, noun, &name, unreadable);
    events::publish(recorder, &reference, &event).await;

    let message = unreadable_message(unreadable, noun);
    super::blocked::set_condition(
        objects,
        resource,
        object,
        UNREADABLE_CONDITION,
        unreadable.reason(),
        &message,
    )
    .await;
}

/// The message of the [`UNREADABLE_CONDITION`] condition.
fn unreadable_message(unreadable: &Unreadable, noun: &str) -> String {
    truncate(&format!(
        "this operator cannot read {}: {}; it takes no action on this {noun} until the object changes",
        unreadable.path, unreadable.message
    ))
}

/// The `status.conditions` to write on an unreadable object: its current
/// conditions with [`UNREADABLE_CONDITION`] set. `None` when nothing would
/// change, or when the current conditions are not a list this operator
/// understands (it never overwrites what it cannot read).
pub fn unreadable_conditions(
    status: Option<&Value>,
    unreadable: &Unreadable,
    noun: &str,
    generation: Option<i64>,
    now: Timestamp,
) -> Option<Vec<Value>> {
    super::blocked::conditions_with(
        status,
        UNREADABLE_CONDITION,
        unreadable.reason(),
        &unreadable_message(unreadable, noun),
        generation,
        now,
    )
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

impl fmt::Display for Part {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Part::Spec => "spec",
            Part::Status => "status",
        })
    }
}

/// An EtcdCluster as the API server would hand it to an untyped watch, for
/// the tests of what decodes it.
#[cfg(test)]
pub(crate) mod test_objects {
    use kube::api::DynamicObject;
    use serde_json::{Value, json};

    /// `value` as an untyped object.
    pub(crate) fn object(value: Value) -> DynamicObject {
        serde_json::from_value(value).expect("a dynamic object")
    }

    /// An EtcdCluster `main` with `spec` (resourceVersion 7, generation 2).
    pub(crate) fn cluster_json(spec: Value) -> Value {
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
}

#[cfg(test)]
mod tests {
    use super::test_objects::{cluster_json, object};
    use super::*;
    use crate::api::EtcdCluster;
    use kube::runtime::events::EventType;
    use serde_json::json;

    #[test]
    fn a_readable_object_decodes() {
        let cluster: EtcdCluster =
            decode(&object(cluster_json(json!({ "replicas": 3 })))).expect("readable");
        assert_eq!(cluster.spec.replicas, 3);
        assert_eq!(cluster.metadata.resource_version.as_deref(), Some("7"));
    }

    #[test]
    fn an_unknown_enum_value_is_reported_with_its_path() {
        let error = decode::<EtcdCluster>(&object(cluster_json(json!({
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
        let error = decode::<EtcdCluster>(&object(cluster_json(json!({
            "replicas": "three",
        }))))
        .expect_err("unreadable");
        assert_eq!(error.path, "spec.replicas");

        let mut value = cluster_json(json!({ "replicas": 3 }));
        value["status"] = json!({ "members": [ { "name": "main-0" }, { "name": 5 } ] });
        let error = decode::<EtcdCluster>(&object(value)).expect_err("unreadable");
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
    fn the_event_names_the_kind_the_part_and_the_path() {
        let error = Unreadable {
            path: "status.phase".into(),
            message: "unknown variant `Archived`".into(),
        };
        let warning = event("EtcdBackup", "backup", "nightly", &error);
        assert_eq!(warning.type_, EventType::Warning);
        assert_eq!(warning.reason, "UnreadableStatus");
        assert_eq!(
            warning.note.as_deref(),
            Some(
                "this operator cannot read the status of EtcdBackup nightly at status.phase: unknown variant `Archived`; it takes no action on this backup until the object changes (other backups are not affected)"
            )
        );
        let long = Unreadable {
            path: "spec.x".into(),
            message: "é".repeat(800),
        };
        let note = event("EtcdCluster", "cluster", "main", &long)
            .note
            .expect("a note");
        assert!(note.len() <= 1004 && note.ends_with('…'), "{note}");
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
        let conditions = unreadable_conditions(Some(&status), &error, "cluster", Some(4), now)
            .expect("a condition to write");
        assert_eq!(conditions.len(), 2);
        assert_eq!(conditions[0]["type"], "Available");
        assert_eq!(conditions[1]["type"], UNREADABLE_CONDITION);
        assert_eq!(conditions[1]["reason"], "UnreadableSpec");
        assert_eq!(conditions[1]["observedGeneration"], 4);
        assert_eq!(
            conditions[1]["message"],
            "this operator cannot read spec.storage.retentionPolicy: unknown variant `Archive`; it takes no action on this cluster until the object changes"
        );

        // Written once: the same condition again changes nothing.
        let written = json!({ "conditions": conditions });
        let later = Timestamp::from_second(2_000).expect("time");
        assert_eq!(
            unreadable_conditions(Some(&written), &error, "cluster", Some(4), later),
            None
        );

        // Conditions of a shape this operator does not know are left alone.
        let foreign = json!({ "conditions": { "Available": true } });
        assert_eq!(
            unreadable_conditions(Some(&foreign), &error, "cluster", Some(4), now),
            None
        );
        assert!(unreadable_conditions(None, &error, "cluster", None, now).is_some());
    }
}
