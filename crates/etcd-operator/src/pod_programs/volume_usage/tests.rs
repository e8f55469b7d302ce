//! The measurement on a real directory of this machine, and the server on
//! loopback, read by the operator's reader.

use std::io::Write as _;
use std::path::Path;
use std::time::Duration;

use super::measure::{allocated_bytes, measure};
use super::server::serve;
use crate::pod_contract::VolumeUsage;

const KIB: u64 = 1024;

/// Writes `bytes` of data that no filesystem stores in fewer blocks.
fn write_file(path: &Path, bytes: u64) {
    std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
    let mut file = std::fs::File::create(path).expect("create");
    let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
    let chunk: Vec<u8> = (0..4096)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state.to_le_bytes()[0]
        })
        .collect();
    let mut left = bytes;
    while left > 0 {
        let n = left.min(4096);
        file.write_all(&chunk[..usize::try_from(n).expect("small")])
            .expect("write");
        left -= n;
    }
    file.sync_all().expect("sync");
}

/// `measured` holds `written` bytes plus at most one 64 KiB block of slack.
fn assert_holds(measured: Option<u64>, written: u64, what: &str) {
    let measured = measured.unwrap_or_else(|| panic!("{what} measured"));
    assert!(
        (written..written + 64 * KIB).contains(&measured),
        "{what}: {measured} bytes measured for {written} written"
    );
}

/// A data dir laid out as etcd lays it out.
fn data_dir_with_etcd_files(root: &Path) -> std::path::PathBuf {
    let data = root.join("data");
    write_file(&data.join("member/snap/db"), 1024 * KIB);
    write_file(
        &data.join("member/snap/0000000000000002-0000000000000007.snap"),
        12 * KIB,
    );
    write_file(
        &data.join("member/wal/0000000000000000-0000000000000000.wal"),
        256 * KIB,
    );
    write_file(&data.join("member/wal/1.tmp"), 64 * KIB);
    data
}

#[test]
fn etcd_files_are_measured_by_what_they_take_on_the_volume() {
    let root = tempfile::tempdir().expect("tempdir");
    let data = data_dir_with_etcd_files(root.path());
    let usage = measure(&data).expect("measure");
    assert_holds(usage.db_file_bytes, 1024 * KIB, "db file");
    assert_holds(usage.wal_bytes, 320 * KIB, "wal");
    assert_holds(usage.snap_dir_bytes, 1036 * KIB, "snap dir");
    assert!(usage.snap_dir_bytes > usage.db_file_bytes);
}

#[test]
#[allow(clippy::useless_conversion)] // `u64` on 64-bit Linux only
fn the_filesystem_figures_are_those_of_statvfs() {
    let root = tempfile::tempdir().expect("tempdir");
    let data = data_dir_with_etcd_files(root.path());
    let usage = measure(&data).expect("measure");
    assert!(usage.capacity_bytes > 0);
    assert!(usage.used_bytes >= 1024 * KIB, "the files written are used");
    assert!(
        usage.available_bytes + usage.used_bytes <= usage.capacity_bytes,
        "{usage:?}"
    );
    let stats = nix::sys::statvfs::statvfs(&data).expect("statvfs");
    assert_eq!(
        usage.capacity_bytes,
        u64::from(stats.blocks()) * u64::from(stats.fragment_size())
    );
}

#[test]
fn before_etcd_starts_the_volume_is_measured_without_etcd_files() {
    let root = tempfile::tempdir().expect("tempdir");
    // The data dir does not exist yet: the volume's root is measured.
    let usage = measure(&root.path().join("data")).expect("measure");
    assert!(usage.capacity_bytes > 0);
    assert_eq!(
        (usage.db_file_bytes, usage.wal_bytes, usage.snap_dir_bytes),
        (None, None, None)
    );
    // An empty data dir: the same.
    std::fs::create_dir(root.path().join("data")).expect("mkdir");
    let usage = measure(&root.path().join("data")).expect("measure");
    assert_eq!(
        (usage.db_file_bytes, usage.wal_bytes, usage.snap_dir_bytes),
        (None, None, None)
    );
}

#[test]
fn a_volume_that_cannot_be_measured_is_an_error() {
    let root = tempfile::tempdir().expect("tempdir");
    let error = measure(&root.path().join("no/such/data")).expect_err("nothing to measure");
    assert!(error.to_string().contains("no/such"), "{error}");
}

#[test]
fn directories_sum_their_files_and_skip_links() {
    let root = tempfile::tempdir().expect("tempdir");
    let dir = root.path().join("wal");
    write_file(&dir.join("a"), 8 * KIB);
    write_file(&dir.join("nested/b"), 8 * KIB);
    std::os::unix::fs::symlink(root.path(), dir.join("loop")).expect("symlink");
    assert_holds(allocated_bytes(&dir).expect("read"), 16 * KIB, "dir");
    assert_eq!(allocated_bytes(&dir.join("absent")).expect("read"), None);
}

#[test]
fn measuring_writes_nothing() {
    let root = tempfile::tempdir().expect("tempdir");
    let data = data_dir_with_etcd_files(root.path());
    let before = listing(root.path());
    measure(&data).expect("measure");
    assert_eq!(listing(root.path()), before);
}

/// Every path under `dir` with its length and modification time.
fn listing(dir: &Path) -> Vec<(std::path::PathBuf, u64, std::time::SystemTime)> {
    let mut out = Vec::new();
    let mut dirs = vec![dir.to_path_buf()];
    while let Some(d) = dirs.pop() {
        for entry in std::fs::read_dir(&d).expect("read_dir") {
            let entry = entry.expect("entry");
            let meta = entry.metadata().expect("metadata");
            if meta.is_dir() {
                dirs.push(entry.path());
            }
            out.push((entry.path(), meta.len(), meta.modified().expect("mtime")));
        }
    }
    out.sort();
    out
}

#[tokio::test]
async fn the_server_answers_the_document_on_loopback() {
    let root = tempfile::tempdir().expect("tempdir");
    let data = data_dir_with_etcd_files(root.path());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let port = listener.local_addr().expect("address").port();
    let server = tokio::spawn(serve(listener, data.clone()));

    let usage: VolumeUsage =
        crate::reconcile::volume_usage::read_port("127.0.0.1", port, Duration::from_secs(5))
            .await
            .expect("read");
    assert_holds(usage.db_file_bytes, 1024 * KIB, "db file");
    assert!(usage.capacity_bytes > 0);

    // Measured at request time: a file etcd adds shows in the next answer.
    write_file(
        &data.join("member/wal/0000000000000001-0000000000000009.wal"),
        128 * KIB,
    );
    let later =
        crate::reconcile::volume_usage::read_port("127.0.0.1", port, Duration::from_secs(5))
            .await
            .expect("read");
    assert_holds(later.wal_bytes, 448 * KIB, "wal");
    server.abort();
}

/// `/wal-tail` reads the member's log on request, read-only, and an empty
/// volume (etcd not started yet) answers an error saying so.
#[tokio::test]
async fn the_server_answers_the_wal_tail_on_loopback() {
    use crate::pod_programs::wal::tests::Writer;
    let root = tempfile::tempdir().expect("tempdir");
    let data = root.path().join("data");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let port = listener.local_addr().expect("address").port();
    let server = tokio::spawn(serve(listener, data.clone()));
    let read = || {
        crate::reconcile::volume_usage::read_wal_tail_port(
            "127.0.0.1",
            port,
            Duration::from_secs(5),
        )
    };

    let error = read().await.expect_err("no log yet");
    assert!(error.to_string().contains("wal"), "{error}");

    let wal = data.join("member/wal");
    std::fs::create_dir_all(&wal).expect("wal dir");
    let mut log = Writer::new(0);
    log.entry(2, 7);
    log.state(2, 6);
    log.entry(3, 8);
    let file = wal.join("0000000000000000-0000000000000000.wal");
    std::fs::write(&file, log.file()).expect("write log");
    let tail = read().await.expect("read");
    assert_eq!(
        (
            tail.last_index,
            tail.last_term,
            tail.persisted_commit,
            tail.torn
        ),
        (8, 3, 6, false)
    );
    assert_eq!(
        std::fs::read(&file).expect("read back"),
        log.file(),
        "nothing written"
    );
    server.abort();
}
