//! Architecture invariants that the compiler does not check, read off the source (in the manner of
//! rust-analyzer's tidy tests): the top-level modules import each other without a circle, the
//! pure core imports nothing from drivers, scenarios, IO or the CLI, and no source file grows past
//! 900 lines.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// Modules that must stay pure: no drivers, no scenario layer, no IO, no CLI.
const PURE: [&str; 8] = [
    "model", "agents", "protocol", "runtime", "observe", "persist", "wire", "outside",
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

/// The most lines a `.rs` file under `src/` or `tests/` may have: past it, a file holds more than
/// one concept and is split along them.
const MAX_LINES: usize = 900;

/// The files that were over [`MAX_LINES`] when the rule came in, each to be split. A file leaves
/// this list when it is split, and none joins it: the test fails for a listed file that is no
/// longer over the limit, so the list only shrinks.
const OVER_900_TO_SPLIT: &[&str] = &[
    "src/mock_llm/book.rs",
    "src/mock_llm/server.rs",
    "src/observe/mod.rs",
    "src/observe/semantic.rs",
    "src/observe/tree.rs",
    "src/report/html.rs",
    "src/scenario/format.rs",
    "src/scenario/load.rs",
    "src/serve/mod.rs",
    "src/sim/mod.rs",
    "src/wire/reply.rs",
    "tests/it/cli.rs",
    "tests/it/serve.rs",
];

/// Every `.rs` file under `src/` and `tests/`, as a `/`-separated path from the crate root, with
/// its line count.
fn line_counts() -> BTreeMap<String, usize> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    rust_files(&root.join("src"), &mut files);
    rust_files(&root.join("tests"), &mut files);
    files
        .into_iter()
        .map(|file| {
            let rel = file.strip_prefix(root).unwrap();
            let name = rel
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect::<Vec<_>>()
                .join("/");
            let lines = fs::read_to_string(&file).unwrap().lines().count();
            (name, lines)
        })
        .collect()
}

/// What breaks the rule: a file over the limit that is not listed, and a listed file that is not
/// over it (split already: take it off the list) or no longer exists.
fn over_the_limit(counts: &BTreeMap<String, usize>, listed: &[&str]) -> Vec<String> {
    let mut wrong = Vec::new();
    for (file, &lines) in counts {
        if lines > MAX_LINES && !listed.contains(&file.as_str()) {
            wrong.push(format!(
                "{file} has {lines} lines, over {MAX_LINES}: split it along its concepts"
            ));
        }
    }
    for &file in listed {
        match counts.get(file) {
            Some(&lines) if lines > MAX_LINES => {}
            Some(&lines) => wrong.push(format!(
                "{file} has {lines} lines, no longer over {MAX_LINES}: take it off \
                 OVER_900_TO_SPLIT"
            )),
            None => wrong.push(format!(
                "{file} is listed in OVER_900_TO_SPLIT but does not exist: take it off the list"
            )),
        }
    }
    wrong
}

#[test]
fn no_source_file_is_over_900_lines_except_the_listed_ones_still_to_split() {
    let wrong = over_the_limit(&line_counts(), OVER_900_TO_SPLIT);
    assert!(wrong.is_empty(), "the 900-line rule: {wrong:#?}");
}

#[test]
fn the_line_rule_names_a_new_long_file_and_a_listed_file_that_shrank() {
    let counts: BTreeMap<String, usize> = [
        ("src/a.rs".to_owned(), 901),
        ("src/b.rs".to_owned(), 900),
        ("src/c.rs".to_owned(), 1200),
    ]
    .into();
    assert_eq!(
        over_the_limit(&counts, &["src/b.rs", "src/c.rs", "src/gone.rs"]),
        [
            "src/a.rs has 901 lines, over 900: split it along its concepts",
            "src/b.rs has 900 lines, no longer over 900: take it off OVER_900_TO_SPLIT",
            "src/gone.rs is listed in OVER_900_TO_SPLIT but does not exist: take it off the list",
        ]
    );
    assert!(over_the_limit(&counts, &["src/a.rs", "src/c.rs"]).is_empty());
}
