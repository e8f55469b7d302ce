//! The module tree of one crate: which file is which module.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// A module's path below the crate root (`["reconcile", "plan"]`); the
/// root itself is empty.
pub type ModulePath = Vec<String>;

/// Every module file of one crate with its source text.
#[derive(Debug, Default)]
pub struct SourceTree {
    /// Module path -> (file, source text).
    pub modules: BTreeMap<ModulePath, (PathBuf, String)>,
}

impl SourceTree {
    /// Reads every `.rs` file below `src` (a crate's `src/` folder).
    pub fn read(src: &Path) -> std::io::Result<Self> {
        let mut tree = Self::default();
        tree.read_dir(src, src)?;
        Ok(tree)
    }

    /// A tree from `(file path relative to src, text)` pairs.
    pub fn from_files<'a>(files: impl IntoIterator<Item = (&'a str, &'a str)>) -> Self {
        let mut tree = Self::default();
        for (file, text) in files {
            tree.add(Path::new(file), text.to_owned());
        }
        tree
    }

    fn read_dir(&mut self, src: &Path, dir: &Path) -> std::io::Result<()> {
        let mut entries = std::fs::read_dir(dir)?.collect::<Result<Vec<_>, _>>()?;
        entries.sort_by_key(|e| e.path());
        for entry in entries {
            let path = entry.path();
            if path.is_dir() {
                self.read_dir(src, &path)?;
            } else if path.extension().is_some_and(|e| e == "rs") {
                let text = std::fs::read_to_string(&path)?;
                let relative = path.strip_prefix(src).unwrap_or(&path).to_owned();
                self.add(&relative, text);
            }
        }
        Ok(())
    }

    fn add(&mut self, relative: &Path, text: String) {
        let module = module_path_of(relative);
        if module.iter().any(|segment| segment == "tests") {
            return;
        }
        // A binary's root (main.rs) beside a library's root (lib.rs) is a
        // crate of its own; it names the library by its crate name, so it
        // adds no edge inside the library.
        if module.is_empty() && relative.file_name().is_some_and(|f| f == "main.rs") {
            return;
        }
        self.modules.insert(module, (relative.to_owned(), text));
    }

    /// The longest prefix of `path` that is a module of this crate.
    pub fn module_prefix<'p>(&self, path: &'p [String]) -> &'p [String] {
        (0..=path.len())
            .rev()
            .map(|n| &path[..n])
            .find(|prefix| self.modules.contains_key(*prefix))
            .unwrap_or(&[])
    }
}

fn module_path_of(relative: &Path) -> ModulePath {
    let mut segments: Vec<String> = relative
        .iter()
        .map(|s| s.to_string_lossy().into_owned())
        .collect();
    if let Some(last) = segments.pop() {
        let stem = last.trim_end_matches(".rs");
        if !matches!(stem, "mod" | "lib" | "main") {
            segments.push(stem.to_owned());
        }
    }
    segments
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_map_to_module_paths() {
        assert!(module_path_of(Path::new("lib.rs")).is_empty());
        assert_eq!(module_path_of(Path::new("a.rs")), ["a"]);
        assert_eq!(module_path_of(Path::new("a/mod.rs")), ["a"]);
        assert_eq!(module_path_of(Path::new("a/b.rs")), ["a", "b"]);
    }

    #[test]
    fn test_modules_and_the_binary_root_are_left_out() {
        let tree = SourceTree::from_files([
            ("lib.rs", ""),
            ("main.rs", ""),
            ("a/tests.rs", ""),
            ("a/tests/sim.rs", ""),
            ("a/mod.rs", ""),
        ]);
        let modules: Vec<_> = tree.modules.keys().cloned().collect();
        assert_eq!(modules, vec![Vec::<String>::new(), vec!["a".to_owned()]]);
    }
}
