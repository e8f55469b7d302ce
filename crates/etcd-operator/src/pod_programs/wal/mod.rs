//! Reading a member's write-ahead log ([`read_wal_tail`]: what the volume
//! holds, for ranking survivors), and committing the tail of a survivor's
//! log, on a copy, before etcd replays it with `--force-new-cluster`.
//!
//! etcd appends every raft entry to its WAL and fsyncs it before the
//! entry can commit, but it only fsyncs a `HardState` record when the
//! term, the vote or the entries change: a record that only advances the
//! commit index stays in the WAL's write buffer. A member killed after
//! acknowledging a write can therefore hold that entry in its WAL with a
//! persisted commit index below it (seen with etcd 3.6: a single member
//! killed after its last write restarts with commit index 53 and its last
//! write at index 54). A normal restart lets raft commit it again;
//! `--force-new-cluster` instead discards every entry after the persisted
//! commit index (or the db's consistent index, when that is higher), so
//! the restore would lose acknowledged writes.
//!
//! [`commit_wal_tail`] appends one `HardState` record whose commit index
//! is the index of the last entry the WAL holds, keeping the term and the
//! vote, to the copy's last WAL file. etcd then keeps every entry the
//! survivor wrote to its log. An entry there that the old cluster never
//! committed is a write whose client got no success answer (a timeout or
//! an error, both of which etcd leaves undetermined); restoring it is
//! within what that client may expect, losing an acknowledged one is not.
//!
//! Only a clean log is changed: every record decodes with its chained
//! CRC-32C and the last file ends in zeros after the last record. A torn
//! or damaged tail is left to etcd, which repairs a torn last record or
//! refuses the log; then the tail is not committed and that is reported.
//!
//! The format is etcd's `server/storage/wal`: records of
//! `walpb.Record{type, crc, data}`, each framed by a little-endian 64-bit
//! length (the low 56 bits; the top byte `0x80 | padding` when the record
//! is padded to 8 bytes), the CRC chained over the data of every record
//! since the first file and restarted by each file's leading CRC record.

use std::fs;
use std::io::{Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use record::{HardState, STATE_TYPE, Scan, crc32c_append, frame_record};

use crate::pod_programs::file_error::{FileError, io};

mod record;

/// Why the WAL could not be read or written; each `Display` is one line.
#[derive(Debug, thiserror::Error)]
pub enum WalError {
    #[error(transparent)]
    Io(#[from] FileError),
    #[error("no WAL file in {0}")]
    Empty(PathBuf),
    #[error("WAL file {path} is damaged at offset {offset} ({reason}), before its last file")]
    Damaged {
        path: PathBuf,
        offset: usize,
        reason: String,
    },
}

/// What the WAL holds, and what [`commit_wal_tail`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct WalTail {
    /// Index of the last entry in the log (or of the last snapshot record
    /// when no entry follows it).
    pub last_index: u64,
    /// The term of that entry: with `last_index`, what raft compares to
    /// tell which of two logs is more up to date.
    pub last_term: u64,
    /// The commit index of the last `HardState` record before the change.
    pub persisted_commit: u64,
    /// The term of the last `HardState` record.
    pub term: u64,
    /// Whether a record committing `last_index` was appended.
    pub appended: bool,
    /// Whether the last file ends in a torn or damaged record (then
    /// nothing is appended).
    pub torn: bool,
}

/// Reads the WAL in `wal_dir` and, when its last entry is after the
/// persisted commit index and the log is clean, appends a `HardState`
/// record committing every entry. Never call it on a member's own data.
pub fn commit_wal_tail(wal_dir: &Path) -> Result<WalTail, WalError> {
    let (scan, last_file) = scan_wal(wal_dir)?;
    let mut tail = tail_of(&scan);
    if scan.torn || tail.last_index <= tail.persisted_commit {
        return Ok(tail);
    }
    let state = HardState {
        term: scan.state.term.max(scan.last_entry_term),
        vote: scan.state.vote,
        commit: tail.last_index,
    }
    .encode();
    let crc = crc32c_append(scan.crc, &state);
    let frame = frame_record(STATE_TYPE, crc, Some(&state));

    let mut file = fs::OpenOptions::new()
        .write(true)
        .open(&last_file)
        .map_err(io("opening", &last_file))?;
    file.seek(SeekFrom::Start(scan.end as u64))
        .and_then(|_| file.write_all(&frame))
        .and_then(|()| file.sync_all())
        .map_err(io("appending a commit record to", &last_file))?;
    tail.appended = true;
    Ok(tail)
}

/// Reads what the WAL in `wal_dir` holds, changing nothing: safe on the
/// log of a running member (a record being written reads as a torn tail).
pub fn read_wal_tail(wal_dir: &Path) -> Result<WalTail, WalError> {
    let (scan, _) = scan_wal(wal_dir)?;
    Ok(tail_of(&scan))
}

fn tail_of(scan: &Scan) -> WalTail {
    WalTail {
        last_index: scan.last_entry.max(scan.last_snapshot),
        last_term: scan.last_entry_term,
        persisted_commit: scan.state.commit,
        term: scan.state.term,
        appended: false,
        torn: scan.torn,
    }
}

/// Reads every WAL file of `wal_dir` in order; returns the scan and the
/// last file.
fn scan_wal(wal_dir: &Path) -> Result<(Scan, PathBuf), WalError> {
    let files = wal_files(wal_dir)?;
    let Some(last_file) = files.last() else {
        return Err(WalError::Empty(wal_dir.to_path_buf()));
    };
    let mut scan = Scan::default();
    for (i, path) in files.iter().enumerate() {
        let data = fs::read(path).map_err(io("reading", path))?;
        let end = scan.file(&data);
        let last = i + 1 == files.len();
        if let Err((offset, reason)) = end {
            if !last {
                return Err(WalError::Damaged {
                    path: path.clone(),
                    offset,
                    reason,
                });
            }
            scan.torn = true;
        }
    }
    Ok((scan, last_file.clone()))
}

/// The `.wal` files of `dir` in log order (their names sort so).
fn wal_files(dir: &Path) -> Result<Vec<PathBuf>, WalError> {
    let mut files = Vec::new();
    for entry in fs::read_dir(dir).map_err(io("reading", dir))? {
        let path = entry.map_err(io("reading", dir))?.path();
        if path.extension().is_some_and(|e| e == "wal") {
            files.push(path);
        }
    }
    files.sort();
    Ok(files)
}

#[cfg(test)]
pub(crate) mod tests;
