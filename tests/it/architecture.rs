//! Architecture invariants that the compiler does not check, read off the source (in the manner of
//! rust-analyzer's tidy tests): the top-level modules import each other without a circle, and the
//! pure core imports nothing from drivers, scenarios, IO or the CLI.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// Modules that must stay pure: no drivers, no scenario layer, no IO, no CLI.
const PURE: [&str; 7] = [
    "model", "agents", "protocol", "runtime", "observe", "persist", "wire",
];

/// What the pure modules may import from the crate: each other only.
fn is_pure(module: &str) -> bool {
    PURE.contains(&module)
}

/// Crates and std paths that do IO or read real time.
const IO: [&str; 9] = [
    "tokio::",
    "axum::",
    "reqwest::",
    "rusqlite::",
    "hyper::",
    "std::fs",
    "std::net",
    "SystemTime",
    "Instant::now",
];

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The top-level module a source file belongs to (`src/runtime/turn.rs` → `runtime`).
fn module_of(src: &Path, file: &Path) -> Option<String> {
    let rel = file.strip_prefix(src).ok()?;
    let first = rel.components().next()?.as_os_str().to_str()?;
    let name = first.strip_suffix(".rs").unwrap_or(first);
    (name != "lib" && name != "main").then(|| name.to_owned())
}

/// The code of a file without comments (doc links name other modules freely) and without its
/// `#[cfg(test)]` module (tests may build fixtures from anywhere).
fn code(text: &str) -> String {
    let body = match text.find("#[cfg(test)]\nmod tests") {
        Some(i) => &text[..i],
        None => text,
    };
    body.lines()
        .map(|l| match l.find("//") {
            Some(i) => &l[..i],
            None => l,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Every `crate::<module>` a piece of code names, including inside `use crate::{a, b}` groups.
fn crate_refs(code: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut rest = code;
    while let Some(i) = rest.find("crate::") {
        rest = &rest[i + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let end = group.find('}').unwrap_or(group.len());
            for item in group[..end].split(',') {
                let name: String = item
                    .trim()
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect();
                if !name.is_empty() {
                    out.insert(name);
                }
            }
        } else {
            let name: String = rest
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            out.insert(name);
        }
    }
    out
}

fn graph() -> (
    BTreeMap<String, BTreeSet<String>>,
    BTreeMap<String, Vec<String>>,
) {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    files.sort();
    let mut deps: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut io: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for file in files {
        let Some(module) = module_of(&src, &file) else {
            continue;
        };
        let code = code(&fs::read_to_string(&file).unwrap());
        let entry = deps.entry(module.clone()).or_default();
        for r in crate_refs(&code) {
            if r != module {
                entry.insert(r);
            }
        }
        for needle in IO {
            if code.contains(needle) {
                io.entry(module.clone())
                    .or_default()
                    .push(format!("{} uses {needle}", file.display()));
            }
        }
    }
    (deps, io)
}

#[test]
fn the_pure_modules_import_only_each_other_and_do_no_io() {
    let (deps, io) = graph();
    let mut wrong = Vec::new();
    for (module, uses) in &deps {
        if !is_pure(module) {
            continue;
        }
        for used in uses {
            if !is_pure(used) {
                wrong.push(format!("{module} imports {used}"));
            }
        }
        if let Some(found) = io.get(module) {
            wrong.extend(found.iter().cloned());
        }
    }
    assert!(wrong.is_empty(), "the pure core reaches out: {wrong:#?}");
}

#[test]
fn the_top_level_modules_import_each_other_without_a_circle() {
    let (deps, _) = graph();
    // Depth-first search for a back edge; report the circle it closes.
    fn visit(
        m: &str,
        deps: &BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(i) = path.iter().position(|p| p == m) {
            let mut circle = path[i..].to_vec();
            circle.push(m.to_owned());
            return Some(circle);
        }
        if done.contains(m) {
            return None;
        }
        path.push(m.to_owned());
        for next in deps.get(m).into_iter().flatten() {
            if let Some(c) = visit(next, deps, path, done) {
                return Some(c);
            }
        }
        path.pop();
        done.insert(m.to_owned());
        None
    }
    let mut done = BTreeSet::new();
    for m in deps.keys() {
        if let Some(circle) = visit(m, &deps, &mut Vec::new(), &mut done) {
            panic!("import circle: {}", circle.join(" → "));
        }
    }
}

#[test]
fn the_checker_sees_grouped_imports() {
    let refs = crate_refs(
        "use crate::{model::ids, protocol::Event};\nlet x = crate::runtime::Runtime::new;",
    );
    let want: BTreeSet<String> = ["model", "protocol", "runtime"].map(String::from).into();
    assert_eq!(refs, want);
}
