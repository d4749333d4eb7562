//! `agentsim mock-llm` over a real port on loopback, driven with a plain HTTP client (reqwest):
//! the three wire formats with and without streaming, addressing, validation with the providers'
//! own errors, scripted faults, bad input, the journal and the report.
#![cfg(feature = "mock-server")]

use std::path::Path;

use agentsim::mock_llm::server::{self, Options, Report, Running};
use agentsim::scenario;
use serde_json::{json, Value};

pub(super) const WEATHER: &str = r#"
name: weather tool loop
agents:
  main: { system: "You are a weather assistant." }
  planner: { kind: agent, match: { system_contains: "You plan" } }
tools:
  get_weather: { result: "18 C, cloudy" }
llm:
  main:
    - text: Let me check.
      tool_use: { name: get_weather, input: { location: "Paris, France" } }
    - It is 18 C and cloudy in Paris.
  planner:
    - error: rate_limit
    - Plan ready.
steps:
  - user: What is the weather in Paris?
"#;

pub(super) async fn serve(yaml: &str, options: Options) -> Running {
    let scenario = scenario::parse(yaml, Path::new("test.yaml")).expect("the scenario loads");
    server::start(&scenario, options)
        .await
        .expect("the server starts")
}

pub(super) async fn post(
    running: &Running,
    path: &str,
    body: Value,
) -> (u16, reqwest::header::HeaderMap, String) {
    let response = reqwest::Client::new()
        .post(format!("http://{}{path}", running.addr))
        .json(&body)
        .send()
        .await
        .expect("the server answers");
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    (status, headers, response.text().await.expect("a body"))
}

pub(super) async fn finish(running: Running) -> Report {
    running.stop();
    running
        .finish(std::future::pending())
        .await
        .expect("the server stops")
}

fn parse(body: &str) -> Value {
    serde_json::from_str(body).unwrap_or_else(|e| panic!("not JSON ({e}): {body}"))
}

/// The events of an SSE body: (event name, data).
pub(super) fn sse(body: &str) -> Vec<(Option<String>, String)> {
    body.split("\n\n")
        .filter(|e| !e.trim().is_empty())
        .map(|e| {
            let mut name = None;
            let mut data = String::new();
            for line in e.lines() {
                if let Some(n) = line.strip_prefix("event: ") {
                    name = Some(n.to_owned());
                } else if let Some(d) = line.strip_prefix("data: ") {
                    data.push_str(d);
                } else {
                    panic!("unexpected SSE line {line:?}");
                }
            }
            (name, data)
        })
        .collect()
}

pub(super) fn anthropic_turn0() -> Value {
    json!({"model": "claude-x", "max_tokens": 100, "system": "You are a weather assistant.",
           "messages": [{"role": "user", "content": "What is the weather in Paris?"}]})
}

#[tokio::test]
async fn an_anthropic_tool_loop_is_served_turn_by_turn_and_passes() {
    let running = serve(WEATHER, Options::default()).await;
    let (status, headers, body) = post(&running, "/v1/messages", anthropic_turn0()).await;
    assert_eq!(status, 200, "{body}");
    assert!(headers.get("request-id").is_some());
    let first = parse(&body);
    assert_eq!(first["type"], "message");
    assert_eq!(first["role"], "assistant");
    assert_eq!(first["stop_reason"], "tool_use");
    assert_eq!(first["content"][0]["text"], "Let me check.");
    let tool = &first["content"][1];
    assert_eq!(tool["name"], "get_weather");
    assert_eq!(tool["input"]["location"], "Paris, France");
    let id = tool["id"].as_str().unwrap().to_owned();

    let mut second = anthropic_turn0();
    second["messages"] = json!([
        {"role": "user", "content": "What is the weather in Paris?"},
        {"role": "assistant", "content": first["content"]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": id, "content": "18 C, cloudy"}]}
    ]);
    let (status, _, body) = post(&running, "/v1/messages", second).await;
    assert_eq!(status, 200, "{body}");
    let reply = parse(&body);
    assert_eq!(
        reply["content"][0]["text"],
        "It is 18 C and cloudy in Paris."
    );
    assert_eq!(reply["stop_reason"], "end_turn");

    let report = finish(running).await;
    assert_eq!(report.exchanges, 2);
    assert!(report.violations.is_empty() && report.misses.is_empty());
    // The planner's two entries were never asked for: the run does not pass.
    assert_eq!(report.unused.len(), 1);
    assert_eq!(report.unused[0].agent, "planner");
    assert_eq!(report.unused[0].entries, [1, 2]);
    assert!(!report.passed);
    assert!(report
        .text()
        .contains("never served: agent `planner`, entries 1, 2"));
}

#[tokio::test]
async fn a_dangling_tool_use_gets_anthropics_own_400_and_is_recorded() {
    let running = serve(WEATHER, Options::default()).await;
    let mut body = anthropic_turn0();
    body["messages"] = json!([
        {"role": "user", "content": "What is the weather in Paris?"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_dangling", "name": "get_weather", "input": {}}]},
        {"role": "user", "content": "hello?"}
    ]);
    let (status, _, text) = post(&running, "/v1/messages", body).await;
    assert_eq!(status, 400);
    let error = parse(&text);
    assert_eq!(error["type"], "error");
    assert_eq!(error["error"]["type"], "invalid_request_error");
    assert_eq!(
        error["error"]["message"],
        "messages.1: `tool_use` ids were found without `tool_result` blocks immediately after: toolu_dangling. Each `tool_use` block must have a corresponding `tool_result` block in the next message."
    );
    let report = finish(running).await;
    assert_eq!(report.violations.len(), 1);
    assert_eq!(report.violations[0].invariant, Some("tool-pairing"));
    // Refused before it was routed, it still names the agent it was for.
    assert_eq!(report.violations[0].address, None);
    assert_eq!(report.violations[0].agent.as_deref(), Some("main"));
    assert!(!report.passed);
}

#[tokio::test]
async fn a_scripted_rate_limit_is_a_429_with_retry_after_and_the_retry_gets_the_reply() {
    let running = serve(WEATHER, Options::default()).await;
    let body = json!({"model": "gpt-x", "messages": [
        {"role": "system", "content": "You plan the work."},
        {"role": "user", "content": "plan it"}]});
    let (status, headers, text) = post(&running, "/v1/chat/completions", body.clone()).await;
    assert_eq!(status, 429, "{text}");
    assert_eq!(headers.get("retry-after").unwrap(), "1");
    let error = parse(&text);
    assert_eq!(error["error"]["code"], "rate_limit_exceeded");
    let (status, _, text) = post(&running, "/v1/chat/completions", body).await;
    assert_eq!(status, 200, "{text}");
    let reply = parse(&text);
    assert_eq!(reply["object"], "chat.completion");
    assert_eq!(reply["choices"][0]["message"]["content"], "Plan ready.");
    assert_eq!(reply["choices"][0]["finish_reason"], "stop");
    let report = running.report();
    assert_eq!(report.unused[0].agent, "main");
    assert!(report.misses.is_empty() && report.violations.is_empty());
    finish(running).await;
}

#[tokio::test]
async fn streams_in_each_format_carry_the_scripted_reply() {
    let running = serve(WEATHER, Options::default()).await;
    // Anthropic: named events, text then a tool use split into input_json_delta fragments.
    let mut body = anthropic_turn0();
    body["stream"] = json!(true);
    let (status, headers, text) = post(&running, "/v1/messages", body).await;
    assert_eq!(status, 200);
    assert!(headers["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/event-stream"));
    let events = sse(&text);
    let names: Vec<&str> = events.iter().map(|(n, _)| n.as_deref().unwrap()).collect();
    assert_eq!(names.first(), Some(&"message_start"));
    assert_eq!(names.last(), Some(&"message_stop"));
    let mut partial = String::new();
    for (name, data) in &events {
        let d = parse(data);
        assert_eq!(d["type"].as_str(), name.as_deref());
        if d["delta"]["type"] == "input_json_delta" {
            partial.push_str(d["delta"]["partial_json"].as_str().unwrap());
        }
    }
    assert_eq!(parse(&partial), json!({"location": "Paris, France"}));

    // OpenAI Responses, streamed: the planner (rate limit first, then its reply).
    let body = json!({"model": "gpt-x", "instructions": "You plan things.", "input": "plan", "stream": true});
    let (status, _, _) = post(&running, "/v1/responses", body.clone()).await;
    assert_eq!(status, 429);
    let (status, _, text) = post(&running, "/v1/responses", body).await;
    assert_eq!(status, 200, "{text}");
    let events = sse(&text);
    assert_eq!(events[0].0.as_deref(), Some("response.created"));
    let last = parse(&events.last().unwrap().1);
    assert_eq!(last["type"], "response.completed");
    assert_eq!(
        last["response"]["output"][0]["content"][0]["text"],
        "Plan ready."
    );
    assert!(events.iter().all(|(_, d)| d != "[DONE]"));
    finish(running).await;
}

#[tokio::test]
async fn an_openai_chat_tool_loop_streams_with_usage_and_done() {
    let yaml = r#"
name: chat loop
agents:
  main: { model: gpt-test }
tools:
  search: { result: found }
llm:
  main:
    - tool_use: [{ name: search, input: { q: a } }, { name: search, input: { q: b } }]
    - Both found.
steps:
  - user: go
"#;
    let running = serve(yaml, Options::default()).await;
    let body = json!({"model": "gpt-test", "stream": true, "stream_options": {"include_usage": true},
                      "messages": [{"role": "user", "content": "go"}]});
    let (status, _, text) = post(&running, "/v1/chat/completions", body).await;
    assert_eq!(status, 200, "{text}");
    let events = sse(&text);
    assert!(events.iter().all(|(n, _)| n.is_none()));
    assert_eq!(events.last().unwrap().1, "[DONE]");
    let chunks: Vec<Value> = events[..events.len() - 1]
        .iter()
        .map(|(_, d)| parse(d))
        .collect();
    let usage = chunks.last().unwrap();
    assert_eq!(usage["choices"], json!([]));
    assert!(usage["usage"]["total_tokens"].as_u64().unwrap() > 0);
    let mut calls: Vec<(String, String, String)> = Vec::new();
    for c in &chunks {
        for call in c["choices"][0]["delta"]["tool_calls"]
            .as_array()
            .into_iter()
            .flatten()
        {
            let i = call["index"].as_u64().unwrap() as usize;
            if i == calls.len() {
                calls.push((
                    call["id"].as_str().unwrap().into(),
                    call["function"]["name"].as_str().unwrap().into(),
                    String::new(),
                ));
            }
            calls[i]
                .2
                .push_str(call["function"]["arguments"].as_str().unwrap());
        }
    }
    assert_eq!(calls.len(), 2);
    assert_ne!(calls[0].0, calls[1].0);
    assert!(calls.iter().all(|c| c.0.starts_with("call_")));
    // The next turn replays both calls and answers them.
    let tool_calls: Vec<Value> = calls
        .iter()
        .map(|(id, name, args)| json!({"id": id, "type": "function", "function": {"name": name, "arguments": args}}))
        .collect();
    let mut messages = vec![
        json!({"role": "user", "content": "go"}),
        json!({"role": "assistant", "content": null, "tool_calls": tool_calls}),
    ];
    for (id, _, _) in &calls {
        messages.push(json!({"role": "tool", "tool_call_id": id, "content": "found"}));
    }
    let (status, _, text) = post(
        &running,
        "/v1/chat/completions",
        json!({"model": "gpt-test", "messages": messages}),
    )
    .await;
    assert_eq!(status, 200, "{text}");
    assert_eq!(
        parse(&text)["choices"][0]["message"]["content"],
        "Both found."
    );
    let report = finish(running).await;
    assert!(report.passed, "{}", report.text());
}

#[tokio::test]
async fn misses_and_rewritten_history_are_explained_never_defaulted() {
    let running = serve(WEATHER, Options::default()).await;
    let body = json!({"model": "nobody", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]});
    let (status, _, text) = post(&running, "/v1/messages", body).await;
    assert_eq!(status, 422, "{text}");
    let message = parse(&text)["error"]["message"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        message.starts_with(
            "agentsim mock-llm: no agent of the scenario matches the request (model \"nobody\""
        ),
        "{message}"
    );
    assert!(
        message
            .contains("`main` (model \"main\" or system prompt \"You are a weather assistant.\")"),
        "{message}"
    );

    post(&running, "/v1/messages", anthropic_turn0()).await;
    let mut rewritten = anthropic_turn0();
    rewritten["messages"] = json!([
        {"role": "user", "content": "What is the weather in Paris?"},
        {"role": "assistant", "content": "I made this up."},
        {"role": "user", "content": "ok"}
    ]);
    let (status, _, text) = post(&running, "/v1/messages", rewritten).await;
    assert_eq!(status, 422, "{text}");
    assert!(text.contains("assistant turn 1 differs"), "{text}");
    let report = finish(running).await;
    assert_eq!(report.misses.len(), 1);
    assert_eq!(report.violations.len(), 1);
    assert_eq!(report.violations[0].invariant, Some("replayed-history"));
}

#[tokio::test]
async fn bad_input_gets_the_providers_error_shape_and_the_server_keeps_serving() {
    let dir = std::env::temp_dir().join(format!("agentsim-mock-llm-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let journal = dir.join("journal.jsonl");
    let options = Options {
        journal: Some(journal.clone()),
        body_limit: 4096,
        ..Options::default()
    };
    let running = serve(WEATHER, options).await;
    let client = reqwest::Client::new();
    let base = format!("http://{}", running.addr);
    // Not JSON.
    let r = client
        .post(format!("{base}/v1/messages"))
        .header("content-type", "application/json")
        .body("{oops")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    let e: Value = r.json().await.unwrap();
    assert_eq!(e["type"], "error");
    assert!(e["error"]["message"]
        .as_str()
        .unwrap()
        .starts_with("the request body is not valid JSON"));
    // No content type.
    let r = client
        .post(format!("{base}/v1/chat/completions"))
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    let e: Value = r.json().await.unwrap();
    assert!(e["error"]["message"]
        .as_str()
        .unwrap()
        .contains("content-type must be application/json (got none)"));
    // A body that is JSON but not a request.
    let r = client
        .post(format!("{base}/v1/responses"))
        .json(&json!({"model": 3}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    // Over the limit.
    let big = json!({"model": "main", "messages": [{"role": "user", "content": "x".repeat(5000)}]});
    let r = client
        .post(format!("{base}/v1/messages"))
        .json(&big)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 413);
    let e: Value = r.json().await.unwrap();
    assert_eq!(e["error"]["type"], "request_too_large");
    // Unknown path, wrong method.
    let r = client
        .get(format!("{base}/v2/nothing"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);
    let r = client
        .get(format!("{base}/v1/messages"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 405);
    // Still serving.
    let (status, _, _) = post(&running, "/v1/messages", anthropic_turn0()).await;
    assert_eq!(status, 200);
    let models: Value = client
        .get(format!("{base}/v1/models"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let ids: Vec<&str> = models["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["main"]);
    let report = finish(running).await;
    assert_eq!(report.exchanges, 7);
    assert_eq!(report.violations.len(), 3, "{}", report.text());
    assert!(report
        .violations
        .iter()
        .all(|v| v.invariant == Some("request-format")));
    let lines: Vec<Value> = std::fs::read_to_string(&journal)
        .unwrap()
        .lines()
        .map(parse)
        .collect();
    let outcomes: Vec<&str> = lines
        .iter()
        .map(|l| l["outcome"].as_str().unwrap())
        .collect();
    assert_eq!(
        outcomes,
        [
            "invalid",
            "invalid",
            "invalid",
            "invalid",
            "unknown-path",
            "unknown-path",
            "reply"
        ],
        "one journal line per exchange"
    );
    assert_eq!(lines[0]["violation"], "request-format");
    assert_eq!(lines[3]["status"], 413);
    assert_eq!(lines[6]["address"]["agent"], "main");
    assert_eq!(lines[6]["address"]["turn"], 0);
    assert_eq!(lines[6]["response"]["stop_reason"], "tool_use");
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn the_shutdown_endpoint_stops_the_server_with_its_report() {
    let running = serve(WEATHER, Options::default()).await;
    let addr = running.addr;
    let report: Value = reqwest::get(format!("http://{addr}/_agentsim/report"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(report["passed"], false);
    assert_eq!(report["unused"][0]["agent"], "main");
    let r = reqwest::Client::new()
        .post(format!("http://{addr}/_agentsim/shutdown"))
        .header("content-type", "application/json")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let report = running.finish(std::future::pending()).await.unwrap();
    assert_eq!(report.exchanges, 0);
    assert!(
        reqwest::get(format!("http://{addr}/v1/models"))
            .await
            .is_err(),
        "the port is closed"
    );
}

#[tokio::test]
async fn scripted_mid_stream_errors_and_cuts_break_the_stream_and_the_retry_gets_the_reply() {
    let yaml = r#"
name: broken streams
agents:
  main: {}
llm:
  main:
    - error: { kind: overloaded, mid_stream: true }
    - error: { kind: network, mid_stream: true }
    - text: The forecast is sunny with a light breeze all afternoon.
"#;
    let running = serve(yaml, Options::default()).await;
    let body = json!({"model": "main", "max_tokens": 100, "stream": true,
        "messages": [{"role": "user", "content": "forecast?"}]});
    // First: half of the reply's events, then an overloaded error event.
    let (status, _, text) = post(&running, "/v1/messages", body.clone()).await;
    assert_eq!(status, 200, "{text}");
    let events = sse(&text);
    assert_eq!(events[0].0.as_deref(), Some("message_start"));
    let (name, data) = events.last().unwrap();
    assert_eq!(name.as_deref(), Some("error"));
    assert_eq!(parse(data)["error"]["type"], "overloaded_error");
    assert!(events
        .iter()
        .all(|(n, _)| n.as_deref() != Some("message_stop")));
    // Second: the same beginning, then the stream just ends.
    let (status, _, text) = post(&running, "/v1/messages", body.clone()).await;
    assert_eq!(status, 200, "{text}");
    let cut = sse(&text);
    assert_eq!(cut.len(), events.len() - 1, "{text}");
    assert!(cut
        .iter()
        .all(|(n, _)| { !matches!(n.as_deref(), Some("error") | Some("message_stop")) }));
    // Third: the whole reply.
    let (status, _, text) = post(&running, "/v1/messages", body.clone()).await;
    assert_eq!(status, 200, "{text}");
    let whole = sse(&text);
    assert_eq!(whole.last().unwrap().0.as_deref(), Some("message_stop"));
    assert_eq!(
        &whole[..cut.len()],
        &cut[..],
        "the broken streams began as the reply"
    );
    let report = running.report();
    assert!(report.passed, "{}", report.text());
    finish(running).await;

    // A request that does not stream gets the error as a status.
    let running = serve(yaml, Options::default()).await;
    let mut body = body;
    body["stream"] = json!(false);
    let (status, _, text) = post(&running, "/v1/messages", body).await;
    assert_eq!(status, 529, "{text}");
    // OpenAI Chat streams: chunks, then an error object (no [DONE]).
    let chat = json!({"model": "main", "stream": true,
        "messages": [{"role": "user", "content": "forecast?"}]});
    let (status, _, text) = post(&running, "/v1/chat/completions", chat).await;
    assert_eq!(status, 200, "{text}");
    let events = sse(&text);
    assert!(events.iter().all(|(_, d)| d != "[DONE]"), "{text}");
    finish(running).await;
}

#[tokio::test]
async fn the_transcript_renders_every_exchange_and_equals_its_journal_rendered() {
    let dir = std::env::temp_dir().join(format!("agentsim-transcript-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let journal = dir.join("exchanges.jsonl");
    let options = Options {
        transcript: true,
        journal: Some(journal.clone()),
        ..Options::default()
    };
    let running = serve(WEATHER, options).await;
    let (status, _, body) = post(&running, "/v1/messages", anthropic_turn0()).await;
    assert_eq!(status, 200);
    let first = parse(&body);
    let planner = json!({"model": "gpt-x", "stream": true, "messages": [
        {"role": "system", "content": "You plan the work."},
        {"role": "user", "content": "plan it"}]});
    assert_eq!(
        post(&running, "/v1/chat/completions", planner.clone())
            .await
            .0,
        429
    );
    assert_eq!(post(&running, "/v1/chat/completions", planner).await.0, 200);
    let mut dangling = anthropic_turn0();
    dangling["messages"] = json!([
        {"role": "user", "content": "What is the weather in Paris?"},
        {"role": "assistant", "content": first["content"]},
        {"role": "user", "content": "hello?"}
    ]);
    assert_eq!(post(&running, "/v1/messages", dangling).await.0, 400);
    let served = reqwest::get(format!("http://{}/_agentsim/transcript", running.addr))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let text = running.transcript();
    assert_eq!(served, text);
    finish(running).await;
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        lines[..3],
        [
            "#1 POST /v1/messages → main, conversation 1, turn 0, entry 1",
            "   main → llm: 1 messages, tools []; last: user text \"What is the weather in Paris?\"",
            "   main ← llm: text \"Let me check.\" + tool_use get_weather toolu_as_a_a_a {\"location\":\"Paris, France\"} [tokens 15 in, 11 out]",
        ],
        "{text}"
    );
    assert!(
        lines[3].starts_with(
            "#2 POST /v1/chat/completions (stream) → planner, conversation 2, turn 0, entry 1"
        ),
        "{text}"
    );
    assert!(
        lines[5].starts_with("   planner ← llm fault 429: "),
        "{text}"
    );
    assert!(
        lines[8].starts_with("   planner ← llm: text \"Plan ready.\""),
        "{text}"
    );
    assert!(
        lines[11].starts_with("   violation [tool-pairing] (400): messages.1: `tool_use` ids were found without `tool_result` blocks"),
        "{text}"
    );
    assert_eq!(lines.len(), 12, "{text}");
    // The journal renders to the same transcript.
    let rendered =
        agentsim::mock_llm::transcript::render_journal(&std::fs::read_to_string(&journal).unwrap());
    assert_eq!(rendered, text);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test]
async fn concurrent_conversations_of_one_agent_get_their_own_scripts_in_any_order() {
    let yaml = r#"
name: two researchers in parallel
agents:
  paris: { kind: agent, match: { model: researcher, first_user_contains: Paris } }
  rome: { kind: agent, match: { model: researcher, first_user_contains: Rome } }
llm:
  paris:
    - tool_use: { name: search, input: { q: paris population } }
    - Paris has about 2.1 million people.
  rome:
    - tool_use: { name: search, input: { q: rome population } }
    - Rome has about 2.8 million people.
"#;
    for rome_first in [false, true] {
        let running = serve(yaml, Options::default()).await;
        let ask = |city: &'static str| {
            json!({"model": "researcher", "max_tokens": 50,
                   "messages": [{"role": "user", "content": format!("Look up the population of {city}")}]})
        };
        let (a, b) = if rome_first {
            ("Rome", "Paris")
        } else {
            ("Paris", "Rome")
        };
        // Both first turns at once, then both second turns at once.
        let (ra, rb) = tokio::join!(
            post(&running, "/v1/messages", ask(a)),
            post(&running, "/v1/messages", ask(b))
        );
        let mut seconds = Vec::new();
        for (city, (status, _, body)) in [(a, ra), (b, rb)] {
            assert_eq!(status, 200, "{body}");
            let first = parse(&body);
            let tool = &first["content"][0];
            assert_eq!(
                tool["input"]["q"],
                format!("{} population", city.to_lowercase())
            );
            let mut next = ask(city);
            next["messages"] = json!([
                {"role": "user", "content": format!("Look up the population of {city}")},
                {"role": "assistant", "content": first["content"]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": tool["id"], "content": "found"}]}
            ]);
            seconds.push((city, next));
        }
        let (ra, rb) = tokio::join!(
            post(&running, "/v1/messages", seconds[1].1.clone()),
            post(&running, "/v1/messages", seconds[0].1.clone())
        );
        for (city, (status, _, body)) in [(seconds[1].0, ra), (seconds[0].0, rb)] {
            assert_eq!(status, 200, "{body}");
            let text = parse(&body)["content"][0]["text"]
                .as_str()
                .unwrap()
                .to_owned();
            assert!(text.starts_with(city), "{city}: {text}");
        }
        let report = finish(running).await;
        assert!(report.passed, "{}", report.text());
    }
}

#[test]
fn a_per_conversation_script_is_for_files_without_steps_and_writes_back() {
    let with_steps = "name: x\nagents:\n  main: { script: per_conversation }\nllm: {main: [hi]}\nsteps:\n  - user: hello\n";
    let e = scenario::parse(with_steps, Path::new("x.yaml")).unwrap_err();
    assert_eq!(e.line, 3, "{e}");
    assert!(
        e.message
            .contains("`script: per_conversation` is for `agentsim mock-llm`"),
        "{e}"
    );
    let served = "name: x\nagents:\n  main: { script: per_conversation }\nllm: {main: [hi]}\n";
    let s = scenario::parse(served, Path::new("x.yaml")).unwrap();
    assert!(s.per_conversation.contains("main"));
    let again = scenario::parse(&scenario::write::to_yaml(&s), Path::new("y.yaml")).unwrap();
    assert_eq!(again.per_conversation, s.per_conversation);
}

#[tokio::test]
async fn features_it_does_not_serve_are_refused_and_images_are_not_empty_turns() {
    let yaml = "name: features\nllm:\n  main: [hello, seen]\n";
    let running = serve(yaml, Options::default()).await;
    // Several choices: refused in OpenAI's shape, reported, never answered with one.
    let (status, _, text) = post(
        &running,
        "/v1/chat/completions",
        json!({"model": "main", "n": 3, "messages": [{"role": "user", "content": "hi"}]}),
    )
    .await;
    assert_eq!(status, 400, "{text}");
    let error = parse(&text);
    assert_eq!(error["error"]["type"], "invalid_request_error");
    assert!(error["error"]["message"]
        .as_str()
        .unwrap()
        .contains("one choice; this request asks for n = 3"));
    // An image-only user turn is a turn, not an empty message.
    let (status, _, text) = post(
        &running,
        "/v1/messages",
        json!({"model": "main", "max_tokens": 10, "messages": [{"role": "user", "content": [
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"}}
        ]}]}),
    )
    .await;
    assert_eq!(status, 200, "{text}");
    let (status, _, text) = post(
        &running,
        "/v1/chat/completions",
        json!({"model": "main", "messages": [{"role": "user", "content": "hi"}]}),
    )
    .await;
    assert_eq!(status, 200, "{text}");
    let report = finish(running).await;
    assert!(report.violations.is_empty(), "{}", report.text());
    assert_eq!(report.misses.len(), 1, "{}", report.text());
    assert!(report.misses[0].message.contains("n = 3"));
    assert!(!report.passed, "a refused request fails the run");
}
