//! `explore`, `mock-llm` and `bench` as a user runs them: findings written and replayed, partitions,
//! time budgets, steering, Ctrl-C, the mock server's report and the benchmarks' JSON. The helpers
//! that run the binary are `cli.rs`'s.

use std::path::Path;
use std::process::Command;

use super::cli::{
    agentsim, interrupt, read_all, scratch, spawn_agentsim, stderr, stdout, wait_bounded,
};

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
    // The continuation workload: a row of its own, every history sound (the server's report would
    // fail the bench otherwise).
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
        "anthropic",
        "--stream",
        "no",
        "--continuation",
        "--json",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).expect("JSON");
    let rows = v["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 2, "{v}");
    assert_eq!(rows[1]["api"], "anthropic-continuation");
    assert!(rows[1]["requests"].as_u64().unwrap() >= 3, "{v}");
    assert_eq!(rows[1]["errors"], 0, "{v}");
    // Flags of one kind of bench are refused with the other.
    let o = agentsim(&["bench", "--stream", "no"]);
    assert_eq!(o.status.code(), Some(2));
    let o = agentsim(&["bench", "--continuation"]);
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
