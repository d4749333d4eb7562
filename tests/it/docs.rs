//! The README, the changelog and the guide in `docs/` are checked like code: a page that lies
//! about the format or the command line fails here, not in a newcomer's terminal.
//!
//! The pages checked are `README.md`, `CHANGELOG.md` and every `*.md` under `docs/`. The rules:
//!
//! - **Fences close.** A line whose text (after any indentation) starts with three or more
//!   backticks opens a code block; the rest of the line is its info string (`yaml`, `sh`, ...). The
//!   block closes at the first later line made only of at least as many backticks. A block still
//!   open at the end of a page is an error naming the line that opened it (GitHub would render the
//!   rest of the page as code), and so is a line inside a block that starts with that many
//!   backticks but has text after them (```` ``` A request ... ```` or ```` ```text ````): it
//!   looks like a fence but closes nothing, so GitHub renders the text that follows as code up to
//!   the next bare fence. A block that shows a fence opens with more backticks than it shows.
//! - **Relative links resolve.** Every `[text](target)` and `![alt](target)` outside code (fenced
//!   blocks and inline code spans) whose target has no scheme must name a file or directory that
//!   exists, relative to the page, inside the repository (a clone has no `../shared/`). A
//!   `#anchor` on a markdown page (or alone, for the same page) must be one of its headings, by
//!   GitHub's rule: lower case, letters, digits, `-` and `_` kept, spaces made `-`, the rest
//!   dropped, `-1`, `-2`, ... for repeats.
//! - **Every page of the guide is linked** directly from `README.md` or `docs/README.md`.
//! - **Scenario examples run.** A `yaml` block is a whole scenario when it has a top-level
//!   `steps:` line, or both a top-level `name:` and a top-level `llm:` line (top-level: at the
//!   block's first column). A whole scenario must load with `agentsim::scenario::parse`; when it
//!   has steps, it must also run and pass, as `agentsim run` runs it. A fragment (a few keys of a
//!   scenario, a CI file whose `steps:` is indented) is not checked. Two markers, an HTML comment
//!   on the last non-blank line before the fence, state that an example is meant to fail:
//!   `<!-- agentsim: expect-fail -->` (it loads, has steps, and its run fails) and
//!   `<!-- agentsim: expect-load-error -->` (it does not load). A marker on anything but a whole
//!   scenario, or an unknown marker, is an error.
//! - **Printed transcripts match.** The code block that comes next after a whole scenario, if it
//!   is a `text` block whose first line is `# <the scenario's name>`, is its transcript as the
//!   page prints it: each of its lines that starts with `[` must be a line of the run's
//!   transcript, in the same order (`...` lines stand for what the page leaves out).
//! - **Rust examples run.** The YAML of every `run_yaml(r#"..."#)` in a `rust` block must load,
//!   run and pass.
//! - **Command lines are real.** A command line runs `agentsim` when it has a word `agentsim` (or
//!   one ending in `/agentsim`), or is `cargo run ... -- ARGS`: in a `sh` or `bash` block, any
//!   line (with its `\` continuations, without a trailing ` # comment`; a line starting with `#`
//!   is a comment); in a `text` block, a line whose first word is `agentsim` (after an optional
//!   `$ ` prompt) and whose second word does not end in `:` (the rest of a `text` block is output,
//!   `agentsim mock-llm: no scripted reply ...` among it); in a `yaml` block, a `run:` line (a CI
//!   step). It must name a subcommand that `agentsim --help` lists, every `--option` after it
//!   must be listed by `agentsim <subcommand> --help`, and a scenario path in it (a word with a
//!   `/` ending in `.yaml`, `.yml` or `.json`) must be a file of the repository.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Component, Path, PathBuf};
use std::process::Command;

/// A markdown page, by its path relative to the repository root.
struct Page {
    path: PathBuf,
    text: String,
}

/// A fenced code block of a page.
struct Block {
    /// The first word of its info string (`yaml`, `sh`, ...), or empty.
    lang: String,
    /// 1-based line of the opening fence.
    line: usize,
    /// Its lines, without the opening fence's indentation.
    body: Vec<String>,
    /// The `agentsim:` marker before it, if any.
    marker: Option<String>,
}

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The pages checked: README.md, CHANGELOG.md and docs/**/*.md, in a stable order.
fn pages() -> Vec<Page> {
    let root = root();
    let mut paths = vec![PathBuf::from("README.md"), PathBuf::from("CHANGELOG.md")];
    let mut docs = Vec::new();
    markdown_under(&root, Path::new("docs"), &mut docs);
    docs.sort();
    paths.extend(docs);
    paths
        .into_iter()
        .map(|path| {
            let text = fs::read_to_string(root.join(&path))
                .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
            Page { path, text }
        })
        .collect()
}

fn markdown_under(root: &Path, dir: &Path, out: &mut Vec<PathBuf>) {
    let entries = fs::read_dir(root.join(dir))
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", dir.display()));
    for entry in entries {
        let entry = entry.expect("a directory entry");
        let rel = dir.join(entry.file_name());
        let kind = entry.file_type().expect("a file type");
        if kind.is_dir() {
            markdown_under(root, &rel, out);
        } else if rel.extension().is_some_and(|e| e == "md") {
            out.push(rel);
        }
    }
}

/// The backticks a line opens or closes a fence with, if it is a fence line: the count, the
/// indentation, and the rest of the line.
fn fence(line: &str) -> Option<(usize, usize, &str)> {
    let trimmed = line.trim_start_matches(' ');
    let indent = line.len() - trimmed.len();
    let ticks = trimmed.bytes().take_while(|&b| b == b'`').count();
    (ticks >= 3).then(|| (ticks, indent, &trimmed[ticks..]))
}

/// The page's fenced blocks, or an error for a fence that never closes.
fn blocks(page: &Page) -> Result<Vec<Block>, String> {
    let mut out = Vec::new();
    let mut open: Option<(usize, usize, Block)> = None;
    let mut last_text: Option<String> = None;
    for (i, line) in page.text.lines().enumerate() {
        match open.take() {
            Some((ticks, indent, mut block)) => match fence(line) {
                Some((n, _, rest)) if n >= ticks && rest.trim().is_empty() => {
                    out.push(block);
                    last_text = None;
                }
                Some((n, _, _)) if n >= ticks => {
                    return Err(format!(
                        "{}:{}: this line starts with a fence but has text after it, so it does not \
                         close the block opened at line {} (a closing fence is backticks alone): \
                         GitHub renders everything up to the next bare fence as code; to show a \
                         fence inside a block, open the block with more backticks",
                        page.path.display(),
                        i + 1,
                        block.line
                    ));
                }
                _ => {
                    let strip = line.len() - line.trim_start_matches(' ').len();
                    block.body.push(line[strip.min(indent)..].to_string());
                    open = Some((ticks, indent, block));
                }
            },
            None => match fence(line) {
                Some((ticks, indent, info)) if !info.contains('`') => {
                    let marker = last_text.as_deref().and_then(|t| {
                        t.strip_prefix("<!-- agentsim:")
                            .and_then(|m| m.strip_suffix("-->"))
                            .map(|m| m.trim().to_string())
                    });
                    let block = Block {
                        lang: info.split_whitespace().next().unwrap_or("").to_string(),
                        line: i + 1,
                        body: Vec::new(),
                        marker,
                    };
                    open = Some((ticks, indent, block));
                }
                _ => {
                    if !line.trim().is_empty() {
                        last_text = Some(line.trim().to_string());
                    }
                }
            },
        }
    }
    match open {
        Some((_, _, block)) => Err(format!(
            "{}:{}: this code fence never closes (GitHub renders the rest of the page as code)",
            page.path.display(),
            block.line
        )),
        None => Ok(out),
    }
}

/// The page's lines outside fenced blocks, with their 1-based numbers.
fn prose(page: &Page) -> Vec<(usize, &str)> {
    let mut out = Vec::new();
    let mut open: Option<usize> = None;
    for (i, line) in page.text.lines().enumerate() {
        match (open, fence(line)) {
            (Some(ticks), Some((n, _, rest))) if n >= ticks && rest.trim().is_empty() => {
                open = None
            }
            (Some(_), _) => {}
            (None, Some((ticks, _, info))) if !info.contains('`') => open = Some(ticks),
            (None, _) => out.push((i + 1, line)),
        }
    }
    out
}

/// A line with its inline code spans removed.
fn without_code_spans(line: &str) -> String {
    let mut out = String::new();
    let mut rest = line;
    while let Some(start) = rest.find('`') {
        out.push_str(&rest[..start]);
        let ticks = rest[start..].bytes().take_while(|&b| b == b'`').count();
        let after = &rest[start + ticks..];
        let closing = "`".repeat(ticks);
        match after.find(&closing) {
            Some(end) => rest = &after[end + ticks..],
            None => {
                rest = after;
                break;
            }
        }
    }
    out.push_str(rest);
    out
}

/// The targets of the inline links of a line (code spans excluded).
fn link_targets(line: &str) -> Vec<String> {
    let line = without_code_spans(line);
    let mut out = Vec::new();
    let mut rest = line.as_str();
    while let Some(at) = rest.find("](") {
        let after = &rest[at + 2..];
        let end = after.find(')').unwrap_or(after.len());
        let target = after[..end].split_whitespace().next().unwrap_or("");
        out.push(target.to_string());
        rest = &after[end..];
    }
    out
}

/// GitHub's anchors of a page's headings.
fn anchors(page: &Page) -> BTreeSet<String> {
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut out = BTreeSet::new();
    for (_, line) in prose(page) {
        let hashes = line.bytes().take_while(|&b| b == b'#').count();
        if hashes == 0 || hashes > 6 || !line[hashes..].starts_with(' ') {
            continue;
        }
        let mut slug = String::new();
        for c in line[hashes..].trim().chars() {
            if c.is_alphanumeric() || c == '-' || c == '_' {
                slug.extend(c.to_lowercase());
            } else if c == ' ' {
                slug.push('-');
            }
        }
        let n = seen.entry(slug.clone()).or_insert(0);
        out.insert(if *n == 0 {
            slug.clone()
        } else {
            format!("{slug}-{n}")
        });
        *n += 1;
    }
    out
}

/// `path` with `.` and `..` resolved, without touching the file system; `None` if it climbs
/// above its start.
fn normalize(path: &Path) -> Option<PathBuf> {
    let mut out = PathBuf::new();
    for part in path.components() {
        match part {
            Component::CurDir => {}
            Component::ParentDir => {
                if !out.pop() {
                    return None;
                }
            }
            Component::Normal(p) => out.push(p),
            Component::RootDir | Component::Prefix(_) => return None,
        }
    }
    Some(out)
}

/// Every relative link of every page, as (page, line, target file relative to the root, anchor).
fn relative_links(pages: &[Page]) -> Vec<(PathBuf, usize, String, Option<PathBuf>, String)> {
    let mut out = Vec::new();
    for page in pages {
        let dir = page.path.parent().unwrap_or(Path::new(""));
        for (line, text) in prose(page) {
            for target in link_targets(text) {
                if target.contains("://") || target.starts_with("mailto:") {
                    continue;
                }
                let (file, anchor) = match target.split_once('#') {
                    Some((f, a)) => (f, a.to_string()),
                    None => (target.as_str(), String::new()),
                };
                let resolved = if file.is_empty() {
                    Some(page.path.clone())
                } else {
                    normalize(&dir.join(file))
                };
                out.push((page.path.clone(), line, target.clone(), resolved, anchor));
            }
        }
    }
    out
}

#[test]
fn every_code_fence_closes() {
    let errors: Vec<String> = pages().iter().filter_map(|p| blocks(p).err()).collect();
    assert!(errors.is_empty(), "{}", errors.join("\n"));
}

#[test]
fn every_relative_link_resolves() {
    let pages = pages();
    let root = root();
    let mut anchor_cache: BTreeMap<PathBuf, BTreeSet<String>> = BTreeMap::new();
    let mut errors = Vec::new();
    for (page, line, target, resolved, anchor) in relative_links(&pages) {
        let at = format!("{}:{line}: link `{target}`", page.display());
        let Some(resolved) = resolved else {
            errors.push(format!(
                "{at} leaves the repository (a clone has nothing there)"
            ));
            continue;
        };
        if !root.join(&resolved).exists() {
            errors.push(format!("{at}: no such file `{}`", resolved.display()));
            continue;
        }
        if anchor.is_empty() || resolved.extension().is_none_or(|e| e != "md") {
            continue;
        }
        let known = anchor_cache.entry(resolved.clone()).or_insert_with(|| {
            let text = fs::read_to_string(root.join(&resolved)).unwrap_or_default();
            anchors(&Page {
                path: resolved.clone(),
                text,
            })
        });
        if !known.contains(&anchor) {
            errors.push(format!(
                "{at}: `{}` has no heading with the anchor `#{anchor}` (it has: {})",
                resolved.display(),
                known.iter().cloned().collect::<Vec<_>>().join(", ")
            ));
        }
    }
    assert!(errors.is_empty(), "{}", errors.join("\n"));
}

#[test]
fn every_guide_page_is_linked_from_an_index() {
    let pages = pages();
    let indexes = [PathBuf::from("README.md"), PathBuf::from("docs/README.md")];
    let linked: BTreeSet<PathBuf> = relative_links(&pages)
        .into_iter()
        .filter(|(page, ..)| indexes.contains(page))
        .filter_map(|(_, _, _, resolved, _)| resolved)
        .collect();
    let unlinked: Vec<String> = pages
        .iter()
        .filter(|p| p.path.starts_with("docs") && !linked.contains(&p.path))
        .map(|p| p.path.display().to_string())
        .collect();
    assert!(
        unlinked.is_empty(),
        "pages of the guide that neither README.md nor docs/README.md links to: {}",
        unlinked.join(", ")
    );
}

/// Whether a block has a line `key:` (or `key: ...`) at its first column.
fn has_top(body: &[String], key: &str) -> bool {
    body.iter().any(|l| {
        l.strip_prefix(key)
            .is_some_and(|rest| rest.starts_with(':'))
    })
}

fn is_whole_scenario(block: &Block) -> bool {
    matches!(block.lang.as_str(), "yaml" | "yml")
        && (has_top(&block.body, "steps")
            || has_top(&block.body, "name") && has_top(&block.body, "llm"))
}

/// Loads a scenario example and, if it has steps, runs it; what went wrong, if anything.
fn check_example(
    at: &str,
    yaml: &str,
    marker: Option<&str>,
) -> (Vec<String>, Option<agentsim::Run>) {
    let parsed = agentsim::scenario::parse(yaml, Path::new("<example>"));
    match (marker, parsed) {
        (Some("expect-load-error"), Ok(_)) => (
            vec![format!("{at}: marked expect-load-error, but it loads")],
            None,
        ),
        (Some("expect-load-error"), Err(_)) => (Vec::new(), None),
        (_, Err(e)) => (vec![format!("{at}: does not load: {e}")], None),
        (Some("expect-fail"), Ok(scenario)) => {
            if scenario.steps.is_empty() {
                return (
                    vec![format!("{at}: marked expect-fail, but has no steps to run")],
                    None,
                );
            }
            let run = agentsim::Run::of(&scenario);
            if run.passed() {
                (
                    vec![format!("{at}: marked expect-fail, but its run passes")],
                    Some(run),
                )
            } else {
                (Vec::new(), Some(run))
            }
        }
        (Some(other), Ok(_)) => (
            vec![format!("{at}: unknown marker `agentsim: {other}`")],
            None,
        ),
        (None, Ok(scenario)) => {
            if scenario.steps.is_empty() {
                return (Vec::new(), None);
            }
            let run = agentsim::Run::of(&scenario);
            match run.failure() {
                Some(failure) => (
                    vec![format!(
                        "{at}: its run fails: {failure}\n{}",
                        run.transcript()
                    )],
                    Some(run),
                ),
                None => (Vec::new(), Some(run)),
            }
        }
    }
}

#[test]
fn every_scenario_example_loads_and_runs_as_the_page_says() {
    let mut errors = Vec::new();
    let mut checked = 0;
    for page in pages() {
        let Ok(blocks) = blocks(&page) else { continue };
        let mut previous: Option<(String, agentsim::Run)> = None;
        for block in &blocks {
            let at = format!("{}:{}", page.path.display(), block.line);
            if block.lang == "text" {
                if let Some((name, run)) = &previous {
                    if block.body.first().map(String::as_str) == Some(&format!("# {name}")) {
                        errors.extend(transcript_mismatch(&at, &block.body, &run.transcript()));
                    }
                }
            }
            previous = None;
            if !is_whole_scenario(block) {
                if let Some(marker) = &block.marker {
                    errors.push(format!(
                        "{at}: marker `agentsim: {marker}` on a block that is not a whole scenario"
                    ));
                }
                continue;
            }
            checked += 1;
            let yaml = block.body.join("\n");
            let (found, run) = check_example(&at, &yaml, block.marker.as_deref());
            errors.extend(found);
            if let Some(run) = run {
                previous = Some((run.outcome().name.clone(), run));
            }
        }
    }
    assert!(errors.is_empty(), "{}", errors.join("\n\n"));
    assert!(
        checked >= 10,
        "only {checked} scenario examples found: is the rule still right?"
    );
}

/// The transcript lines a page prints (those starting with `[`) that the run does not print in
/// that order.
fn transcript_mismatch(at: &str, printed: &[String], actual: &str) -> Vec<String> {
    let mut actual_lines = actual.lines();
    let mut errors = Vec::new();
    for line in printed.iter().filter(|l| l.starts_with('[')) {
        if !actual_lines.any(|a| a == line) {
            errors.push(format!(
                "{at}: the printed transcript has `{line}`, which the run does not print (in this order):\n{actual}"
            ));
            break;
        }
    }
    errors
}

#[test]
fn every_run_yaml_example_runs_and_passes() {
    let mut errors = Vec::new();
    let mut checked = 0;
    for page in pages() {
        let Ok(blocks) = blocks(&page) else { continue };
        for block in blocks.iter().filter(|b| b.lang == "rust") {
            let code = block.body.join("\n");
            let mut rest = code.as_str();
            while let Some(start) = rest.find("run_yaml(r#\"") {
                let after = &rest[start + "run_yaml(r#\"".len()..];
                let Some(end) = after.find("\"#") else {
                    errors.push(format!(
                        "{}:{}: a run_yaml raw string that never ends",
                        page.path.display(),
                        block.line
                    ));
                    break;
                };
                checked += 1;
                let at = format!("{}:{} (run_yaml)", page.path.display(), block.line);
                let (found, run) = check_example(&at, &after[..end], None);
                if found.is_empty() && run.is_none() {
                    errors.push(format!("{at}: has no steps, so it runs nothing"));
                }
                errors.extend(found);
                rest = &after[end..];
            }
        }
    }
    assert!(errors.is_empty(), "{}", errors.join("\n\n"));
    assert!(checked >= 2, "only {checked} run_yaml examples found");
}

/// Where in a block a command line may stand.
#[derive(Clone, Copy, PartialEq)]
enum Lines {
    /// A shell block: any line that is not a comment.
    Shell,
    /// A text block: a line that starts with `agentsim` (after an optional `$ ` prompt).
    Text,
    /// A YAML block: a `run:` step.
    Yaml,
}

/// The `agentsim` command a line runs, as its words after `agentsim`, if it runs one.
fn agentsim_words(line: &str, lines: Lines) -> Option<Vec<String>> {
    let line = line.trim();
    if line.starts_with('#') {
        return None;
    }
    let line = line.strip_prefix("$ ").unwrap_or(line);
    let line = match lines {
        Lines::Yaml => line
            .strip_prefix("- run:")
            .or_else(|| line.strip_prefix("run:"))?,
        Lines::Text if !line.starts_with("agentsim ") => return None,
        // `agentsim mock-llm: no scripted reply ...` is a message of agentsim's own: output.
        Lines::Text
            if line
                .split_whitespace()
                .nth(1)
                .is_some_and(|w| w.ends_with(':')) =>
        {
            return None
        }
        _ => line,
    };
    let line = match line.find(" #") {
        Some(comment) => &line[..comment],
        None => line,
    };
    let words: Vec<&str> = line.split_whitespace().collect();
    if let Some(at) = words
        .iter()
        .position(|w| *w == "agentsim" || w.ends_with("/agentsim"))
    {
        return Some(words[at + 1..].iter().map(|w| w.to_string()).collect());
    }
    if words.len() > 2 && words[0] == "cargo" && words[1] == "run" {
        let dashes = words.iter().position(|w| *w == "--")?;
        return Some(words[dashes + 1..].iter().map(|w| w.to_string()).collect());
    }
    None
}

/// The long options a help text lists.
fn options_of(help: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for word in help.split(|c: char| !(c.is_ascii_alphanumeric() || c == '-')) {
        if word.starts_with("--") && word.len() > 2 {
            out.insert(word.to_string());
        }
    }
    out
}

fn help(args: &[&str]) -> String {
    let output = Command::new(env!("CARGO_BIN_EXE_agentsim"))
        .args(args)
        .arg("--help")
        .output()
        .expect("agentsim runs");
    assert!(output.status.success(), "agentsim {args:?} --help failed");
    String::from_utf8(output.stdout).expect("help is UTF-8")
}

#[test]
fn every_agentsim_command_line_uses_real_subcommands_and_options() {
    let top = help(&[]);
    let commands: BTreeSet<String> = top
        .lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .filter_map(|l| l.split_whitespace().next().map(str::to_string))
        .filter(|c| c != "help")
        .collect();
    assert!(commands.contains("run"), "no commands read from:\n{top}");
    let mut option_cache: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut errors = Vec::new();
    let mut checked = 0;
    for page in pages() {
        let Ok(blocks) = blocks(&page) else { continue };
        for block in &blocks {
            let lines = match block.lang.as_str() {
                "sh" | "bash" => Lines::Shell,
                "text" => Lines::Text,
                "yaml" | "yml" => Lines::Yaml,
                _ => continue,
            };
            let mut joined = String::new();
            for (i, line) in block.body.iter().enumerate() {
                if let Some(part) = line.strip_suffix('\\') {
                    joined.push_str(part);
                    joined.push(' ');
                    continue;
                }
                joined.push_str(line);
                let at = format!("{}:{}", page.path.display(), block.line + 1 + i);
                if let Some(words) = agentsim_words(&joined, lines) {
                    checked += 1;
                    match words.first() {
                        None => errors.push(format!("{at}: `agentsim` with no subcommand")),
                        Some(sub) if !commands.contains(sub) => errors.push(format!(
                            "{at}: `agentsim {sub}` is no subcommand (agentsim --help lists: {})",
                            commands.iter().cloned().collect::<Vec<_>>().join(", ")
                        )),
                        Some(sub) => {
                            let known = option_cache
                                .entry(sub.clone())
                                .or_insert_with(|| options_of(&help(&[sub])));
                            for word in &words[1..] {
                                for option in options_of(word) {
                                    if !known.contains(&option) {
                                        errors.push(format!(
                                            "{at}: `agentsim {sub} --help` lists no `{option}`"
                                        ));
                                    }
                                }
                                let scenario_file = [".yaml", ".yml", ".json"]
                                    .iter()
                                    .any(|ext| word.ends_with(ext));
                                if scenario_file
                                    && word.contains('/')
                                    && !root().join(word).is_file()
                                {
                                    errors.push(format!(
                                        "{at}: `{word}` is no file of the repository"
                                    ));
                                }
                            }
                        }
                    }
                }
                joined.clear();
            }
        }
    }
    assert!(errors.is_empty(), "{}", errors.join("\n"));
    assert!(checked >= 20, "only {checked} agentsim command lines found");
}

#[test]
fn the_fence_rule_sees_unclosed_and_glued_fences_and_closed_ones() {
    let broken = Page {
        path: PathBuf::from("broken.md"),
        text: "text\n\n```yaml\nname: x\n``` text after the fence is no closing fence\n\nmore\n"
            .to_string(),
    };
    let err = blocks(&broken)
        .err()
        .expect("a fence glued to text is an error");
    assert!(err.starts_with("broken.md:5:"), "{err}");
    let unclosed = Page {
        path: PathBuf::from("unclosed.md"),
        text: "text\n\n```sh\nagentsim run x.yaml\n\nmore\n".to_string(),
    };
    let err = blocks(&unclosed)
        .err()
        .expect("an unclosed fence is an error");
    assert!(err.starts_with("unclosed.md:3:"), "{err}");
    let fine = Page {
        path: PathBuf::from("fine.md"),
        text: "<!-- agentsim: expect-fail -->\n  ```yaml\n  steps: []\n  ```\n````md\n```\n````\n"
            .to_string(),
    };
    let found = blocks(&fine).expect("both fences close");
    assert_eq!(found.len(), 2);
    assert_eq!(found[0].marker.as_deref(), Some("expect-fail"));
    assert_eq!(found[0].body, ["steps: []"]);
    assert!(is_whole_scenario(&found[0]));
    assert_eq!(found[1].body, ["```"]);
}

#[test]
fn the_link_and_anchor_rules_read_what_github_renders() {
    assert_eq!(
        link_targets("see [a](x.md#y), `[not](a link)` and ![img](i.png)"),
        ["x.md#y", "i.png"]
    );
    let page = Page {
        path: PathBuf::from("p.md"),
        text: "# The rules of `tool-pairing`\n## In CI: JUnit and JSON\n## In CI: JUnit and JSON\n```\n# not a heading\n```\n".to_string(),
    };
    let found = anchors(&page);
    assert!(found.contains("the-rules-of-tool-pairing"), "{found:?}");
    assert!(found.contains("in-ci-junit-and-json"), "{found:?}");
    assert!(found.contains("in-ci-junit-and-json-1"), "{found:?}");
    assert!(!found.contains("not-a-heading"), "{found:?}");
    assert_eq!(
        normalize(Path::new("docs/../README.md")),
        Some(PathBuf::from("README.md"))
    );
    assert_eq!(normalize(Path::new("../shared/DESIGN.md")), None);
}

#[test]
fn the_command_rule_finds_agentsim_in_its_spellings() {
    let words = |l: &str, lines| agentsim_words(l, lines).map(|w| w.join(" "));
    assert_eq!(
        words("agentsim run x.yaml --seed 3", Lines::Shell),
        Some("run x.yaml --seed 3".into())
    );
    assert_eq!(
        words(
            "cargo run --release -- check scenarios   # the main job",
            Lines::Shell
        ),
        Some("check scenarios".into())
    );
    assert_eq!(
        words(
            "valgrind --tool=callgrind target/release/agentsim bench --json",
            Lines::Shell
        ),
        Some("bench --json".into())
    );
    assert_eq!(words("cargo test --test docs", Lines::Shell), None);
    assert_eq!(words("# agentsim run in a comment", Lines::Shell), None);
    assert_eq!(
        words("- run: cargo run -- explore --generated", Lines::Yaml),
        Some("explore --generated".into())
    );
    assert_eq!(
        words("description: found by agentsim explore", Lines::Yaml),
        None
    );
    assert_eq!(
        words("$ agentsim check x --junit j.xml", Lines::Text),
        Some("check x --junit j.xml".into())
    );
    assert_eq!(
        words("rerun: agentsim run x.yaml --seed 0", Lines::Text),
        None
    );
}
