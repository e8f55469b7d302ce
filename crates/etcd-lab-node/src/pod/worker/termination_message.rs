//! `terminationMessagePolicy: FallbackToLogsOnError`: the tail of a failed
//! container's log becomes its termination message. The termination
//! message file is not read.

use std::path::Path;

/// The kubelet's limits on the log tail: lines and bytes.
const MAX_LINES: usize = 80;
const MAX_BYTES: usize = 2048;

/// The termination message of a run that exited with `exit_code`, read
/// from its log when the container asks for it and the run failed.
pub(super) fn fallback_to_log(policy: Option<&str>, exit_code: i32, log: &Path) -> Option<String> {
    if exit_code == 0 || policy != Some("FallbackToLogsOnError") {
        return None;
    }
    log_tail(&std::fs::read(log).ok()?)
}

/// The last 80 lines of the last 2048 bytes of a log, `None` when empty.
fn log_tail(log: &[u8]) -> Option<String> {
    let tail = &log[log.len().saturating_sub(MAX_BYTES)..];
    let text = String::from_utf8_lossy(tail);
    let lines: Vec<&str> = text.trim_end().lines().collect();
    let message = lines[lines.len().saturating_sub(MAX_LINES)..].join("\n");
    (!message.is_empty()).then_some(message)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_last_eighty_lines_of_the_last_two_kilobytes() {
        let log: String = (0..100).map(|i| format!("line {i}\n")).collect();
        let message = log_tail(log.as_bytes()).expect("message");
        assert_eq!(message.lines().count(), 80);
        assert!(message.ends_with("line 99"));

        let long = "x".repeat(5000);
        assert_eq!(log_tail(long.as_bytes()).map(|m| m.len()), Some(2048));
        assert_eq!(log_tail(b"\n\n"), None);
    }

    #[test]
    fn only_for_failed_runs_of_containers_that_ask_for_it() {
        let dir = tempfile::tempdir().expect("tempdir");
        let log = dir.path().join("app.log");
        std::fs::write(&log, "starting\npanic: no quorum\n").expect("write");
        let policy = Some("FallbackToLogsOnError");
        assert_eq!(
            fallback_to_log(policy, 2, &log).as_deref(),
            Some("starting\npanic: no quorum")
        );
        assert_eq!(fallback_to_log(policy, 0, &log), None);
        assert_eq!(fallback_to_log(Some("File"), 2, &log), None);
        assert_eq!(fallback_to_log(None, 2, &log), None);
    }
}
