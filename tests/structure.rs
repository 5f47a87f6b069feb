//! The crate's import structure, checked (issue 28): no import cycle between two folders
//! (neither among files nor among the folders taken whole), and inside one folder only the
//! cycles listed in [`ALLOWED`], each with the reason it is tolerated. A new cycle fails this test with every cycle it found printed.
//!
//! Run it with `cargo nextest run --test structure` (docs/development.md, "Structure").
//!
//! The graph is built from the sources alone, so that it needs no tool beyond cargo:
//! every file under `src/` is a node (its module path follows from where it lies:
//! `src/a/b.rs` and `src/a/b/mod.rs` are `crate::a::b`), and a file depends on another
//! when it names it: in a `use` declaration (`crate::…`, `super::…`, `self::…`, or a child
//! module by its bare name) or in a path written out in code (`crate::a::b::f()`,
//! `super::X`). A name a folder's `mod.rs` (or `lib.rs`) re-exports with `pub use` is
//! followed to the file that defines it: a facade's re-export is a pass-through, not a
//! dependency of the facade. A parent's calls into its own children by their bare names
//! (`write::handle(…)` in `sim/mod.rs`) are ownership, not imports, and are not edges.
//! Comments and string literals are skipped; `super::` inside an inline module
//! (`mod tests { use super::*; }`) refers to its own file first.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Cycles inside one folder that are tolerated, each as the sorted list of its files
/// (paths under `src/`), with why.
const ALLOWED: &[(&[&str], &str)] = &[
    (
        &["proto/schema/generated.rs", "proto/schema/mod.rs"],
        "generated.rs is written by scripts/gen-proto-schema: a table of the types mod.rs \
         defines, which mod.rs looks kinds up in; splitting the types out would only move \
         the generator's target",
    ),
    (
        &["stack/guard.rs", "stack/mod.rs"],
        "mod.rs composes the stack (it names the guard layer) and defines the boxed future \
         every hand-written layer returns (guard.rs among them): a type alias, no code",
    ),
];

/// Known cycles to be removed, listed as their files so that the test passes while one
/// is being taken apart and fails the day a new file joins it. Empty: the last one (the
/// fan-out's stream, bookmark tick, hub and queues) went with issue 28, when the bookmark
/// schedule became generic over its watchers (`watch/schedule.rs`), the queue's item type
/// moved to the queue and the deadline rule to `duration.rs`.
const KNOWN_TO_BE_REMOVED: &[&[&str]] = &[];

#[test]
fn no_import_cycle_spans_two_folders_and_only_allowed_ones_inside_one() {
    let graph = Graph::read(Path::new(env!("CARGO_MANIFEST_DIR")).join("src").as_path());
    let cycles = graph.cycles();
    let mut unexpected = Vec::new();
    for cycle in &cycles {
        let names: Vec<&str> = cycle.iter().map(String::as_str).collect();
        let known = KNOWN_TO_BE_REMOVED.contains(&names.as_slice());
        let allowed = ALLOWED.iter().any(|(files, _)| *files == names.as_slice());
        let folders: BTreeSet<&str> = cycle.iter().map(|f| folder(f)).collect();
        if known || (allowed && folders.len() == 1) {
            continue;
        }
        unexpected.push(cycle);
    }
    // An entry that no longer matches a cycle is stale: the cycle was removed (or grew,
    // which the loop above reports), and the list should say so.
    let stale: Vec<_> = ALLOWED
        .iter()
        .map(|(files, _)| *files)
        .chain(KNOWN_TO_BE_REMOVED.iter().copied())
        .filter(|files| {
            !cycles
                .iter()
                .any(|c| c.iter().map(String::as_str).eq(files.iter().copied()))
        })
        .collect();
    // Shown with `--no-capture`: the cycles as they are, allowed or not.
    for cycle in &cycles {
        eprintln!("cycle: {}", cycle.join(" "));
    }
    let report = cycles
        .iter()
        .map(|c| format!("  {}", c.join(" ")))
        .collect::<Vec<_>>()
        .join("\n");
    assert!(
        unexpected.is_empty() && stale.is_empty(),
        "import cycles (strongly connected files under src/):\n{report}\n\nnot allowed:\n{}\n\nstale entries of ALLOWED or KNOWN_TO_BE_REMOVED:\n{}\n\n{}",
        unexpected
            .iter()
            .map(|c| format!("  {}", c.join(" ")))
            .collect::<Vec<_>>()
            .join("\n"),
        stale
            .iter()
            .map(|c| format!("  {}", c.join(" ")))
            .collect::<Vec<_>>()
            .join("\n"),
        graph.explain(&unexpected),
    );
}

/// The scanner on the shapes that would fool a text search: grouped and renamed `use`s,
/// an inline test module's `super`, paths in comments and strings, a bare child `use`.
#[test]
fn the_scanner_reads_imports_as_rustc_resolves_them() {
    let text = r#"
        //! Mentions crate::in_doc::X.
        use super::{sibling::Thing, other as renamed};
        use child::Item;
        mod child;
        pub(crate) use crate::facade::Name;
        fn f() { let _ = "crate::in_string"; let c = '{'; crate::deep::path::call(); }
        #[cfg(test)]
        mod tests { use super::*; use super::super::up::Up; }
    "#;
    let s = scan("a/b.rs".into(), module_of("a/b.rs"), text);
    let uses: Vec<(bool, String, usize)> = s
        .uses
        .iter()
        .map(|(p, path, i)| (*p, path.join("::"), *i))
        .collect();
    assert_eq!(
        uses,
        [
            (false, "super::sibling::Thing".into(), 0),
            (false, "super::other::as renamed".into(), 0),
            (false, "child::Item".into(), 0),
            (true, "crate::facade::Name".into(), 0),
            (false, "super".into(), 1),
            (false, "super::super::up::Up".into(), 1),
        ]
    );
    let paths: Vec<String> = s.paths.iter().map(|(p, _)| p.join("::")).collect();
    assert_eq!(paths, ["crate::deep::path::call"]);
    assert_eq!(s.children, BTreeSet::from(["child".to_string()]));
    let abs = |i: usize| absolute(&s, &s.uses[i].1, s.uses[i].2, true);
    assert_eq!(
        abs(0),
        Some(vec!["a".into(), "sibling".into(), "Thing".into()])
    );
    assert_eq!(
        abs(2),
        Some(vec!["a".into(), "b".into(), "child".into(), "Item".into()])
    );
    // `use super::*` in the file's own test module is the file itself.
    assert_eq!(abs(4), None);
    assert_eq!(abs(5), Some(vec!["a".into(), "up".into(), "Up".into()]));
}

/// The folder of a file under `src/` (`cache` for `cache/store.rs`, `` for `lib.rs`).
fn folder(file: &str) -> &str {
    file.rsplit_once('/').map_or("", |(dir, _)| dir)
}

/// Files and the files each one imports.
struct Graph {
    /// Module path (`["cache", "store"]`) → file (`cache/store.rs`).
    modules: BTreeMap<Vec<String>, String>,
    /// File → the files it imports, each with one path that made the edge.
    edges: BTreeMap<String, BTreeMap<String, String>>,
}

/// One source file, scanned.
struct Source {
    file: String,
    module: Vec<String>,
    /// Child modules declared with `mod x;` (or `mod x { … }`, which has no file).
    children: BTreeSet<String>,
    /// `use` declarations: (is `pub`, the path as absolute segments or unresolved, the
    /// number of inline modules around it).
    uses: Vec<(bool, Vec<String>, usize)>,
    /// Paths written in code that start with `crate`, `super` or `self`.
    paths: Vec<(Vec<String>, usize)>,
}

impl Graph {
    fn read(src: &Path) -> Graph {
        let mut files = Vec::new();
        collect(src, &mut files);
        let mut sources = Vec::new();
        for path in files {
            let rel = path
                .strip_prefix(src)
                .unwrap()
                .to_string_lossy()
                .replace('\\', "/");
            if rel == "main.rs" {
                // The binary is another crate: it sees the library only from outside.
                continue;
            }
            let module = module_of(&rel);
            let text = std::fs::read_to_string(&path).unwrap();
            sources.push(scan(rel, module, &text));
        }
        let modules: BTreeMap<Vec<String>, String> = sources
            .iter()
            .map(|s| (s.module.clone(), s.file.clone()))
            .collect();
        // Re-exports of facades (`mod.rs`, `lib.rs`): module path + name → target path.
        let mut reexports: BTreeMap<Vec<String>, Vec<String>> = BTreeMap::new();
        for s in &sources {
            if !is_facade(&s.file) {
                continue;
            }
            for (public, path, inline) in &s.uses {
                if !*public || *inline > 0 {
                    continue;
                }
                if let Some(abs) = absolute(s, path, 0, true) {
                    let (name, target) = match abs.last().map(String::as_str) {
                        Some(alias) if alias.starts_with("as ") => {
                            (alias[3..].to_string(), abs[..abs.len() - 1].to_vec())
                        }
                        Some(last) => (last.to_string(), abs.clone()),
                        None => continue,
                    };
                    let mut key = s.module.clone();
                    key.push(name);
                    reexports.insert(key, target);
                }
            }
        }
        let mut edges: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
        for s in &sources {
            let out = edges.entry(s.file.clone()).or_default();
            let mut add = |path: &Vec<String>, inline: usize, is_use: bool| {
                let Some(abs) = absolute(s, path, inline, is_use) else {
                    return;
                };
                let abs: Vec<String> = abs.into_iter().filter(|p| !p.starts_with("as ")).collect();
                if let Some(target) = resolve(&modules, &reexports, abs, 0) {
                    if target != s.file {
                        out.entry(target).or_insert_with(|| path.join("::"));
                    }
                }
            };
            for (public, path, inline) in &s.uses {
                if *public && is_facade(&s.file) && *inline == 0 {
                    continue;
                }
                add(path, *inline, true);
            }
            for (path, inline) in &s.paths {
                add(path, *inline, false);
            }
        }
        Graph { modules, edges }
    }

    /// The strongly connected components of more than one file (Tarjan's algorithm),
    /// each sorted, in file order.
    fn cycles(&self) -> Vec<Vec<String>> {
        let nodes: Vec<&String> = self.modules.values().collect();
        let index_of: BTreeMap<&String, usize> =
            nodes.iter().enumerate().map(|(i, n)| (*n, i)).collect();
        let succ: Vec<Vec<usize>> = nodes
            .iter()
            .map(|n| {
                self.edges
                    .get(*n)
                    .map(|e| e.keys().filter_map(|t| index_of.get(t).copied()).collect())
                    .unwrap_or_default()
            })
            .collect();
        let mut tarjan = Tarjan {
            succ: &succ,
            index: vec![None; nodes.len()],
            low: vec![0; nodes.len()],
            on_stack: vec![false; nodes.len()],
            stack: Vec::new(),
            next: 0,
            out: Vec::new(),
        };
        for v in 0..nodes.len() {
            if tarjan.index[v].is_none() {
                tarjan.visit(v);
            }
        }
        let mut cycles: Vec<Vec<String>> = tarjan
            .out
            .into_iter()
            .filter(|c| c.len() > 1)
            .map(|c| {
                let mut files: Vec<String> = c.into_iter().map(|i| nodes[i].clone()).collect();
                files.sort();
                files
            })
            .collect();
        cycles.sort();
        cycles
    }

    /// The edges inside each cycle, with the path that made each, to find what to move.
    fn explain(&self, cycles: &[&Vec<String>]) -> String {
        let mut out = String::new();
        for cycle in cycles {
            out.push_str(&format!("edges of the cycle {}:\n", cycle.join(" ")));
            for from in *cycle {
                for (to, path) in self.edges.get(from).into_iter().flatten() {
                    if cycle.contains(to) {
                        out.push_str(&format!("  {from} -> {to}   ({path})\n"));
                    }
                }
            }
        }
        out
    }
}

struct Tarjan<'a> {
    succ: &'a [Vec<usize>],
    index: Vec<Option<usize>>,
    low: Vec<usize>,
    on_stack: Vec<bool>,
    stack: Vec<usize>,
    next: usize,
    out: Vec<Vec<usize>>,
}

impl Tarjan<'_> {
    fn visit(&mut self, v: usize) {
        self.index[v] = Some(self.next);
        self.low[v] = self.next;
        self.next += 1;
        self.stack.push(v);
        self.on_stack[v] = true;
        for &w in &self.succ[v] {
            match self.index[w] {
                None => {
                    self.visit(w);
                    self.low[v] = self.low[v].min(self.low[w]);
                }
                Some(iw) if self.on_stack[w] => self.low[v] = self.low[v].min(iw),
                Some(_) => {}
            }
        }
        if Some(self.low[v]) == self.index[v] {
            let mut component = Vec::new();
            loop {
                let w = self.stack.pop().unwrap();
                self.on_stack[w] = false;
                component.push(w);
                if w == v {
                    break;
                }
            }
            self.out.push(component);
        }
    }
}

fn collect(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            collect(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

fn is_facade(file: &str) -> bool {
    file == "lib.rs" || file.ends_with("/mod.rs")
}

/// `cache/store.rs` → `["cache", "store"]`; `cache/mod.rs` → `["cache"]`; `lib.rs` → `[]`.
fn module_of(file: &str) -> Vec<String> {
    let stem = file.trim_end_matches(".rs");
    let mut parts: Vec<String> = stem.split('/').map(str::to_string).collect();
    if matches!(parts.last().map(String::as_str), Some("mod" | "lib")) {
        parts.pop();
    }
    parts
}

/// A path as absolute module segments (without `crate`), or `None` for one that leaves
/// the crate (std, dependencies) or stays inside the file (an inline module's `super`).
fn absolute(s: &Source, path: &[String], inline: usize, is_use: bool) -> Option<Vec<String>> {
    let first = path.first()?.as_str();
    match first {
        "crate" => Some(path[1..].to_vec()),
        "super" => {
            let supers = path.iter().take_while(|p| *p == "super").count();
            // The first `super`s of a path inside inline modules climb those modules.
            let up = supers.checked_sub(inline).filter(|up| *up > 0)?;
            let base = s.module.len().checked_sub(up)?;
            let mut abs = s.module[..base].to_vec();
            abs.extend_from_slice(&path[supers..]);
            Some(abs)
        }
        "self" if inline == 0 => {
            let mut abs = s.module.clone();
            abs.extend_from_slice(&path[1..]);
            Some(abs)
        }
        // A `use` of a child module by its bare name (`use store::Store;` in a mod.rs).
        name if is_use && inline == 0 && s.children.contains(name) => {
            let mut abs = s.module.clone();
            abs.extend_from_slice(path);
            Some(abs)
        }
        _ => None,
    }
}

/// The file a path names: the longest prefix that is a file's module, following facades'
/// re-exports of the rest.
fn resolve(
    modules: &BTreeMap<Vec<String>, String>,
    reexports: &BTreeMap<Vec<String>, Vec<String>>,
    path: Vec<String>,
    depth: usize,
) -> Option<String> {
    for len in (0..=path.len()).rev() {
        let Some(file) = modules.get(&path[..len]) else {
            continue;
        };
        if len < path.len() && depth < 8 {
            let mut key = path[..len].to_vec();
            key.push(path[len].clone());
            if let Some(target) = reexports.get(&key) {
                let mut next = target.clone();
                next.extend_from_slice(&path[len + 1..]);
                if next != path {
                    return resolve(modules, reexports, next, depth + 1);
                }
            }
        }
        return Some(file.clone());
    }
    None
}

/// A token of the scanner: identifiers, `::`, and single punctuation characters.
#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Ident(String),
    Colons,
    Punct(char),
}

fn scan(file: String, module: Vec<String>, text: &str) -> Source {
    let toks = tokens(text);
    let mut s = Source {
        file,
        module,
        children: BTreeSet::new(),
        uses: Vec::new(),
        paths: Vec::new(),
    };
    // Inline modules: the brace depth at which each one's body opened.
    let mut inline: Vec<usize> = Vec::new();
    let mut depth = 0usize;
    let mut pending_inline = false;
    let mut i = 0;
    while i < toks.len() {
        match &toks[i] {
            Tok::Punct('{') => {
                depth += 1;
                if pending_inline {
                    inline.push(depth);
                    pending_inline = false;
                }
                i += 1;
            }
            Tok::Punct('}') => {
                if inline.last() == Some(&depth) {
                    inline.pop();
                }
                depth = depth.saturating_sub(1);
                i += 1;
            }
            Tok::Ident(w) if w == "mod" => {
                if let Some(Tok::Ident(name)) = toks.get(i + 1) {
                    match toks.get(i + 2) {
                        Some(Tok::Punct(';')) if inline.is_empty() => {
                            s.children.insert(name.clone());
                        }
                        Some(Tok::Punct('{')) => pending_inline = true,
                        _ => {}
                    }
                }
                i += 2;
            }
            Tok::Ident(w) if w == "use" => {
                let public = i > 0 && is_pub_before(&toks, i);
                let end = toks[i..]
                    .iter()
                    .position(|t| *t == Tok::Punct(';'))
                    .map_or(toks.len(), |p| i + p);
                for path in use_paths(&toks[i + 1..end]) {
                    s.uses.push((public, path, inline.len()));
                }
                i = end + 1;
            }
            Tok::Ident(w) if matches!(w.as_str(), "crate" | "super" | "self") => {
                // A path in code: only where it starts (not after `::` or `$`).
                let starts = i == 0 || !matches!(toks[i - 1], Tok::Colons | Tok::Punct('$'));
                let mut path = vec![w.clone()];
                let mut j = i + 1;
                while let (Some(Tok::Colons), Some(Tok::Ident(next))) =
                    (toks.get(j), toks.get(j + 1))
                {
                    path.push(next.clone());
                    j += 2;
                }
                if starts && path.len() > 1 {
                    s.paths.push((path, inline.len()));
                }
                i = j;
            }
            _ => i += 1,
        }
    }
    s
}

/// Whether the `use` at `i` is `pub use` or `pub(…) use`.
fn is_pub_before(toks: &[Tok], i: usize) -> bool {
    match &toks[i - 1] {
        Tok::Ident(w) => w == "pub",
        Tok::Punct(')') => toks[..i - 1]
            .iter()
            .rposition(|t| *t == Tok::Punct('('))
            .is_some_and(|open| open > 0 && toks[open - 1] == Tok::Ident("pub".into())),
        _ => false,
    }
}

/// The paths of a use tree (`a::{b, c::d as e}` → `a::b`, `a::c::d::as e`); `self` in a
/// group names the group's prefix, `*` leaves the prefix as it is.
fn use_paths(toks: &[Tok]) -> Vec<Vec<String>> {
    fn tree(toks: &[Tok], i: &mut usize, prefix: Vec<String>, out: &mut Vec<Vec<String>>) {
        let mut path = prefix;
        loop {
            match toks.get(*i) {
                Some(Tok::Ident(w)) if w == "as" => {
                    if let Some(Tok::Ident(alias)) = toks.get(*i + 1) {
                        path.push(format!("as {alias}"));
                    }
                    *i += 2;
                }
                Some(Tok::Ident(w)) if w == "self" && !path.is_empty() => *i += 1,
                Some(Tok::Ident(w)) => {
                    path.push(w.clone());
                    *i += 1;
                }
                Some(Tok::Colons) => *i += 1,
                Some(Tok::Punct('*')) => *i += 1,
                Some(Tok::Punct('{')) => {
                    *i += 1;
                    loop {
                        match toks.get(*i) {
                            Some(Tok::Punct('}')) => {
                                *i += 1;
                                break;
                            }
                            Some(Tok::Punct(',')) => *i += 1,
                            None => return,
                            _ => tree(toks, i, path.clone(), out),
                        }
                    }
                    return;
                }
                _ => break,
            }
        }
        if !path.is_empty() {
            out.push(path);
        }
    }
    let mut out = Vec::new();
    let mut i = 0;
    while i < toks.len() {
        let before = i;
        tree(toks, &mut i, Vec::new(), &mut out);
        if i == before {
            i += 1;
        }
    }
    out
}

/// Identifiers, `::` and punctuation, with comments, strings and chars left out.
fn tokens(text: &str) -> Vec<Tok> {
    let b = text.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if c == b'/' && b.get(i + 1) == Some(&b'/') {
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
        } else if c == b'/' && b.get(i + 1) == Some(&b'*') {
            let mut nest = 0;
            while i < b.len() {
                if b[i] == b'/' && b.get(i + 1) == Some(&b'*') {
                    nest += 1;
                    i += 2;
                } else if b[i] == b'*' && b.get(i + 1) == Some(&b'/') {
                    nest -= 1;
                    i += 2;
                    if nest == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
        } else if c == b'"' {
            i += 1;
            while i < b.len() && b[i] != b'"' {
                i += if b[i] == b'\\' { 2 } else { 1 };
            }
            i += 1;
        } else if (c == b'r' || c == b'b')
            && raw_string_start(b, i).is_some()
            && (i == 0 || !is_ident(b[i - 1]))
        {
            let (hashes, body) = raw_string_start(b, i).unwrap();
            let close: Vec<u8> = std::iter::once(b'"')
                .chain(std::iter::repeat_n(b'#', hashes))
                .collect();
            i = body;
            while i < b.len() && !b[i..].starts_with(&close) {
                i += 1;
            }
            i += close.len();
        } else if c == b'\'' {
            // A char literal ('x', '\n', '\u{1F600}') or a lifetime ('a).
            if b.get(i + 1) == Some(&b'\\') {
                i += 2;
                while i < b.len() && b[i] != b'\'' {
                    i += 1;
                }
                i += 1;
            } else {
                let ch_len = text[i + 1..].chars().next().map_or(1, char::len_utf8);
                if b.get(i + 1 + ch_len) == Some(&b'\'') {
                    i += 2 + ch_len;
                } else {
                    i += 1;
                }
            }
        } else if c == b':' && b.get(i + 1) == Some(&b':') {
            out.push(Tok::Colons);
            i += 2;
        } else if is_ident(c) {
            let start = i;
            while i < b.len() && is_ident(b[i]) {
                i += 1;
            }
            let word = &text[start..i];
            // `b'x'` and `b"…"` are byte literals, not identifiers.
            if word == "b" && matches!(b.get(i), Some(b'\'' | b'"')) {
                continue;
            }
            out.push(Tok::Ident(word.to_string()));
        } else if c.is_ascii_whitespace() {
            i += 1;
        } else {
            out.push(Tok::Punct(text[i..].chars().next().unwrap()));
            i += text[i..].chars().next().unwrap().len_utf8();
        }
    }
    out
}

fn is_ident(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_' || c >= 0x80
}

/// `r"`, `r#"`, `br##"` …: the number of `#` and where the body starts.
fn raw_string_start(b: &[u8], i: usize) -> Option<(usize, usize)> {
    let mut j = i;
    if b[j] == b'b' {
        j += 1;
    }
    if b.get(j) != Some(&b'r') {
        return None;
    }
    j += 1;
    let hashes = b[j..].iter().take_while(|c| **c == b'#').count();
    j += hashes;
    (b.get(j) == Some(&b'"')).then_some((hashes, j + 1))
}

/// The same graph with each top-level module one node (`cache/` and its files are
/// `cache`, `apipath.rs` is `apipath`), and each folder's subfolders one node inside it
/// (`sim/write`): a cycle between two of these is an import cycle between folders, even
/// when no single file cycle spans them (`a/x.rs → b/y.rs → a/z.rs`).
#[test]
fn no_import_cycle_between_folders() {
    let graph = Graph::read(Path::new(env!("CARGO_MANIFEST_DIR")).join("src").as_path());
    let mut found = Vec::new();
    for level in 1..=2 {
        let unit = |file: &str| -> Option<String> {
            let parts: Vec<&str> = file.split('/').collect();
            if file == "lib.rs" {
                return None;
            }
            Some(if parts.len() > level {
                parts[..level].join("/")
            } else {
                file.to_string()
            })
        };
        let mut edges: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
        let mut modules = BTreeMap::new();
        for (from, targets) in &graph.edges {
            let Some(u) = unit(from) else { continue };
            modules.insert(vec![u.clone()], u.clone());
            for (to, path) in targets {
                let Some(v) = unit(to) else { continue };
                modules.insert(vec![v.clone()], v.clone());
                if u != v {
                    edges
                        .entry(u.clone())
                        .or_default()
                        .entry(v)
                        .or_insert_with(|| format!("{from} -> {to} ({path})"));
                }
            }
        }
        let folded = Graph { modules, edges };
        for cycle in folded.cycles() {
            // At the second level only cycles among one folder's parts that include a
            // subfolder count; the rest are file cycles, the other test's.
            let folder_in_it = cycle.iter().any(|u| !u.ends_with(".rs"));
            if level == 2 && !folder_in_it {
                continue;
            }
            found.push(format!(
                "{}\n{}",
                cycle.join(" "),
                folded.explain(&[&cycle])
            ));
        }
    }
    assert!(
        found.is_empty(),
        "import cycles between folders:\n{}",
        found.join("\n")
    );
}
