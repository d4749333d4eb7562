//! The `agentsim` binary as a user runs it: exit codes, what goes to stdout and stderr, located
//! load errors, and byte-identical transcripts across two separate processes.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn agentsim(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_agentsim"))
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .env_remove("AGENTSIM_SEED")
        .output()
        .expect("the binary runs")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// A scratch file under the target directory.
fn scratch(name: &str, contents: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("cli");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, contents).unwrap();
    path
}

const EXAMPLE: &str = "scenarios/examples/stack-diagram.yaml";

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
fn explore_finds_a_planted_bug_writes_a_file_that_replays_it_and_exits_one() {
    let out = Path::new(env!("CARGO_TARGET_TMPDIR")).join("explore-out");
    let _ = std::fs::remove_dir_all(&out);
    let o = agentsim(&[
        "explore",
        "--generated",
        "--runs",
        "40",
        "--jobs",
        "1",
        "--bug",
        "iteration-off-by-one",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(1), "{}", stdout(&o));
    let text = stdout(&o);
    assert!(text.contains("iteration-bound"), "{text}");
    let seed: u64 = text
        .split("replay: agentsim explore --generated --seed ")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no replay command: {text}"));
    assert!(
        text.contains(&format!(
            "--seed {seed} --runs 1 --bug iteration-off-by-one"
        )),
        "{text}"
    );
    let file = out.join(format!("iteration-bound-{seed}.yaml"));
    assert!(file.exists(), "{text}");
    let o = agentsim(&["run", file.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stdout(&o));
    assert!(stdout(&o).contains("reproduced: invariant iteration-bound broke"));
}

#[test]
fn explore_without_bugs_exits_zero_with_a_summary() {
    let o = agentsim(&["explore", "--generated", "--runs", "100", "--no-write"]);
    assert!(o.status.success(), "{}", stdout(&o));
    let text = stdout(&o);
    assert!(text.contains("100 runs from seed 0"), "{text}");
    assert!(text.contains("runs/s"), "{text}");
    assert!(text.contains("violations: none"), "{text}");
    let o = agentsim(&["explore"]);
    assert_eq!(o.status.code(), Some(2), "FILE or --generated is required");
}

#[test]
fn explore_help_names_every_planted_bug() {
    let o = agentsim(&["explore", "--help"]);
    let text = stdout(&o);
    for bug in agentsim::runtime::planted::PlantedBug::ALL {
        assert!(text.contains(bug.name()), "{bug} missing from --help");
    }
}

#[test]
fn bench_json_reports_every_field_for_each_repetition() {
    let o = agentsim(&[
        "bench",
        "--workload",
        "w1",
        "--observer",
        "both",
        "--seconds",
        "0.02",
        "--repeat",
        "3",
        "--json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out: serde_json::Value = serde_json::from_str(&stdout(&o)).expect("bench --json is JSON");
    let rows = out["workloads"].as_array().expect("a workloads array");
    assert_eq!(rows.len(), 2, "observer on and off: {out}");
    for (row, observer) in rows.iter().zip([true, false]) {
        assert_eq!(row["workload"], "w1");
        assert_eq!(row["observer"], observer);
        assert_eq!(row["repeats"], 3);
        let f = |k: &str| row[k].as_f64().unwrap_or_else(|| panic!("{k} in {row}"));
        let (min, ns, max) = (f("ns_per_turn_min"), f("ns_per_turn"), f("ns_per_turn_max"));
        assert!(0.0 < min && min <= ns && ns <= max, "{row}");
        assert!((f("turns_per_sec") * ns / 1e9 - 1.0).abs() < 1e-9, "{row}");
        // Every run of W1 makes 9 model turns.
        assert_eq!(f("turns"), 9.0 * f("runs"), "{row}");
    }
}

#[test]
fn bench_rejects_a_bad_repeat_or_seconds_as_usage_errors() {
    let o = agentsim(&["bench", "--repeat", "0"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("--repeat"), "{}", stderr(&o));
    let o = agentsim(&["bench", "--seconds", "-1"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    let o = agentsim(&["bench", "--workload", "w9"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
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
fn explore_jobs_are_bounded() {
    for jobs in ["0", "257"] {
        let o = agentsim(&["explore", "--generated", "--runs", "1", "--jobs", jobs]);
        assert_eq!(o.status.code(), Some(2), "--jobs {jobs}");
        assert!(stderr(&o).contains("is not in 1..=256"), "{}", stderr(&o));
    }
}

#[test]
fn explore_never_overwrites_a_file_in_out() {
    let explore = |dir: &Path| {
        let _ = std::fs::create_dir_all(dir);
        agentsim(&[
            "explore",
            "--generated",
            "--runs",
            "20",
            "--no-steer",
            "--bug",
            "iteration-off-by-one",
            "--out",
            dir.to_str().unwrap(),
        ])
    };
    // Where exploration writes its finding.
    let first = Path::new(env!("CARGO_TARGET_TMPDIR")).join("cli-explore-first");
    let _ = std::fs::remove_dir_all(&first);
    assert_eq!(explore(&first).status.code(), Some(1));
    let written: Vec<_> = std::fs::read_dir(&first)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    let [name] = &written[..] else {
        panic!("one finding, one file: {written:?}")
    };
    assert!(name.starts_with("iteration-bound-"), "{name}");
    // A regression the user edited after a fix, where exploration would write its next finding.
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("cli-explore-out");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let edited = dir.join(name);
    std::fs::write(&edited, "# edited by hand\n").unwrap();
    let o = explore(&dir);
    assert_eq!(o.status.code(), Some(1));
    assert!(stdout(&o).contains("exists and is kept"), "{}", stdout(&o));
    assert_eq!(
        std::fs::read_to_string(&edited).unwrap(),
        "# edited by hand\n"
    );
    let again = name.replace(".yaml", "-2.yaml");
    assert!(dir.join(&again).exists(), "{again}");
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
fn interrupt(child: &std::process::Child) {
    let status = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .expect("kill runs");
    assert!(status.success());
}

/// Waits at most `secs` for `child` to exit; kills it and fails the test if it does not.
fn wait_bounded(child: &mut std::process::Child, secs: u64) -> std::process::ExitStatus {
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

fn spawn_agentsim(args: &[&str]) -> std::process::Child {
    Command::new(env!("CARGO_BIN_EXE_agentsim"))
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .env_remove("AGENTSIM_SEED")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("the binary starts")
}

fn read_all(pipe: Option<impl std::io::Read>) -> String {
    let mut text = String::new();
    if let Some(mut pipe) = pipe {
        std::io::Read::read_to_string(&mut pipe, &mut text).expect("readable");
    }
    text
}

/// Issue 13 item 7: Ctrl-C during `explore` stops the runs, prints the summary, and shrinks and
/// writes what was found.
#[test]
fn ctrl_c_during_explore_summarizes_and_writes_what_was_found() {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("cli-ctrl-c");
    let _ = std::fs::remove_dir_all(&dir);
    let dir_arg = dir.to_str().unwrap();
    let mut child = spawn_agentsim(&[
        "explore",
        "--generated",
        "--bug",
        "iteration-off-by-one",
        "--runs",
        "100000000",
        "--jobs",
        "2",
        "--out",
        dir_arg,
    ]);
    // The bug is found at seed 7; a debug build makes thousands of runs a second.
    std::thread::sleep(std::time::Duration::from_secs(2));
    interrupt(&child);
    let status = wait_bounded(&mut child, 120);
    let out = read_all(child.stdout.take());
    let err = read_all(child.stderr.take());
    assert_eq!(status.code(), Some(1), "{out}\n{err}");
    assert!(out.contains("interrupted after "), "{out}");
    assert!(out.contains("iteration-bound: "), "{out}");
    assert!(out.contains("shrunk to "), "{out}");
    assert!(
        err.contains("interrupted: stopping the runs in flight"),
        "{err}"
    );
    let written = std::fs::read_dir(&dir).expect("the out directory").count();
    assert_eq!(written, 1, "{out}");

    // Nothing found: the summary says so, and the exit code says the runs did not all happen.
    let mut child = spawn_agentsim(&[
        "explore",
        "--generated",
        "--runs",
        "100000000",
        "--no-write",
    ]);
    std::thread::sleep(std::time::Duration::from_millis(500));
    interrupt(&child);
    let status = wait_bounded(&mut child, 60);
    let out = read_all(child.stdout.take());
    assert_eq!(status.code(), Some(130), "{out}");
    assert!(
        out.contains("interrupted after ") && out.contains("violations: none"),
        "{out}"
    );
}

/// A second Ctrl-C quits at once, whatever the process is doing. Here it is blocked writing a
/// transcript nobody reads, so only the second Ctrl-C can end it.
#[test]
fn a_second_ctrl_c_quits_at_once() {
    let mut src = String::from("name: long\nagents: { main: {} }\nllm:\n  main:\n");
    for _ in 0..3_000 {
        src.push_str(
            "    - a reply long enough to fill a pipe quickly, line after line after line\n",
        );
    }
    src.push_str("steps:\n");
    for _ in 0..3_000 {
        src.push_str("  - user: hello there, a message long enough to fill a pipe\n");
    }
    let file = scratch("long-transcript.yaml", &src);
    let mut child = spawn_agentsim(&[
        "explore",
        file.to_str().unwrap(),
        "--runs",
        "1",
        "--no-faults",
        "--no-write",
    ]);
    let mut stderr = std::io::BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    // The run is over once its transcript starts coming; the transcript (a megabyte) is more than
    // the pipe holds, so the process blocks writing it, for good, since nothing reads on.
    let mut first = [0u8; 1];
    std::io::Read::read_exact(child.stdout.as_mut().unwrap(), &mut first).unwrap();
    interrupt(&child);
    loop {
        line.clear();
        let n = std::io::BufRead::read_line(&mut stderr, &mut line).unwrap();
        assert!(
            n > 0,
            "stderr closed before the first interrupt was acknowledged"
        );
        if line.contains("interrupted: stopping") {
            break;
        }
    }
    assert!(
        child.try_wait().unwrap().is_none(),
        "still blocked on its output"
    );
    interrupt(&child);
    let status = wait_bounded(&mut child, 30);
    let rest = read_all(Some(stderr));
    assert_eq!(status.code(), Some(130), "{rest}");
    assert!(rest.contains("interrupted again: quitting"), "{rest}");
}

/// Issue 13 item 5: a worker that cannot be spawned is a warning, not a panic. A stack size no
/// system can map makes every spawn fail, deterministically.
#[test]
fn explore_goes_on_when_threads_cannot_be_spawned() {
    let o = Command::new(env!("CARGO_BIN_EXE_agentsim"))
        .args([
            "explore",
            "--generated",
            "--runs",
            "20",
            "--jobs",
            "4",
            "--no-write",
        ])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .env_remove("AGENTSIM_SEED")
        .env("RUST_MIN_STACK", (1u64 << 46).to_string())
        .output()
        .expect("the binary runs");
    let (out, err) = (stdout(&o), stderr(&o));
    assert_eq!(o.status.code(), Some(0), "{out}\n{err}");
    assert!(err.contains("cannot start worker threads"), "{err}");
    assert!(err.contains("exploring on the main thread"), "{err}");
    assert!(out.contains("20 runs from seed 0, 1 jobs"), "{out}");
    assert!(!err.contains("panicked"), "{err}");
}

/// Issue 14 item 3: steering is deterministic whatever the number of workers (a seed's
/// configuration depends on finished epochs only), and it reaches behaviour the default
/// configuration reaches less often.
#[test]
fn steered_exploration_is_deterministic_and_reaches_more() {
    let summary = |extra: &[&str]| {
        let mut args = vec!["explore", "--generated", "--runs", "3000", "--no-write"];
        args.extend_from_slice(extra);
        let o = agentsim(&args);
        assert!(o.status.success(), "{}", stdout(&o));
        // Everything but the timing line.
        stdout(&o)
            .lines()
            .filter(|l| !l.contains("runs/s"))
            .collect::<Vec<_>>()
            .join("\n")
    };
    let one = summary(&["--jobs", "1"]);
    let two = summary(&["--jobs", "2"]);
    assert_eq!(
        one.replace("1 jobs", "N jobs"),
        two.replace("2 jobs", "N jobs")
    );
    assert!(
        one.contains("steered toward rare behaviour, runs per configuration: default "),
        "{one}"
    );
    let reached = |s: &str| -> usize {
        let line = s
            .lines()
            .find(|l| l.contains("features reached"))
            .expect("a coverage line");
        line.split_whitespace().nth(1).unwrap().parse().unwrap()
    };
    let plain = summary(&["--no-steer"]);
    assert!(!plain.contains("steered"), "{plain}");
    assert!(reached(&one) > reached(&plain), "{one}\n{plain}");
}

#[test]
fn an_unknown_swarm_configuration_is_a_usage_error() {
    let o = agentsim(&["explore", "--generated", "--swarm", "nope", "--runs", "1"]);
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("no such configuration") && err.contains("odd-tools"),
        "{err}"
    );
    let o = agentsim(&[
        "explore",
        "--generated",
        "--swarm",
        "odd-tools",
        "--runs",
        "20",
        "--no-write",
    ]);
    assert!(o.status.success(), "{}", stdout(&o));
    assert!(!stdout(&o).contains("steered"), "{}", stdout(&o));
}

/// One HTTP/1.1 request over a plain socket; the response's status and body.
#[cfg(feature = "mock-server")]
fn http(addr: &str, method: &str, path: &str, body: &str) -> (u16, String) {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).expect("the server accepts");
    s.set_read_timeout(Some(std::time::Duration::from_secs(20)))
        .unwrap();
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nhost: {addr}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).expect("a response");
    let status = out[9..12].parse().expect("a status line");
    let body = out.split_once("\r\n\r\n").map_or("", |(_, b)| b).to_owned();
    (status, body)
}

#[cfg(feature = "mock-server")]
#[test]
fn mock_llm_serves_until_shutdown_prints_its_report_and_fails_on_unused_replies() {
    use std::io::BufRead;
    let path = scratch(
        "mock.yaml",
        "name: mock\nllm: {main: [Hello there., Unused.]}\nsteps:\n  - user: hi\n",
    );
    let report = Path::new(env!("CARGO_TARGET_TMPDIR")).join("cli/mock-report.json");
    let transcript = Path::new(env!("CARGO_TARGET_TMPDIR")).join("cli/mock-transcript.txt");
    let mut child = Command::new(env!("CARGO_BIN_EXE_agentsim"))
        .args(["mock-llm", path.to_str().unwrap(), "--addr", "127.0.0.1:0"])
        .arg("--report")
        .arg(&report)
        .arg("--transcript")
        .arg(&transcript)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("the binary runs");
    let mut stdout = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut first = String::new();
    stdout.read_line(&mut first).unwrap();
    let addr = first
        .trim()
        .strip_prefix("listening on http://")
        .unwrap_or_else(|| panic!("first line: {first:?}"))
        .to_owned();
    let (status, body) = http(
        &addr,
        "POST",
        "/v1/messages",
        r#"{"model":"main","max_tokens":10,"messages":[{"role":"user","content":"hi"}]}"#,
    );
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("Hello there."), "{body}");
    let (status, _) = http(&addr, "POST", "/_agentsim/shutdown", "");
    assert_eq!(status, 200);
    let exit = wait_bounded(&mut child, 30);
    assert_eq!(exit.code(), Some(1), "an unused reply fails the run");
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut stdout, &mut rest).unwrap();
    assert!(
        rest.contains("mock-llm: mock: 1 exchanges, 1 conversations"),
        "{rest}"
    );
    assert!(
        rest.contains("never served: agent `main`, entry 2"),
        "{rest}"
    );
    assert!(rest.trim_end().ends_with("FAIL"), "{rest}");
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
    assert_eq!(json["passed"], false);
    assert_eq!(json["unused"][0]["entries"], serde_json::json!([2]));
    let transcript = std::fs::read_to_string(&transcript).unwrap();
    assert_eq!(
        transcript,
        "#1 POST /v1/messages → main, conversation 1, turn 0, entry 1\n   main → llm: 1 messages, tools []; last: user text \"hi\"\n   main ← llm: text \"Hello there.\" [tokens 1 in, 3 out]\n"
    );
}

#[cfg(feature = "mock-server")]
#[test]
fn mock_llm_refuses_a_bad_scenario_or_address_with_a_clear_error() {
    let o = agentsim(&["mock-llm", "no/such/file.yaml", "--addr", "127.0.0.1:0"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("no/such/file.yaml"), "{}", stderr(&o));
    let path = scratch("mock-noscript.yaml", "name: x\nsteps:\n  - user: hi\n");
    let o = agentsim(&["mock-llm", path.to_str().unwrap(), "--addr", "127.0.0.1:0"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("the scenario has no `llm` scripts to serve"),
        "{}",
        stderr(&o)
    );
    let o = agentsim(&["mock-llm", path.to_str().unwrap(), "--addr", "nowhere"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("--addr"), "{}", stderr(&o));
}

#[cfg(feature = "mock-server")]
#[test]
fn bench_mock_llm_measures_every_mode_with_no_error_and_reports_json() {
    let o = agentsim(&[
        "bench",
        "mock-llm",
        "--seconds",
        "0.2",
        "--connections",
        "2",
        "--server-threads",
        "1",
        "--api",
        "openai-chat",
        "--api",
        "openai-responses",
        "--json",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).expect("JSON");
    let rows = v["rows"].as_array().unwrap();
    let modes: Vec<(String, bool)> = rows
        .iter()
        .map(|r| (r["api"].as_str().unwrap().to_owned(), r["stream"] == true))
        .collect();
    assert_eq!(
        modes,
        [
            ("openai-chat".to_owned(), false),
            ("openai-chat".to_owned(), true),
            ("openai-responses".to_owned(), false),
            ("openai-responses".to_owned(), true)
        ]
    );
    for r in rows {
        assert_eq!(r["server"], "agentsim");
        assert!(r["requests"].as_u64().unwrap() > 0, "{r}");
        assert_eq!(r["errors"], 0, "{r}");
        assert!(r["p50_us"].as_u64().unwrap() <= r["p99_us"].as_u64().unwrap());
    }
    assert_eq!(v["ratios"], serde_json::json!([]));
    // Flags of one kind of bench are refused with the other.
    let o = agentsim(&["bench", "--stream", "no"]);
    assert_eq!(o.status.code(), Some(2));
    let o = agentsim(&["bench", "mock-llm", "--repeat", "2"]);
    assert_eq!(o.status.code(), Some(2));
    let o = agentsim(&["bench", "mock-llm", "--workload", "w1"]);
    assert_eq!(o.status.code(), Some(2));
    // A server that does not give the benchmark's reply is an error, never a row.
    let o = agentsim(&[
        "bench",
        "mock-llm",
        "--seconds",
        "0.1",
        "--against",
        "nobody=http://127.0.0.1:9",
    ]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("nobody (openai-chat): no answer"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
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
fn explore_partitions_are_disjoint_and_their_summaries_add_up() {
    let number = |out: &str, before: &str| -> u64 {
        let i = out
            .find(before)
            .unwrap_or_else(|| panic!("{before:?} in {out}"));
        out[..i]
            .rsplit(|c: char| !c.is_ascii_digit())
            .find(|w| !w.is_empty())
            .unwrap()
            .parse()
            .unwrap()
    };
    let whole = agentsim(&[
        "explore",
        "--generated",
        "--runs",
        "31",
        "--no-steer",
        "--no-write",
        "--jobs",
        "2",
    ]);
    assert!(whole.status.success(), "{}", stdout(&whole));
    let whole_faults = number(&stdout(&whole), " faults injected");
    let (mut runs, mut faults, mut next_seed) = (0, 0, 0u64);
    for i in 1..=4 {
        let part = format!("{i}/4");
        let o = agentsim(&[
            "explore",
            "--generated",
            "--runs",
            "31",
            "--no-steer",
            "--no-write",
            "--partition",
            &part,
        ]);
        assert!(o.status.success(), "{}", stdout(&o));
        let out = stdout(&o);
        let first = number(&out, " to ");
        assert_eq!(first, next_seed, "{out}");
        let count = number(&out, " of 31 runs)");
        next_seed = first + count;
        runs += count;
        faults += number(&out, " faults injected");
    }
    assert_eq!((runs, next_seed), (31, 31));
    assert_eq!(
        faults, whole_faults,
        "the partitions ran exactly the whole run's seeds"
    );
    let o = agentsim(&["explore", "--generated", "--partition", "5/4"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("expected I/N with 1 <= I <= N"));
}

#[test]
fn explore_stops_at_its_time_budget_and_leaves_out_fault_kinds() {
    let o = agentsim(&[
        "explore",
        "--generated",
        "--runs",
        "100000000",
        "--time",
        "0.5",
        "--no-write",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stdout(&o).contains("of 100000000 runs in the time budget of 0.5s"),
        "{}",
        stdout(&o)
    );
    let mut args = vec!["explore", "--generated", "--runs", "50", "--no-write"];
    for kind in [
        "llm-error",
        "llm-stall",
        "llm-latency",
        "tool-error",
        "tool-latency",
        "user-message",
        "cancel",
        "restart",
        "restart-mid-turn",
        "intervene",
    ] {
        args.extend(["--no-fault", kind]);
    }
    let o = agentsim(&args);
    assert!(o.status.success(), "{}", stdout(&o));
    assert!(stdout(&o).contains(", 0 faults injected"), "{}", stdout(&o));
    // A failure's replay command carries the kinds left out, so that it replays the same run.
    let o = agentsim(&[
        "explore",
        "--generated",
        "--runs",
        "300",
        "--no-write",
        "--bug",
        "double-delivery",
        "--no-fault",
        "cancel",
    ]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stdout(&o).contains("--no-fault cancel"), "{}", stdout(&o));
    let o = agentsim(&["explore", "--generated", "--no-fault", "bogus"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("unknown fault kind `bogus`"));
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
