//! mock-llm's scripted errors that outlast a client's retries (`times: N | always`, with a short
//! `retry_after`), their bad values as located load errors, and routing by the `x-agentsim-agent`
//! header; over a real port on loopback with reqwest. The helpers are `mock_llm.rs`'s.
#![cfg(feature = "mock-server")]

use std::path::Path;

use agentsim::mock_llm::server::Options;
use agentsim::scenario;
use serde_json::{json, Value};

use super::mock_llm::{finish, post, serve};

/// `main` fails its first turn twice (each attempt asked to retry after 10 ms), then answers;
/// `stuck` fails every attempt.
const RETRIED: &str = r#"
name: errors that outlast retries
agents:
  main: { model: claude-main }
  stuck: { kind: agent, model: claude-stuck }
llm:
  main:
    - error: { kind: overloaded, times: 2, retry_after: 10ms }
    - Done at last.
  stuck:
    - error: { kind: rate_limit, message: "still limited", times: always }
steps:
  - user: Go.
"#;

fn turn0(model: &str) -> Value {
    json!({"model": model, "max_tokens": 100,
           "messages": [{"role": "user", "content": "Go."}]})
}

/// The same request three times against `times: 2`: an error, an error, the reply; the report
/// passes (every entry served, nothing broken).
#[tokio::test]
async fn an_error_with_times_two_fails_two_attempts_then_the_retry_gets_the_reply() {
    let yaml = RETRIED.replace(
        "  stuck:\n    - error: { kind: rate_limit, message: \"still limited\", times: always }\n",
        "",
    );
    let running = serve(&yaml, Options::default()).await;
    for attempt in 1..=2 {
        let (status, headers, body) = post(&running, "/v1/messages", turn0("claude-main")).await;
        assert_eq!(status, 529, "attempt {attempt}: {body}");
        assert_eq!(
            headers.get("retry-after-ms").map(|v| v.to_str().unwrap()),
            Some("10"),
            "attempt {attempt}"
        );
        assert_eq!(
            headers.get("retry-after").map(|v| v.to_str().unwrap()),
            Some("1"),
            "whole seconds, rounded up"
        );
        assert!(body.contains("overloaded_error"), "{body}");
    }
    let (status, _, body) = post(&running, "/v1/messages", turn0("claude-main")).await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("Done at last."), "{body}");
    let report = finish(running).await;
    assert!(report.passed, "{}", report.text());
    assert!(report.misses.is_empty() && report.unused.is_empty());
}

/// `times: always` fails every attempt of its turn, with its message, over every wire format;
/// the report passes (the entry was served), and the 429 keeps its usual `retry-after` of 1 s.
#[tokio::test]
async fn an_error_of_every_attempt_fails_every_retry_of_its_turn() {
    let yaml = RETRIED.replace(
        "    - error: { kind: overloaded, times: 2, retry_after: 10ms }\n    - Done at last.\n",
        "    - Done.\n",
    );
    let running = serve(&yaml, Options::default()).await;
    for path in ["/v1/messages", "/v1/chat/completions"].repeat(5) {
        let (status, headers, body) = post(&running, path, turn0("claude-stuck")).await;
        assert_eq!(status, 429, "{path}: {body}");
        assert!(body.contains("still limited"), "{body}");
        assert_eq!(headers.get("retry-after").unwrap(), "1");
        assert_eq!(headers.get("retry-after-ms").unwrap(), "1000");
    }
    let (status, _, body) = post(&running, "/v1/messages", turn0("claude-main")).await;
    assert_eq!(status, 200, "{body}");
    let report = finish(running).await;
    assert!(report.passed, "{}", report.text());
}

/// Routing by `x-agentsim-agent`: the header names the agent before any rule or default (here
/// the model name says `main`); an unknown name is a miss answered 422 listing the agents.
#[tokio::test]
async fn the_agent_header_routes_a_request_and_an_unknown_name_is_a_422_miss() {
    let yaml = r#"
name: routed by header
agents:
  main: { model: shared-model }
  researcher: { kind: agent, model: shared-model, match: { system_contains: "never in any request" } }
llm:
  main:
    - From main.
  researcher:
    - From the researcher.
steps:
  - user: Go.
"#;
    let running = serve(yaml, Options::default()).await;
    let client = reqwest::Client::new();
    let send = |agent: &'static str| {
        client
            .post(format!("http://{}/v1/messages", running.addr))
            .header("x-agentsim-agent", agent)
            .json(&turn0("shared-model"))
            .send()
    };
    let response = send("researcher").await.expect("an answer");
    assert_eq!(response.status().as_u16(), 200);
    let body = response.text().await.unwrap();
    assert!(body.contains("From the researcher."), "{body}");
    let response = send("planner").await.expect("an answer");
    assert_eq!(response.status().as_u16(), 422);
    let body = response.text().await.unwrap();
    assert!(
        body.contains("the request's header `x-agentsim-agent: planner` names no agent with a script in the scenario; agents: `main`, `researcher`"),
        "{body}"
    );
    // Without the header, the default routing: the model name is `main`'s.
    let (status, _, body) = post(&running, "/v1/messages", turn0("shared-model")).await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("From main."), "{body}");
    let report = finish(running).await;
    assert!(!report.passed, "the miss fails the run");
    assert_eq!(report.misses.len(), 1, "{}", report.text());
    assert!(report.unused.is_empty(), "{}", report.text());
}

/// Every bad `times` or `retry_after` is a located load error (FILE:LINE:COL) saying what to
/// write.
#[test]
fn bad_times_and_retry_after_are_located_load_errors() {
    let cases = [
        ("times: 0", "`times: 0` would fail no attempt"),
        ("times: -1", "`times: -1` is negative"),
        ("times: \"x\"", "`times: \"x\"` is not a number"),
        ("times: x", "`times: \"x\"` is not a number"),
        ("times: 1.5", "`times: 1.5` is not a whole number"),
        ("times: true", "`times: true` is a boolean"),
        ("times: 5000000000", "more attempts than any client makes"),
        ("retry_after: 0", "`retry_after: 0` is ignored by the SDKs"),
        ("retry_after: soon", "invalid duration `soon`"),
        ("retry_after: -5ms", "cannot be negative"),
        ("tries: 2", "unknown field `tries`"),
    ];
    for (key, wanted) in cases {
        let yaml = format!(
            "name: t\nllm:\n  main:\n    - error:\n        kind: rate_limit\n        {key}\nsteps: [{{user: x}}]\n"
        );
        let e = scenario::parse(&yaml, Path::new("t.yaml"))
            .expect_err(&format!("`{key}` loads"))
            .to_string();
        assert!(e.starts_with("t.yaml:"), "{key}: {e}");
        let (line, column) = {
            let mut parts = e.split(':').skip(1);
            (parts.next().unwrap(), parts.next().unwrap())
        };
        // The error sits on the error's lines (4 to 6), never nowhere.
        assert!(
            ["4", "5", "6"].contains(&line) && column.parse::<u32>().is_ok_and(|c| c >= 1),
            "{key}: {e}"
        );
        assert!(e.contains(wanted), "{key}: wanted {wanted:?} in {e}");
    }
    let network = "name: t\nllm:\n  main:\n    - error: { kind: network, retry_after: 10ms }\nsteps: [{user: x}]\n";
    let e = scenario::parse(network, Path::new("t.yaml"))
        .expect_err("a network error's retry_after loads")
        .to_string();
    assert!(
        e.starts_with("t.yaml:4:") && e.contains("a `network` error drops the connection"),
        "{e}"
    );
}

/// The simulator accepts `times` and `retry_after` and serves the error once: its runtime does
/// not retry, so the call fails and the turn ends with the error, as for any scripted error; the
/// next turn gets the next entry.
#[test]
fn the_simulator_fails_one_call_whatever_the_times() {
    let run = agentsim::harness::run_yaml(
        r#"
name: simulator and times
llm:
  main:
    - error: { kind: overloaded, times: always, retry_after: 10ms }
    - error: { kind: rate_limit, times: 3 }
    - Back online.
steps:
  - user: first try
  - expect: { sent: ["LLM error: overloaded (529)"], llm_calls: { main: 1 } }
  - user: second try
  - expect: { sent: ["LLM error: rate limit exceeded (429)"], llm_calls: { main: 2 } }
  - user: third try
  - expect: { sent: [Back online.], llm_calls: { main: 3 } }
"#,
    )
    .expect("loads");
    run.assert_passed();
}

/// A scenario written back (`explore`'s shrunk files) keeps `times` and `retry_after`.
#[test]
fn times_and_retry_after_survive_writing_the_scenario_back() {
    let s = scenario::parse(RETRIED, Path::new("x.yaml")).expect("loads");
    let yaml = scenario::write::to_yaml(&s);
    assert!(
        yaml.contains(r#""retry_after":10,"times":2"#) && yaml.contains(r#""times":"always""#),
        "{yaml}"
    );
    let again = scenario::parse(&yaml, Path::new("y.yaml")).expect("the written file loads");
    assert_eq!(again.scripts, s.scripts);
}
