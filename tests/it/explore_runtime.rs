//! `explore FILE --runtime CMD` against tests/runtimes/fake.py: kills between steps found by seed,
//! judged by the `restart` check and mock-llm's `replayed-history`, shrunk by rerunning the
//! runtime into a file that fails against the buggy runtime and passes against the fixed one;
//! and the same exploration of a runtime that restarts correctly finds nothing.

use std::path::{Path, PathBuf};
use std::process::Output;

const SUBJECT: &str = "tests/runtimes/three-turns.yaml";

fn fresh(name: &str) -> PathBuf {
    super::support::fresh_dir("explore-runtime", name)
}

use super::support::{agentsim, text};

fn fake(mode: &str) -> String {
    format!("python3 tests/runtimes/fake.py {mode} restart")
}

/// Explores the subject against `mode` for ten seeds from 0, writing into `out`.
fn explore(mode: &str, out: &Path, extra: &[&str]) -> Output {
    let runtime = fake(mode);
    let mut args = vec![
        "explore",
        SUBJECT,
        "--runtime",
        &runtime,
        "--runs",
        "10",
        "--jobs",
        "2",
        "--out",
        out.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    agentsim(&args)
}

use super::support::the_file_in as written;

fn steps_of(yaml: &str) -> usize {
    let after = yaml.split("\nsteps:\n").nth(1).expect("a steps list");
    after.lines().filter(|l| l.starts_with("  - ")).count()
}

#[test]
fn a_text_sent_again_after_a_kill_is_found_shrunk_and_written_as_a_file_that_fails_until_fixed() {
    let out = fresh("resend");
    let o = explore(
        "resend-after-restart",
        &out,
        &[
            "--no-fault",
            "llm-error",
            "--no-fault",
            "llm-stall",
            "--no-fault",
            "llm-latency",
        ],
    );
    let all = text(&o);
    assert_eq!(o.status.code(), Some(1), "{all}");
    assert!(all.contains("faults kill -9 and restart"), "{all}");
    assert!(all.contains("    restart: "), "{all}");
    assert!(
        all.contains("had already sent it since the user's last message"),
        "{all}"
    );
    // The seed and the exact command that replays it.
    let rerun = all
        .lines()
        .find_map(|l| l.strip_prefix("  rerun: "))
        .expect("a rerun line");
    assert!(
        rerun.starts_with(&format!(
            "agentsim explore {SUBJECT} --runtime 'python3 tests/runtimes/fake.py resend-after-restart restart' --no-fault llm-error --no-fault llm-stall --no-fault llm-latency --seed "
        )),
        "{rerun}"
    );
    let (file, yaml) = written(&out);
    assert!(
        file.file_name()
            .unwrap()
            .to_str()
            .unwrap()
            .starts_with("restart-"),
        "{file:?}"
    );
    assert!(yaml.contains("{\"restart\":true}"), "{yaml}");
    assert!(steps_of(&yaml) <= 10, "{yaml}");
    assert!(yaml.contains(&format!(
        "#   agentsim run {} --runtime 'python3 tests/runtimes/fake.py resend-after-restart restart'",
        file.display()
    )));
    let path = file.to_str().unwrap();
    let buggy = agentsim(&["run", path, "--runtime", &fake("resend-after-restart")]);
    assert_eq!(buggy.status.code(), Some(1), "{}", text(&buggy));
    assert!(text(&buggy).contains("restart: after the restart"));
    let fixed = agentsim(&["run", path, "--runtime", &fake("restart-ok")]);
    assert_eq!(fixed.status.code(), Some(0), "{}", text(&fixed));
}

#[test]
fn a_turn_lost_in_a_restart_is_found_by_the_replayed_history_rule() {
    let out = fresh("lose");
    // Kills between turns only: this runtime's bug is in what it keeps across one.
    let o = explore(
        "lose-last-turn",
        &out,
        &[
            "--no-fault",
            "llm-error",
            "--no-fault",
            "user-message",
            "--no-fault",
            "cancel",
            "--no-fault",
            "restart-mid-turn",
        ],
    );
    let all = text(&o);
    assert_eq!(o.status.code(), Some(1), "{all}");
    assert!(all.contains("    replayed-history: "), "{all}");
    let (file, yaml) = written(&out);
    assert!(steps_of(&yaml) <= 10, "{yaml}");
    let path = file.to_str().unwrap();
    let fixed = agentsim(&["run", path, "--runtime", &fake("restart-ok")]);
    assert_eq!(fixed.status.code(), Some(0), "{}", text(&fixed));
}

#[test]
fn a_runtime_that_restarts_correctly_is_explored_with_kills_and_model_faults_and_nothing_is_found()
{
    let out = fresh("ok");
    let o = explore("restart-ok", &out, &[]);
    let all = text(&o);
    assert_eq!(o.status.code(), Some(0), "{all}");
    assert!(
        all.contains("10 runs from seed 0, 2 jobs, faults model errors, model stalls, model latency, kill -9 and restart, tool errors, tool latency,"
        ),
        "{all}"
    );
    assert!(all.contains("findings: none"), "{all}");
    // Faults were injected: the count is in the summary.
    let injected: u64 = all
        .split(" faults injected")
        .next()
        .and_then(|s| s.rsplit(' ').next())
        .and_then(|n| n.parse().ok())
        .expect("a count of faults");
    assert!(injected > 0, "{all}");
    assert!(!out.exists() || std::fs::read_dir(&out).unwrap().next().is_none());
}

#[test]
fn one_seed_replays_with_its_transcript_and_its_faults() {
    let o = agentsim(&[
        "explore",
        SUBJECT,
        "--runtime",
        &fake("restart-ok"),
        "--seed",
        "4",
        "--runs",
        "1",
        "--no-fault",
        "llm-error",
    ]);
    let all = text(&o);
    assert_eq!(o.status.code(), Some(0), "{all}");
    assert!(
        all.contains("agentsim kills the runtime (SIGKILL)"),
        "{all}"
    );
    assert!(
        all.contains("faults of seed 4:\n  kill -9 and restart after step 1"),
        "{all}"
    );
}

#[test]
fn flags_for_agentsims_own_runtime_are_refused_with_runtime() {
    for extra in [
        &["--bug", "double-delivery"][..],
        &["--coverage"][..],
        &["--no-fault", "intervene"][..],
    ] {
        let mut args = vec!["explore", SUBJECT, "--runtime", "python3 x.py"];
        args.extend_from_slice(extra);
        let o = agentsim(&args);
        assert_eq!(o.status.code(), Some(2), "{extra:?}: {}", text(&o));
    }
    // `--generated` runs against a runtime; steering its generator is agentsim's own.
    let o = agentsim(&[
        "explore",
        "--generated",
        "--swarm",
        "deep",
        "--runtime",
        "python3 x.py",
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("--swarm is for agentsim's own runtime"));
}

#[test]
fn a_tool_failure_injected_by_seed_is_found_and_written_as_a_scripted_tool_error() {
    // Seed 10 is the first whose faults fail the tool's first call.
    let out = fresh("tool");
    let runtime = "python3 tests/runtimes/fake.py crash-on-tool-failure";
    let o = agentsim(&[
        "explore",
        "tests/runtimes/one-tool.yaml",
        "--runtime",
        runtime,
        "--runs",
        "12",
        "--jobs",
        "2",
        "--no-fault",
        "llm-error",
        "--no-fault",
        "user-message",
        "--no-fault",
        "llm-stall",
        "--no-fault",
        "llm-latency",
        "--out",
        out.to_str().unwrap(),
    ]);
    let all = text(&o);
    assert_eq!(o.status.code(), Some(1), "{all}");
    assert!(all.contains("faults tool errors, tool latency\n"), "{all}");
    assert!(all.contains("    unexpected-exit: "), "{all}");
    assert!(
        all.contains("fault: tool fault injected: call 1 of weather fails"),
        "{all}"
    );
    let (file, yaml) = written(&out);
    assert!(yaml.contains("tool failure injected by explore"), "{yaml}");
    assert_eq!(steps_of(&yaml), 1, "{yaml}");
    let path = file.to_str().unwrap();
    let buggy = agentsim(&["run", path, "--runtime", runtime]);
    assert_eq!(buggy.status.code(), Some(1), "{}", text(&buggy));
    assert!(
        text(&buggy).contains("the runtime exited"),
        "{}",
        text(&buggy)
    );
    // A crash ends the run where it happened: the file keeps the reply the runtime never asked
    // for, which a runtime that survives the failure goes on to ask for.
    assert!(yaml.contains("It is 4 degrees."), "{yaml}");
    let fixed = agentsim(&[
        "run",
        path,
        "--runtime",
        "python3 tests/runtimes/fake.py ok",
    ]);
    assert_eq!(fixed.status.code(), Some(0), "{}", text(&fixed));
}
