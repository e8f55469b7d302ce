//! Edges between sibling modules and the circles among them.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::PathBuf;

use crate::paths::{Anchor, NamedPath, named_paths, reexports};
use crate::tree::{ModulePath, SourceTree};

/// `from` names something in `to`; both are children of `parent`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Edge {
    pub parent: ModulePath,
    pub from: String,
    pub to: String,
    /// The file and the path that make the edge (the first one found).
    pub file: PathBuf,
    pub named: String,
}

/// Siblings under `parent` that reach each other, with one edge for each
/// step between them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Circle {
    pub parent: ModulePath,
    pub members: Vec<String>,
    pub edges: Vec<Edge>,
}

impl fmt::Display for Circle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parent = if self.parent.is_empty() {
            "crate".to_owned()
        } else {
            self.parent.join("::")
        };
        writeln!(f, "in {parent}: {}", self.members.join(" <-> "))?;
        for edge in &self.edges {
            writeln!(
                f,
                "  {} -> {}: {} names {}",
                edge.from,
                edge.to,
                edge.file.display(),
                edge.named
            )?;
        }
        Ok(())
    }
}

/// The lifted import edges of one crate.
#[derive(Debug, Default)]
pub struct ImportGraph {
    /// (parent, from, to) -> the first witness.
    pub edges: BTreeMap<(ModulePath, String, String), Edge>,
}

impl ImportGraph {
    /// The edges of every module in `tree`. A path that names an item a
    /// module re-exports (`pub use`) is followed to where the item is
    /// defined, so a child naming `super::Error` that its parent re-exports
    /// from a sibling `error` names `error`.
    pub fn of(tree: &SourceTree) -> Self {
        let reexports = Reexports::of(tree);
        let mut graph = Self::default();
        for (module, (file, text)) in &tree.modules {
            for named in named_paths(text) {
                let written = absolute(module, &named);
                let resolved = reexports.follow(tree, written.clone());
                let target = tree.module_prefix(&resolved);
                let common = module
                    .iter()
                    .zip(target)
                    .take_while(|(a, b)| a == b)
                    .count();
                if common == module.len() || common == target.len() {
                    continue; // an ancestor or a descendant, or itself
                }
                let key = (
                    module[..common].to_vec(),
                    module[common].clone(),
                    target[common].clone(),
                );
                let named = if resolved == written {
                    written.join("::")
                } else {
                    format!(
                        "{} (re-exported from {})",
                        written.join("::"),
                        resolved.join("::")
                    )
                };
                graph.edges.entry(key.clone()).or_insert_with(|| Edge {
                    parent: key.0,
                    from: key.1,
                    to: key.2,
                    file: file.clone(),
                    named,
                });
            }
        }
        graph
    }

    /// Every set of two or more siblings that reach each other.
    pub fn circles(&self) -> Vec<Circle> {
        let parents: BTreeSet<&ModulePath> = self.edges.keys().map(|(p, _, _)| p).collect();
        let mut circles = Vec::new();
        for parent in parents {
            let next: BTreeMap<&str, Vec<&str>> = self
                .edges
                .keys()
                .filter(|(p, _, _)| p == parent)
                .fold(BTreeMap::new(), |mut map, (_, from, to)| {
                    map.entry(from.as_str()).or_default().push(to.as_str());
                    map
                });
            for members in strongly_connected(&next) {
                if members.len() < 2 {
                    continue;
                }
                let inside: BTreeSet<&str> = members.iter().copied().collect();
                let edges = self
                    .edges
                    .values()
                    .filter(|e| {
                        &e.parent == parent
                            && inside.contains(e.from.as_str())
                            && inside.contains(e.to.as_str())
                    })
                    .cloned()
                    .collect();
                circles.push(Circle {
                    parent: parent.clone(),
                    members: members.into_iter().map(str::to_owned).collect(),
                    edges,
                });
            }
        }
        circles
    }
}

/// The path `named` stands for, from the crate root, as written in
/// `module`.
fn absolute(module: &[String], named: &NamedPath) -> Vec<String> {
    let base: &[String] = match named.anchor {
        Anchor::Root => &[],
        // A file module's `super` is its parent; `a/mod.rs` is module `a`,
        // whose `super` is the root too.
        Anchor::Up(ups) => &module[..module.len().saturating_sub(ups)],
        Anchor::Here => module,
    };
    base.iter().cloned().chain(named.segments.clone()).collect()
}

/// What each module re-exports: the name, and the path (from the crate
/// root) it stands for. Globs are not followed.
struct Reexports(BTreeMap<ModulePath, BTreeMap<String, Vec<String>>>);

impl Reexports {
    fn of(tree: &SourceTree) -> Self {
        let mut all: BTreeMap<ModulePath, BTreeMap<String, Vec<String>>> = BTreeMap::new();
        for (module, (_, text)) in &tree.modules {
            for named in reexports(text) {
                let Some(name) = named.segments.last().cloned() else {
                    continue;
                };
                if name == "*" {
                    continue;
                }
                let path = absolute(module, &named);
                // A relative path that names no module of the crate (an
                // external crate's item) stays where it is.
                if named.anchor == Anchor::Here && tree.module_prefix(&path) == module.as_slice() {
                    continue;
                }
                all.entry(module.clone()).or_default().insert(name, path);
            }
        }
        Self(all)
    }

    /// `path`, with every re-exported name in it replaced by what it stands
    /// for (a few steps at most: re-exports of re-exports).
    fn follow(&self, tree: &SourceTree, mut path: Vec<String>) -> Vec<String> {
        for _ in 0..8 {
            let module = tree.module_prefix(&path).to_vec();
            let Some(name) = path.get(module.len()) else {
                return path;
            };
            let Some(source) = self.0.get(&module).and_then(|names| names.get(name)) else {
                return path;
            };
            if *source == path[..=module.len()] {
                return path;
            }
            path = source
                .iter()
                .cloned()
                .chain(path[module.len() + 1..].iter().cloned())
                .collect();
        }
        path
    }
}

/// Tarjan's strongly connected components, each sorted.
fn strongly_connected<'a>(next: &BTreeMap<&'a str, Vec<&'a str>>) -> Vec<Vec<&'a str>> {
    struct State<'a> {
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on_stack: BTreeSet<&'a str>,
        components: Vec<Vec<&'a str>>,
    }
    fn visit<'a>(node: &'a str, next: &BTreeMap<&'a str, Vec<&'a str>>, s: &mut State<'a>) {
        let n = s.index.len();
        s.index.insert(node, n);
        s.low.insert(node, n);
        s.stack.push(node);
        s.on_stack.insert(node);
        for &to in next.get(node).map(Vec::as_slice).unwrap_or(&[]) {
            if !s.index.contains_key(to) {
                visit(to, next, s);
                let low = s.low[node].min(s.low[to]);
                s.low.insert(node, low);
            } else if s.on_stack.contains(to) {
                let low = s.low[node].min(s.index[to]);
                s.low.insert(node, low);
            }
        }
        if s.low[node] == s.index[node] {
            let mut component = Vec::new();
            while let Some(top) = s.stack.pop() {
                s.on_stack.remove(top);
                component.push(top);
                if top == node {
                    break;
                }
            }
            component.sort_unstable();
            s.components.push(component);
        }
    }
    let mut state = State {
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        components: Vec::new(),
    };
    for &node in next.keys() {
        if !state.index.contains_key(node) {
            visit(node, next, &mut state);
        }
    }
    state.components
}

#[cfg(test)]
mod tests {
    use super::*;

    fn circles_of(files: &[(&str, &str)]) -> Vec<Vec<String>> {
        let tree = SourceTree::from_files(files.iter().copied());
        ImportGraph::of(&tree)
            .circles()
            .into_iter()
            .map(|c| c.members)
            .collect()
    }

    #[test]
    fn two_siblings_naming_each_other_are_a_circle() {
        let circles = circles_of(&[
            ("lib.rs", "mod a; mod b;"),
            ("a.rs", "use crate::b::X;"),
            ("b.rs", "fn f() { super::a::g() }"),
        ]);
        assert_eq!(circles, vec![vec!["a".to_owned(), "b".to_owned()]]);
    }

    #[test]
    fn edges_are_lifted_to_siblings_below_the_common_ancestor() {
        let circles = circles_of(&[
            ("lib.rs", ""),
            ("a/mod.rs", ""),
            ("a/x.rs", "use crate::b::y::Y;"),
            ("b/mod.rs", ""),
            ("b/y.rs", "use crate::a::x::X;"),
        ]);
        assert_eq!(circles, vec![vec!["a".to_owned(), "b".to_owned()]]);
    }

    #[test]
    fn parents_and_children_make_no_circle() {
        let circles = circles_of(&[
            ("lib.rs", "pub use crate::a::x::X;"),
            ("a/mod.rs", "pub use self::x::X; pub struct P;"),
            ("a/x.rs", "use super::P; use crate::T;"),
        ]);
        assert!(circles.is_empty(), "{circles:?}");
    }

    #[test]
    fn a_circle_through_a_parents_re_export_is_found() {
        // `x` names `super::Error`, which `b` re-exports from `error`;
        // `error` names `x`: the circle is `error <-> x` under `b`.
        let circles = circles_of(&[
            ("lib.rs", "mod b;"),
            ("b/mod.rs", "mod error; mod x; pub use error::Error;"),
            ("b/error.rs", "pub struct Error(super::x::Cause);"),
            (
                "b/x.rs",
                "pub struct Cause; fn f() -> super::Error { todo!() }",
            ),
        ]);
        assert_eq!(circles, vec![vec!["error".to_owned(), "x".to_owned()]]);
    }

    #[test]
    fn a_re_export_of_an_external_item_adds_no_edge() {
        let circles = circles_of(&[
            ("lib.rs", "mod a; mod b; pub use std::fmt::Display;"),
            ("a.rs", "use crate::Display; use crate::b::B;"),
            ("b.rs", "pub struct B; use crate::Display;"),
        ]);
        assert!(circles.is_empty(), "{circles:?}");
    }

    #[test]
    fn a_one_way_chain_is_no_circle() {
        let circles = circles_of(&[
            ("lib.rs", ""),
            ("a.rs", "use crate::b::B;"),
            ("b.rs", "use crate::c::C;"),
            ("c.rs", ""),
        ]);
        assert!(circles.is_empty());
    }
}
