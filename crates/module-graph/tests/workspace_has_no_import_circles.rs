//! No crate of the workspace has modules that import each other in a
//! circle (see the `module-graph` crate for what counts).

use std::path::Path;

use module_graph::{ImportGraph, SourceTree};

#[test]
fn no_crate_has_an_import_circle() {
    let crates = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut report = String::new();
    let mut entries: Vec<_> = std::fs::read_dir(&crates)
        .expect("crates/")
        .flatten()
        .map(|e| e.path())
        .collect();
    entries.sort();
    for krate in entries {
        let src = krate.join("src");
        if !src.is_dir() {
            continue;
        }
        let tree = SourceTree::read(&src).expect("read the crate's sources");
        for circle in ImportGraph::of(&tree).circles() {
            report.push_str(&format!(
                "{}: {circle}",
                krate.file_name().unwrap_or_default().to_string_lossy()
            ));
        }
    }
    assert!(report.is_empty(), "import circles:\n{report}");
}
