//! The paths a module's text names: every `crate::…` and `super::…` path,
//! with `use` groups (`crate::a::{b, c::d}`) expanded; and the names a
//! module re-exports (`pub use …`), with the paths they stand for.

/// Where a path starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Anchor {
    /// `crate::`
    Root,
    /// `super::` repeated this many times.
    Up(usize),
    /// The module itself (`self::`, or a path relative to it in a `use`).
    Here,
}

/// One named path: its anchor and the segments after it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NamedPath {
    pub anchor: Anchor,
    pub segments: Vec<String>,
}

/// Every `crate::` and `super::` path in `text`, comments and string
/// literals left out.
pub fn named_paths(text: &str) -> Vec<NamedPath> {
    let code = strip_test_modules(&strip_comments_and_strings(text));
    let chars: Vec<char> = code.chars().collect();
    let mut found = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let starts_word = i == 0 || !is_ident(chars[i - 1]) && chars[i - 1] != ':';
        if starts_word {
            if let Some(after) = keyword_then_colons(&chars, i, "crate") {
                let mut parser = Parser {
                    chars: &chars,
                    at: after,
                    glob: false,
                };
                for segments in parser.tail() {
                    found.push(NamedPath {
                        anchor: Anchor::Root,
                        segments,
                    });
                }
                i = parser.at.max(i + 1);
                continue;
            }
            if let Some(mut after) = keyword_then_colons(&chars, i, "super") {
                let mut ups = 1;
                while let Some(next) = keyword_then_colons(&chars, after, "super") {
                    ups += 1;
                    after = next;
                }
                let mut parser = Parser {
                    chars: &chars,
                    at: after,
                    glob: false,
                };
                for segments in parser.tail() {
                    found.push(NamedPath {
                        anchor: Anchor::Up(ups),
                        segments,
                    });
                }
                i = parser.at.max(i + 1);
                continue;
            }
        }
        i += 1;
    }
    found
}

/// Every path a `pub use` (of any visibility but private) of `text`
/// re-exports, anchored where it starts: its last segment is the name it is
/// re-exported under (renames are not followed), `*` for a glob.
pub fn reexports(text: &str) -> Vec<NamedPath> {
    let code = strip_test_modules(&strip_comments_and_strings(text));
    let chars: Vec<char> = code.chars().collect();
    let mut found = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let starts_word = i == 0 || !is_ident(chars[i - 1]);
        let Some(after_pub) = starts_word.then(|| word_at(&chars, i, "pub")).flatten() else {
            i += 1;
            continue;
        };
        let mut at = skip_space(&chars, after_pub);
        if chars.get(at) == Some(&'(') {
            while at < chars.len() && chars[at] != ')' {
                at += 1;
            }
            at = skip_space(&chars, at + 1);
        }
        let Some(after_use) = word_at(&chars, at, "use") else {
            i = after_pub;
            continue;
        };
        let mut at = skip_space(&chars, after_use);
        let mut anchor = Anchor::Here;
        if let Some(after) = keyword_then_colons(&chars, at, "crate") {
            anchor = Anchor::Root;
            at = after;
        } else if let Some(after) = keyword_then_colons(&chars, at, "self") {
            at = after;
        } else if let Some(mut after) = keyword_then_colons(&chars, at, "super") {
            let mut ups = 1;
            while let Some(next) = keyword_then_colons(&chars, after, "super") {
                ups += 1;
                after = next;
            }
            anchor = Anchor::Up(ups);
            at = after;
        }
        let mut parser = Parser {
            chars: &chars,
            at,
            glob: true,
        };
        for segments in parser.tail() {
            if !segments.is_empty() {
                found.push(NamedPath {
                    anchor: anchor.clone(),
                    segments,
                });
            }
        }
        i = parser.at.max(i + 1);
    }
    found
}

/// `word` at `at` as a whole word: the index after it.
fn word_at(chars: &[char], at: usize, word: &str) -> Option<usize> {
    let end = at + word.chars().count();
    let matches = chars.get(at..end)?.iter().copied().eq(word.chars());
    (matches && !chars.get(end).is_some_and(|c| is_ident(*c))).then_some(end)
}

fn is_ident(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// `word` at `at` followed by `::`: the index after the colons.
fn keyword_then_colons(chars: &[char], at: usize, word: &str) -> Option<usize> {
    let mut i = at;
    for expected in word.chars() {
        if chars.get(i) != Some(&expected) {
            return None;
        }
        i += 1;
    }
    i = skip_space(chars, i);
    if chars.get(i) == Some(&':') && chars.get(i + 1) == Some(&':') {
        Some(skip_space(chars, i + 2))
    } else {
        None
    }
}

fn skip_space(chars: &[char], mut i: usize) -> usize {
    while chars.get(i).is_some_and(|c| c.is_whitespace()) {
        i += 1;
    }
    i
}

struct Parser<'c> {
    chars: &'c [char],
    at: usize,
    /// Whether a `*` ends its path with a `*` segment (else with none).
    glob: bool,
}

impl Parser<'_> {
    /// The rest of a path after `::`: segments, a `{…}` group or `*`.
    fn tail(&mut self) -> Vec<Vec<String>> {
        self.at = skip_space(self.chars, self.at);
        match self.chars.get(self.at) {
            Some('{') => {
                self.at += 1;
                let mut all = Vec::new();
                loop {
                    self.at = skip_space(self.chars, self.at);
                    match self.chars.get(self.at) {
                        Some('}') => {
                            self.at += 1;
                            return all;
                        }
                        Some(',') => self.at += 1,
                        None => return all,
                        _ => {
                            let before = self.at;
                            all.extend(self.tail());
                            if self.at == before {
                                self.at += 1;
                            }
                        }
                    }
                }
            }
            Some('*') => {
                self.at += 1;
                if self.glob {
                    vec![vec!["*".to_owned()]]
                } else {
                    vec![Vec::new()]
                }
            }
            _ => {
                let Some(word) = self.ident() else {
                    return vec![Vec::new()];
                };
                let after_word = self.at;
                let next = skip_space(self.chars, self.at);
                if self.chars.get(next) == Some(&':') && self.chars.get(next + 1) == Some(&':') {
                    self.at = next + 2;
                    let rest = self.tail();
                    rest.into_iter()
                        .map(|tail| {
                            let mut path = if word == "self" {
                                Vec::new()
                            } else {
                                vec![word.clone()]
                            };
                            path.extend(tail);
                            path
                        })
                        .collect()
                } else {
                    self.at = after_word;
                    self.skip_rename();
                    if word == "self" {
                        vec![Vec::new()]
                    } else {
                        vec![vec![word]]
                    }
                }
            }
        }
    }

    fn ident(&mut self) -> Option<String> {
        let start = self.at;
        while self.chars.get(self.at).is_some_and(|c| is_ident(*c)) {
            self.at += 1;
        }
        (self.at > start).then(|| self.chars[start..self.at].iter().collect())
    }

    /// ` as name` after a path in a `use` group.
    fn skip_rename(&mut self) {
        let next = skip_space(self.chars, self.at);
        if self.chars[next..].starts_with(&['a', 's'])
            && self.chars.get(next + 2).is_some_and(|c| c.is_whitespace())
        {
            self.at = skip_space(self.chars, next + 2);
            let _ = self.ident();
        }
    }
}

/// The code without its inline test modules (`#[cfg(test)] mod … { … }`):
/// tests may look everywhere, as test files may.
fn strip_test_modules(code: &str) -> String {
    const MARK: &str = "#[cfg(test)]";
    let mut out = String::with_capacity(code.len());
    let mut rest = code;
    while let Some(at) = rest.find(MARK) {
        let after = &rest[at + MARK.len()..];
        let body = after.trim_start();
        let is_module = body.starts_with("mod ") || body.starts_with("pub mod ");
        let Some(open) = body.find(['{', ';']).filter(|_| is_module) else {
            out.push_str(&rest[..at + MARK.len()]);
            rest = after;
            continue;
        };
        out.push_str(&rest[..at]);
        if body[open..].starts_with(';') {
            // `#[cfg(test)] mod tests;`: a file the tree leaves out.
            rest = &body[open + 1..];
            continue;
        }
        let mut depth = 0usize;
        let mut end = body.len();
        for (i, c) in body[open..].char_indices() {
            match c {
                '{' => depth += 1,
                '}' => {
                    depth = depth.saturating_sub(1);
                    if depth == 0 {
                        end = open + i + 1;
                        break;
                    }
                }
                _ => {}
            }
        }
        rest = &body[end..];
    }
    out.push_str(rest);
    out
}

/// The text with comments removed and string and char literals emptied.
fn strip_comments_and_strings(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < chars.len() {
        match (chars[i], chars.get(i + 1)) {
            ('/', Some('/')) => {
                while i < chars.len() && chars[i] != '\n' {
                    i += 1;
                }
            }
            ('/', Some('*')) => {
                let mut depth = 0;
                while i < chars.len() {
                    if chars[i] == '/' && chars.get(i + 1) == Some(&'*') {
                        depth += 1;
                        i += 2;
                    } else if chars[i] == '*' && chars.get(i + 1) == Some(&'/') {
                        depth -= 1;
                        i += 2;
                        if depth == 0 {
                            break;
                        }
                    } else {
                        i += 1;
                    }
                }
            }
            ('r', Some('#' | '"')) if i == 0 || !is_ident(chars[i - 1]) => {
                let mut j = i + 1;
                let mut hashes = 0;
                while chars.get(j) == Some(&'#') {
                    hashes += 1;
                    j += 1;
                }
                if chars.get(j) != Some(&'"') {
                    out.push(chars[i]);
                    i += 1;
                    continue;
                }
                j += 1;
                'raw: while j < chars.len() {
                    if chars[j] == '"' && (1..=hashes).all(|k| chars.get(j + k) == Some(&'#')) {
                        j += 1 + hashes;
                        break 'raw;
                    }
                    j += 1;
                }
                out.push_str("\"\"");
                i = j;
            }
            ('"', _) => {
                i += 1;
                while i < chars.len() && chars[i] != '"' {
                    if chars[i] == '\\' {
                        i += 1;
                    }
                    i += 1;
                }
                i += 1;
                out.push_str("\"\"");
            }
            ('\'', Some(c)) if chars.get(i + 2) == Some(&'\'') || (*c == '\\') => {
                // A char literal ('x' or '\n'); a lifetime has no closing quote.
                let mut j = i + 1;
                if chars[j] == '\\' {
                    j += 1;
                }
                while j < chars.len() && chars[j] != '\'' {
                    j += 1;
                }
                i = j + 1;
                out.push_str("' '");
            }
            (c, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn roots(text: &str) -> Vec<String> {
        spelled(named_paths(text))
    }

    fn spelled(paths: Vec<NamedPath>) -> Vec<String> {
        paths
            .into_iter()
            .map(|p| {
                let anchor = match p.anchor {
                    Anchor::Root => "crate".to_owned(),
                    Anchor::Up(n) => vec!["super"; n].join("::"),
                    Anchor::Here => "self".to_owned(),
                };
                std::iter::once(anchor)
                    .chain(p.segments)
                    .collect::<Vec<_>>()
                    .join("::")
            })
            .collect()
    }

    #[test]
    fn use_lines_and_inline_paths_are_found() {
        let text = "use crate::a::b;\nfn f() { crate::c::d(); super::super::e::F }";
        assert_eq!(
            roots(text),
            ["crate::a::b", "crate::c::d", "super::super::e::F"]
        );
    }

    #[test]
    fn groups_are_expanded() {
        let text = "use crate::{a::{self, X}, b::c as d, e::*};";
        assert_eq!(
            roots(text),
            ["crate::a", "crate::a::X", "crate::b::c", "crate::e"]
        );
    }

    #[test]
    fn comments_and_strings_name_nothing() {
        let text = "// crate::a::b\n/// [`crate::c`]\nlet s = \"crate::d\"; let r = r#\"crate::e\"#; let c = ':';";
        assert!(roots(text).is_empty(), "{:?}", roots(text));
    }

    #[test]
    fn re_exports_are_read_with_their_anchors_and_globs() {
        let text = "mod error;\npub use error::{BackupError, Category};\npub(crate) use crate::a::B;\npub(super) use self::c::*;\nuse d::E;\npub fn f() {}";
        assert_eq!(
            spelled(reexports(text)),
            [
                "self::error::BackupError",
                "self::error::Category",
                "crate::a::B",
                "self::c::*"
            ]
        );
    }

    #[test]
    fn inline_test_modules_name_nothing() {
        let text = "use crate::a::A;\n#[cfg(test)]\nmod tests {\n    use crate::b::B;\n    fn f() { if true { crate::c::C } }\n}\nfn g() { crate::d::D }";
        assert_eq!(roots(text), ["crate::a::A", "crate::d::D"]);
    }

    #[test]
    fn lifetimes_are_not_char_literals() {
        let text = "fn f<'a>(x: &'a str) { crate::a::b(x) }";
        assert_eq!(roots(text), ["crate::a::b"]);
    }
}
