//! The workspace crates a crate depends on, read from its `Cargo.toml`.

use std::collections::BTreeSet;
use std::path::Path;

/// The crates of `workspace` named in the `[dependencies]` of the manifest
/// of `krate` (dev-dependencies left out).
pub fn workspace_dependencies(
    krate: &Path,
    workspace: &BTreeSet<String>,
) -> std::io::Result<Vec<String>> {
    let manifest = std::fs::read_to_string(krate.join("Cargo.toml"))?;
    Ok(dependencies_in(&manifest, workspace))
}

fn dependencies_in(manifest: &str, workspace: &BTreeSet<String>) -> Vec<String> {
    let mut in_dependencies = false;
    let mut found = Vec::new();
    for line in manifest.lines() {
        let line = line.trim();
        if line.starts_with('[') {
            in_dependencies = line == "[dependencies]";
            continue;
        }
        if !in_dependencies {
            continue;
        }
        let key = line.split(['=', '.', ' ']).next().unwrap_or_default();
        if workspace.contains(key) {
            found.push(key.to_owned());
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_normal_dependencies_on_workspace_crates_are_read() {
        let workspace: BTreeSet<String> = ["a", "b", "c"].map(String::from).into();
        let manifest = "[package]\nname = \"x\"\n\n[dependencies]\na = { path = \"../a\" }\nserde.workspace = true\nb.workspace = true\n\n[dev-dependencies]\nc = { path = \"../c\" }\n";
        assert_eq!(dependencies_in(manifest, &workspace), ["a", "b"]);
    }
}
