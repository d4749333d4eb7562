//! The `agentsim` binary as a user runs it: exit codes, what goes to stdout and stderr, located
//! load errors, and byte-identical transcripts across two separate processes.

use std::path::{Path, PathBuf};
use std::process::Command;

pub(super) use super::support::{agentsim, stderr, stdout};

/// A scratch file under the target directory.
pub(super) fn scratch(name: &str, contents: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("cli");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, contents).unwrap();
    path
}

pub(super) const EXAMPLE: &str = "scenarios/examples/stack-diagram.yaml";

#[test]
fn run_prints_the_transcript_and_exits_zero() {
    let o = agentsim(&["run", EXAMPLE]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(
        out.contains("push skill:research depth=2 parent=toolu_01"),
        "{out}"
    );
    assert!(
        out.contains("pop skill:research depth=1 (completed, 3 iterations)"),
        "{out}"
    );
    assert!(out.trim_end().ends_with("passed"), "{out}");
}

#[test]
fn two_processes_give_byte_identical_transcripts() {
    for format in ["text", "json"] {
        let a = agentsim(&["run", EXAMPLE, "--seed", "7", "--format", format]);
        let b = agentsim(&["run", EXAMPLE, "--seed", "7", "--format", format]);
        assert!(a.status.success() && b.status.success());
        assert_eq!(a.stdout, b.stdout, "format {format}");
    }
}

#[test]
fn json_format_is_valid_json_with_the_records() {
    let o = agentsim(&["run", EXAMPLE, "--format", "json"]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("valid JSON");
    assert_eq!(v["passed"], true);
    assert_eq!(v["seed"], 0);
    let records = v["records"].as_array().unwrap();
    assert!(records.iter().any(|r| r["entry"]["type"] == "push"));
}

#[test]
fn a_wrong_expectation_exits_one_with_expected_and_actual() {
    let path = scratch(
        "wrong.yaml",
        "name: wrong\nllm:\n  main: [hello]\nsteps:\n  - user: hi\n  - expect: { sent: [goodbye], depth: 0 }\n",
    );
    let o = agentsim(&["run", path.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1));
    let err = stderr(&o);
    assert!(err.contains("expected: [\"goodbye\"]"), "{err}");
    assert!(err.contains("actual:   [\"hello\"]"), "{err}");
    assert!(err.contains("step 2 (line 6, column 5)"), "{err}");
    assert!(
        err.contains(&format!("rerun: agentsim run {} --seed 0", path.display())),
        "{err}"
    );
}

#[test]
fn a_malformed_file_is_a_located_error_and_exit_two() {
    let path = scratch(
        "typo.yaml",
        "name: typo\nagents:\n  main: { max_iteration: 3 }\nsteps: []\n",
    );
    let o = agentsim(&["run", path.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2));
    let err = stderr(&o);
    assert!(err.contains(&format!("{}:3:", path.display())), "{err}");
    assert!(err.contains("unknown field `max_iteration`"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
fn a_missing_file_is_an_error_not_a_panic() {
    let o = agentsim(&["run", "does/not/exist.yaml"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("cannot read the file"));
}

#[test]
fn check_prints_one_line_per_scenario_and_a_total() {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("check-corpus");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("a-pass.yaml"),
        "name: a\nllm:\n  main: [hi]\nsteps:\n  - user: x\n  - expect: { sent: [hi] }\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("b-fail.yaml"),
        "name: b\nllm:\n  main: [hi]\nsteps:\n  - user: x\n  - expect: { sent: [bye] }\n",
    )
    .unwrap();
    std::fs::write(dir.join("notes.txt"), "not a scenario").unwrap();
    let o = agentsim(&["check", dir.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1));
    let out = stdout(&o);
    assert!(out.contains("ok   "), "{out}");
    assert!(out.contains("FAIL "), "{out}");
    assert!(out.contains("2 scenarios: 1 passed, 1 failed"), "{out}");

    std::fs::remove_file(dir.join("b-fail.yaml")).unwrap();
    let o = agentsim(&["check", dir.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stdout(&o));
}

#[test]
fn check_defaults_to_the_scenarios_directory() {
    let o = agentsim(&["check"]);
    assert!(o.status.success(), "{}", stdout(&o));
    assert!(stdout(&o).contains("examples/stack-diagram.yaml"));
}

#[test]
fn the_seed_comes_from_the_flag_or_the_environment() {
    let o = agentsim(&["run", EXAMPLE, "--seed", "42"]);
    assert!(stdout(&o).contains("# seed 42"));
    let o = Command::new(env!("CARGO_BIN_EXE_agentsim"))
        .args(["run", EXAMPLE])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .env("AGENTSIM_SEED", "9")
        .output()
        .unwrap();
    assert!(stdout(&o).contains("# seed 9"));
}

#[test]
fn schema_is_json_schema_naming_the_top_level_keys() {
    let o = agentsim(&["schema"]);
    assert!(o.status.success());
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("valid JSON");
    let props = v["properties"].as_object().expect("properties");
    for key in [
        "name",
        "agents",
        "llm",
        "tools",
        "steps",
        "settings",
        "expect_violation",
    ] {
        assert!(props.contains_key(key), "missing {key}");
    }
}

#[test]
fn help_lists_the_commands() {
    let o = agentsim(&["--help"]);
    let out = stdout(&o);
    for cmd in ["run", "check", "schema"] {
        assert!(out.contains(cmd), "{out}");
    }
    let o = agentsim(&["run", "--help"]);
    assert!(stdout(&o).contains("--seed"));
}

#[test]
fn a_bad_argument_is_a_usage_error() {
    let o = agentsim(&["run", EXAMPLE, "--seed", "minus-one"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("invalid value"));
}

#[test]
fn a_nul_byte_is_a_located_error_not_the_end_of_the_file() {
    // Before the fix the parser stopped at the NUL and the run passed without the last step.
    let path = scratch(
        "nul.yaml",
        "name: t\nllm: {main: [hi]}\nsteps:\n  - user: x\n  - expect: {sent: [hi]}\n\0  - expect: {depth: 99}\n",
    );
    let o = agentsim(&["run", path.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2), "{}", stdout(&o));
    assert!(
        stderr(&o).contains("nul.yaml:6:1: a NUL byte"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn only_a_regular_file_is_read() {
    for (path, what) in [
        ("/dev/zero", "not a regular file"),
        ("scenarios", "a directory"),
    ] {
        let o = agentsim(&["run", path]);
        assert_eq!(o.status.code(), Some(2));
        assert!(stderr(&o).contains(what), "{path}: {}", stderr(&o));
    }
    // A named pipe would block a reader forever: it is refused before it is opened.
    let fifo = Path::new(env!("CARGO_TARGET_TMPDIR")).join("cli-fifo.yaml");
    let _ = std::fs::remove_file(&fifo);
    let made = Command::new("mkfifo").arg(&fifo).status();
    if made.is_ok_and(|s| s.success()) {
        let o = agentsim(&["run", fifo.to_str().unwrap()]);
        assert_eq!(o.status.code(), Some(2));
        assert!(stderr(&o).contains("not a regular file"), "{}", stderr(&o));
    }
}

#[test]
fn invalid_utf8_is_located() {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("cli");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("latin1.yaml");
    std::fs::write(&path, b"name: t\nsteps:\n  - user: \"caf\xe9\"\n").unwrap();
    let o = agentsim(&["run", path.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("latin1.yaml:3:"), "{}", stderr(&o));
}

#[test]
fn no_invariants_refuses_a_scenario_that_expects_a_violation() {
    // Before the fix the run reported that it "kept" the invariant although nothing was checked.
    let o = agentsim(&[
        "run",
        "scenarios/regressions/planted/double-delivery.yaml",
        "--no-invariants",
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", stdout(&o));
    assert!(
        stderr(&o).contains("--no-invariants checks none"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn the_rerun_command_keeps_no_invariants() {
    let path = scratch(
        "wrong-expectation.yaml",
        "name: t\nllm: {main: [hi]}\nsteps:\n  - user: x\n  - expect: {sent: [bye]}\n",
    );
    let o = agentsim(&["run", path.to_str().unwrap(), "--no-invariants"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("--seed 0 --no-invariants"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn content_after_the_scenario_is_an_error_not_ignored() {
    // Before the fix both passed: the parser stopped after the first document.
    for (name, text, at) in [
        (
            "junk.yaml",
            "{\"name\": \"j\", \"llm\": {\"main\": [\"hi\"]}, \"steps\": [{\"user\": \"x\"}]} junk\n",
            "junk.yaml:1:66:",
        ),
        (
            "two.json",
            "{\"name\": \"j\", \"llm\": {\"main\": [\"hi\"]}, \"steps\": [{\"user\": \"x\"}]}\n{\"name\": \"k\", \"steps\": [{\"expect\": {\"depth\": 99}}]}\n",
            "two.json:2:1:",
        ),
        (
            "two-docs.yaml",
            "name: a\nllm: {main: [hi]}\nsteps:\n  - user: x\n---\nname: b\nsteps: []\n",
            "two-docs.yaml:6:1: a second document starts here",
        ),
    ] {
        let path = scratch(name, text);
        let o = agentsim(&["run", path.to_str().unwrap()]);
        assert_eq!(o.status.code(), Some(2), "{name}: {}", stdout(&o));
        assert!(stderr(&o).contains(at), "{name}: {}", stderr(&o));
    }
}

/// `check` walks a scenario tree as users keep it: a hidden folder (`.git/`) is not entered, an
/// editor's lock link is skipped and reported, the JSON Schema the docs suggest keeping beside the
/// scenarios is reported as skipped, a symbolic link loop is walked once, and a dangling link is reported by path while
/// the other scenarios still run. Before the fix the dangling link aborted the whole run.
#[test]
fn check_reports_a_bad_entry_and_goes_on() {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("cli-check-tree");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join(".git")).unwrap();
    std::fs::create_dir_all(dir.join("sub")).unwrap();
    std::fs::copy(EXAMPLE, dir.join("stack-diagram.yaml")).unwrap();
    std::fs::write(dir.join(".git/broken.yaml"), "garbage: [").unwrap();
    let schema = agentsim(&["schema"]);
    std::fs::write(dir.join("scenario.schema.json"), &schema.stdout).unwrap();
    std::os::unix::fs::symlink("/nonexistent/x.yaml", dir.join("dangling.yaml")).unwrap();
    std::os::unix::fs::symlink("/nonexistent/y.yaml", dir.join(".#lock.yaml")).unwrap();
    std::os::unix::fs::symlink(&dir, dir.join("sub/loop")).unwrap();
    let o = agentsim(&["check", dir.to_str().unwrap()]);
    let out = stdout(&o);
    assert_eq!(o.status.code(), Some(1), "{out}{}", stderr(&o));
    assert!(
        out.contains("FAIL ") && out.contains("dangling.yaml"),
        "{out}"
    );
    assert!(out.contains("a symbolic link to nothing"), "{out}");
    assert!(
        out.contains("ok   ") && out.contains("stack-diagram.yaml"),
        "{out}"
    );
    // Every file with a scenario's name that is not run is reported, and counted (issue 36).
    assert!(
        out.contains("4 scenarios: 1 passed, 1 failed, 2 skipped"),
        "{out}"
    );
    assert!(out.contains("scenario.schema.json (a JSON Schema"), "{out}");
    assert!(out.contains(".#lock.yaml (hidden"), "{out}");
    assert!(
        !out.contains("broken.yaml"),
        "a hidden folder is not entered: {out}"
    );
}

#[test]
fn a_user_step_without_text_and_an_out_file_say_what_is_wrong() {
    // Before: "a step has exactly one of `user`, ..." for a step that has `user`.
    let path = scratch("user-no-text.yaml", "name: t\nsteps:\n  - user:\n");
    let o = agentsim(&["run", path.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("`user:` needs the message's text"),
        "{}",
        stderr(&o)
    );
    // Before: explored, then "could not write ...: File exists".
    let file = scratch("not-a-dir", "");
    let o = agentsim(&[
        "explore",
        "--generated",
        "--runs",
        "1",
        "--out",
        file.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("not a directory"), "{}", stderr(&o));
}

#[test]
fn a_name_with_control_characters_is_printed_escaped() {
    // Before: the escape sequence went to the terminal as it was.
    let path = scratch(
        "evil-name.yaml",
        "name: \"evil \\e[31mred\"\nllm: {main: [hi]}\nsteps:\n  - user: x\n",
    );
    let o = agentsim(&["run", path.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(out.starts_with("# evil \\u{1b}[31mred\n"), "{out:?}");
    assert!(!out.contains('\u{1b}'), "{out:?}");
}

/// Sends SIGINT (what Ctrl-C sends) to a child process.
pub(super) fn interrupt(child: &std::process::Child) {
    let status = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .expect("kill runs");
    assert!(status.success());
}

/// Waits at most `secs` for `child` to exit; kills it and fails the test if it does not.
pub(super) fn wait_bounded(child: &mut std::process::Child, secs: u64) -> std::process::ExitStatus {
    for _ in 0..secs * 20 {
        if let Some(status) = child.try_wait().expect("the child can be waited for") {
            return status;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let _ = child.kill();
    let _ = child.wait();
    panic!("the process did not exit within {secs}s");
}

pub(super) fn spawn_agentsim(args: &[&str]) -> std::process::Child {
    Command::new(env!("CARGO_BIN_EXE_agentsim"))
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .env_remove("AGENTSIM_SEED")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("the binary starts")
}

pub(super) fn read_all(pipe: Option<impl std::io::Read>) -> String {
    let mut text = String::new();
    if let Some(mut pipe) = pipe {
        std::io::Read::read_to_string(&mut pipe, &mut text).expect("readable");
    }
    text
}

/// A directory with a passing, a failing and a broken scenario (the failing one second).
fn mixed_corpus(tag: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("cli/mixed-{tag}"));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("sub")).unwrap();
    std::fs::write(
        dir.join("a-ok.yaml"),
        "name: ok\nllm:\n  main: [hello]\nsteps:\n  - user: hi\n  - expect: { sent: [hello] }\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("b-wrong.yaml"),
        "name: wrong\nllm:\n  main: [hello]\nsteps:\n  - user: hi\n  - expect: { sent: [goodbye] }\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("sub/c-broken.yaml"),
        "name: broken\nagents:\n  main: { max_iteration: 3 }\nsteps: []\n",
    )
    .unwrap();
    dir
}

#[test]
fn check_json_reports_each_scenario_with_a_structured_failure() {
    let dir = mixed_corpus("json");
    let o = agentsim(&["check", dir.to_str().unwrap(), "--format", "json"]);
    assert_eq!(o.status.code(), Some(1));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("one JSON document");
    assert_eq!(v["passed"], 1);
    assert_eq!(v["failed"], 2);
    let s = v["scenarios"].as_array().unwrap();
    assert_eq!(s.len(), 3);
    assert_eq!(s[0]["passed"], true);
    let wrong = &s[1]["failure"];
    assert_eq!(wrong["kind"], "expectation");
    assert_eq!(wrong["step"], 2);
    assert_eq!(wrong["line"], 6);
    assert_eq!(wrong["mismatches"][0]["what"], "sent");
    assert_eq!(wrong["mismatches"][0]["actual"], "[\"hello\"]");
    assert!(s[1]["rerun"].as_str().unwrap().starts_with("agentsim run "));
    let broken = &s[2]["failure"];
    assert_eq!(broken["kind"], "load");
    assert_eq!(broken["line"], 3);
    assert!(broken["message"]
        .as_str()
        .unwrap()
        .contains("unknown field `max_iteration`"));
}

#[test]
fn run_json_keeps_the_failure_structured_and_load_errors_are_json() {
    let dir = mixed_corpus("run-json");
    let o = agentsim(&[
        "run",
        dir.join("b-wrong.yaml").to_str().unwrap(),
        "--format",
        "json",
    ]);
    assert_eq!(o.status.code(), Some(1));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["failure"]["kind"], "expectation");
    assert_eq!(v["failure"]["column"], 5);
    assert!(v["rerun"].as_str().unwrap().contains("--seed 0"));
    let o = agentsim(&[
        "run",
        dir.join("sub/c-broken.yaml").to_str().unwrap(),
        "--format",
        "json",
    ]);
    assert_eq!(o.status.code(), Some(2));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("JSON even so");
    assert_eq!(v["passed"], false);
    assert_eq!(v["failure"]["kind"], "load");
    assert_eq!(v["failure"]["line"], 3);
}

#[test]
fn check_junit_writes_a_case_per_file_with_failures_and_errors() {
    let dir = mixed_corpus("junit");
    let report = dir.join("report.xml");
    let o = agentsim(&[
        "check",
        dir.to_str().unwrap(),
        "--junit",
        report.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(1));
    let x = std::fs::read_to_string(&report).unwrap();
    assert!(x.contains("tests=\"3\" failures=\"1\" errors=\"1\""), "{x}");
    assert_eq!(x.matches("<testcase ").count(), 3, "{x}");
    assert!(x.contains("name=\"a-ok\""), "{x}");
    assert!(x.contains("<failure message=\"step 2 (line 6, column 5): expectation failed\" type=\"expectation\">"), "{x}");
    assert!(
        x.contains("b-wrong.yaml:6:5\nseed: 0\nrerun: agentsim run "),
        "{x}"
    );
    assert!(
        x.contains("<error message=") && x.contains("type=\"load\""),
        "{x}"
    );
    // The text report still comes out as usual.
    assert!(stdout(&o).contains("3 scenarios: 1 passed, 2 failed"));
}

#[test]
fn check_filters_stops_early_and_keeps_order_with_many_jobs() {
    let dir = mixed_corpus("filter");
    let d = dir.to_str().unwrap();
    let o = agentsim(&["check", d, "--filter", "a-ok"]);
    assert!(o.status.success(), "{}", stdout(&o));
    assert!(stdout(&o).contains("1 scenarios: 1 passed, 0 failed"));
    let o = agentsim(&["check", d, "--filter", "nothing-like-this"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("no scenario file matches --filter nothing-like-this"));
    let o = agentsim(&["check", d, "--fail-fast", "--jobs", "1"]);
    assert_eq!(o.status.code(), Some(1));
    let out = stdout(&o);
    assert!(out.contains("FAIL"), "{out}");
    assert!(out.contains("not run (--fail-fast)"), "{out}");
    // The broken file sorts after the wrong one only in its subdirectory: one failure stops it.
    assert!(
        out.contains("3 scenarios: 1 passed, 1 failed, 1 not run"),
        "{out}"
    );
    let lines = |jobs: &str| {
        let o = agentsim(&["check", "scenarios", "--jobs", jobs]);
        assert!(o.status.success());
        let out = stdout(&o);
        out.lines()
            .filter(|l| !l.contains(" scenarios: "))
            .map(str::to_owned)
            .collect::<Vec<_>>()
    };
    assert_eq!(lines("1"), lines("4"), "the report keeps the files' order");
}

#[test]
fn run_draws_a_page_and_a_mermaid_diagram_and_check_a_page_per_scenario() {
    let page = Path::new(env!("CARGO_TARGET_TMPDIR")).join("cli/stack.html");
    let o = agentsim(&["run", EXAMPLE, "--html", page.to_str().unwrap()]);
    assert!(o.status.success());
    assert!(
        stdout(&o).contains("push skill:research"),
        "the transcript still prints"
    );
    let html = std::fs::read_to_string(&page).unwrap();
    assert!(html.contains("<svg id=\"timeline\"") && html.contains("<svg id=\"sequence\""));
    let o = agentsim(&["run", EXAMPLE, "--mermaid"]);
    assert!(o.status.success());
    let m = stdout(&o);
    assert!(
        m.starts_with("sequenceDiagram\n    participant P0 as user\n"),
        "{m}"
    );
    let o = agentsim(&["run", EXAMPLE, "--mermaid", "--format", "json"]);
    assert_eq!(o.status.code(), Some(2), "one output at a time");
    let dir = mixed_corpus("html");
    let pages = dir.join("pages");
    let o = agentsim(&[
        "check",
        dir.to_str().unwrap(),
        "--html",
        pages.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(1));
    let index = std::fs::read_to_string(pages.join("index.html")).unwrap();
    assert_eq!(index.matches("<li>").count(), 3, "{index}");
    let written: Vec<String> = std::fs::read_dir(&pages)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n != "index.html")
        .collect();
    assert_eq!(
        written.len(),
        2,
        "a page per scenario that ran: {written:?}"
    );
    let failing = written.iter().find(|n| n.contains("b-wrong")).unwrap();
    let html = std::fs::read_to_string(pages.join(failing)).unwrap();
    assert!(html.contains("class=\"verdict failed\""));
    assert!(index.contains(&format!("href=\"{failing}\"")), "{index}");
}
