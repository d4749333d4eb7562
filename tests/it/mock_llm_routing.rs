//! mock-llm's routing help: `match:` by a subset of the tools offered (`tools_include`) and by one
//! named tool (`tool`), the smallest rule a miss suggests for each agent (pasted back into the
//! file, it routes the request), `kind:` left out of a file served by mock-llm alone, and the
//! simulator's own tools (`ask_user`) refused when the request does not offer them; over a real
//! port on loopback with reqwest. The helpers are `mock_llm.rs`'s.
#![cfg(feature = "mock-server")]

use std::path::Path;

use agentsim::mock_llm::server::Options;
use agentsim::scenario;
use serde_json::{json, Value};

use super::mock_llm::{finish, post, serve};

/// One model name and one system prompt for both agents, as real runtimes send: only the tools
/// tell them apart.
const BY_TOOLS: &str = r#"
name: routed by the tools offered
agents:
  main: { match: { tools_include: [get_weather, transfer_to_forecaster] } }
  forecaster: { match: { tool: get_forecast } }
llm:
  main:
    - Main here.
  forecaster:
    - Forecaster here.
"#;

fn anthropic(system: &str, user: &str, tools: &[&str]) -> Value {
    let tools: Vec<Value> = tools
        .iter()
        .map(|t| json!({"name": t, "input_schema": {"type": "object"}}))
        .collect();
    json!({"model": "gpt-shared", "max_tokens": 100, "system": system, "tools": tools,
           "messages": [{"role": "user", "content": user}]})
}

#[tokio::test]
async fn tools_are_matched_as_a_subset_and_by_a_named_tool() {
    let running = serve(BY_TOOLS, Options::default()).await;
    let (status, _, body) = post(
        &running,
        "/v1/messages",
        anthropic(
            "You are helpful.",
            "weather?",
            &["search", "transfer_to_forecaster", "get_weather"],
        ),
    )
    .await;
    assert_eq!(
        status, 200,
        "a superset of main's tools routes to main: {body}"
    );
    assert!(body.contains("Main here."), "{body}");
    let (status, _, body) = post(
        &running,
        "/v1/messages",
        anthropic("You are helpful.", "forecast?", &["get_forecast", "search"]),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("Forecaster here."), "{body}");
    // Only one of main's two tools: main's rule does not hold, nor does the forecaster's.
    let (status, _, body) = post(
        &running,
        "/v1/messages",
        anthropic("You are helpful.", "other?", &["get_weather"]),
    )
    .await;
    assert_eq!(status, 422, "{body}");
    assert!(body.contains("no agent of the scenario matches"), "{body}");
    let report = finish(running).await;
    assert_eq!(report.misses.len(), 1, "{}", report.text());
}

/// The suggestion in a miss's 422, pasted into the file under the agent it names, routes the
/// same request there; the report carries the same lines.
#[tokio::test]
async fn a_miss_suggests_for_each_agent_a_rule_that_routes_the_request_once_pasted() {
    let yaml = r#"
name: a runtime whose agents share one model name
agents:
  main: { model: claude-main }
  forecaster: { model: claude-forecaster }
llm:
  main:
    - tool_use: { name: ask_forecaster, input: { q: rain } }
  forecaster:
    - tool_use: { name: get_forecast, input: { city: Rome } }
    - Rain tomorrow.
"#;
    let system = "You forecast the weather for the main agent, precisely and briefly, in metric units always.\nMore rules follow.";
    let request = anthropic(system, "Rain in Rome?", &["search", "get_forecast"]);
    let running = serve(yaml, Options::default()).await;
    let (status, _, body) = post(&running, "/v1/messages", request.clone()).await;
    assert_eq!(status, 422, "{body}");
    let message = serde_json::from_str::<Value>(&body).unwrap()["error"]["message"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        message.contains("the smallest `match:` rule that routes this request to each agent"),
        "{message}"
    );
    let line = |agent: &str| -> String {
        message
            .lines()
            .find_map(|l| l.trim().strip_prefix(&format!("`{agent}`: ")))
            .unwrap_or_else(|| panic!("no suggestion for {agent}: {message}"))
            .to_owned()
    };
    let forecaster = line("forecaster");
    let main = line("main");
    // The system prompt's first line, cut at a word, is the most telling condition.
    let rule = r#"match: { system_contains: "You forecast the weather for the main agent, precisely and" }"#;
    assert_eq!(main, rule, "one condition routes it to either");
    // The forecaster's script calls a tool the request offers: a hint of whose request it is, as
    // a YAML comment.
    assert_eq!(
        forecaster,
        format!("{rule}   # its script calls `get_forecast`, which the request offers")
    );
    let report = finish(running).await;
    assert!(
        report.misses[0].message.contains(&forecaster),
        "{}",
        report.text()
    );

    // Pasted under `forecaster`, the suggestion routes the request there.
    let pasted = yaml.replace(
        "forecaster: { model: claude-forecaster }",
        &format!("forecaster:\n    model: claude-forecaster\n    {forecaster}"),
    );
    let running = serve(&pasted, Options::default()).await;
    let (status, _, body) = post(&running, "/v1/messages", request).await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("get_forecast"), "{body}");
    finish(running).await;
}

/// When both agents' rules hold, each agent's suggestion says which other agent keeps matching;
/// a request without a system prompt is routed by a tool the agent's script calls.
#[tokio::test]
async fn a_miss_among_several_agents_names_those_that_keep_matching() {
    let yaml = r#"
name: two rules that both hold
agents:
  main: { match: { model: m } }
  helper: { match: { model: m } }
llm:
  main: [Main.]
  helper: [{ tool_use: { name: lookup, input: {} } }]
"#;
    let running = serve(yaml, Options::default()).await;
    let request = json!({"model": "m", "max_tokens": 10,
        "tools": [{"name": "zeta", "input_schema": {}}, {"name": "lookup", "input_schema": {}}],
        "messages": [{"role": "user", "content": "hi"}]});
    let (status, _, body) = post(&running, "/v1/messages", request).await;
    assert_eq!(status, 422, "{body}");
    assert!(body.contains("matches several agents"), "{body}");
    assert!(
        body.contains("`helper`: no rule of its own routes it there while `main` matches it too"),
        "{body}"
    );
    assert!(
        body.contains("`main`: no rule of its own routes it there while `helper` matches it too"),
        "{body}"
    );
    finish(running).await;

    // Alone, the helper is routed by the tool its script calls, before any other tool.
    let yaml = yaml.replace(
        "main: { match: { model: m } }",
        "main: { match: { model: other } }",
    );
    let running = serve(&yaml, Options::default()).await;
    let request = json!({"model": "x", "max_tokens": 10,
        "tools": [{"name": "zeta", "input_schema": {}}, {"name": "lookup", "input_schema": {}}],
        "messages": [{"role": "user", "content": "hi"}]});
    let (_, _, body) = post(&running, "/v1/messages", request).await;
    assert!(
        body.contains(r#"`helper`: match: { tool: \"lookup\" }"#),
        "{body}"
    );
    assert!(
        body.contains(r#"`main`: match: { tool: \"zeta\" }"#),
        "{body}"
    );
    finish(running).await;
}

#[test]
fn bad_tool_rules_are_located_load_errors() {
    let cases = [
        ("{ tools_include: [] }", "at least one"),
        (
            "{ tools_include: [a, \"\"] }",
            "`match: tools_include` lists",
        ),
        ("{ tool: \"\" }", "not an empty name"),
        ("{ tool: [a] }", "expected string scalar"),
        (
            "{ tools: [a, b], tool: c }",
            "tool `c`, which its `tools: [a, b]`",
        ),
        ("{ tools: [a], tools_include: [a, d] }", "tool `d`"),
        ("{ tools: [\"\"] }", "an empty tool name"),
        ("{ tool_name: a }", "unknown field `tool_name`"),
    ];
    for (rule, wanted) in cases {
        let yaml = format!(
            "name: t\nagents:\n  helper:\n    kind: agent\n    match: {rule}\nllm:\n  helper: [hi]\n"
        );
        let e = scenario::parse(&yaml, Path::new("t.yaml"))
            .expect_err(&format!("`{rule}` loads"))
            .to_string();
        assert!(
            e.starts_with("t.yaml:5:"),
            "{rule}: located at the rule's line: {e}"
        );
        assert!(e.contains(wanted), "{rule}: wanted {wanted:?} in {e}");
    }
    let s = scenario::parse(
        "name: t\nagents:\n  helper: { kind: agent, match: { tools_include: [b, a, b], tool: c } }\nllm:\n  helper: [hi]\n",
        Path::new("t.yaml"),
    )
    .expect("loads");
    let rule = &s.routes["helper"];
    assert_eq!(rule.tools_include, ["a", "b"]);
    assert_eq!(rule.tool.as_deref(), Some("c"));
    let again = scenario::parse(&scenario::write::to_yaml(&s), Path::new("w.yaml"))
        .expect("written back, it loads");
    assert_eq!(&again.routes["helper"], rule);
}

#[test]
fn kind_may_be_left_out_only_in_a_file_served_by_mock_llm_alone() {
    let served = "name: t\nagents:\n  helper: { system: You help. }\nllm:\n  helper: [hi]\n";
    let s = scenario::parse(served, Path::new("t.yaml")).expect("a file without steps loads");
    assert_eq!(
        s.catalog.get("helper").map(|d| d.kind),
        Some(agentsim::model::agent::AgentKind::Agent)
    );
    let run = format!("{served}steps: [{{user: x}}]\n");
    let e = scenario::parse(&run, Path::new("t.yaml"))
        .expect_err("a file with steps needs the kind")
        .to_string();
    assert!(
        e.starts_with("t.yaml:3:")
            && e.contains("needs `kind: skill` or `kind: agent`")
            && e.contains("served by `agentsim mock-llm` alone"),
        "{e}"
    );
}

/// A scripted `ask_user` (the simulator's own tool) is refused with a 422 that says why when the
/// request does not offer it, and served when it does.
#[tokio::test]
async fn the_simulators_own_tools_are_refused_unless_the_request_offers_them() {
    let yaml = r#"
name: a script that asks the user
agents:
  main: { model: gpt-shared }
llm:
  main:
    - ask_user: Which city?
"#;
    let running = serve(yaml, Options::default()).await;
    let (status, _, body) = post(&running, "/v1/messages", anthropic("s", "hi", &["search"])).await;
    assert_eq!(status, 422, "{body}");
    assert!(
        body.contains("calls `ask_user` (the shorthand `ask_user:` is that call), a tool of agentsim's own runtime, but the request offers no tool of that name (tools [search])"),
        "{body}"
    );
    let offered = anthropic("s", "hi", &["search", "ask_user"]);
    let (status, _, body) = post(&running, "/v1/messages", offered).await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("Which city?"), "{body}");
    let report = finish(running).await;
    assert_eq!(report.misses.len(), 1, "{}", report.text());
    assert!(report.unused.is_empty(), "{}", report.text());
}
