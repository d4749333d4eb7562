//! `agentsim check`: finds the scenario files under the given paths, runs them on several
//! threads, and reports each (text or JSON, JUnit XML, an HTML page per run with an index).

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use agentsim::report;
use agentsim::scenario::{self, RunOptions};

use super::Format;

#[derive(clap::Args)]
pub(crate) struct CheckArgs {
    /// Scenario files or directories (searched recursively for .yaml, .yml, .json).
    #[arg(default_value = "scenarios")]
    paths: Vec<PathBuf>,
    /// Seed for every scenario (overrides each file's `seed`).
    #[arg(long, env = "AGENTSIM_SEED")]
    seed: Option<u64>,
    /// Output: a line per scenario (text), or one JSON document at the end (json), with each
    /// failure structured (kind, step, line, column, mismatches, rerun command).
    #[arg(long, value_enum, default_value_t = Format::Text)]
    format: Format,
    /// Also write a JUnit XML report here (one test case per scenario file).
    #[arg(long, value_name = "FILE")]
    junit: Option<PathBuf>,
    /// Also write an HTML page per scenario run into this directory (created if missing),
    /// with an index.html listing them.
    #[arg(long, value_name = "DIR")]
    html: Option<PathBuf>,
    /// Run only the files whose path contains this text (repeatable: any of them).
    #[arg(long, value_name = "TEXT")]
    filter: Vec<String>,
    /// Stop starting scenarios after the first failure (with several jobs, those already
    /// running finish).
    #[arg(long)]
    fail_fast: bool,
    /// Scenarios run at once, 1 to 256 (default: the machine's cores); the report keeps the
    /// files' order.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=256))]
    jobs: Option<u64>,
}

/// Runs `agentsim check` with its flags.
pub(crate) fn command(args: CheckArgs) -> ExitCode {
    let CheckArgs {
        paths,
        seed,
        format,
        junit,
        html,
        filter,
        fail_fast,
        jobs,
    } = args;
    check(
        &paths,
        CheckOptions {
            seed,
            format,
            junit,
            html,
            filter,
            fail_fast,
            jobs: jobs.map_or_else(
                || std::thread::available_parallelism().map_or(1, |n| n.get()),
                |j| j as usize,
            ),
        },
    )
}

/// What a walk of the given paths found: scenario files, sorted, and entries that could not be
/// walked or read, each with what was wrong.
#[derive(Default)]
struct Found {
    files: Vec<PathBuf>,
    problems: Vec<(PathBuf, String)>,
    /// Directories entered (canonical), so that a symbolic link loop is walked once.
    seen: std::collections::BTreeSet<PathBuf>,
}

/// Collects the scenario files under `path` (given on the command line: it must exist).
fn collect_root(path: &Path, found: &mut Found) -> std::io::Result<()> {
    if !path.exists() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::NotFound,
            format!("{}: no such file or directory", path.display()),
        ));
    }
    if path.is_file() {
        // A file named on the command line is a scenario, whatever its extension.
        found.files.push(path.to_owned());
        return Ok(());
    }
    collect(path, found);
    Ok(())
}

/// Walks `path`: scenario files (`.yaml`, `.yml`, `.json`) are collected; hidden entries (a name
/// starting with `.`, such as `.git/` or an editor's lock file) are skipped; a JSON Schema (a JSON
/// object with `$schema`) is not a scenario; every entry that cannot be walked or read is recorded
/// as a problem by path, and the walk goes on.
fn collect(path: &Path, found: &mut Found) {
    let meta = match std::fs::metadata(path) {
        Ok(meta) => meta,
        Err(e) => {
            let what = if std::fs::symlink_metadata(path).is_ok() {
                format!("a symbolic link to nothing ({e})")
            } else {
                format!("cannot be read: {e}")
            };
            found.problems.push((path.to_owned(), what));
            return;
        }
    };
    if meta.is_dir() {
        let canonical = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_owned());
        if !found.seen.insert(canonical) {
            return; // Entered already: a symbolic link loop, or two links to one directory.
        }
        let entries = match std::fs::read_dir(path) {
            Ok(entries) => entries,
            Err(e) => {
                found.problems.push((
                    path.to_owned(),
                    format!("the directory cannot be read: {e}"),
                ));
                return;
            }
        };
        let mut paths = Vec::new();
        for entry in entries {
            match entry {
                Ok(entry) => paths.push(entry.path()),
                Err(e) => found
                    .problems
                    .push((path.to_owned(), format!("an entry cannot be read: {e}"))),
            }
        }
        paths.sort();
        for entry in paths {
            let hidden = entry
                .file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with('.'));
            if !hidden {
                collect(&entry, found);
            }
        }
        return;
    }
    let extension = path.extension().and_then(|e| e.to_str());
    if !matches!(extension, Some("yaml" | "yml" | "json")) {
        return;
    }
    if extension == Some("json") && is_json_schema(path) {
        return;
    }
    found.files.push(path.to_owned());
}

/// Whether a `.json` file is a JSON Schema (such as the one `agentsim schema` prints), not a
/// scenario.
fn is_json_schema(path: &Path) -> bool {
    let Ok(text) = std::fs::read_to_string(path) else {
        return false; // The loader reports why it cannot be read.
    };
    serde_json::from_str::<serde_json::Value>(&text).is_ok_and(|v| v.get("$schema").is_some())
}

struct CheckOptions {
    seed: Option<u64>,
    format: Format,
    junit: Option<PathBuf>,
    html: Option<PathBuf>,
    filter: Vec<String>,
    fail_fast: bool,
    jobs: usize,
}

/// One entry `check` goes through: a scenario file, or a path the walk could not take.
enum CheckEntry {
    File(PathBuf),
    Problem(PathBuf, String),
}

/// Loads and runs one entry (never panics on bad input: a file that cannot be loaded is a
/// broken case); with `color`, also the failure's text with its differences marked.
fn check_one(
    entry: &CheckEntry,
    seed: Option<u64>,
    color: bool,
    html: Option<&Path>,
) -> (report::check::Case, Option<String>) {
    let mut shown = None;
    use report::check::{Case, CaseResult};
    let started = Instant::now();
    let (path, result) = match entry {
        CheckEntry::Problem(path, problem) => (
            path.display().to_string(),
            CaseResult::Broken {
                message: problem.clone(),
                location: None,
            },
        ),
        CheckEntry::File(file) => match scenario::load(file) {
            Err(e) => (
                file.display().to_string(),
                CaseResult::Broken {
                    message: e.to_string(),
                    location: (e.line > 0).then_some((e.line, e.column)),
                },
            ),
            Ok(scenario) => {
                let outcome = scenario::run(
                    &scenario,
                    RunOptions {
                        seed,
                        observe: true,
                    },
                );
                if let Some(dir) = html {
                    let page = dir.join(page_name(&outcome.path));
                    if let Err(e) = std::fs::write(&page, report::html::page(&outcome)) {
                        eprintln!("warning: cannot write {}: {e}", page.display());
                    }
                }
                let result = match &outcome.failure {
                    None => CaseResult::Passed {
                        name: outcome.name.clone(),
                        seed: outcome.seed,
                        reproduced: outcome.reproduced.clone(),
                    },
                    Some(failure) => {
                        if color {
                            shown = Some(report::diff::failure_text(failure, true));
                        }
                        CaseResult::Failed {
                            name: outcome.name.clone(),
                            seed: outcome.seed,
                            failure: failure.to_json(),
                            location: failure.location(),
                            rerun: outcome.rerun_command(),
                        }
                    }
                };
                (outcome.path.clone(), result)
            }
        },
    };
    let case = Case {
        path,
        seconds: started.elapsed().as_secs_f64(),
        result,
    };
    (case, shown)
}

/// The file name of a scenario's page in `check --html DIR`: its path with `/` as `__`.
fn page_name(path: &str) -> String {
    let flat: String = path
        .chars()
        .map(|c| match c {
            '/' | '\\' => '_',
            c if c.is_alphanumeric() || matches!(c, '-' | '_' | '.') => c,
            _ => '-',
        })
        .collect();
    format!("{}.html", flat.trim_start_matches(['.', '_']))
}

/// `check`'s line(s) for one case, as text (`shown`: the failure's text to print instead of its
/// plain message).
fn case_text(case: &report::check::Case, shown: Option<&str>) -> String {
    use report::check::CaseResult;
    let path = report::printable(&case.path);
    match &case.result {
        CaseResult::Passed {
            reproduced: Some(inv),
            ..
        } => format!("ok   {path} (reproduces {inv})\n"),
        CaseResult::Passed { .. } => format!("ok   {path}\n"),
        CaseResult::Failed {
            seed,
            failure,
            rerun,
            ..
        } => format!(
            "FAIL {path} (seed {seed})\n  {}\n  rerun: {}\n",
            shown.unwrap_or_else(|| failure["message"].as_str().unwrap_or("failed")),
            report::printable(rerun)
        ),
        CaseResult::Broken { message, .. } => format!("FAIL {path}\n  {message}\n"),
    }
}

fn check(paths: &[PathBuf], options: CheckOptions) -> ExitCode {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    let started = Instant::now();
    let mut found = Found::default();
    for path in paths {
        if let Err(e) = collect_root(path, &mut found) {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    }
    let Found {
        files, problems, ..
    } = found;
    if files.is_empty() && problems.is_empty() {
        eprintln!("error: no scenario files (.yaml, .yml, .json) found");
        return ExitCode::from(2);
    }
    let keep = |p: &Path| {
        options.filter.is_empty() || {
            let text = p.display().to_string();
            options.filter.iter().any(|f| text.contains(f.as_str()))
        }
    };
    let mut entries: Vec<CheckEntry> = problems
        .into_iter()
        .filter(|(p, _)| keep(p))
        .map(|(p, m)| CheckEntry::Problem(p, m))
        .collect();
    entries.extend(files.into_iter().filter(|f| keep(f)).map(CheckEntry::File));
    if entries.is_empty() {
        eprintln!(
            "error: no scenario file matches --filter {}",
            options.filter.join(", ")
        );
        return ExitCode::from(2);
    }
    let text = matches!(options.format, Format::Text);
    if let Some(dir) = &options.html {
        if let Err(e) = std::fs::create_dir_all(dir) {
            eprintln!("error: --html {}: {e}", dir.display());
            return ExitCode::from(2);
        }
    }
    // Results land in their slot; the text report prints them in the files' order as soon as
    // every earlier one is in.
    let color =
        text && report::diff::color_wanted(std::io::IsTerminal::is_terminal(&std::io::stdout()));
    type Slot = Option<(report::check::Case, Option<String>)>;
    let slots: Vec<std::sync::Mutex<Slot>> = entries
        .iter()
        .map(|_| std::sync::Mutex::new(None))
        .collect();
    let printed = std::sync::Mutex::new(0usize);
    let next = AtomicUsize::new(0);
    let stop = AtomicBool::new(false);
    let flush = || {
        let mut printed = printed.lock().unwrap_or_else(|e| e.into_inner());
        let mut out = String::new();
        while *printed < slots.len() {
            let slot = slots[*printed].lock().unwrap_or_else(|e| e.into_inner());
            let Some((case, shown)) = slot.as_ref() else {
                break;
            };
            if text {
                out.push_str(&case_text(case, shown.as_deref()));
            }
            *printed += 1;
        }
        if !out.is_empty() {
            print!("{out}");
            let _ = std::io::Write::flush(&mut std::io::stdout());
        }
    };
    let work = || loop {
        if stop.load(Ordering::Relaxed) {
            return;
        }
        let i = next.fetch_add(1, Ordering::Relaxed);
        let Some(entry) = entries.get(i) else { return };
        let case = check_one(entry, options.seed, color, options.html.as_deref());
        if options.fail_fast && !case.0.passed() {
            stop.store(true, Ordering::Relaxed);
        }
        *slots[i].lock().unwrap_or_else(|e| e.into_inner()) = Some(case);
        flush();
    };
    std::thread::scope(|scope| {
        let mut workers = Vec::new();
        for _ in 0..options.jobs.min(entries.len()) {
            match std::thread::Builder::new().spawn_scoped(scope, work) {
                Ok(w) => workers.push(w),
                Err(e) => {
                    eprintln!("warning: cannot start another worker thread ({e})");
                    break;
                }
            }
        }
        if workers.is_empty() {
            work();
        }
        for w in workers {
            if let Err(panic) = w.join() {
                std::panic::resume_unwind(panic);
            }
        }
    });
    // With --fail-fast some slots stay empty: the cases are those that ran, in order.
    let ran: Vec<(report::check::Case, Option<String>)> = slots
        .into_iter()
        .filter_map(|s| s.into_inner().unwrap_or_else(|e| e.into_inner()))
        .collect();
    let not_run = entries.len() - ran.len();
    if text {
        // Whatever the ordered printing held back (a gap left by --fail-fast) comes out now.
        let printed = *printed.lock().unwrap_or_else(|e| e.into_inner());
        let mut rest = String::new();
        for (case, shown) in ran.iter().skip(printed) {
            rest.push_str(&case_text(case, shown.as_deref()));
        }
        print!("{rest}");
    }
    let cases: Vec<report::check::Case> = ran.into_iter().map(|(case, _)| case).collect();
    let seconds = started.elapsed().as_secs_f64();
    let passed = cases.iter().filter(|c| c.passed()).count();
    let failed = cases.len() - passed;
    if let Some(dir) = &options.html {
        let mut index = String::from("<!DOCTYPE html>\n<html lang=\"en\">\n<head><meta charset=\"utf-8\"><title>agentsim check</title></head>\n<body>\n<h1>agentsim check</h1>\n<ul>\n");
        for case in &cases {
            let status = if case.passed() { "ok" } else { "FAIL" };
            let link = match &case.result {
                report::check::CaseResult::Broken { .. } => report::check::markup(&case.path),
                _ => format!(
                    "<a href=\"{}\">{}</a>",
                    report::check::markup(&page_name(&case.path)),
                    report::check::markup(&case.path)
                ),
            };
            index.push_str(&format!("<li>{status} {link}</li>\n"));
        }
        index.push_str("</ul>\n</body>\n</html>\n");
        if let Err(e) = std::fs::write(dir.join("index.html"), index) {
            eprintln!(
                "error: cannot write {}: {e}",
                dir.join("index.html").display()
            );
            return ExitCode::from(2);
        }
    }
    if let Some(path) = &options.junit {
        if let Err(e) = std::fs::write(path, report::check::junit(&cases, seconds)) {
            eprintln!(
                "error: cannot write the JUnit report {}: {e}",
                path.display()
            );
            return ExitCode::from(2);
        }
    }
    match options.format {
        Format::Json => println!(
            "{}",
            serde_json::to_string_pretty(&report::check::json_report(&cases, seconds, not_run))
                .expect("a report is JSON")
        ),
        Format::Text => {
            let skipped = if not_run > 0 {
                format!(", {not_run} not run (--fail-fast)")
            } else {
                String::new()
            };
            println!(
                "{} scenarios: {passed} passed, {failed} failed{skipped} ({seconds:.2}s)",
                entries.len()
            );
        }
    }
    if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
