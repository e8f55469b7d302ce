//! Figures of a crate's non-test code, read from its source text as
//! rustfmt lays it out: lines, files, and functions by length.
//!
//! Test code is left out: files under a `tests` folder or named
//! `tests.rs`, and inline `#[cfg(test)] mod … { … }` blocks (found by
//! their line, the block ending at the `}` of the same indentation).

use std::path::{Path, PathBuf};

/// One function of non-test code and its length in lines.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FunctionLength {
    pub file: PathBuf,
    pub name: String,
    pub lines: usize,
}

/// The non-test code of one crate.
#[derive(Debug, Default)]
pub struct CodeFigures {
    /// Each non-test file (relative to the crate) and its non-test lines.
    pub files: Vec<(PathBuf, usize)>,
    /// Every function with a body, in non-test code.
    pub functions: Vec<FunctionLength>,
}

impl CodeFigures {
    /// Reads every `.rs` file under `src`.
    pub fn read(src: &Path) -> std::io::Result<Self> {
        let mut figures = Self::default();
        let mut files = Vec::new();
        collect(src, &mut files)?;
        files.sort();
        for path in files {
            let relative = path.strip_prefix(src).unwrap_or(&path).to_owned();
            if is_test_file(&relative) {
                continue;
            }
            let text = std::fs::read_to_string(&path)?;
            figures.add(relative, &text);
        }
        Ok(figures)
    }

    /// Adds one file's text.
    pub fn add(&mut self, file: PathBuf, text: &str) {
        let lines = without_test_modules(text);
        for (name, length) in function_lengths(&lines) {
            self.functions.push(FunctionLength {
                file: file.clone(),
                name,
                lines: length,
            });
        }
        self.files.push((file, lines.len()));
    }

    /// Non-test lines in all.
    pub fn lines(&self) -> usize {
        self.files.iter().map(|(_, n)| n).sum()
    }
}

fn collect(dir: &Path, files: &mut Vec<PathBuf>) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.is_dir() {
            collect(&path, files)?;
        } else if path.extension().is_some_and(|e| e == "rs") {
            files.push(path);
        }
    }
    Ok(())
}

fn is_test_file(relative: &Path) -> bool {
    relative
        .iter()
        .any(|part| part == "tests" || part == "tests.rs")
}

fn indent(line: &str) -> usize {
    line.len() - line.trim_start().len()
}

/// The lines of `text` outside inline test modules.
fn without_test_modules(text: &str) -> Vec<&str> {
    let all: Vec<&str> = text.lines().collect();
    let mut kept = Vec::with_capacity(all.len());
    let mut i = 0;
    while i < all.len() {
        let line = all[i];
        if line.trim() == "#[cfg(test)]"
            && let Some(next) = all.get(i + 1)
            && (next.trim_start().starts_with("mod ") || next.trim_start().starts_with("pub mod "))
            && next.trim_end().ends_with('{')
        {
            let depth = indent(next);
            let end = all[i + 2..]
                .iter()
                .position(|l| indent(l) == depth && l.trim() == "}")
                .map_or(all.len(), |p| i + 2 + p);
            i = end + 1;
            continue;
        }
        kept.push(line);
        i += 1;
    }
    kept
}

/// The name after `fn ` when `line` starts a function.
fn function_name(line: &str) -> Option<String> {
    let mut rest = line.trim_start();
    if rest.starts_with("//") {
        return None;
    }
    if let Some(after) = rest.strip_prefix("pub") {
        rest = after.trim_start();
        if rest.starts_with('(') {
            rest = &rest[rest.find(')')? + 1..];
            rest = rest.trim_start();
        }
    }
    for qualifier in ["const ", "async ", "unsafe ", "extern \"C\" "] {
        if let Some(after) = rest.strip_prefix(qualifier) {
            rest = after.trim_start();
        }
    }
    let after = rest.strip_prefix("fn ")?;
    let name: String = after
        .chars()
        .take_while(|c| c.is_alphanumeric() || *c == '_')
        .collect();
    (!name.is_empty()).then_some(name)
}

/// Every function with a body and its length in lines (from its `fn` line
/// to the `}` of the same indentation).
fn function_lengths(lines: &[&str]) -> Vec<(String, usize)> {
    let mut found = Vec::new();
    for (start, line) in lines.iter().enumerate() {
        let Some(name) = function_name(line) else {
            continue;
        };
        let depth = indent(line);
        // A declaration without a body ends with `;` before any `{`; a
        // body on one line ends with `}`.
        let Some(opens) = lines[start..]
            .iter()
            .position(|l| l.trim_end().ends_with(['{', ';', '}']))
        else {
            continue;
        };
        if !lines[start + opens].trim_end().ends_with('{') {
            continue;
        }
        let Some(close) = lines[start + opens + 1..]
            .iter()
            .position(|l| indent(l) == depth && l.trim_start().starts_with('}'))
        else {
            continue;
        };
        found.push((name, opens + close + 2));
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn functions_are_measured_from_fn_to_their_closing_brace() {
        let text = "pub fn a() {\n    x();\n}\n\nfn b(\n    y: u8,\n) -> u8 {\n    y\n}\ntrait T {\n    fn c(&self);\n}\n";
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            function_lengths(&lines),
            [("a".to_owned(), 3), ("b".to_owned(), 5)]
        );
    }

    #[test]
    fn inline_test_modules_are_not_counted() {
        let text = "fn a() {}\n#[cfg(test)]\nmod tests {\n    fn t() {\n    }\n}\nfn b() {}\n";
        assert_eq!(without_test_modules(text), ["fn a() {}", "fn b() {}"]);
    }
}
