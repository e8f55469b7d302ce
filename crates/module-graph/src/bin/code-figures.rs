//! `cargo run -p module-graph --bin code-figures`: the figures of the
//! workspace's non-test code, as Markdown on standard output: lines per
//! crate and their share, files over 600 lines, functions over 100 lines,
//! import circles (re-exports followed) and the edges between the
//! workspace's crates (normal dependencies). Run it before and after a
//! change of structure to compare.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use module_graph::{CodeFigures, ImportGraph, SourceTree, workspace_dependencies};

const LONG_FILE: usize = 600;
const LONG_FUNCTION: usize = 100;

fn main() -> std::io::Result<()> {
    let crates_dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut crates: Vec<PathBuf> = std::fs::read_dir(&crates_dir)?
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.join("src").is_dir())
        .collect();
    crates.sort();
    let names: BTreeSet<String> = crates.iter().map(|c| crate_name(c)).collect();

    let mut rows = Vec::new();
    for krate in &crates {
        let src = krate.join("src");
        let figures = CodeFigures::read(&src)?;
        let circles = ImportGraph::of(&SourceTree::read(&src)?).circles();
        rows.push((crate_name(krate), figures, circles));
    }
    let total: usize = rows.iter().map(|(_, f, _)| f.lines()).sum();

    println!("# Code figures (non-test code)\n");
    println!(
        "| crate | lines | share | files over {LONG_FILE} lines | functions over {LONG_FUNCTION} lines | import circles |"
    );
    println!("|---|---:|---:|---:|---:|---:|");
    for (name, figures, circles) in &rows {
        let share = figures.lines() * 100 / total.max(1);
        let long_files = figures.files.iter().filter(|(_, n)| *n > LONG_FILE).count();
        let long_functions = figures
            .functions
            .iter()
            .filter(|f| f.lines > LONG_FUNCTION)
            .count();
        println!(
            "| {name} | {} | {share} % | {long_files} | {long_functions} | {} |",
            figures.lines(),
            circles.len()
        );
    }
    println!("| all | {total} | 100 % | | | |\n");

    println!("## Files over {LONG_FILE} lines\n");
    for (name, figures, _) in &rows {
        for (file, lines) in figures.files.iter().filter(|(_, n)| *n > LONG_FILE) {
            println!("- {name}/src/{}: {lines}", file.display());
        }
    }
    println!("\n## Functions over {LONG_FUNCTION} lines\n");
    for (name, figures, _) in &rows {
        let mut long: Vec<_> = figures
            .functions
            .iter()
            .filter(|f| f.lines > LONG_FUNCTION)
            .collect();
        long.sort_by_key(|f| std::cmp::Reverse(f.lines));
        for function in long {
            println!(
                "- {name}/src/{} `{}`: {}",
                function.file.display(),
                function.name,
                function.lines
            );
        }
    }
    println!("\n## Import circles\n");
    for (name, _, circles) in &rows {
        for circle in circles {
            print!("- {name}: {circle}");
        }
    }
    println!("\n## Crate dependency edges\n");
    for krate in &crates {
        for dependency in workspace_dependencies(krate, &names)? {
            println!("- {} -> {dependency}", crate_name(krate));
        }
    }
    Ok(())
}

fn crate_name(krate: &Path) -> String {
    krate
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}
