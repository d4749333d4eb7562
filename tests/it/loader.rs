//! The scenario loader on bad input: every mutation of a valid file loads or fails with a located
//! error, and never panics.

use std::path::Path;

use agentsim::scenario;

const VALID: &str = include_str!("../../scenarios/examples/stack-diagram.yaml");

#[test]
fn every_truncation_and_byte_edit_of_a_valid_file_is_handled_without_panic() {
    let path = Path::new("mutated.yaml");
    let bytes = VALID.as_bytes();
    let mut errors = 0;
    let mut edits = 0;
    let replacements: [&[u8]; 6] = [b"", b":", b"[", b"\t", b" ", b"{"];
    for i in (0..bytes.len()).step_by(3) {
        for r in replacements {
            let mut v = bytes[..i].to_vec();
            v.extend_from_slice(r);
            v.extend_from_slice(&bytes[(i + 1).min(bytes.len())..]);
            let text = String::from_utf8_lossy(&v);
            edits += 1;
            if let Err(e) = scenario::parse(&text, path) {
                errors += 1;
                assert!(e.line >= 1 && e.column >= 1, "unlocated error: {e}");
                assert!(e.to_string().starts_with("mutated.yaml:"), "{e}");
            }
        }
        let truncated = String::from_utf8_lossy(&bytes[..i]);
        let _ = scenario::parse(&truncated, path);
    }
    assert!(
        errors > edits / 10,
        "the mutations should mostly break the file"
    );
}

#[test]
fn semantic_errors_point_at_the_offending_entry() {
    // With steps (a file without them is served by mock-llm alone, where `kind` may be left out).
    let src = "name: x\nagents:\n  main: {}\n  helper: { tools: [nope] }\nsteps: [{user: hi}]\n";
    let e = scenario::parse(src, Path::new("s.yaml")).unwrap_err();
    assert_eq!((e.line, e.column), (4, 11), "{e}");
    assert!(
        e.message.contains("needs `kind: skill` or `kind: agent`"),
        "{e}"
    );

    let src = "name: x\nagents:\n  main: { tools: [nope] }\nsteps: []\n";
    let e = scenario::parse(src, Path::new("s.yaml")).unwrap_err();
    assert!(e.message.contains("lists tool 'nope'"), "{e}");

    let src = "name: x\nllm:\n  ghost: [hi]\nsteps: []\n";
    let e = scenario::parse(src, Path::new("s.yaml")).unwrap_err();
    assert_eq!(e.line, 3, "{e}");
    assert!(e.message.contains("not a declared agent"), "{e}");

    let src = "name: x\nsteps:\n  - advance: soon\n";
    let e = scenario::parse(src, Path::new("s.yaml")).unwrap_err();
    assert_eq!(e.line, 3, "{e}");
    assert!(e.message.contains("invalid duration"), "{e}");

    let src = "name: x\nexpect_violation: tool-pairingg\nsteps: []\n";
    let e = scenario::parse(src, Path::new("s.yaml")).unwrap_err();
    assert!(e.message.contains("unknown invariant"), "{e}");
    assert_eq!(e.line, 2, "{e}");
    assert!(
        e.message.contains("restart"),
        "the known names list it: {e}"
    );

    // The outside checks are names a shrunk file may expect to break, `restart` among them.
    let src = "name: x\nexpect_violation: restart\nsteps: []\n";
    let s = scenario::parse(src, Path::new("s.yaml")).unwrap();
    assert_eq!(s.expect_violation.as_deref(), Some("restart"));
    let src = "name: x\nexpect_violation: restarts\nsteps: []\n";
    let e = scenario::parse(src, Path::new("s.yaml")).unwrap_err();
    assert!(e.message.contains("unknown invariant 'restarts'"), "{e}");
    assert_eq!((e.line, e.column), (2, 19), "{e}");
}

#[test]
fn json_scenarios_load_too() {
    let src = r#"{"name": "j", "llm": {"main": ["hello"]}, "steps": [{"user": "hi"}, {"expect": {"sent": ["hello"]}}]}"#;
    let s = scenario::parse(src, Path::new("j.json")).unwrap();
    let outcome = scenario::run(&s, Default::default());
    assert!(outcome.passed(), "{:?}", outcome.failure);
}

/// Settings that make no sense are refused where they stand, instead of being accepted (a frame that
/// can make no model call, a name that frame names cannot hold) or silently changed (a fraction of
/// a millisecond rounded, a duration that saturates the clock).
#[test]
fn nonsense_settings_are_located_errors() {
    let cases = [
        (
            "name: t\nagents: {main: {max_iterations: 0}}\nsteps: [{user: x}]\n",
            "t.yaml:2:",
            "`max_iterations: 0`",
        ),
        (
            "name: t\nagents: {\"\": {kind: skill}}\nsteps: [{user: x}]\n",
            "t.yaml:2:",
            "an agent needs a name",
        ),
        (
            "name: t\nagents: {\"a:b\": {kind: skill}}\nsteps: [{user: x}]\n",
            "t.yaml:2:",
            "contains ':'",
        ),
        (
            "name: t\nllm: {main: [{text: hi, after: 0.5}]}\nsteps: [{user: x}]\n",
            "t.yaml:2:",
            "whole milliseconds",
        ),
        (
            "name: t\nsteps: [{advance: \"1e309s\"}]\n",
            "t.yaml:2:",
            "longer than",
        ),
        (
            "name: t\nsteps: [{advance: 18446744073709551615}]\n",
            "t.yaml:2:",
            "longer than",
        ),
        (
            "name: t\nsteps: [{advance: \"-2s\"}]\n",
            "t.yaml:2:",
            "cannot be negative",
        ),
        (
            "name: t\nagents:\n  main: {max_depth: 1}\nsteps: [{user: x}]\n",
            "t.yaml:3:",
            "no `workflow: six_step`",
        ),
        (
            "name: t\nagents:\n  main: {workflow: seven_step}\nsteps: [{user: x}]\n",
            "t.yaml:3:",
            "six_step",
        ),
        (
            "name: t\nagents:\n  main: {workflow: six_step}\nllm:\n  main:\n    - NO\nsteps: [{user: x}]\n",
            "t.yaml:6:",
            "quote it",
        ),
        (
            "name: t\nagents:\n  main: {}\nllm:\n  main#1: [hi]\nsteps: [{user: x}]\n",
            "t.yaml:5:",
            "`fork: true` or a `workflow`",
        ),
        (
            "name: t\nagents:\n  main: {}\n  poet: {kind: agent, question_callback: \"http://h\"}\nsteps: []\n",
            "t.yaml:4:",
            "go with `async_questions: true`",
        ),
        (
            "name: t\nagents:\n  main: {}\n  poet: {kind: agent, async_questions: true, on_timeout: later}\nsteps: []\n",
            "t.yaml:4:",
            "`on_timeout` is `fail` or `{default_answer: <text>}`",
        ),
        (
            "name: t\nagents:\n  main: {}\n  poet: {kind: agent, async_questions: true,\n    question_callback: \"ftp://h\"}\nsteps: []\n",
            "t.yaml:5:",
            "`question_callback` must be an http:// or https:// URL with a host",
        ),
        (
            "name: t\nsettings:\n  question_callback_url: \"http:///x\"\nsteps: []\n",
            "t.yaml:3:",
            "`question_callback_url` must be an http:// or https:// URL",
        ),
        (
            "name: t\nsettings:\n  callbacks:\n    replies: [200, refused, 42]\nsteps: []\n",
            "t.yaml:4:",
            "a reply is an HTTP status (100 to 599; 2xx delivers), `refused` or `hang`, not `42`",
        ),
        (
            "name: t\nsettings:\n  callbacks: {retries: 2, wait: 1s}\nsteps: []\n",
            "t.yaml:3:",
            "wait",
        ),
        (
            "name: t\nsettings:\n  session_expiry: soon\nsteps: []\n",
            "t.yaml:3:",
            "invalid duration",
        ),
    ];
    for (text, at, what) in cases {
        let err = scenario::parse(text, Path::new("t.yaml"))
            .unwrap_err()
            .to_string();
        assert!(err.starts_with(at) && err.contains(what), "{text:?}: {err}");
    }
    // What is sensible still loads: a fraction of a second that is whole milliseconds.
    let ok = "name: t\nllm: {main: [{text: hi, after: 1.5s}]}\nsteps: [{user: x}]\n";
    assert!(scenario::parse(ok, Path::new("t.yaml")).is_ok());
}

/// The inputs of main's scripted tool uses, in order.
fn scripted_inputs(src: &str) -> Vec<serde_json::Value> {
    use agentsim::drive::scripted::{ReplyKind, ScriptBlock};
    let s = scenario::parse(src, Path::new("free.yaml")).unwrap_or_else(|e| panic!("{e}"));
    let mut out = Vec::new();
    for reply in &s.scripts["main"] {
        let blocks: Vec<&ScriptBlock> = match &reply.kind {
            ReplyKind::Content(blocks) => blocks.iter().collect(),
            ReplyKind::Stream(chunks) => chunks.iter().map(|c| &c.block).collect(),
            _ => continue,
        };
        for block in blocks {
            if let ScriptBlock::ToolUse { input, .. } = block {
                out.push((**input).clone());
            }
        }
    }
    out
}

#[test]
fn free_form_values_keep_the_text_the_author_wrote() {
    use serde_json::json;
    // Issue 13 item 10: YAML 1.1 turned `yes` into true and `012` into 12.0.
    let src = r#"
name: free-form values
agents: { main: {} }
tools: { t: {} }
llm:
  main:
    - ask_user: { question: Pick, options: [yes, no, on, 012, 1.50, ~, "quoted"] }
    - ask_user: 012
    - tool_use: { name: t, input: { a: yes, b: 012, c: 1.50, d: 0x1F, e: true, f: ~, g: -3, h: 1e3, i: .inf, j: "7", k: !!str 5, l: 99999999999999999999 } }
    - tool_use:
        name: t
        input:
          nested:
            - off
            - 0o17
            - deep: { n: 08 }
    - tool_use: [{ name: t, input: &base { kind: y, size: 10 } }, { name: t, input: *base }]
    - tool_use: { name: t, input: { <<: *base, size: 011, extra: N } }
    - use_agent: { agent: main, message: no }
    - use_skill: { skill: s, message: 1.0 }
    - chunks:
        - { tool_use: { name: t, input: { z: Yes } } }
    - text: done
steps:
  - user: go
"#;
    let inputs = scripted_inputs(src);
    assert_eq!(
        inputs,
        vec![
            json!({"question": "Pick", "options": ["yes", "no", "on", "012", "1.50", "~", "quoted"]}),
            json!({"question": "012"}),
            json!({"a": "yes", "b": "012", "c": 1.5, "d": "0x1F", "e": true, "f": null, "g": -3,
                   "h": 1000.0, "i": ".inf", "j": "7", "k": "5", "l": "99999999999999999999"}),
            json!({"nested": ["off", "0o17", {"deep": {"n": "08"}}]}),
            json!({"kind": "y", "size": 10}),
            json!({"kind": "y", "size": 10}),
            json!({"kind": "y", "size": "011", "extra": "N"}),
            json!({"agent": "main", "message": "no"}),
            json!({"skill": "s", "message": 1.0}),
            json!({"z": "Yes"}),
        ]
    );
}

/// Issue 13 item 15: the reader's own wording (its API, its budget structs) never reaches the user,
/// and its budgets let every file within the documented limits load.
#[test]
fn reader_limits_are_said_in_the_scenarios_terms() {
    let parse = |src: &str| scenario::parse(src, Path::new("s.yaml"));
    let internals = [
        "Options",
        "Policy",
        "budget",
        "Budget",
        "from_multiple",
        "Option<",
        "{ ",
    ];
    let check = |src: &str, want: &str, line: u32| {
        let e = parse(src).unwrap_err();
        assert!(e.message.contains(want), "{e}");
        assert_eq!(e.line, line, "{e}");
        for word in internals {
            assert!(
                !e.message.contains(word),
                "internal wording `{word}` in: {e}"
            );
        }
    };
    check(
        "name: x\nsteps: []\nname: y\n",
        "`name` appears twice in this mapping",
        3,
    );
    check("name: ~\nsteps: []\n", "text is needed here", 1);
    let deep = format!(
        "name: x\nagents: {{ main: {{}} }}\ntools: {{ t: {{}} }}\nllm:\n  main:\n    - tool_use: {{ name: t, input: {}1{} }}\nsteps: []\n",
        "[".repeat(70),
        "]".repeat(70)
    );
    check(&deep, "nests deeper than 64 levels", 6);
    // Billion laughs: nine levels of ten aliases each.
    let mut bomb =
        String::from("name: x\nagents: { main: {} }\ntools: { t: {} }\nanchors:\n  - &l0 [lol]\n");
    for level in 1..=9 {
        let refs = vec![format!("*l{}", level - 1); 10].join(", ");
        bomb.push_str(&format!("  - &l{level} [{refs}]\n"));
    }
    let bomb = bomb
        .replace(
            "anchors:\n",
            "llm:\n  main:\n    - tool_use: { name: t, input: [\n",
        )
        .replace("  - &", "      &")
        .replace("]\n      &", "],\n      &")
        + "    ] }\nsteps: []\n";
    let e = parse(&bomb).unwrap_err();
    assert!(e.message.contains("aliases expand past"), "{e}");
    for word in internals {
        assert!(
            !e.message.contains(word),
            "internal wording `{word}` in: {e}"
        );
    }

    // A legitimate long file: 200,000 steps, each reusing an anchored reply.
    let mut long =
        String::from("name: long\nagents: { main: {} }\nllm:\n  main:\n    - &r { text: ok }\n");
    for _ in 1..200_000 {
        long.push_str("    - *r\n");
    }
    long.push_str("steps:\n");
    for _ in 0..200_000 {
        long.push_str("  - user: hi\n");
    }
    let s = parse(&long).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(s.steps.len(), 200_000);
}

/// Keys that would be accepted and then ignored are refused where they stand: a file never says
/// more than the run does.
#[test]
fn keys_that_would_be_silently_ignored_are_located_errors() {
    let cases = [
        (
            "name: t\nllm: {main: [{empty: false}]}\nsteps: [{user: x}]\n",
            "t.yaml:2:",
            "write `empty: true`",
        ),
        (
            "name: t\nllm: {main: [{stall: false}]}\nsteps: [{user: x}]\n",
            "t.yaml:2:",
            "write `stall: true`",
        ),
        (
            "name: t\nllm: {main: [{stall: true, after: 1s}]}\nsteps: [{user: x}]\n",
            "t.yaml:2:",
            "a `stall` never answers",
        ),
        (
            "name: t\nllm: {main: [{error: overloaded, usage: {input_tokens: 1}}]}\nsteps: [{user: x}]\n",
            "t.yaml:2:",
            "a failed call reports no `usage`",
        ),
        (
            "name: t\nllm: {main: [{tool_use: []}]}\nsteps: [{user: x}]\n",
            "t.yaml:2:",
            "`tool_use: []` names no tool use",
        ),
        (
            "name: t\ntools: {search: {calls: [found], after: 5s}}\nsteps: []\n",
            "t.yaml:2:",
            "takes `after` on each call",
        ),
        (
            "name: t\ntools: {search: {error: down, is_error: true}}\nsteps: []\n",
            "t.yaml:2:",
            "`is_error` marks a `result`",
        ),
        (
            "name: t\ntools: {search: {calls: [{hang: true, is_error: true}]}}\nsteps: []\n",
            "t.yaml:2:",
            "`is_error` marks a `result`",
        ),
        (
            "name: t\ntools: {ask_user: \"yes\"}\nsteps: []\n",
            "t.yaml:2:",
            "`ask_user` is a built-in tool",
        ),
        (
            "name: t\nagents:\n  cc: {kind: skill, passthrough: {result: ok, timeout: 1s}}\nsteps: []\n",
            "t.yaml:3:",
            "a passthrough skill's run has no `timeout`",
        ),
    ];
    for (src, at, message) in cases {
        let e = scenario::parse(src, Path::new("t.yaml")).unwrap_err();
        let text = e.to_string();
        assert!(text.starts_with(at), "{src}: {text}");
        assert!(text.contains(message), "{src}: {text}");
    }
}

/// Expectations that would check nothing fail instead: a misspelled script name in `llm_calls`,
/// a `session:N` key naming no triggered session; and per-call tool outcomes left unused fail
/// the run the way unused model replies do.
#[test]
fn expectations_and_scripts_that_would_check_nothing_fail_the_run() {
    let run = |src: &str| {
        let s = scenario::parse(src, Path::new("t.yaml")).unwrap();
        scenario::run(&s, Default::default())
    };
    let outcome =
        run("name: t\nllm: {main: [hi]}\nsteps: [{user: x}, {expect: {llm_calls: {mian: 0}}}]\n");
    let failure = outcome
        .failure
        .expect("a misspelled script fails")
        .to_string();
    assert!(failure.contains("no such agent or script"), "{failure}");

    let outcome = run(
        "name: t\nllm: {main: [hi]}\nsteps: [{user: x}, {expect: {key: \"session:1\", sent: []}}]\n",
    );
    let failure = outcome.failure.expect("no session 1").to_string();
    assert!(failure.contains("0 sessions triggered so far"), "{failure}");

    let outcome = run(
        "name: t\nllm: {main: [{tool_use: {name: search, input: {}}}, done]}\ntools: {search: [one, two]}\nsteps: [{user: x}]\n",
    );
    let failure = outcome.failure.expect("an unused tool outcome").to_string();
    assert!(
        failure.contains("scripted tool outcomes never used (search: 1)"),
        "{failure}"
    );
    // The same file with both outcomes used passes.
    let outcome = run(
        "name: t\nllm: {main: [{tool_use: {name: search, input: {}}}, {tool_use: {name: search, input: {}}}, done]}\ntools: {search: [one, two]}\nsteps: [{user: x}]\n",
    );
    assert!(outcome.passed(), "{:?}", outcome.failure);
}
