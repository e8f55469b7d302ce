//! The workspace's crates depend on each other one way: the API crate on
//! none of them, the `kubectl etcd` plugin on the API crate alone.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use module_graph::workspace_dependencies;

fn crates() -> (PathBuf, BTreeSet<String>) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let names = std::fs::read_dir(&dir)
        .expect("crates/")
        .flatten()
        .filter(|e| e.path().join("Cargo.toml").is_file())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    (dir, names)
}

#[test]
fn crate_dependencies_point_one_way() {
    let (dir, names) = crates();
    let of = |name: &str| workspace_dependencies(&dir.join(name), &names).expect("manifest");
    assert_eq!(
        of("etcd-operator-api"),
        Vec::<String>::new(),
        "the API crate depends on no crate of the workspace"
    );
    assert_eq!(
        of("kubectl-etcd"),
        ["etcd-operator-api"],
        "the plugin depends on the API crate alone"
    );
    assert!(
        of("etcd-operator").contains(&"etcd-operator-api".to_owned()),
        "the operator builds on the API crate"
    );
}
