//! How a program leaves its report: on stderr, where people and a runtime
//! without termination message files (the lab's node agent, which reads
//! the log's tail) find it, and in the container's termination message
//! file when the runtime made one.

use std::io::Write;
use std::path::Path;

use crate::pod_contract::{Report, TERMINATION_MESSAGE_PATH};

/// Writes `report` to stderr and, when it exists, to the termination
/// message file. Never creates that file: outside a container its path may
/// belong to the host. A report that cannot be written leaves the exit
/// code to speak.
pub fn leave(report: &Report) {
    let message = report.termination_message();
    eprint!("{message}");
    write_if_present(Path::new(TERMINATION_MESSAGE_PATH), &message);
}

fn write_if_present(path: &Path, message: &str) {
    let file = std::fs::OpenOptions::new()
        .write(true)
        .truncate(true)
        .open(path);
    if let Ok(mut file) = file {
        let _ = file.write_all(message.as_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pod_contract::{Outcome, Program, Reading};

    #[test]
    fn writes_an_existing_file_and_creates_none() -> Result<(), Box<dyn std::error::Error>> {
        let dir = tempfile::tempdir()?;
        let report = Report::new(Program::RestoreVolume, Outcome::Failed, "no db");
        let missing = dir.path().join("termination-log");
        write_if_present(&missing, &report.termination_message());
        assert!(!missing.exists());
        std::fs::write(&missing, "an older, longer message\nthat is replaced\n")?;
        write_if_present(&missing, &report.termination_message());
        let written = std::fs::read_to_string(&missing)?;
        assert_eq!(written, report.termination_message());
        assert_eq!(
            Reading::of_termination_message(&written),
            Reading::Report(report)
        );
        Ok(())
    }
}
