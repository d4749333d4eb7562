//! `agentsim check`: finds the scenario files under the given paths, runs them on several
//! threads, and reports each (text or JSON, JUnit XML, an HTML page per run with an index).

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use agentsim::report;
use agentsim::scenario::{self, RunOptions};

use super::runtime_args::RuntimeArgs;
use super::shared::{refuse_outputs_over_inputs, write_atomic};
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
    /// Follow directory links that lead outside the given directories (by default they are
    /// reported and not followed).
    #[arg(long)]
    follow_links: bool,
    /// With --runtime: start a new process for every scenario, even when the runtime offers
    /// `reset` (by default each job keeps one process and resets it between scenarios).
    #[arg(long)]
    no_reset: bool,
    #[command(flatten)]
    runtime: RuntimeArgs,
}

impl CheckArgs {
    /// Whether the run may go to an outside runtime (`--runtime`, or a config file).
    pub(crate) fn runtime_given(&self) -> bool {
        self.runtime.given()
    }
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
        follow_links,
        no_reset,
        runtime,
    } = args;
    let runtime = match runtime.options(seed) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    if no_reset && runtime.is_none() {
        eprintln!("error: --no-reset is for a check against your runtime: give --runtime CMD, or a config file with a `runtime:` block (agentsim.yaml, or --config FILE)");
        return ExitCode::from(2);
    }
    check(
        &paths,
        CheckOptions {
            seed,
            format,
            junit,
            html,
            filter,
            fail_fast,
            follow_links,
            runtime,
            reset: !no_reset,
            jobs: jobs.map_or_else(
                || std::thread::available_parallelism().map_or(1, |n| n.get()),
                |j| j as usize,
            ),
        },
    )
}

/// What a walk of the given paths found, in walk order (each directory's entries sorted): scenario
/// files, files with a scenario's name that are not run (and why), and entries that could not be
/// walked or read (and why).
#[derive(Default)]
struct Found {
    entries: Vec<CheckEntry>,
    /// The given directories (canonical): a directory link that leads outside them is not
    /// followed unless `follow_links`.
    roots: Vec<PathBuf>,
    follow_links: bool,
    /// Directories entered (canonical), so that a symbolic link loop is walked once.
    seen: std::collections::BTreeSet<PathBuf>,
    /// Directory links not followed: (the link, where it leads).
    outside: Vec<(PathBuf, PathBuf)>,
}

/// The keys only a scenario file has at its top level (`description` is a JSON Schema's keyword
/// too): a JSON file with `$schema` and none of these is a JSON Schema, not a scenario.
const SCENARIO_KEYS: [&str; 8] = [
    "name",
    "seed",
    "expect_violation",
    "settings",
    "agents",
    "llm",
    "tools",
    "steps",
];

/// Whether a file's name is a scenario's: `.yaml`, `.yml` or `.json`, in any case.
fn scenario_name(path: &Path) -> bool {
    path.extension().and_then(|e| e.to_str()).is_some_and(|e| {
        ["yaml", "yml", "json"]
            .iter()
            .any(|x| e.eq_ignore_ascii_case(x))
    })
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
        found.entries.push(CheckEntry::File(path.to_owned()));
        return Ok(());
    }
    found
        .roots
        .push(std::fs::canonicalize(path).unwrap_or_else(|_| path.to_owned()));
    collect(path, found);
    Ok(())
}

/// Walks `path`. The rules, in order:
/// - a name that is not a scenario's (`.yaml`, `.yml`, `.json` in any case) is none of check's
///   business, and a hidden directory (`.git/`) is not entered;
/// - a hidden file with a scenario's name (`.draft.yaml`, an editor's lock file) is skipped, and
///   reported;
/// - a JSON file whose top level has `$schema` and none of a scenario's keys is a JSON Schema
///   (such as `agentsim schema` prints): skipped, and reported. A scenario may carry `$schema`
///   beside its keys (for an editor), and runs;
/// - a directory link that leads outside the given directories is not followed (reported on
///   stderr) unless `--follow-links`; a link loop is walked once;
/// - an entry with a scenario's name that cannot be read (a link to nothing) is an error of that
///   file alone, and the walk goes on.
fn collect(path: &Path, found: &mut Found) {
    let meta = match std::fs::metadata(path) {
        Ok(meta) => meta,
        Err(e) => {
            if scenario_name(path) {
                let what = if std::fs::symlink_metadata(path).is_ok() {
                    format!("a symbolic link to nothing ({e})")
                } else {
                    format!("cannot be read: {e}")
                };
                found
                    .entries
                    .push(CheckEntry::Problem(path.to_owned(), what));
            }
            return;
        }
    };
    if meta.is_dir() {
        let canonical = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_owned());
        let link = std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink());
        if link && !found.follow_links && !found.roots.iter().any(|r| canonical.starts_with(r)) {
            found.outside.push((path.to_owned(), canonical));
            return;
        }
        if !found.seen.insert(canonical) {
            return; // Entered already: a symbolic link loop, or two links to one directory.
        }
        let entries = match std::fs::read_dir(path) {
            Ok(entries) => entries,
            Err(e) => {
                found.entries.push(CheckEntry::Problem(
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
                Err(e) => found.entries.push(CheckEntry::Problem(
                    path.to_owned(),
                    format!("an entry cannot be read: {e}"),
                )),
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
            } else if scenario_name(&entry) && !entry.is_dir() {
                found.entries.push(CheckEntry::Skipped(
                    entry,
                    "hidden: its name starts with `.` (name it on the command line to run it)"
                        .to_owned(),
                ));
            }
        }
        return;
    }
    if !scenario_name(path) {
        return;
    }
    let json = path
        .extension()
        .and_then(|e| e.to_str())
        .is_some_and(|e| e.eq_ignore_ascii_case("json"));
    let config = path
        .file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|n| n == super::runtime_config::DEFAULT_CONFIG);
    if config {
        found.entries.push(CheckEntry::Skipped(
            path.to_owned(),
            "agentsim's config file (its `runtime:` block), not a scenario".to_owned(),
        ));
        return;
    }
    if json && is_json_schema(path) {
        found.entries.push(CheckEntry::Skipped(
            path.to_owned(),
            "a JSON Schema, not a scenario: it has `$schema` and no `name`, `steps`, `llm`, `agents`, `tools`, `settings`, `seed` or `expect_violation`"
                .to_owned(),
        ));
        return;
    }
    found.entries.push(CheckEntry::File(path.to_owned()));
}

/// Whether a `.json` file is a JSON Schema (such as the one `agentsim schema` prints): an object
/// with `$schema` and none of a scenario's top-level keys.
fn is_json_schema(path: &Path) -> bool {
    let Ok(text) = std::fs::read_to_string(path) else {
        return false; // The loader reports why it cannot be read.
    };
    serde_json::from_str::<serde_json::Value>(&text).is_ok_and(|v| {
        v.get("$schema").is_some() && !SCENARIO_KEYS.iter().any(|k| v.get(k).is_some())
    })
}

struct CheckOptions {
    seed: Option<u64>,
    format: Format,
    junit: Option<PathBuf>,
    html: Option<PathBuf>,
    filter: Vec<String>,
    fail_fast: bool,
    follow_links: bool,
    jobs: usize,
    /// Run against this runtime instead of agentsim's own.
    runtime: Option<agentsim::outside_run::Options>,
    /// Keep a process per job across scenarios when the runtime offers `reset`.
    reset: bool,
}

/// One entry `check` goes through: a scenario file, a file with a scenario's name it does not run
/// (and why), or a path the walk could not take.
enum CheckEntry {
    File(PathBuf),
    Skipped(PathBuf, String),
    Problem(PathBuf, String),
}

impl CheckEntry {
    fn path(&self) -> &Path {
        match self {
            CheckEntry::File(p) | CheckEntry::Skipped(p, _) | CheckEntry::Problem(p, _) => p,
        }
    }
}

/// Loads and runs one entry (never panics on bad input: a file that cannot be loaded is a
/// broken case); with `color`, also the failure's text with its differences marked.
fn check_one(
    entry: &CheckEntry,
    seed: Option<u64>,
    color: bool,
    html: Option<&Path>,
    runtime: Option<&super::check_runtime::Worker<'_>>,
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
        CheckEntry::Skipped(path, reason) => (
            path.display().to_string(),
            CaseResult::Skipped {
                reason: reason.clone(),
            },
        ),
        CheckEntry::File(file) => match scenario::load(file).and_then(|s| s.runnable().map(|()| s))
        {
            Err(e) => (
                file.display().to_string(),
                CaseResult::Broken {
                    message: e.to_string(),
                    location: (e.line > 0).then_some((e.line, e.column)),
                },
            ),
            Ok(scenario) if runtime.is_some() => {
                let worker = runtime.expect("checked");
                let path = file.display().to_string();
                let page = html.map(|dir| dir.join(page_name(&path)));
                let result = worker.case(&path, &scenario, page.as_deref());
                (path, result)
            }
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
                    if let Err(e) = write_atomic(&page, report::html::page(&outcome).as_bytes()) {
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

/// The file name of a scenario's page in `check --html DIR`, unique by construction: its path
/// with letters, digits, `-` and `.` kept, `/` written `__`, `_` written `_u`, and any other
/// character `_x<hex>_` (so `a/x.yaml` is `a__x.yaml.html` and `a_x.yaml` is `a_ux.yaml.html`),
/// and a leading `.` written `_d` (a page is never hidden).
fn page_name(path: &str) -> String {
    let mut name = String::with_capacity(path.len() + 5);
    for (i, c) in path.chars().enumerate() {
        match c {
            '.' if i == 0 => name.push_str("_d"),
            c if c.is_ascii_alphanumeric() || matches!(c, '-' | '.') => name.push(c),
            '/' => name.push_str("__"),
            '_' => name.push_str("_u"),
            c => name.push_str(&format!("_x{:x}_", c as u32)),
        }
    }
    name.push_str(".html");
    name
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
            shown.map_or_else(
                || report::terminal(failure["message"].as_str().unwrap_or("failed")),
                std::borrow::Cow::Borrowed
            ),
            report::printable(rerun)
        ),
        CaseResult::Broken { message, .. } => {
            format!("FAIL {path}\n  {}\n", report::terminal(message))
        }
        CaseResult::Skipped { reason } => {
            format!("skip {path} ({})\n", report::terminal(reason))
        }
    }
}

/// The reason of a case that an interrupted check never started.
const NOT_STARTED: &str = "not run: the check was interrupted";

fn check(paths: &[PathBuf], options: CheckOptions) -> ExitCode {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    let started = Instant::now();
    let mut found = Found {
        follow_links: options.follow_links,
        ..Found::default()
    };
    for path in paths {
        if let Err(e) = collect_root(path, &mut found) {
            eprintln!("error: {}", report::terminal(&e.to_string()));
            return ExitCode::from(2);
        }
    }
    for (link, target) in &found.outside {
        eprintln!(
            "note: not following {} (a link to {}, outside the given paths; --follow-links follows it)",
            report::printable(&link.display().to_string()),
            report::printable(&target.display().to_string())
        );
    }
    if found.entries.is_empty() {
        eprintln!("error: no scenario files (.yaml, .yml, .json) found");
        return ExitCode::from(2);
    }
    let keep = |p: &Path| {
        options.filter.is_empty() || {
            let text = p.display().to_string();
            options.filter.iter().any(|f| text.contains(f.as_str()))
        }
    };
    let entries: Vec<CheckEntry> = found
        .entries
        .into_iter()
        .filter(|e| keep(e.path()))
        .collect();
    if entries.is_empty() {
        eprintln!(
            "error: no scenario file matches --filter {}",
            report::printable(&options.filter.join(", "))
        );
        return ExitCode::from(2);
    }
    // No report may be written over a file the check reads.
    let inputs: Vec<&Path> = entries.iter().map(CheckEntry::path).collect();
    let mut outputs: Vec<(&str, PathBuf)> = Vec::new();
    if let Some(junit) = &options.junit {
        outputs.push(("--junit", junit.clone()));
    }
    if let Some(dir) = &options.html {
        outputs.push(("--html", dir.join("index.html")));
        for input in &inputs {
            outputs.push(("--html", dir.join(page_name(&input.display().to_string()))));
        }
    }
    let outputs: Vec<(&str, &Path)> = outputs.iter().map(|(f, p)| (*f, p.as_path())).collect();
    if let Err(e) = refuse_outputs_over_inputs(&inputs, &outputs) {
        eprintln!("error: {e}");
        return ExitCode::from(2);
    }
    if let Some(junit) = &options.junit {
        // The previous run's report goes before this one starts: a CI job that reads it after a
        // crash must not find an old green report.
        if let Err(e) = std::fs::remove_file(junit) {
            if e.kind() != std::io::ErrorKind::NotFound {
                eprintln!(
                    "error: --junit {}: cannot remove the previous report: {e}",
                    report::printable(&junit.display().to_string())
                );
                return ExitCode::from(2);
            }
        }
    }
    let text = matches!(options.format, Format::Text);
    if let Some(dir) = &options.html {
        if let Err(e) = std::fs::create_dir_all(dir) {
            eprintln!(
                "error: --html {}: {e}",
                report::printable(&dir.display().to_string())
            );
            return ExitCode::from(2);
        }
    }
    // Ctrl-C stops starting scenarios; those running finish, and the total and the reports cover
    // what ran, with the rest marked as not run. A second Ctrl-C quits at once.
    let interrupted = std::sync::Arc::new(AtomicBool::new(false));
    {
        let interrupted = std::sync::Arc::clone(&interrupted);
        let handler = move || {
            if interrupted.swap(true, Ordering::SeqCst) {
                eprintln!("\ninterrupted again: quitting");
                std::process::exit(130);
            }
            eprintln!(
                "\ninterrupted: finishing the scenarios in flight; the total and the reports cover what ran (Ctrl-C again quits at once)"
            );
        };
        if let Err(e) = ctrlc::set_handler(handler) {
            eprintln!("warning: cannot catch Ctrl-C ({e}); it will quit without a total");
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
    let outside = options
        .runtime
        .clone()
        .map(|o| super::check_runtime::Shared::new(o, options.reset));
    let work = || {
        // Each worker runs its scenarios on an async runtime of its own, on one kept process
        // when the runtime offers `reset`.
        let worker = match outside.as_ref().map(|o| o.worker()).transpose() {
            Ok(w) => w,
            Err(e) => {
                eprintln!("error: {e}");
                stop.store(true, Ordering::Relaxed);
                return;
            }
        };
        loop {
            if stop.load(Ordering::Relaxed) || interrupted.load(Ordering::Relaxed) {
                break;
            }
            let i = next.fetch_add(1, Ordering::Relaxed);
            let Some(entry) = entries.get(i) else { break };
            let case = check_one(
                entry,
                options.seed,
                color,
                options.html.as_deref(),
                worker.as_ref(),
            );
            if options.fail_fast && case.0.failed() {
                stop.store(true, Ordering::Relaxed);
            }
            *slots[i].lock().unwrap_or_else(|e| e.into_inner()) = Some(case);
            flush();
        }
        if let Some(worker) = worker {
            worker.finish();
        }
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
    let interrupted = interrupted.load(Ordering::SeqCst);
    // With --fail-fast some slots stay empty: the cases are those that ran, in order. Once
    // interrupted, those never started are cases too, marked as not run.
    // Each case with its colored text, and whether it ran (a case never started prints nothing).
    let mut ran: Vec<(report::check::Case, Option<String>, bool)> = Vec::new();
    let mut not_run = 0;
    let mut never_started = 0;
    for (slot, entry) in slots.into_iter().zip(&entries) {
        match slot.into_inner().unwrap_or_else(|e| e.into_inner()) {
            Some((case, shown)) => ran.push((case, shown, true)),
            None if interrupted => {
                never_started += 1;
                ran.push((
                    report::check::Case {
                        path: entry.path().display().to_string(),
                        seconds: 0.0,
                        result: report::check::CaseResult::Skipped {
                            reason: format!("{NOT_STARTED} (Ctrl-C)"),
                        },
                    },
                    None,
                    false,
                ))
            }
            None => not_run += 1,
        }
    }
    if text {
        // Whatever the ordered printing held back (a gap left by --fail-fast or Ctrl-C) comes out
        // now; those never started are counted in the total, not listed.
        let printed = *printed.lock().unwrap_or_else(|e| e.into_inner());
        let mut rest = String::new();
        for (case, shown, _) in ran.iter().skip(printed).filter(|(_, _, ran)| *ran) {
            rest.push_str(&case_text(case, shown.as_deref()));
        }
        print!("{rest}");
    }
    let mut cases: Vec<report::check::Case> = ran.into_iter().map(|(case, ..)| case).collect();
    // A reset the runtime did not come back from is a failed case of its own, after the
    // scenarios' (it has no page).
    let scenario_cases = cases.len();
    let failed_resets = outside
        .as_ref()
        .map_or_else(Vec::new, |o| o.failed_resets());
    if text {
        for case in &failed_resets {
            print!("{}", case_text(case, None));
        }
    }
    let resets_failed = failed_resets.len();
    cases.extend(failed_resets);
    let seconds = started.elapsed().as_secs_f64();
    let passed = cases.iter().filter(|c| c.passed()).count();
    let skipped = cases.iter().filter(|c| c.skipped()).count();
    let failed = cases.len() - passed - skipped;
    if let Some(dir) = &options.html {
        let mut index = String::from("<!DOCTYPE html>\n<html lang=\"en\">\n<head><meta charset=\"utf-8\"><title>agentsim check</title></head>\n<body>\n<h1>agentsim check</h1>\n<ul>\n");
        for (i, case) in cases.iter().enumerate() {
            let (status, linked) = match &case.result {
                report::check::CaseResult::Passed { .. } => ("ok", true),
                report::check::CaseResult::Failed { .. } => ("FAIL", true),
                report::check::CaseResult::Broken { .. } => ("FAIL", false),
                report::check::CaseResult::Skipped { .. } => ("skip", false),
            };
            let link = if linked && i < scenario_cases {
                format!(
                    "<a href=\"{}\">{}</a>",
                    report::check::markup(&page_name(&case.path)),
                    report::check::markup(&case.path)
                )
            } else {
                report::check::markup(&case.path)
            };
            index.push_str(&format!("<li>{status} {link}</li>\n"));
        }
        index.push_str("</ul>\n</body>\n</html>\n");
        let path = dir.join("index.html");
        if let Err(e) = write_atomic(&path, index.as_bytes()) {
            eprintln!(
                "error: cannot write {}: {e}",
                report::printable(&path.display().to_string())
            );
            return ExitCode::from(2);
        }
    }
    if let Some(path) = &options.junit {
        if let Err(e) = write_atomic(path, report::check::junit(&cases, seconds).as_bytes()) {
            eprintln!(
                "error: cannot write the JUnit report {}: {e}",
                report::printable(&path.display().to_string())
            );
            return ExitCode::from(2);
        }
    }
    match options.format {
        Format::Json => {
            let mut json = report::check::json_report(&cases, seconds, not_run);
            json["interrupted"] = interrupted.into();
            println!(
                "{}",
                report::escape::json(
                    &serde_json::to_string_pretty(&json).expect("a report is JSON")
                )
            )
        }
        Format::Text => {
            let mut tail = String::new();
            let shown_skips = skipped - never_started;
            if shown_skips > 0 {
                tail.push_str(&format!(", {shown_skips} skipped"));
            }
            if not_run > 0 {
                tail.push_str(&format!(", {not_run} not run (--fail-fast)"));
            }
            if interrupted {
                tail.push_str(&format!(", {never_started} not run (interrupted)"));
            }
            if resets_failed > 0 {
                tail.push_str(&format!(", {resets_failed} failed reset(s) of the runtime"));
            }
            let reused = match outside.as_ref().map(|o| o.resets()) {
                Some(n) if n > 0 => format!("; {n} on a process reused with `reset`"),
                _ => String::new(),
            };
            println!(
                "{} scenarios: {passed} passed, {} failed{tail} ({seconds:.2}s{reused})",
                entries.len(),
                failed - resets_failed
            );
        }
    }
    if interrupted {
        ExitCode::from(130)
    } else if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
