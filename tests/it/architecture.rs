//! Architecture invariants that the compiler does not check, read off the source (in the manner of
//! rust-analyzer's tidy tests): the top-level modules import each other without a circle, the
//! files of each module folder import each other without a circle, the pure core imports nothing
//! from drivers, scenarios, IO or the CLI, and no source file is over 900 lines.

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
/// inline `#[cfg(test)]` module (tests may build fixtures from anywhere). A `mod tests;` that
/// names a file of its own cuts nothing: the code after it is the module's.
fn code(text: &str) -> String {
    let body = match text.find("#[cfg(test)]\nmod tests {") {
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
    if let Some(circle) = find_circle(&deps) {
        panic!("import circle: {}", circle.join(" → "));
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

/// The module path of a source file: `src/observe/stack.rs` → `[crate, observe, stack]`,
/// `src/observe/mod.rs` → `[crate, observe]`. (`main.rs` and its `cli/` are the binary's crate;
/// their `crate::` paths name the binary's modules, which no library module shares a name with.)
fn module_path(src: &Path, file: &Path) -> Vec<String> {
    let rel = file.strip_prefix(src).unwrap();
    let mut path = vec!["crate".to_owned()];
    for part in rel.components() {
        let part = part.as_os_str().to_str().unwrap();
        let part = part.strip_suffix(".rs").unwrap_or(part);
        if !matches!(part, "mod" | "lib" | "main") {
            path.push(part.to_owned());
        }
    }
    path
}

/// Whether `file` is a module's own folder file (`mod.rs`, `lib.rs`, `main.rs`), whose `super::`
/// is its folder's parent rather than its folder.
fn is_folder_file(file: &Path) -> bool {
    file.file_stem()
        .is_some_and(|s| matches!(s.to_str(), Some("mod" | "lib" | "main")))
}

fn is_ident(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// The paths one `use` tree or path expression names, from just after its first `::`: `a::b`,
/// `{a, b::{c, d}}`, `a as x`. Each comes with the name it is bound to (its alias or last
/// segment). `rest` is consumed up to where the path ends.
fn path_tree(rest: &str) -> Vec<(Vec<String>, String)> {
    fn parse(s: &mut &str, prefix: &[String], out: &mut Vec<(Vec<String>, String)>) {
        let mut path = prefix.to_vec();
        loop {
            *s = s.trim_start();
            if let Some(group) = s.strip_prefix('{') {
                *s = group;
                loop {
                    parse(s, &path, out);
                    *s = s.trim_start();
                    if let Some(more) = s.strip_prefix(',') {
                        *s = more;
                        if let Some(end) = s.trim_start().strip_prefix('}') {
                            *s = end;
                            return;
                        }
                    } else {
                        *s = s.strip_prefix('}').unwrap_or(s);
                        return;
                    }
                }
            }
            let end = s
                .find(|c: char| !is_ident(c) && c != '*')
                .unwrap_or(s.len());
            if end == 0 {
                break;
            }
            path.push(s[..end].to_owned());
            *s = &s[end..];
            match s.strip_prefix("::") {
                Some(next) => *s = next,
                None => break,
            }
        }
        if path.len() == prefix.len() {
            return;
        }
        let mut name = path.last().cloned().unwrap_or_default();
        if let Some(alias) = s.trim_start().strip_prefix("as ") {
            let alias = alias.trim_start();
            let end = alias.find(|c: char| !is_ident(c)).unwrap_or(alias.len());
            name = alias[..end].to_owned();
            *s = &alias[end..];
        }
        out.push((path, name));
    }
    let mut out = Vec::new();
    let mut s = rest;
    parse(&mut s, &[], &mut out);
    out
}

/// Every absolute module path a piece of code names through `crate::`, `self::` or `super::`
/// (in `use` declarations and in expressions alike), with the name each binds; `here` is the
/// module the code is in.
fn named_paths(code: &str, here: &[String]) -> Vec<(Vec<String>, String)> {
    let mut out = Vec::new();
    for (i, _) in code.match_indices("::") {
        let before = &code[..i];
        let start = before
            .rfind(|c: char| !is_ident(c))
            .map_or(0, |j| j + before[j..].chars().next().unwrap().len_utf8());
        let head = &before[start..];
        if before[..start].ends_with("::") || before[..start].ends_with('$') {
            continue; // the middle of a longer path, or a macro's `$crate`
        }
        let base: Vec<String> = match head {
            "crate" => vec!["crate".to_owned()],
            "self" => here.to_vec(),
            "super" => {
                // `super::super::x`: each `super` climbs one more.
                let mut base = here[..here.len().saturating_sub(1)].to_vec();
                let mut rest = &code[i + 2..];
                while let Some(more) = rest.strip_prefix("super::") {
                    base.pop();
                    rest = more;
                }
                base
            }
            _ => continue,
        };
        let mut rest = &code[i + 2..];
        while let Some(more) = rest.strip_prefix("super::") {
            rest = more;
        }
        for (path, name) in path_tree(rest) {
            let mut full = base.clone();
            full.extend(path);
            out.push((full, name));
        }
    }
    out
}

/// The `use` declarations of a folder file, as (the path it names, relative to the folder, the
/// name it binds): `pub use config::{QueryUser, RuntimeConfig};` gives `[config, QueryUser]`.
fn folder_uses(code: &str) -> Vec<(Vec<String>, String)> {
    let mut out = Vec::new();
    for line in code.split(';') {
        let line = line.trim_start();
        let line = line.strip_prefix("pub").map_or(line, |rest| {
            let rest = rest.trim_start();
            match rest.strip_prefix('(') {
                Some(r) => r.split_once(')').map_or(rest, |(_, after)| after),
                None => rest,
            }
        });
        if let Some(tree) = line.trim_start().strip_prefix("use ") {
            let tree = tree.trim_start();
            let tree = tree.strip_prefix("self::").unwrap_or(tree);
            out.extend(path_tree(tree));
        }
    }
    out
}

/// For every module folder under `src/`, the imports among its files: for each child module (a
/// file, or a folder with all its files), the children it names, by path (`super::turn::run`,
/// `crate::runtime::turn`) or through a name its folder file re-exports from another child
/// (`super::RuntimeConfig`, re-exported from `config`).
fn folder_graphs() -> BTreeMap<String, BTreeMap<String, BTreeSet<String>>> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    files.sort();
    // Each file's module path and code.
    let files: Vec<(Vec<String>, bool, String)> = files
        .iter()
        .map(|f| {
            let text = fs::read_to_string(f).unwrap();
            (module_path(&src, f), is_folder_file(f), code(&text))
        })
        .collect();
    let mut graphs: BTreeMap<String, BTreeMap<String, BTreeSet<String>>> = BTreeMap::new();
    for (folder, _, folder_code) in files.iter().filter(|(_, own, _)| *own) {
        let children: BTreeSet<&String> = files
            .iter()
            .filter(|(m, _, _)| m.len() == folder.len() + 1 && m.starts_with(folder))
            .map(|(m, _, _)| &m[folder.len()])
            .collect();
        if children.is_empty() {
            continue;
        }
        // Names the folder file imports from a child, which its children may use as its own.
        let reexports: BTreeMap<String, String> = folder_uses(folder_code)
            .into_iter()
            .filter(|(path, name)| path.len() > 1 && name != "*" && children.contains(&path[0]))
            .map(|(path, name)| (name, path[0].clone()))
            .collect();
        let graph = graphs.entry(folder.join("::")).or_default();
        for (module, _, code) in &files {
            if module.len() <= folder.len() || !module.starts_with(folder) {
                continue;
            }
            let child = &module[folder.len()];
            let uses = graph.entry(child.clone()).or_default();
            for (path, _) in named_paths(code, module) {
                if path.len() <= folder.len() || !path.starts_with(folder) {
                    continue;
                }
                let named = &path[folder.len()];
                let target = if children.contains(named) {
                    Some(named)
                } else {
                    reexports.get(named)
                };
                if let Some(target) = target.filter(|t| *t != child) {
                    uses.insert(target.clone());
                }
            }
        }
    }
    graphs
}

/// A circle in `deps`, if there is one, as the modules along it (the first one again at the end):
/// a depth-first search for a back edge.
fn find_circle(deps: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
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
    deps.keys()
        .find_map(|m| visit(m, deps, &mut Vec::new(), &mut done))
}

#[test]
fn the_files_of_each_module_folder_import_each_other_without_a_circle() {
    let graphs = folder_graphs();
    assert!(
        graphs.contains_key("crate::runtime") && graphs.contains_key("crate::observe"),
        "the checker found no module folders: {:?}",
        graphs.keys().collect::<Vec<_>>()
    );
    let circles: Vec<String> = graphs
        .iter()
        .filter_map(|(folder, deps)| {
            let circle = find_circle(deps)?;
            Some(format!("{folder}: {}", circle.join(" → ")))
        })
        .collect();
    assert!(
        circles.is_empty(),
        "import circles among the files of a module folder (move the piece they share into \
         the file that owns it, or a small module of its own): {circles:#?}"
    );
}

#[test]
fn the_folder_checker_sees_paths_groups_and_reexports() {
    let here: Vec<String> = ["crate", "runtime", "turn"].map(String::from).into();
    let paths: Vec<String> = named_paths(
        "use super::dispatch::{on_tool_outcome, run_next_tool};\n\
         use super::{Runtime, fork::{self, start}};\n\
         let x = super::workflow::begin(frame, cx);\n\
         let y = crate::runtime::sessions::ask_async;\n\
         let z = $crate::ignored::path;",
        &here,
    )
    .into_iter()
    .map(|(p, name)| format!("{} as {name}", p.join("::")))
    .collect();
    assert_eq!(
        paths,
        [
            "crate::runtime::dispatch::on_tool_outcome as on_tool_outcome",
            "crate::runtime::dispatch::run_next_tool as run_next_tool",
            "crate::runtime::Runtime as Runtime",
            "crate::runtime::fork::self as self",
            "crate::runtime::fork::start as start",
            "crate::runtime::workflow::begin as begin",
            "crate::runtime::sessions::ask_async as ask_async",
        ]
    );
    let uses = folder_uses(
        "mod turn;\npub use config::{QueryUser, RuntimeConfig as Config};\npub(crate) use self::fork::fork_name;\nuse std::sync::Arc;",
    );
    let uses: Vec<String> = uses
        .into_iter()
        .map(|(p, name)| format!("{} as {name}", p.join("::")))
        .collect();
    assert_eq!(
        uses,
        [
            "config::QueryUser as QueryUser",
            "config::RuntimeConfig as Config",
            "fork::fork_name as fork_name",
            "std::sync::Arc as Arc",
        ]
    );
    let circle = find_circle(
        &[("a", "b"), ("b", "c"), ("c", "a")]
            .map(|(m, n)| (m.to_owned(), BTreeSet::from([n.to_owned()])))
            .into(),
    );
    assert_eq!(circle.unwrap().join(" → "), "a → b → c → a");
}

/// The most lines a `.rs` file under `src/` or `tests/` may have: past it, a file holds more than
/// one concept and is split along them.
const MAX_LINES: usize = 900;

/// The files that were over [`MAX_LINES`] when the rule came in, each to be split. A file leaves
/// this list when it is split, and none joins it: the test fails for a listed file that is no
/// longer over the limit, so the list only shrinks.
const OVER_900_TO_SPLIT: &[&str] = &[];

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
