//! Seed 000's persisted format imported: the `context.jsonl` and `state.json` that agentsim's own
//! runtime writes (the stack diagram run with persistence, stopped half-way and run to its end)
//! become a scenario whose scripts are the run's replies, each agent's in order, served back by
//! mock-llm to the same requests; and hand-written broken journals are errors at their line, or
//! listed skips, never a panic.

use std::path::{Path, PathBuf};

use agentsim::import;
use agentsim::scenario;

fn stack_diagram() -> scenario::Scenario {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios/examples/stack-diagram.yaml");
    let mut s = scenario::load(&path).unwrap();
    s.config.persist = true;
    s
}

fn dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir()
        .join(format!("agentsim-import-context-{}", std::process::id()))
        .join(name);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// The stack diagram run with persistence: after the first user message (`half`), or to the end.
fn persisted(half: bool) -> (String, String) {
    let s = stack_diagram();
    let mut sim = s.sim(0, true, true);
    sim.user("default", "research Python async APIs").unwrap();
    sim.run_until_idle().unwrap();
    if !half {
        sim.user("default", "focus on 3.13 specifically").unwrap();
        sim.run_until_idle().unwrap();
    }
    let (state, context) = sim.persisted();
    (state.unwrap().to_owned(), context.to_owned())
}

#[test]
fn the_runtimes_own_context_and_state_import_into_its_scripts() {
    for half in [true, false] {
        let (state, context) = persisted(half);
        let d = dir(if half { "half" } else { "whole" });
        std::fs::write(d.join("context.jsonl"), &context).unwrap();
        std::fs::write(d.join("state.json"), &state).unwrap();
        let imported = import::import_with_state(
            context.as_bytes(),
            &d.join("context.jsonl"),
            Some((state.as_bytes(), &d.join("state.json"))),
            "from context",
        )
        .unwrap_or_else(|e| panic!("{e}\n{context}"));
        assert!(imported.skipped.is_empty(), "{:?}", imported.skipped);
        assert_eq!(imported.agents, ["main", "research"], "{}", imported.yaml);
        let yaml = &imported.yaml;
        // The replies of the run, each agent's in order.
        let whole = |e: &'static str| (!half).then_some(e);
        let expected: Vec<&str> = [
            Some("  research:\n    kind: skill\n"),
            Some("tool_use: { name: use_skill, input: { message: Python async APIs, skill: research }, id: toolu_01 }"),
            whole("- \"Here is what research found: Found 3 APIs: asyncio.TaskGroup, asyncio.timeout, asyncio.Runner\""),
            Some("- I'll search for Python async APIs. Any version in particular?"),
            whole("tool_use: { name: web_search, input: { q: python 3.13 async }, id: toolu_02 }"),
            whole("tool_use: { name: complete, input: { result: \"Found 3 APIs: asyncio.TaskGroup, asyncio.timeout, asyncio.Runner\" }, id: toolu_03 }"),
            whole("web_search: { result: \"3 results\" }"),
        ]
        .into_iter()
        .flatten()
        .collect();
        // In the order of the file: main's script, then research's, then the tools.
        let mut at = 0;
        for e in &expected {
            let found = yaml[at..]
                .find(e)
                .unwrap_or_else(|| panic!("{e:?} missing (or out of order) from:\n{yaml}"));
            at += found + e.len();
        }
        assert_eq!(imported.exchanges, if half { 2 } else { 5 }, "{yaml}");
        // The user's messages as steps, which agentsim's runtime replays and passes.
        let steps = if half {
            "steps:\n  - user: \"research Python async APIs\"\n"
        } else {
            "steps:\n  - user: \"research Python async APIs\"\n  - user: \"focus on 3.13 specifically\"\n"
        };
        assert!(yaml.ends_with(steps), "{yaml}");
        let written = scenario::parse(yaml, Path::new("from-context.yaml"))
            .unwrap_or_else(|e| panic!("{e}\n{yaml}"));
        let outcome = scenario::run::run(&written, scenario::RunOptions::default());
        assert!(outcome.passed(), "{:?}\n{yaml}", outcome.failure);
    }
}

#[test]
fn a_context_jsonl_alone_imports_and_a_state_of_another_run_is_refused() {
    let (_, context) = persisted(false);
    let alone = import::import(context.as_bytes(), Path::new("context.jsonl"), "alone").unwrap();
    assert_eq!(alone.agents, ["main", "research"]);
    let with_state = |state: &serde_json::Value, context: &str| {
        import::import_with_state(
            context.as_bytes(),
            Path::new("context.jsonl"),
            Some((state.to_string().as_bytes(), Path::new("state.json"))),
            "x",
        )
    };
    // A state.json whose main session is not in the journal belongs to another run.
    let (state, _) = persisted(false);
    let mut other: serde_json::Value = serde_json::from_str(&state).unwrap();
    other["conversations"][0]["main_session_id"] = "00000000-0000-4000-8000-00000000abcd".into();
    let e = with_state(&other, &context).unwrap_err();
    assert_eq!(e_place(&e), ("state.json".into(), 0), "{e}");
    assert!(e.message.contains("do not belong together"), "{e}");
    // One whose active frame names another agent than the journal's session contradicts it.
    let (state, half) = persisted(true);
    let mut state: serde_json::Value = serde_json::from_str(&state).unwrap();
    assert!(with_state(&state, &half).is_ok());
    state["conversations"][0]["active_stack"][1]["agent_name"] = "writer".into();
    let e = with_state(&state, &half).unwrap_err();
    assert!(e.message.contains("contradict"), "{e}");
    let err = import::import_with_state(
        context.as_bytes(),
        Path::new("context.jsonl"),
        Some((b"{", Path::new("state.json"))),
        "x",
    )
    .unwrap_err();
    assert_eq!(e_place(&err), ("state.json".into(), 0), "{err}");
}

fn e_place(e: &import::ImportError) -> (String, usize) {
    (e.path.display().to_string(), e.line)
}

const MAIN: &str = "00000000-0000-4000-8000-000000000001";
const CHILD: &str = "00000000-0000-4000-8000-000000000002";

/// A small hand-written journal: main delegates, the child answers and completes, main answers.
fn good_lines() -> Vec<String> {
    vec![
        format!(r#"{{"type":"user","agent_session_id":"{MAIN}","text":"build it"}}"#),
        format!(
            r#"{{"type":"assistant","agent_session_id":"{MAIN}","content":[{{"type":"tool_use","id":"toolu_1","name":"use_agent","input":{{"agent":"task","message":"build"}}}}]}}"#
        ),
        format!(
            r#"{{"type":"agent_session","agent_session_id":"{CHILD}","agent_name":"task","agent_type":"agent","parent_tool_use_id":"toolu_1","message":"build"}}"#
        ),
        format!(
            r#"{{"type":"assistant","agent_session_id":"{CHILD}","content":[{{"type":"tool_use","id":"toolu_2","name":"complete","input":{{"result":"built"}}}}]}}"#
        ),
        format!(
            r#"{{"type":"agent_session_complete","agent_session_id":"{CHILD}","result":"built","is_error":false}}"#
        ),
        format!(
            r#"{{"type":"tool_result","agent_session_id":"{MAIN}","tool_use_id":"toolu_1","content":"built","is_error":false}}"#
        ),
        format!(
            r#"{{"type":"assistant","agent_session_id":"{MAIN}","content":[{{"type":"text","text":"Done: built."}}]}}"#
        ),
    ]
}

fn import_lines(lines: &[String], tail: &str) -> Result<import::Imported, import::ImportError> {
    let text = lines.join("\n") + tail;
    import::import(text.as_bytes(), Path::new("context.jsonl"), "hand")
}

#[test]
fn a_hand_written_journal_imports_and_broken_ones_are_located_errors_or_listed_skips() {
    let good = import_lines(&good_lines(), "\n").unwrap();
    assert_eq!(good.agents, ["main", "task"]);
    assert!(
        good.yaml.ends_with("steps:\n  - user: \"build it\"\n"),
        "{}",
        good.yaml
    );
    // A user message the journal never saw answered: the steps would not replay (the script
    // has no reply for it), so they are left out, and the file says so.
    let mut unanswered = good_lines();
    unanswered.push(format!(
        r#"{{"type":"user","agent_session_id":"{MAIN}","text":"and now?"}}"#
    ));
    let imported = import_lines(&unanswered, "\n").unwrap();
    assert!(!imported.yaml.contains("\nsteps:"), "{}", imported.yaml);
    assert_eq!(imported.skipped.len(), 1, "{:?}", imported.skipped);
    assert_eq!(imported.skipped[0].line, 1);
    assert!(
        imported.skipped[0].reason.contains("not written as steps"),
        "{:?}",
        imported.skipped
    );
    assert!(
        imported
            .yaml
            .contains("#   line 1: the user's messages are not written as steps"),
        "{}",
        imported.yaml
    );
    assert!(good.yaml.contains("- \"Done: built.\""), "{}", good.yaml);
    assert!(
        good.yaml.contains("  task:\n    kind: agent\n"),
        "{}",
        good.yaml
    );
    assert!(good.skipped.is_empty());

    // An unknown entry type is listed; a torn last line (a crash mid-write) is listed.
    let mut lines = good_lines();
    lines.insert(
        1,
        r#"{"type":"memory_extraction","agent_session_id":"x"}"#.into(),
    );
    let torn = format!(r#"{{"type":"user","agent_session_id":"{MAIN}","te"#);
    let imported = import_lines(&lines, &format!("\n{torn}")).unwrap();
    let lines_skipped: Vec<usize> = imported.skipped.iter().map(|s| s.line).collect();
    assert_eq!(lines_skipped, [2, 9], "{:?}", imported.skipped);
    assert!(imported.skipped[0]
        .reason
        .contains("unknown type `memory_extraction`"));
    assert!(imported.skipped[1].reason.contains("torn"));

    let broken = |at: usize, line: &str| {
        let mut lines = good_lines();
        lines[at] = line.to_owned();
        import_lines(&lines, "\n").unwrap_err()
    };
    // A line cut short in the middle of the journal.
    let e = broken(3, r#"{"type":"assistant","agent_session_id":"#);
    assert_eq!(e_place(&e), ("context.jsonl".into(), 4), "{e}");
    assert!(e.message.contains("truncated"), "{e}");
    // A tool result whose tool use no reply holds.
    let e = broken(
        5,
        &format!(
            r#"{{"type":"tool_result","agent_session_id":"{MAIN}","tool_use_id":"toolu_nobody","content":"x","is_error":false}}"#
        ),
    );
    assert_eq!(e.line, 6, "{e}");
    assert!(e.message.contains("do not pair"), "{e}");
    // A child session answering a tool use nobody made.
    let e = broken(
        2,
        &format!(
            r#"{{"type":"agent_session","agent_session_id":"{CHILD}","agent_name":"task","agent_type":"agent","parent_tool_use_id":"toolu_9","message":"build"}}"#
        ),
    );
    assert_eq!(e.line, 3, "{e}");
    assert!(e.message.contains("do not pair"), "{e}");
    // A reply in a session nothing started.
    let e = broken(
        2,
        r#"{"type":"user","agent_session_id":"00000000-0000-4000-8000-000000000009","text":"hi"}"#,
    );
    assert_eq!(e.line, 4, "{e}");
    assert!(e.message.contains("no earlier line started"), "{e}");
    // An entry of a known type that does not read, and a line that is not an entry.
    let e = broken(
        0,
        &format!(r#"{{"type":"user","agent_session_id":"{MAIN}"}}"#),
    );
    assert_eq!(e.line, 1, "{e}");
    assert!(e.message.contains("missing field `text`"), "{e}");
    let e = broken(1, r#"[1, 2]"#);
    assert_eq!(e.line, 2, "{e}");
    // Bytes that are not UTF-8.
    let mut bytes = good_lines().join("\n").into_bytes();
    let second = bytes.iter().position(|&b| b == b'\n').unwrap() + 20;
    bytes[second] = 0xff;
    let e = import::import(&bytes, Path::new("context.jsonl"), "x").unwrap_err();
    assert_eq!(e.line, 2, "{e}");
    assert!(e.message.contains("not UTF-8"), "{e}");
    // A journal without a reply has nothing to script.
    let e = import_lines(&good_lines()[..1], "\n").unwrap_err();
    assert_eq!(e.line, 0, "{e}");
}

#[test]
fn the_command_reads_a_directory_or_a_context_jsonl_with_its_state() {
    let (state, context) = persisted(true);
    let d = dir("cli");
    std::fs::write(d.join("context.jsonl"), &context).unwrap();
    std::fs::write(d.join("state.json"), &state).unwrap();
    let out = d.join("imported.yaml");
    let s = |p: &Path| p.to_str().unwrap().to_owned();
    let o = super::cli::agentsim(&["import", &s(&d), "--out", &s(&out)]);
    let stderr = super::cli::stderr(&o);
    assert_eq!(o.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains("2 exchanges, agents main, research"),
        "{stderr}"
    );
    let written = std::fs::read_to_string(&out).unwrap();
    scenario::parse(&written, &out).unwrap();
    // The state beside a context.jsonl is read with --state; a bad one is an error naming it.
    std::fs::write(d.join("other-state.json"), "{\"version\": 1}").unwrap();
    let o = super::cli::agentsim(&[
        "import",
        &s(&d.join("context.jsonl")),
        "--state",
        &s(&d.join("other-state.json")),
        "--out",
        &s(&out),
    ]);
    let stderr = super::cli::stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("other-state.json: missing field"),
        "{stderr}"
    );
    // Neither of the inputs is ever written over.
    let o = super::cli::agentsim(&["import", &s(&d), "--out", &s(&d.join("state.json"))]);
    assert_eq!(o.status.code(), Some(2), "{}", super::cli::stderr(&o));
    assert_eq!(
        std::fs::read_to_string(d.join("state.json")).unwrap(),
        state
    );
}

#[test]
fn the_docs_example_is_what_the_runtime_persists_today_and_imports() {
    let d = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/import/seed-000");
    let (state, context) = persisted(false);
    assert_eq!(
        std::fs::read_to_string(d.join("context.jsonl")).unwrap(),
        context
    );
    assert_eq!(
        std::fs::read_to_string(d.join("state.json")).unwrap(),
        state
    );
    let imported = import::import_with_state(
        context.as_bytes(),
        &d.join("context.jsonl"),
        Some((state.as_bytes(), &d.join("state.json"))),
        "x",
    )
    .unwrap();
    assert_eq!((imported.exchanges, imported.agents.len()), (5, 2));
}
