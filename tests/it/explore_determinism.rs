//! `explore --runtime CMD --determinism`: each seed run twice with the same faults and compared.
//! tests/runtimes/fake.py in mode `clock` (the wall time in its system text) is found, its first
//! difference named, not shrunk, and its rerun command reproduces it; a declared pattern (flag or
//! config file) silences it; a deterministic runtime passes under kills, model and tool faults;
//! bad patterns are located errors.

use std::path::PathBuf;
use std::process::Output;

use super::support::{agentsim, text};

const SUBJECT: &str = "tests/runtimes/three-turns.yaml";
/// The faults that land at a time into a turn (their effect depends on timing) left out.
const UNTIMED: [&str; 6] = [
    "--no-fault",
    "user-message",
    "--no-fault",
    "cancel",
    "--no-fault",
    "restart-mid-turn",
];

fn fresh(name: &str) -> PathBuf {
    super::support::fresh_dir("explore-determinism", name)
}

/// `explore SUBJECT --determinism` against fake.py in `mode` (with `restart`), `runs` seeds.
fn explore(mode: &str, runs: &str, extra: &[&str]) -> Output {
    let runtime = format!("python3 tests/runtimes/fake.py {mode} restart");
    let mut args = vec![
        "explore",
        SUBJECT,
        "--runtime",
        &runtime,
        "--runs",
        runs,
        "--jobs",
        "2",
        "--determinism",
    ];
    args.extend_from_slice(extra);
    agentsim(&args)
}

#[test]
fn a_runtime_that_puts_the_time_in_its_requests_is_a_determinism_finding_naming_the_difference() {
    let out = fresh("clock");
    let mut extra = vec!["--out", out.to_str().unwrap()];
    extra.extend_from_slice(&UNTIMED);
    let o = explore("clock", "3", &extra);
    let all = text(&o);
    assert_eq!(o.status.code(), Some(1), "{all}");
    assert!(
        all.contains("determinism: 3 runs (first at seed 0)"),
        "{all}"
    );
    assert!(all.contains("FAIL seed 0: determinism: the runtime is not deterministic: seed 0 run twice with the same faults, model request 1 of conversation"), "{all}");
    assert!(
        all.contains("differs at `system`: first run \"You are main. The time is "),
        "{all}"
    );
    assert!(
        all.contains(", second run \"You are main. The time is "),
        "{all}"
    );
    assert!(all.contains("not shrunk"), "{all}");
    // Not shrunk: nothing is written.
    assert_eq!(std::fs::read_dir(&out).unwrap().count(), 0, "{all}");
    // The rerun command repeats the check and finds it again.
    let rerun = all
        .lines()
        .find_map(|l| l.trim().strip_prefix("rerun: agentsim "))
        .expect("a rerun line")
        .to_owned();
    assert!(rerun.contains(" --determinism"), "{rerun}");
    let words: Vec<String> = agentsim::outside_run::split_command(&rerun).unwrap();
    let mut args: Vec<&str> = words.iter().map(String::as_str).collect();
    args.push("--no-write");
    let again = agentsim(&args);
    let again_text = text(&again);
    assert_eq!(again.status.code(), Some(1), "{again_text}");
    assert!(
        again_text.contains("FAIL seed 0: determinism"),
        "{again_text}"
    );
}

#[test]
fn a_declared_pattern_silences_the_known_nondeterminism() {
    let mut extra = vec!["--no-write", "--nondeterministic", "time is [0-9.]+"];
    extra.extend_from_slice(&UNTIMED);
    let o = explore("clock", "3", &extra);
    let all = text(&o);
    assert_eq!(o.status.code(), Some(0), "{all}");
    assert!(all.contains("findings: none"), "{all}");
    assert!(
        all.contains("ignored as known nondeterminism: time is [0-9.]+"),
        "{all}"
    );
    // A pattern that matches something else does not.
    let mut extra = vec!["--no-write", "--nondeterministic", "date [0-9]+"];
    extra.extend_from_slice(&UNTIMED);
    let o = explore("clock", "2", &extra);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
}

#[test]
fn a_deterministic_runtime_passes_the_check_under_kills_and_faults() {
    let mut extra = vec!["--no-write"];
    extra.extend_from_slice(&UNTIMED);
    let o = explore("ok", "8", &extra);
    let all = text(&o);
    assert_eq!(o.status.code(), Some(0), "{all}");
    assert!(
        all.contains("determinism: each seed that did not fail run a second time"),
        "{all}"
    );
    assert!(all.contains("findings: none"), "{all}");
    assert!(all.contains("kill -9 and restart"), "{all}");
}

#[test]
fn patterns_in_the_config_file_count_and_bad_ones_are_located_errors() {
    let dir = fresh("config");
    let config = dir.join("agentsim.yaml");
    std::fs::write(
        &config,
        format!(
            "runtime:\n  command: python3 tests/runtimes/fake.py clock\n  cwd: {}\n  nondeterministic: ['time is [0-9.]+']\n",
            env!("CARGO_MANIFEST_DIR")
        ),
    )
    .unwrap();
    let mut extra = vec!["--no-write", "--config", config.to_str().unwrap()];
    extra.extend_from_slice(&UNTIMED);
    let o = explore("clock", "2", &extra);
    let all = text(&o);
    assert_eq!(o.status.code(), Some(0), "{all}");
    assert!(all.contains("findings: none"), "{all}");

    std::fs::write(
        &config,
        "runtime:\n  command: python3 x.py\n  nondeterministic: ['(']\n",
    )
    .unwrap();
    let o = explore("clock", "2", &["--config", config.to_str().unwrap()]);
    let all = text(&o);
    assert_eq!(o.status.code(), Some(2), "{all}");
    assert!(
        all.contains("agentsim.yaml: runtime.nondeterministic[0]: --nondeterministic `(`: not a regular expression"),
        "{all}"
    );

    let o = explore("clock", "2", &["--nondeterministic", "a{2"]);
    let all = text(&o);
    assert_eq!(o.status.code(), Some(2), "{all}");
    assert!(
        all.contains("error: --nondeterministic `a{2`: not a regular expression"),
        "{all}"
    );
    // Without --determinism the patterns have nothing to apply to.
    let o = agentsim(&[
        "explore",
        SUBJECT,
        "--runtime",
        "python3 tests/runtimes/fake.py ok",
        "--nondeterministic",
        "x",
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
}
