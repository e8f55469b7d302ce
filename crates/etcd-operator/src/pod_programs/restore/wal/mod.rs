//! Committing the tail of a survivor's write-ahead log, on a copy, before
//! etcd replays it with `--force-new-cluster`.
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

const METADATA_TYPE: u64 = 1;
const ENTRY_TYPE: u64 = 2;
const STATE_TYPE: u64 = 3;
const CRC_TYPE: u64 = 4;
const SNAPSHOT_TYPE: u64 = 5;

/// Why the WAL could not be read or written; each `Display` is one line.
#[derive(Debug, thiserror::Error)]
pub enum WalError {
    #[error("{action} {path}: {source}")]
    Io {
        action: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
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
    let mut tail = WalTail {
        last_index: scan.last_entry.max(scan.last_snapshot),
        persisted_commit: scan.state.commit,
        term: scan.state.term,
        appended: false,
        torn: scan.torn,
    };
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
    let mut record = Vec::with_capacity(state.len() + 16);
    put_field_varint(&mut record, 1, STATE_TYPE);
    put_field_varint(&mut record, 2, u64::from(crc));
    put_field_bytes(&mut record, 3, &state);
    let pad = (8 - record.len() % 8) % 8;
    let mut length = record.len() as u64;
    if pad != 0 {
        length |= (0x80 | pad as u64) << 56;
    }
    let mut frame = length.to_le_bytes().to_vec();
    frame.extend_from_slice(&record);
    frame.resize(frame.len() + pad, 0);

    let mut file = fs::OpenOptions::new()
        .write(true)
        .open(last_file)
        .map_err(io("opening", last_file))?;
    file.seek(SeekFrom::Start(scan.end as u64))
        .and_then(|_| file.write_all(&frame))
        .and_then(|()| file.sync_all())
        .map_err(io("appending a commit record to", last_file))?;
    tail.appended = true;
    Ok(tail)
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

fn io(action: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> WalError {
    let path = path.to_path_buf();
    move |source| WalError::Io {
        action,
        path,
        source,
    }
}

#[derive(Debug, Default, Clone, Copy)]
struct HardState {
    term: u64,
    vote: u64,
    commit: u64,
}

impl HardState {
    fn decode(data: &[u8]) -> Option<Self> {
        let mut state = Self::default();
        for (field, value) in Fields(data) {
            match (field, value?) {
                (1, Value::Varint(v)) => state.term = v,
                (2, Value::Varint(v)) => state.vote = v,
                (3, Value::Varint(v)) => state.commit = v,
                _ => {}
            }
        }
        Some(state)
    }

    fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        put_field_varint(&mut out, 1, self.term);
        put_field_varint(&mut out, 2, self.vote);
        put_field_varint(&mut out, 3, self.commit);
        out
    }
}

/// The running state of a read through the WAL files.
#[derive(Debug, Default)]
struct Scan {
    crc: u32,
    state: HardState,
    last_entry: u64,
    last_entry_term: u64,
    last_snapshot: u64,
    /// Offset after the last valid record of the file read last.
    end: usize,
    torn: bool,
}

impl Scan {
    /// Reads one file; `Err((offset, reason))` where a record is torn or
    /// damaged (`self.end` is then the offset after the last good one).
    fn file(&mut self, data: &[u8]) -> Result<(), (usize, String)> {
        let mut offset = 0;
        self.end = 0;
        loop {
            let Some(frame) = data.get(offset..offset + 8) else {
                return Ok(());
            };
            let mut length = [0u8; 8];
            length.copy_from_slice(frame);
            let length = u64::from_le_bytes(length);
            if length == 0 {
                // Preallocated space: the rest must be zeros.
                return match data[offset..].iter().any(|&b| b != 0) {
                    true => Err((offset, "bytes after the last record".to_string())),
                    false => Ok(()),
                };
            }
            let bytes = usize::try_from(length & !(0xff << 56)).unwrap_or(usize::MAX);
            let pad = if length >> 63 == 1 {
                ((length >> 56) & 0x7) as usize
            } else {
                0
            };
            let start = offset + 8;
            let Some(record) = start
                .checked_add(bytes)
                .and_then(|end| data.get(start..end))
            else {
                return Err((offset, "record beyond the end of the file".to_string()));
            };
            let Some((kind, crc, payload)) = decode_record(record) else {
                return Err((offset, "record does not decode".to_string()));
            };
            if kind == CRC_TYPE {
                if self.crc != 0 && crc != self.crc {
                    return Err((offset, "CRC record differs from the chain".to_string()));
                }
                self.crc = crc;
            } else {
                let chained = crc32c_append(self.crc, payload);
                if chained != crc {
                    return Err((offset, "CRC mismatch".to_string()));
                }
                self.crc = chained;
            }
            match kind {
                ENTRY_TYPE => {
                    let (term, index) = decode_entry(payload)
                        .ok_or_else(|| (offset, "entry does not decode".to_string()))?;
                    self.last_entry = index;
                    self.last_entry_term = term;
                }
                STATE_TYPE => {
                    self.state = HardState::decode(payload)
                        .ok_or_else(|| (offset, "state does not decode".to_string()))?;
                }
                SNAPSHOT_TYPE => {
                    let index = Fields(payload)
                        .find_map(|(field, value)| match (field, value) {
                            (1, Some(Value::Varint(v))) => Some(v),
                            _ => None,
                        })
                        .unwrap_or(0);
                    self.last_snapshot = index;
                    if index > self.last_entry {
                        self.last_entry = index;
                    }
                }
                METADATA_TYPE | CRC_TYPE => {}
                _ => return Err((offset, format!("unknown record type {kind}"))),
            }
            offset = start + bytes + pad;
            self.end = offset;
        }
    }
}

/// `walpb.Record`: (type, crc, data).
fn decode_record(data: &[u8]) -> Option<(u64, u32, &[u8])> {
    let (mut kind, mut crc, mut payload) = (0, 0, &data[..0]);
    for (field, value) in Fields(data) {
        match (field, value?) {
            (1, Value::Varint(v)) => kind = v,
            (2, Value::Varint(v)) => crc = u32::try_from(v).ok()?,
            (3, Value::Bytes(b)) => payload = b,
            _ => {}
        }
    }
    Some((kind, crc, payload))
}

/// `raftpb.Entry`: (term, index).
fn decode_entry(data: &[u8]) -> Option<(u64, u64)> {
    let (mut term, mut index) = (0, 0);
    for (field, value) in Fields(data) {
        match (field, value?) {
            (2, Value::Varint(v)) => term = v,
            (3, Value::Varint(v)) => index = v,
            _ => {}
        }
    }
    Some((term, index))
}

enum Value<'a> {
    Varint(u64),
    Bytes(&'a [u8]),
}

/// The fields of a protobuf message: `(number, None)` ends the iteration
/// on a malformed field.
struct Fields<'a>(&'a [u8]);

impl<'a> Iterator for Fields<'a> {
    type Item = (u64, Option<Value<'a>>);

    fn next(&mut self) -> Option<Self::Item> {
        if self.0.is_empty() {
            return None;
        }
        let Some(key) = read_varint(&mut self.0) else {
            self.0 = &[];
            return Some((0, None));
        };
        let value = match key & 7 {
            0 => read_varint(&mut self.0).map(Value::Varint),
            2 => read_varint(&mut self.0)
                .and_then(|len| usize::try_from(len).ok())
                .and_then(|len| {
                    let bytes = self.0.get(..len)?;
                    self.0 = &self.0[len..];
                    Some(Value::Bytes(bytes))
                }),
            _ => None,
        };
        if value.is_none() {
            self.0 = &[];
        }
        Some((key >> 3, value))
    }
}

fn read_varint(data: &mut &[u8]) -> Option<u64> {
    let mut value = 0u64;
    for (i, &byte) in data.iter().enumerate().take(10) {
        value |= u64::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            *data = &data[i + 1..];
            return Some(value);
        }
    }
    None
}

fn put_varint(out: &mut Vec<u8>, mut value: u64) {
    while value >= 0x80 {
        out.push((value as u8) | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

fn put_field_varint(out: &mut Vec<u8>, field: u64, value: u64) {
    put_varint(out, field << 3);
    put_varint(out, value);
}

fn put_field_bytes(out: &mut Vec<u8>, field: u64, value: &[u8]) {
    put_varint(out, (field << 3) | 2);
    put_varint(out, value.len() as u64);
    out.extend_from_slice(value);
}

/// CRC-32C (Castagnoli) table, reflected polynomial.
const CRC32C_TABLE: [u32; 256] = {
    let mut table = [0u32; 256];
    let mut i = 0;
    while i < 256 {
        let mut crc = i as u32;
        let mut bit = 0;
        while bit < 8 {
            crc = if crc & 1 == 1 {
                (crc >> 1) ^ 0x82f6_3b78
            } else {
                crc >> 1
            };
            bit += 1;
        }
        table[i] = crc;
        i += 1;
    }
    table
};

/// Go's `crc32.Update(crc, castagnoliTable, data)`.
fn crc32c_append(crc: u32, data: &[u8]) -> u32 {
    let mut crc = !crc;
    for &byte in data {
        crc = CRC32C_TABLE[((crc ^ u32::from(byte)) & 0xff) as usize] ^ (crc >> 8);
    }
    !crc
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    #[test]
    fn crc32c_matches_the_reference_vector() {
        // RFC 3720 B.4: 32 bytes of zeros.
        assert_eq!(crc32c_append(0, &[0u8; 32]), 0x8a91_36aa);
        assert_eq!(crc32c_append(0, b"123456789"), 0xe306_9283);
        // Chaining equals one pass.
        assert_eq!(
            crc32c_append(crc32c_append(0, b"1234"), b"56789"),
            0xe306_9283
        );
    }

    /// A WAL file written the way etcd's encoder writes one.
    pub(crate) struct Writer {
        out: Vec<u8>,
        pub(crate) crc: u32,
    }

    impl Writer {
        pub(crate) fn new(previous: u32) -> Self {
            let mut w = Self {
                out: Vec::new(),
                crc: previous,
            };
            w.record(CRC_TYPE, &[]);
            w
        }

        pub(crate) fn record(&mut self, kind: u64, data: &[u8]) {
            if kind != CRC_TYPE {
                self.crc = crc32c_append(self.crc, data);
            }
            let mut record = Vec::new();
            put_field_varint(&mut record, 1, kind);
            put_field_varint(&mut record, 2, u64::from(self.crc));
            if kind != CRC_TYPE {
                put_field_bytes(&mut record, 3, data);
            }
            let pad = (8 - record.len() % 8) % 8;
            let mut length = record.len() as u64;
            if pad != 0 {
                length |= (0x80 | pad as u64) << 56;
            }
            self.out.extend_from_slice(&length.to_le_bytes());
            self.out.extend_from_slice(&record);
            self.out.resize(self.out.len() + pad, 0);
        }

        pub(crate) fn entry(&mut self, term: u64, index: u64) {
            let mut data = Vec::new();
            put_field_varint(&mut data, 1, 0);
            put_field_varint(&mut data, 2, term);
            put_field_varint(&mut data, 3, index);
            put_field_bytes(&mut data, 4, b"put");
            self.record(ENTRY_TYPE, &data);
        }

        pub(crate) fn state(&mut self, term: u64, commit: u64) {
            let state = HardState {
                term,
                vote: 7,
                commit,
            };
            self.record(STATE_TYPE, &state.encode());
        }

        /// Preallocated like etcd's files.
        pub(crate) fn file(&self) -> Vec<u8> {
            let mut out = self.out.clone();
            out.resize(4096, 0);
            out
        }
    }

    fn scan(dir: &Path) -> Scan {
        let mut scan = Scan::default();
        for path in wal_files(dir).expect("files") {
            scan.file(&fs::read(path).expect("read")).expect("clean");
        }
        scan
    }

    #[test]
    fn the_tail_after_the_persisted_commit_is_committed_and_reads_back()
    -> Result<(), Box<dyn std::error::Error>> {
        let dir = tempfile::tempdir()?;
        let mut first = Writer::new(0);
        first.record(METADATA_TYPE, b"meta");
        first.record(SNAPSHOT_TYPE, &[]);
        first.entry(1, 1);
        first.state(1, 1);
        fs::write(
            dir.path().join("0000000000000000-0000000000000000.wal"),
            first.file(),
        )?;
        let mut second = Writer::new(first.crc);
        second.entry(2, 2);
        second.entry(2, 3);
        second.state(2, 2);
        second.entry(2, 4);
        fs::write(
            dir.path().join("0000000000000001-0000000000000002.wal"),
            second.file(),
        )?;
        fs::write(dir.path().join("0.tmp"), [1u8; 64])?;

        let tail = commit_wal_tail(dir.path())?;
        assert_eq!(
            tail,
            WalTail {
                last_index: 4,
                persisted_commit: 2,
                term: 2,
                appended: true,
                torn: false,
            }
        );
        // The appended record is valid in the CRC chain and commits 4.
        let after = scan(dir.path());
        assert_eq!(
            (after.state.commit, after.state.term, after.state.vote),
            (4, 2, 7)
        );
        // Run again: nothing more to do.
        let again = commit_wal_tail(dir.path())?;
        assert!(!again.appended && again.persisted_commit == 4);
        Ok(())
    }

    #[test]
    fn a_torn_or_committed_log_is_left_alone() -> Result<(), Box<dyn std::error::Error>> {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("0000000000000000-0000000000000000.wal");
        let mut wal = Writer::new(0);
        wal.record(METADATA_TYPE, b"meta");
        wal.entry(1, 1);
        wal.state(1, 1);
        fs::write(&path, wal.file())?;
        let tail = commit_wal_tail(dir.path())?;
        assert!(!tail.appended && tail.last_index == 1 && tail.persisted_commit == 1);

        let before = wal.out.len();
        wal.entry(1, 2);
        let mut torn = wal.file();
        // The last record damaged by the crash (its CRC field here).
        torn[before + 10] ^= 0xff;
        fs::write(&path, &torn)?;
        let tail = commit_wal_tail(dir.path())?;
        assert!(tail.torn && !tail.appended);
        assert_eq!(fs::read(&path)?, torn, "a torn log is not changed");
        Ok(())
    }

    #[test]
    fn damage_before_the_last_file_is_an_error() -> Result<(), Box<dyn std::error::Error>> {
        let dir = tempfile::tempdir()?;
        let mut first = Writer::new(0);
        first.entry(1, 1);
        let mut bytes = first.file();
        bytes[20] ^= 0xff;
        fs::write(
            dir.path().join("0000000000000000-0000000000000000.wal"),
            bytes,
        )?;
        let second = Writer::new(first.crc);
        fs::write(
            dir.path().join("0000000000000001-0000000000000002.wal"),
            second.file(),
        )?;
        assert!(matches!(
            commit_wal_tail(dir.path()),
            Err(WalError::Damaged { .. })
        ));
        Ok(())
    }
}
