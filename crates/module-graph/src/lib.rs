//! The import graph between the modules of a crate, read from its source
//! text, and the circles in it.
//!
//! A module is a file under `src/` (`a.rs` or `a/mod.rs` is `a`, `a/b.rs` is
//! `a::b`). Every path a module names that starts with `crate::` or
//! `super::` (in `use` lines and inline) is an edge, lifted to the two
//! sibling modules below the closest common ancestor: `a::b` naming
//! `crate::c::d::f` is the edge `a -> c` under the root. A module naming its
//! own ancestor or descendant adds no edge (a parent declares its children;
//! a child may use what its parent defines). Test modules (`tests`, and
//! everything below one) are left out: tests may look everywhere.
//!
//! A circle is a set of siblings that reach each other: `a -> c -> a`.

mod figures;
mod graph;
mod manifest;
mod paths;
mod tree;

pub use figures::{CodeFigures, FunctionLength};
pub use graph::{Circle, Edge, ImportGraph};
pub use manifest::workspace_dependencies;
pub use tree::SourceTree;
