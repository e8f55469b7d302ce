//! Kubernetes Events of the controllers: built as plain values (a plan
//! states its Events, the pass publishes them), notes cut to the 1 kB the
//! API allows, and published without failing the pass (an Event that
//! cannot be published is logged).

use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::{Event, EventType, Recorder};

/// Longest Event note and condition message, in bytes.
pub const NOTE_LIMIT: usize = 1000;

/// A `Normal` Event.
pub fn normal(action: &str, reason: &str, note: &str) -> Event {
    event(EventType::Normal, action, reason, note)
}

/// A `Warning` Event.
pub fn warning(action: &str, reason: &str, note: &str) -> Event {
    event(EventType::Warning, action, reason, note)
}

/// An Event of `type_`.
pub fn event(type_: EventType, action: &str, reason: &str, note: &str) -> Event {
    Event {
        type_,
        reason: reason.to_owned(),
        note: Some(truncate(note)),
        action: action.to_owned(),
        secondary: None,
    }
}

/// Publishes `event` about the object `reference`; a failure is logged,
/// never an error of the pass.
pub async fn publish(recorder: &Recorder, reference: &ObjectReference, event: &Event) {
    if let Err(error) = recorder.publish(event, reference).await {
        tracing::warn!(reason = %event.reason, "cannot publish event: {error}");
    }
}

/// `text` cut to [`NOTE_LIMIT`] bytes on a char boundary, marked with `…`
/// when cut.
pub fn truncate(text: &str) -> String {
    if text.len() <= NOTE_LIMIT {
        return text.to_owned();
    }
    let mut end = NOTE_LIMIT;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_notes_are_cut_on_a_char_boundary() {
        let note = "é".repeat(800);
        let cut = truncate(&note);
        assert!(cut.len() <= NOTE_LIMIT + 4);
        assert!(cut.ends_with('…'));
        assert_eq!(truncate("short"), "short");
    }

    #[test]
    fn events_carry_their_type_action_and_reason() {
        let event = warning("Backup", "BackupFailed", "attempt 1: no member");
        assert_eq!(event.type_, EventType::Warning);
        assert_eq!(event.action, "Backup");
        assert_eq!(event.reason, "BackupFailed");
        assert_eq!(event.note.as_deref(), Some("attempt 1: no member"));
        assert_eq!(
            normal("Backup", "BackupSucceeded", "ok").type_,
            EventType::Normal
        );
    }
}
