//! The restore Pod's containers run on this host as the Pod builder wrote
//! them: images mapped to the pinned binaries and to the operator binary
//! under test, the Pod's paths to a temporary volume; and what the restore
//! tests read of data directories (copies, digests, the revision of a db).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

#[cfg(feature = "operator")]
use etcd_operator_api::api::{BackupSource, EtcdCluster, EtcdClusterSpec};
use k8s_openapi::api::core::v1::{Container, Pod};
use sha2::{Digest, Sha256};

use crate::upstream::etcd_bin;

/// Where the Pod builder puts things, mapped by [`run_pod`].
const POD_DATA_MOUNT: &str = "/var/lib/etcd";
const POD_TOOLS: &str = "/var/run/etcd-operator";
const POD_ETCD: &str = "/usr/local/bin/etcd";
const POD_ETCDUTL: &str = "/usr/local/bin/etcdutl";
const POD_OPERATOR: &str = "/usr/local/bin/etcd-operator";

/// Copies a directory tree.
pub fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("create");
    for entry in std::fs::read_dir(from).expect("read dir") {
        let entry = entry.expect("entry");
        let target = to.join(entry.file_name());
        if entry.file_type().expect("type").is_dir() {
            copy_tree(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).expect("copy");
        }
    }
}

/// The SHA-256 of every file under `dir`, by relative path.
pub fn tree_digest(dir: &Path) -> BTreeMap<PathBuf, String> {
    fn walk(base: &Path, dir: &Path, out: &mut BTreeMap<PathBuf, String>) {
        for entry in std::fs::read_dir(dir).expect("read dir") {
            let path = entry.expect("entry").path();
            if path.is_dir() {
                walk(base, &path, out);
            } else {
                let digest = Sha256::digest(std::fs::read(&path).expect("read"));
                out.insert(
                    path.strip_prefix(base).expect("under").to_path_buf(),
                    hex::encode(digest),
                );
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(dir, dir, &mut out);
    out
}

/// The revision a db file or snapshot holds, read by `etcdutl snapshot
/// status` on a copy (the member's own file stays as it was).
pub fn db_revision(db: &Path, scratch: &Path) -> i64 {
    let copy = scratch.join("status.db");
    std::fs::copy(db, &copy).expect("copy db");
    let output = Command::new(etcd_bin("etcdutl"))
        .args(["snapshot", "status", "-w", "json"])
        .arg(&copy)
        .output()
        .expect("etcdutl snapshot status");
    assert!(
        output.status.success(),
        "etcdutl snapshot status: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let status: serde_json::Value = serde_json::from_slice(&output.stdout).expect("json");
    status["revision"].as_i64().expect("revision")
}

/// The restore Pod the operator builds for member 0 of cluster
/// `prod/main` in incarnation `token`, from `source` or (none) from the
/// survivor's own data on the volume.
#[cfg(feature = "operator")]
pub fn restore_pod_of_main(token: &str, source: Option<BackupSource>) -> Pod {
    let mut cluster = EtcdCluster::new("main", EtcdClusterSpec::default());
    cluster.metadata.namespace = Some("prod".into());
    cluster.metadata.uid = Some("uid".into());
    let addressing = etcd_operator::resources::MemberAddressing::new("main", "prod");
    etcd_operator::resources::restore::restore_pod(
        &cluster,
        &addressing,
        "operator",
        0,
        token,
        source,
    )
}

/// Runs the restore Pod's init containers, then its containers, each as
/// the Pod builder wrote it, on `volume` (the Pod's data mount) with
/// `tools` as its tools volume and `operator` (the binary under test) for
/// the operator's image; panics with the output of a step that fails.
/// Returns the combined output.
pub fn run_pod(pod: &Pod, volume: &Path, tools: &Path, operator: &Path) -> String {
    let spec = pod.spec.as_ref().expect("spec");
    let mut log = String::new();
    for container in spec
        .init_containers
        .iter()
        .flatten()
        .chain(spec.containers.iter())
    {
        log.push_str(&run_container(container, volume, tools, operator));
    }
    log
}

fn run_container(container: &Container, volume: &Path, tools: &Path, operator: &Path) -> String {
    let command = container.command.as_ref().expect("command");
    let map = |arg: &str| -> String {
        if arg == POD_ETCD || arg == format!("--etcd-binary={POD_ETCD}") {
            return arg.replace(POD_ETCD, &etcd_bin("etcd").display().to_string());
        }
        arg.replace(POD_DATA_MOUNT, &volume.display().to_string())
            .replace(POD_TOOLS, &tools.display().to_string())
    };
    let program = match command[0].as_str() {
        POD_OPERATOR => operator.to_owned(),
        POD_ETCDUTL => etcd_bin("etcdutl"),
        other => PathBuf::from(map(other)),
    };
    let args: Vec<String> = command[1..]
        .iter()
        .chain(container.args.iter().flatten())
        .map(|a| map(a))
        .collect();
    let output = Command::new(&program)
        .args(&args)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("{}: {e}", program.display()));
    let text = format!(
        "--- {} ({} {})\n{}{}",
        container.name,
        program.display(),
        args.join(" "),
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        output.status.success(),
        "step {} failed:\n{text}",
        container.name
    );
    text
}
