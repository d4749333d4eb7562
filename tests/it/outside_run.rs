//! `run --runtime` and `check --runtime` against tests/runtimes/fake.py, a runtime of the standard
//! library that misbehaves on purpose: every fault is a failure that names what happened (never a
//! pass, never a hang), and a well-behaved runtime passes.

use std::path::{Path, PathBuf};
use std::process::Output;

use super::support::text;

fn fresh(name: &str) -> PathBuf {
    super::support::fresh_dir("outside-run", name)
}

fn fake(mode: &str, caps: &str) -> String {
    format!("python3 tests/runtimes/fake.py {mode} {caps}")
        .trim_end()
        .to_owned()
}

/// `agentsim ARGS` in the repository, with `SECRET` and `PASSED` in its environment.
fn agentsim(args: &[&str]) -> Output {
    super::support::agentsim_in(
        Path::new(env!("CARGO_MANIFEST_DIR")),
        args,
        &[("SECRET", "sk-do-not-leak"), ("PASSED", "passed-on")],
    )
}

/// Writes `yaml` as `name.yaml` in a fresh directory and runs it against `runtime`.
fn run(name: &str, yaml: &str, runtime: &str, extra: &[&str]) -> Output {
    let dir = fresh(name);
    let file = dir.join(format!("{name}.yaml"));
    std::fs::write(&file, yaml).unwrap();
    let mut args = vec!["run", file.to_str().unwrap(), "--runtime", runtime];
    args.extend_from_slice(extra);
    agentsim(&args)
}

const HELLO: &str = "name: hello
llm: { main: [Hi there., Bye.] }
steps:
  - user: hello
  - expect: { sent: [Hi there.], llm_calls: { main: 1 }, idle: true }
  - user: bye
  - expect: { sent: [Bye.] }
";

const WITH_TOOL: &str = "name: a tool call answered by agentsim
llm:
  main:
    - tool_use: { name: weather, input: { city: Oslo } }
    - It is 4 degrees.
tools:
  weather: { result: 4C, after: 200ms }
steps:
  - user: weather?
  - expect: { sent: [It is 4 degrees.] }
";

#[test]
fn a_runtime_that_keeps_the_protocol_passes_and_its_transcript_shows_both_sides() {
    let o = run("ok", HELLO, &fake("ok", ""), &[]);
    let out = text(&o);
    assert_eq!(o.status.code(), Some(0), "{out}");
    for seen in [
        "user → default (seq 1): \"hello\"",
        "#1 POST /v1/messages → main",
        "runtime → user default: \"Hi there.\"",
        "runtime → idle 2",
        "PASSED",
    ] {
        assert!(out.contains(seen), "{seen:?} in\n{out}");
    }
    let o = run("tool", WITH_TOOL, &fake("ok", ""), &[]);
    let out = text(&o);
    assert_eq!(o.status.code(), Some(0), "{out}");
    assert!(
        out.contains("runtime → tool_call c1-1 weather by main: {\"city\":\"Oslo\"}"),
        "{out}"
    );
    assert!(out.contains("→ tool_result c1-1: \"4C\""), "{out}");
}

#[test]
fn a_wrong_expectation_fails_with_the_step_and_a_rerun_naming_the_runtime() {
    let yaml = HELLO.replace("sent: [Bye.]", "sent: [Goodbye.]");
    let o = run("wrong", &yaml, &fake("ok", ""), &["--runtime-env", "X=1"]);
    let out = text(&o);
    assert_eq!(o.status.code(), Some(1), "{out}");
    assert!(
        out.contains(
            "step 4 (expect, conversation default): sent: expected [\"Goodbye.\"], got [\"Bye.\"]"
        ),
        "{out}"
    );
    assert!(
        out.contains("--runtime 'python3 tests/runtimes/fake.py ok' --runtime-env X=1 --seed 0"),
        "{out}"
    );
}

#[test]
fn every_misbehaviour_fails_the_run_with_what_was_awaited_and_never_hangs() {
    let fast = [
        "--ready-timeout",
        "2s",
        "--idle-timeout",
        "2s",
        "--shutdown-timeout",
        "1s",
    ];
    let cases: [(&str, &str); 8] = [
        ("garbage", "malformed-json"),
        (
            "silent",
            "no `ready` within 2 s (ready timeout, --ready-timeout)",
        ),
        (
            "exit-on-user",
            "the runtime exited (status 3) while agentsim was awaiting `idle` for user seq 1",
        ),
        (
            "no-idle",
            "no `idle` for user seq 1 within 2 s of silence (idle timeout, --idle-timeout)",
        ),
        ("bad-idle", "unknown-seq: `idle` for seq 5, never sent"),
        ("oversize", "oversize-line"),
        ("flood", "flood: more than 100000 lines in one run"),
        (
            "unknown-tool",
            "unknown-tool: `tool_call.name` \"rm_rf\" is not a tool",
        ),
    ];
    for (mode, said) in cases {
        let o = run(mode, HELLO, &fake(mode, ""), &fast);
        let out = text(&o);
        assert_eq!(o.status.code(), Some(1), "{mode}: {out}");
        assert!(out.contains(said), "{mode}: {said:?} in\n{out}");
        assert!(out.contains("FAILED"), "{mode}: {out}");
    }
    // What the runtime said on stderr before it died is quoted.
    let o = run("exit-on-user", HELLO, &fake("exit-on-user", ""), &fast);
    assert!(
        text(&o).contains("  | ValueError: the agent broke"),
        "{}",
        text(&o)
    );
    // A runtime that does not exit after `shutdown` is stopped, and that fails the run.
    let o = run("no-exit", HELLO, &fake("no-exit", ""), &fast);
    let out = text(&o);
    assert_eq!(o.status.code(), Some(1), "{out}");
    assert!(
        out.contains("did not exit within 1 s of `shutdown`"),
        "{out}"
    );
    // A command that does not exist.
    let o = run("missing", HELLO, "./no-such-runtime --flag", &fast);
    let out = text(&o);
    assert_eq!(o.status.code(), Some(1), "{out}");
    assert!(
        out.contains("cannot start the runtime `./no-such-runtime --flag`"),
        "{out}"
    );
}

#[test]
fn a_line_or_a_model_request_after_idle_breaks_the_idle_check() {
    let yaml = "name: idle
llm: { main: [Hi there., Bye.] }
steps:
  - user: hello
  - advance: 1s
  - user: bye
";
    let o = run(
        "request-after-idle",
        yaml,
        &fake("request-after-idle", ""),
        &["--time-scale", "1"],
    );
    let out = text(&o);
    assert_eq!(o.status.code(), Some(1), "{out}");
    assert!(
        out.contains("idle: the runtime made 1 model request(s) after its `idle` for seq 1"),
        "{out}"
    );
    // A line is judged as it arrives: one that comes after agentsim's next line is the next
    // turn's, so the `advance` gives the runtime time to show the bug.
    let o = run(
        "send-after-idle",
        yaml,
        &fake("send-after-idle", ""),
        &["--time-scale", "1"],
    );
    let out = text(&o);
    assert_eq!(o.status.code(), Some(1), "{out}");
    assert!(
        out.contains("idle: the runtime wrote `send` after its `idle` for seq 1"),
        "{out}"
    );
}

#[test]
fn the_runtime_gets_only_the_protocols_environment_and_the_allow_list() {
    let yaml = "name: env
steps:
  - user: what do you see?
  - expect: { sent: ['{\"AGENTSIM_PROTOCOL\": \"1\", \"PASSED\": \"passed-on\", \"SECRET\": null, \"SET\": \"by flag\"}'] }
";
    let o = run(
        "env",
        yaml,
        &fake("env", ""),
        &["--runtime-env", "PASSED", "--runtime-env", "SET=by flag"],
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    for bad in ["ANTHROPIC_BASE_URL=x", "1X", "A-B"] {
        let o = run("env-bad", yaml, &fake("env", ""), &["--runtime-env", bad]);
        assert_eq!(o.status.code(), Some(2), "{bad}: {}", text(&o));
    }
}

#[test]
fn a_leaked_display_text_breaks_no_display_leak_and_a_file_can_expect_it() {
    let yaml = "name: leak
llm:
  main:
    - tool_use: { name: pause, input: {} }
    - Done.
tools:
  pause: ok
steps:
  - user: go
";
    let o = run("leak", yaml, &fake("leak", ""), &[]);
    let out = text(&o);
    assert_eq!(o.status.code(), Some(1), "{out}");
    assert!(
        out.contains("no-display-leak: model request #2 carries \"Interrupted. Tell Ally what to do instead.\""),
        "{out}"
    );
    // The bug report as a file: it passes while the bug is there, and fails once it is fixed.
    let expecting = format!("expect_violation: no-display-leak\n{yaml}");
    let o = run("leak-expected", &expecting, &fake("leak", ""), &[]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(
        text(&o).contains("PASSED: reproduces no-display-leak"),
        "{}",
        text(&o)
    );
    let o = run("leak-fixed", &expecting, &fake("ok", ""), &[]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(
        text(&o).contains("expects no-display-leak to break (expect_violation), and it held"),
        "{}",
        text(&o)
    );
}

#[test]
fn keys_the_runtime_cannot_be_judged_by_are_located_errors_and_check_skips_them() {
    let stack = "name: needs stack
llm: { main: [Hi there.] }
steps:
  - user: hello
  - expect: { sent: [Hi there.], depth: 0 }
";
    // Without the capability, agentsim reads the stack from the model requests.
    let o = run("no-stack", stack, &fake("ok", ""), &[]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let wrong = stack.replace("depth: 0", "depth: 1");
    let o = run("no-stack-wrong", &wrong, &fake("ok", ""), &[]);
    assert!(
        text(&o).contains("depth: expected 1, got 0"),
        "{}",
        text(&o)
    );
    // It does so for one conversation only: two are a located error naming the capability.
    let two = "name: needs stack
llm: { main: [Hi there., Hi again.] }
steps:
  - user: hello
  - user: hello
    key: other
  - expect: { sent: [Hi again.], key: other, depth: 0 }
";
    let o = run("two-conversations", two, &fake("ok", ""), &[]);
    let out = text(&o);
    assert_eq!(o.status.code(), Some(2), "{out}");
    assert!(
        out.contains("two-conversations.yaml:7:5: step 3: `expect.depth` needs the runtime capability `stack`, which `python3 tests/runtimes/fake.py ok` did not offer in `ready` (agentsim reads it from the model requests of a scenario of several conversations only when the runtime names each request's conversation with the header `x-agentsim-conversation` and offers the capability `conversation-header`)"),
        "{out}"
    );
    // With the capability, the runtime's own `stack` lines are judged.
    let o = run("stack", stack, &fake("ok", "stack"), &[]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let o = run("stack-wrong", &wrong, &fake("ok", "stack"), &[]);
    assert!(
        text(&o).contains("depth: expected 1, got 0"),
        "{}",
        text(&o)
    );
    // What no runtime can express is refused before any process starts.
    let response = "name: response
llm: { main: [Hi there.] }
steps:
  - user: hello
  - expect: { time: 1s }
";
    let o = run("response", response, &fake("ok", ""), &[]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(
        text(&o).contains("response.yaml:5:5: step 2: `expect.time` cannot be judged from outside"),
        "{}",
        text(&o)
    );
    // check: the first runs, the others are skipped with the reason, and the total says so.
    let dir = fresh("check");
    std::fs::write(dir.join("a.yaml"), HELLO).unwrap();
    std::fs::write(dir.join("b.yaml"), two).unwrap();
    std::fs::write(dir.join("c.yaml"), response).unwrap();
    let o = agentsim(&[
        "check",
        dir.to_str().unwrap(),
        "--runtime",
        &fake("ok", ""),
        "--jobs",
        "2",
    ]);
    let out = text(&o);
    assert_eq!(o.status.code(), Some(0), "{out}");
    assert!(out.contains("ok   "), "{out}");
    assert!(
        out.contains("b.yaml (") && out.contains("needs the runtime capability `stack`"),
        "{out}"
    );
    assert!(
        out.contains("3 scenarios: 1 passed, 0 failed, 2 skipped"),
        "{out}"
    );
}

/// Two conversations, judged from the model requests alone: `other`'s turn comes after
/// `default`'s, so read as one conversation, `default`'s response would be `other`'s.
const TWO_CONVERSATIONS: &str = "name: two conversations judged from the model requests
llm:
  main:
    - tool_use: { name: weather, input: { city: Oslo } }
    - It is 4 degrees.
    - Hi there.
tools:
  weather: { result: 4C, after: 100ms }
steps:
  - user: weather?
  - user: hello
    key: other
  - expect: { key: other, sent: [Hi there.], depth: 0, response: { text: Hi there., iterations: 1, tool_calls: [] } }
  - expect:
      sent: [It is 4 degrees.]
      depth: 0
      iterations: { main: 2 }
      tool_result: { agent: main, content: 4C }
      response: { text: It is 4 degrees., iterations: 2, tool_calls: [weather] }
";

#[test]
fn a_runtime_that_names_each_requests_conversation_is_judged_from_its_requests_in_every_conversation(
) {
    let caps = "conversation-header";
    let o = run("two-by-header", TWO_CONVERSATIONS, &fake("ok", caps), &[]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    // The inference is per conversation: a wrong count in one is seen.
    let wrong = TWO_CONVERSATIONS.replace("iterations: 2, tool_calls", "iterations: 1, tool_calls");
    let o = run("two-by-header-wrong", &wrong, &fake("ok", caps), &[]);
    let out = text(&o);
    assert_eq!(o.status.code(), Some(1), "{out}");
    assert!(
        out.contains(
            "step 4 (expect, conversation default): response.iterations: expected 1, got 2"
        ),
        "{out}"
    );
    // A runtime that offers the capability and breaks its promise fails the run, saying which
    // request and what it named.
    for (mode, seen) in [
        ("no-header", "model request #1 (to agent `main`) carries no header `x-agentsim-conversation`, though the runtime offered the capability `conversation-header`"),
        ("wrong-conversation", "model request #1 (to agent `main`) names the conversation `elsewhere` in its header `x-agentsim-conversation`, to which agentsim sent no `user` message (it sent to `default`)"),
    ] {
        let o = run(mode, TWO_CONVERSATIONS, &fake(mode, caps), &[]);
        let out = text(&o);
        assert_eq!(o.status.code(), Some(1), "{out}");
        assert!(out.contains(seen), "{mode}: {out}");
        assert!(out.contains("conversation-header"), "{out}");
    }
    // Without the capability, a scenario of two conversations needs the runtime's reports.
    let o = run("two-no-header", TWO_CONVERSATIONS, &fake("ok", ""), &[]);
    let out = text(&o);
    assert_eq!(o.status.code(), Some(2), "{out}");
    assert!(
        out.contains("needs the runtime capability `stack`"),
        "{out}"
    );
}

#[test]
fn usage_is_judged_against_the_sum_the_runtime_reports_and_needs_the_capability() {
    let yaml = "name: usage summed by the runtime
llm:
  main:
    - tool_use: { name: weather, input: { city: Oslo } }
      usage: { input_tokens: 100, output_tokens: 20 }
    - text: It is 4 degrees.
      usage: { input_tokens: 150, output_tokens: 30 }
    - Bye.
tools: { weather: 4C }
steps:
  - user: weather?
  - expect: { sent: [It is 4 degrees.], usage: { input_tokens: 250, output_tokens: 50 } }
  - user: bye
  - expect: { sent: [Bye.], usage: { input_tokens: 250 } }
";
    // The last reply has no scripted usage: it counts zero tokens, as in the simulator.
    let o = run("usage", yaml, &fake("ok", "usage"), &[]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(
        text(&o).contains("runtime → event default: usage: 250 in, 50 out"),
        "{}",
        text(&o)
    );
    let o = run("usage-last", yaml, &fake("usage-last", "usage"), &[]);
    let out = text(&o);
    assert_eq!(o.status.code(), Some(1), "{out}");
    assert!(
        out.contains("step 2 (expect, conversation default): usage.input_tokens: expected 250, got 150; usage.output_tokens: expected 50, got 30"),
        "{out}"
    );
    let o = run("usage-no-capability", yaml, &fake("ok", ""), &[]);
    let out = text(&o);
    assert_eq!(o.status.code(), Some(2), "{out}");
    assert!(
        out.contains("usage-no-capability.yaml:12:5: step 2: `expect.usage` needs the runtime capability `usage`, which `python3 tests/runtimes/fake.py ok` did not offer in `ready`"),
        "{out}"
    );
}

#[test]
fn check_html_draws_each_outside_run_as_a_page_and_run_html_writes_one() {
    let dir = fresh("html");
    let out_dir = dir.join("pages");
    std::fs::write(dir.join("a.yaml"), WITH_TOOL).unwrap();
    let wrong = HELLO.replace("sent: [Bye.]", "sent: [Goodbye.]");
    std::fs::write(dir.join("b.yaml"), &wrong).unwrap();
    std::fs::write(
        dir.join("c.yaml"),
        "name: c\nllm: { main: [Hi.] }\nsteps:\n  - user: hi\n  - expect: { tool_results: [] }\n",
    )
    .unwrap();
    let o = agentsim(&[
        "check",
        dir.to_str().unwrap(),
        "--runtime",
        &fake("ok", ""),
        "--html",
        out_dir.to_str().unwrap(),
    ]);
    let out = text(&o);
    assert_eq!(o.status.code(), Some(1), "{out}");
    let index = std::fs::read_to_string(out_dir.join("index.html")).unwrap();
    let page_of = |name: &str| {
        let suffix = format!("__{name}.html");
        let file = std::fs::read_dir(&out_dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .find(|f| f.ends_with(&suffix))
            .unwrap_or_else(|| panic!("no page for {name}"));
        assert!(index.contains(&file), "{file} in {index}");
        std::fs::read_to_string(out_dir.join(file)).unwrap()
    };
    // The passing run: the user, the runtime, the model and the tools, in order.
    let a = page_of("a.yaml");
    assert!(a.contains("class=\"verdict passed\">PASSED</span>"), "{a}");
    for seen in [
        ">default: weather?</text>",
        ">#1 main</text>",
        ">c1-1 weather {&quot;city&quot;:&quot;Oslo&quot;}</text>",
        ">c1-1: 4C</text>",
        ">default: It is 4 degrees.</text>",
        "id=\"not-shown\"",
        "runtime → tool_call c1-1 weather by main",
    ] {
        assert!(a.contains(seen), "{seen} in {a}");
    }
    // The failing run: its verdict, its failure, the step's red note and the rerun command.
    let b = page_of("b.yaml");
    assert!(b.contains("class=\"verdict failed\""), "{b}");
    assert!(
        b.contains("step 4 (expect, conversation default): sent: expected [&quot;Goodbye.&quot;], got [&quot;Bye.&quot;]"),
        "{b}"
    );
    assert!(b.contains("<g class=\"note alarm\">"), "{b}");
    assert!(b.contains("rerun: <code>agentsim run "), "{b}");
    // The skipped one has no page.
    assert!(index.contains("skip "), "{index}");
    assert!(!index.contains("c.yaml.html"), "{index}");
    // run --html writes one page.
    let page = dir.join("one.html");
    let o = agentsim(&[
        "run",
        dir.join("a.yaml").to_str().unwrap(),
        "--runtime",
        &fake("ok", ""),
        "--html",
        page.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(std::fs::read_to_string(&page)
        .unwrap()
        .contains(">#2 main</text>"));
}

#[test]
fn the_response_expectation_is_judged_against_the_runtimes_response_events() {
    let yaml = WITH_TOOL.replace(
        "expect: { sent: [It is 4 degrees.] }",
        "expect: { sent: [It is 4 degrees.], response: { text: It is 4 degrees., iterations: 2, tool_calls: [weather] } }",
    );
    let o = run("response-ok", &yaml, &fake("ok", "response"), &[]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(
        text(&o).contains("runtime → event default: response: \"It is 4 degrees.\", 2 iterations, tools [weather]"),
        "{}",
        text(&o)
    );
    let wrong = yaml.replace("iterations: 2", "iterations: 3");
    let o = run("response-wrong", &wrong, &fake("ok", "response"), &[]);
    assert!(
        text(&o).contains("response.iterations: expected 3, got 2"),
        "{}",
        text(&o)
    );
    // Without the capability, the main frame's turn is read from the model requests and the
    // last text sent.
    let o = run("response-inferred", &yaml, &fake("ok", ""), &[]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let o = run("response-inferred-wrong", &wrong, &fake("ok", ""), &[]);
    assert!(
        text(&o).contains("response.iterations: expected 3, got 2"),
        "{}",
        text(&o)
    );
}

#[test]
fn a_rust_test_runs_a_scenario_against_an_outside_runtime_with_the_harness() {
    let dir = fresh("harness");
    let file = dir.join("hello.yaml");
    std::fs::write(&file, HELLO).unwrap();
    let run = agentsim::harness::run_file_against(&file, &fake("ok", "")).unwrap();
    run.assert_passed();
    assert_eq!(run.sent_to("default"), ["Hi there.", "Bye."]);
    let wrong = dir.join("wrong.yaml");
    std::fs::write(&wrong, HELLO.replace("[Bye.]", "[Ciao.]")).unwrap();
    let run = agentsim::harness::run_file_against(&wrong, &fake("ok", "")).unwrap();
    assert!(!run.passed());
    let panic = std::panic::catch_unwind(|| {
        run.assert_passed();
    })
    .expect_err("a failed run panics");
    let message = panic.downcast_ref::<String>().unwrap();
    assert!(
        message.contains("sent: expected [\"Ciao.\"], got [\"Bye.\"]"),
        "{message}"
    );
    assert!(message.contains("rerun: agentsim run"), "{message}");
    // A scenario the runtime cannot express, or a command that is not one, is an error.
    let stack = dir.join("stack.yaml");
    let two = HELLO.replace("user: bye", "user: bye\n    key: other");
    std::fs::write(
        &stack,
        two.replace("[Bye.] }", "[Bye.], key: other, depth: 0 }"),
    )
    .unwrap();
    let e = agentsim::harness::run_file_against(&stack, &fake("ok", "")).unwrap_err();
    assert!(e.contains("needs the runtime capability `stack`"), "{e}");
    let e = agentsim::harness::run_file_against(&file, "'unclosed").unwrap_err();
    assert!(e.contains("a single quote is not closed"), "{e}");
}

#[test]
fn bench_runtime_measures_runs_and_the_cpu_split() {
    let o = agentsim(&["bench", "runtime", "--seconds", "0", "--json"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["runs"], 3, "{v}");
    for key in [
        "runs_per_second",
        "ms_per_run",
        "agentsim_cpu_ms_per_run",
        "runtime_cpu_ms_per_run",
    ] {
        assert!(v[key].as_f64().is_some_and(|x| x > 0.0), "{key}: {v}");
    }
    let share = v["agentsim_share"].as_f64().unwrap();
    assert!(share > 0.0 && share < 1.0, "{v}");
    // A runtime that fails the bench's scenario is an error, never a figure.
    let o = agentsim(&[
        "bench",
        "runtime",
        "--seconds",
        "0",
        "--runtime",
        &fake("garbage", ""),
    ]);
    assert_ne!(o.status.code(), Some(0), "{}", text(&o));
}

#[test]
fn bench_runtime_plays_w1_as_user_messages_and_times_each() {
    let o = agentsim(&[
        "bench",
        "runtime",
        "--workload",
        "w1",
        "--seconds",
        "0",
        "--json",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["workload"], "w1", "{v}");
    assert_eq!(v["runs"], 1, "{v}");
    assert_eq!(v["messages"], 20, "{v}");
    assert_eq!(v["turns_per_message"], 9, "{v}");
    let p50 = v["message_ms_p50"].as_f64().unwrap();
    let p99 = v["message_ms_p99"].as_f64().unwrap();
    assert!(p50 > 0.0 && p99 >= p50, "{v}");
    assert!(v["turns_per_second"].as_f64().unwrap() > 0.0, "{v}");
    // W3..W6 need what protocol 1 cannot express: refused, never measured as something else.
    let o = agentsim(&["bench", "runtime", "--workload", "w3", "--seconds", "0"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(
        text(&o).contains("plays the workloads w1 and w2"),
        "{}",
        text(&o)
    );
}

#[test]
fn the_readmes_python_quick_start_is_the_file_the_tests_run() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let code = std::fs::read_to_string(root.join("examples/quickstart/my_agent.py")).unwrap();
    assert!(
        readme.contains(&format!("```python\n{code}```")),
        "README.md's Python quick start differs from examples/quickstart/my_agent.py, which examples/runtimes/python/tests/test_quickstart.py runs"
    );
}
