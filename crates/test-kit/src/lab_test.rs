//! The lab's own tests (root and the upstream binaries needed): one lab
//! at a time per machine under the machine-wide lab lock, stopped with its
//! logs kept when a test fails; the lab's processes seen through its
//! cgroups; and the check that `etcd-lab down` left nothing behind.

use std::path::{Path, PathBuf};
use std::process::Command;

use etcd_lab::LabOptions;

use crate::lab_lock::{LabLock, is_root, lab_dir};

/// Holds the machine-wide lab test lock; stops the lab when the test fails
/// (keeping its logs for inspection).
pub struct LabTest {
    pub lab_dir: PathBuf,
    etcd_lab: PathBuf,
    _lock: LabLock,
}

impl LabTest {
    /// Takes the lock for a lab in `dir` (below the lane's directory in a
    /// lab lane, see [`lab_dir`]) driven by `etcd_lab` (the binary under
    /// test, `env!("CARGO_BIN_EXE_etcd-lab")`).
    pub fn start(dir: &str, etcd_lab: &str) -> Self {
        assert!(
            is_root(),
            "the lab tests need root (network namespaces, cgroups, mounts)"
        );
        let lab_dir = lab_dir(dir);
        let lab_dir = lab_dir.as_str();
        let lock = LabLock::acquire();
        let etcd_lab = PathBuf::from(etcd_lab);
        stop_other_lab(&etcd_lab, Path::new(lab_dir));
        if Path::new(lab_dir).exists() {
            // Left by an earlier failed run: start from an empty lab.
            assert!(
                etcd_lab_cli(&etcd_lab, Path::new(lab_dir), &["down"])
                    .status
                    .success(),
                "cleaning up an earlier lab failed"
            );
        }
        Self {
            lab_dir: PathBuf::from(lab_dir),
            etcd_lab,
            _lock: lock,
        }
    }

    /// The options of `Lab::up` for this lab.
    pub fn options(&self) -> LabOptions {
        LabOptions {
            lab_dir: Some(self.lab_dir.clone()),
            etcd_lab_binary: Some(self.etcd_lab.clone()),
            ..LabOptions::default()
        }
    }

    /// `etcd-lab down` succeeds and leaves nothing behind.
    pub fn down_leaves_nothing(&self) {
        let down = self.cli(&["down"]);
        assert!(
            down.status.success(),
            "down: {}",
            String::from_utf8_lossy(&down.stderr)
        );
        assert_nothing_left(&self.lab_dir);
    }

    /// Runs `etcd-lab <args>` on this lab.
    pub fn cli(&self, args: &[&str]) -> std::process::Output {
        etcd_lab_cli(&self.etcd_lab, &self.lab_dir, args)
    }
}

impl Drop for LabTest {
    fn drop(&mut self) {
        if std::thread::panicking() {
            let _ = self.cli(&["down", "--keep-data"]);
            eprintln!(
                "the lab is down; its logs are kept in {}/logs",
                self.lab_dir.display()
            );
        }
    }
}

/// Holding the lab lock, stops a lab left up for reuse in another
/// directory than `lab_dir` (its data kept), as one lab runs per machine.
pub fn stop_other_lab(etcd_lab: &Path, lab_dir: &Path) {
    if let Some(other) = etcd_lab::current::current()
        && other != lab_dir
    {
        let down = etcd_lab_cli(etcd_lab, &other, &["down", "--keep-data"]);
        assert!(
            down.status.success(),
            "stopping the lab at {}: {}",
            other.display(),
            String::from_utf8_lossy(&down.stderr)
        );
    }
}

fn etcd_lab_cli(etcd_lab: &Path, lab_dir: &Path, args: &[&str]) -> std::process::Output {
    Command::new(etcd_lab)
        .args(args)
        .env("ETCD_LAB_DIR", lab_dir)
        .env("RUST_BACKTRACE", "0")
        .output()
        .expect("run etcd-lab")
}

/// Pids of a pod's container processes (found through the lab's cgroups).
pub fn container_pids(uid: &str) -> Vec<i32> {
    let cgroups = etcd_lab::cgroup::LabCgroups::detect().expect("cgroup2");
    cgroups
        .pids()
        .into_iter()
        .filter(|pid| {
            let cgroup = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap_or_default();
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            cgroup.contains(uid) && String::from_utf8_lossy(&cmdline).contains("python3")
        })
        .collect()
}

/// The state letter of a process (`R`, `S`, `T`...).
pub fn process_state(pid: i32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(')')?.1.trim_start().chars().next()
}

/// Checks that `etcd-lab down` left nothing behind.
pub fn assert_nothing_left(lab_dir: &Path) {
    assert!(!lab_dir.exists(), "the state directory is removed");
    let cgroups = etcd_lab::cgroup::LabCgroups::detect().expect("cgroup2");
    assert!(!cgroups.lab().exists(), "the lab's cgroup is removed");
    assert_eq!(etcd_lab::teardown::lab_netns(), Vec::<String>::new());
    assert!(etcd_lab::teardown::mounts_under(lab_dir).is_empty());
    assert_eq!(
        etcd_lab::teardown::loop_devices_under(lab_dir),
        Vec::<PathBuf>::new(),
        "no loop device of a lab volume disk is left"
    );
    let tables = Command::new("nft")
        .args(["list", "tables"])
        .output()
        .expect("nft");
    let tables = String::from_utf8_lossy(&tables.stdout);
    assert!(!tables.contains("etcdlab"), "host nft tables: {tables}");
    let links = Command::new("ip").args(["link"]).output().expect("ip link");
    assert!(!String::from_utf8_lossy(&links.stdout).contains("etcdlab"));
    // Every process of the lab names its state directory on its command line
    // (other tests may run their own etcd processes meanwhile).
    let lab_dir = lab_dir.to_string_lossy().into_owned();
    let leftovers: Vec<String> = std::fs::read_dir("/proc")
        .expect("/proc")
        .flatten()
        .filter_map(|e| {
            let cmdline = std::fs::read(e.path().join("cmdline")).ok()?;
            let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
            cmdline.contains(&lab_dir).then_some(cmdline)
        })
        .collect();
    assert_eq!(leftovers, Vec::<String>::new(), "lab processes left");
}

/// Deletes Pod `name` and waits (up to a minute) until it is gone.
pub async fn delete_pod_and_wait(pods: &kube::Api<k8s_openapi::api::core::v1::Pod>, name: &str) {
    pods.delete(name, &kube::api::DeleteParams::default())
        .await
        .expect("delete pod");
    crate::poll::wait_until(
        &format!("{name} gone"),
        std::time::Duration::from_secs(60),
        || async { matches!(pods.get_opt(name).await, Ok(None)).then_some(()) },
    )
    .await;
}
