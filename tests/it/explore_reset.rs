//! `explore --runtime` against a runtime that offers `reset` (tests/runtimes/fake.py with `reset`
//! in its capabilities): one process per job reset between runs gives the runs a process per run
//! gives; a runtime that dies on `reset` or never answers after it is reported as a `reset`
//! finding with its stderr while every run still runs; a runtime that dies during a run is that
//! run's finding, and the next run starts a new process.

use std::path::Path;
use std::process::Output;

use super::support::{agentsim, text};

const SUBJECT: &str = "tests/runtimes/three-turns.yaml";

/// `explore SUBJECT` against fake.py in `mode` with `caps`, `runs` seeds from 0, no files.
fn explore(subject: &str, mode: &str, caps: &str, runs: &str, extra: &[&str]) -> Output {
    let runtime = format!("python3 tests/runtimes/fake.py {mode} {caps}");
    let mut args = vec![
        "explore",
        subject,
        "--runtime",
        &runtime,
        "--runs",
        runs,
        "--no-write",
    ];
    args.extend_from_slice(extra);
    agentsim(&args)
}

/// The summary's lines that do not depend on timing or on how processes were started: the
/// faults injected and what the runs gave.
fn results(all: &str) -> Vec<String> {
    all.lines()
        .filter(|l| {
            l.contains("faults injected")
                || l.contains("clean limit")
                || l.contains("findings")
                || l.starts_with("    ")
        })
        .map(|l| match l.split_once("runs/s, ") {
            Some((_, rest)) => rest.to_owned(),
            None => l.to_owned(),
        })
        .collect()
}

#[test]
fn a_runtime_that_offers_reset_runs_in_one_process_per_job_with_the_results_of_a_process_per_run() {
    let reset = explore(SUBJECT, "ok", "restart,reset", "12", &["--jobs", "1"]);
    let all = text(&reset);
    assert_eq!(reset.status.code(), Some(0), "{all}");
    assert!(
        all.contains("one process per job, `reset` between runs (11 runs began with a reset)"),
        "{all}"
    );
    assert!(all.contains("findings: none"), "{all}");
    let fresh = explore(
        SUBJECT,
        "ok",
        "restart,reset",
        "12",
        &["--jobs", "1", "--no-reset"],
    );
    let fresh_all = text(&fresh);
    assert_eq!(fresh.status.code(), Some(0), "{fresh_all}");
    assert!(
        fresh_all.contains("a new process per run (--no-reset)"),
        "{fresh_all}"
    );
    assert_eq!(results(&all), results(&fresh_all));
    // The kills of the seeds' restart faults happened in the reused runs too.
    let one = explore(SUBJECT, "ok", "restart,reset", "1", &["--seed", "1"]);
    let without = explore(SUBJECT, "ok", "restart", "1", &["--seed", "1"]);
    assert!(
        text(&one).contains("a new process per run") || text(&one).contains("one process per job")
    );
    assert_eq!(
        text(&one).matches("kill -9 and restart after step").count(),
        text(&without)
            .matches("kill -9 and restart after step")
            .count()
    );
}

#[test]
fn a_runtime_that_dies_on_reset_is_a_reset_finding_with_its_stderr_and_every_run_still_runs() {
    let o = explore(
        SUBJECT,
        "reset-dies",
        "restart,reset",
        "5",
        &["--jobs", "1"],
    );
    let all = text(&o);
    assert_eq!(o.status.code(), Some(1), "{all}");
    assert!(all.contains(": 5 runs from seed 0"), "{all}");
    assert!(
        all.contains("FAIL reset: 4 time(s) the runtime did not come back from `reset`"),
        "{all}"
    );
    assert!(
        all.contains("the runtime exited (status 3) while agentsim was awaiting ready after reset"),
        "{all}"
    );
    assert!(all.contains("  | RuntimeError: reset broke"), "{all}");
    assert!(!all.contains("error:"), "never an error of agentsim: {all}");
}

#[test]
fn a_runtime_that_never_answers_after_reset_is_killed_within_the_ready_timeout() {
    let o = explore(
        SUBJECT,
        "reset-hangs",
        "restart,reset",
        "3",
        &["--jobs", "1", "--no-faults", "--ready-timeout", "2s"],
    );
    let all = text(&o);
    assert_eq!(o.status.code(), Some(1), "{all}");
    assert!(all.contains(": 3 runs from seed 0"), "{all}");
    assert!(
        all.contains("FAIL reset: 2 time(s)") && all.contains("no `ready` within 2 s"),
        "{all}"
    );
}

#[test]
fn a_runtime_that_dies_during_a_reused_run_is_that_runs_finding_and_the_next_run_starts_anew() {
    let subject = Path::new("tests/runtimes/one-tool.yaml");
    let o = explore(
        subject.to_str().unwrap(),
        "crash-on-tool-failure",
        "reset",
        "12",
        // Only tool failures: an interjected user line would reach the fake where it waits for
        // a tool result, and it dies of that first.
        &[
            "--jobs",
            "1",
            "--no-fault",
            "llm-error",
            "--no-fault",
            "user-message",
            "--no-fault",
            "cancel",
        ],
    );
    let all = text(&o);
    assert_eq!(o.status.code(), Some(1), "{all}");
    assert!(all.contains("    unexpected-exit: "), "{all}");
    assert!(all.contains("RuntimeError: the tool failed"), "{all}");
    assert!(!all.contains("FAIL reset"), "{all}");
    // Runs that passed handed their process on.
    let resets: u64 = all
        .split(" runs began with a reset")
        .next()
        .and_then(|s| s.rsplit('(').next())
        .and_then(|n| n.parse().ok())
        .expect("a count of resets");
    assert!(resets > 0, "{all}");
}
