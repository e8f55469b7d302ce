use super::record::*;
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
        let data = (kind != CRC_TYPE).then_some(data);
        self.out
            .extend_from_slice(&frame_record(kind, self.crc, data));
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
            last_term: 2,
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

/// The tail is read without a change: the last entry's index and term (the
/// up-to-dateness raft compares), beyond the persisted commit index, and a
/// later leader's shorter log (entries overwritten at a lower index) reads
/// as what it is.
#[test]
fn the_tail_is_read_without_a_change() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("0000000000000000-0000000000000000.wal");
    let mut wal = Writer::new(0);
    wal.record(METADATA_TYPE, b"meta");
    wal.entry(1, 1);
    wal.entry(1, 2);
    wal.state(1, 1);
    wal.entry(1, 3);
    fs::write(&path, wal.file())?;
    let tail = read_wal_tail(dir.path())?;
    assert_eq!(
        (
            tail.last_index,
            tail.last_term,
            tail.persisted_commit,
            tail.torn
        ),
        (3, 1, 1, false)
    );
    assert_eq!(fs::read(&path)?, wal.file(), "nothing written");

    // A new leader of term 2 overwrote index 3 and beyond with index 3.
    wal.state(2, 2);
    wal.entry(2, 3);
    fs::write(&path, wal.file())?;
    let tail = read_wal_tail(dir.path())?;
    assert_eq!((tail.last_index, tail.last_term), (3, 2));

    // A snapshot record after the last entry: its index and term.
    let mut snapshot = Vec::new();
    put_field_varint(&mut snapshot, 1, 10);
    put_field_varint(&mut snapshot, 2, 4);
    wal.record(SNAPSHOT_TYPE, &snapshot);
    fs::write(&path, wal.file())?;
    let tail = read_wal_tail(dir.path())?;
    assert_eq!((tail.last_index, tail.last_term), (10, 4));
    Ok(())
}
