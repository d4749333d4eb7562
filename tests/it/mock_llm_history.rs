//! mock-llm and the histories real agent frameworks send (research/frameworks-wire.md): agents that
//! share a history under `history: continuation` (the OpenAI Agents SDK's handoff, with and
//! without `nest_handoff_history`; a langgraph-supervisor round trip), the same refused by the
//! default `exact` with the policy to use, `lenient` for compacted histories, the bad values as
//! located load errors, and the Vercel AI SDK's OpenAI Responses `store: true` (`item_reference`)
//! and `previous_response_id`; over a real port on loopback with reqwest. The helpers are
//! `mock_llm.rs`'s.
#![cfg(feature = "mock-server")]

use std::path::Path;

use agentsim::mock_llm::server::Options;
use agentsim::scenario;
use serde_json::{json, Value};

use super::mock_llm::{finish, post, serve};

fn parse(body: &str) -> Value {
    serde_json::from_str(body).unwrap_or_else(|e| panic!("not JSON ({e}): {body}"))
}

/// The OpenAI Agents SDK (Responses API): triage hands off to the forecaster, which looks the
/// forecast up and answers; then the same with `nest_handoff_history=True`.
const HANDOFF: &str = r#"
name: agents sdk handoff
history: continuation
agents:
  triage: { kind: agent, match: { system_contains: "You are the triage agent" } }
  forecaster: { kind: agent, match: { system_contains: "You are the forecaster" } }
llm:
  triage:
    - tool_use: { name: transfer_to_forecaster, input: {} }
    - tool_use: { name: transfer_to_forecaster, input: {} }
  forecaster:
    - tool_use: { name: get_forecast, input: { city: Rome } }
    - Sunny in Rome, 24 C.
    - Sunny in Rome, as I said.
"#;

const TRIAGE: &str =
    "You are the triage agent. Hand weather questions to the forecaster with transfer_to_forecaster.";
const FORECASTER: &str = "You are the forecaster. Use get_forecast.";

fn responses(instructions: &str, input: Value) -> Value {
    json!({"model": "gpt-4.1", "instructions": instructions, "input": input,
           "tools": [{"type": "function", "name": "transfer_to_forecaster", "parameters": {}},
                     {"type": "function", "name": "get_forecast", "parameters": {}}]})
}

/// A reply's output items, as the Agents SDK replays them (it sends the items back whole).
fn output(body: &str) -> Vec<Value> {
    parse(body)["output"].as_array().expect("output").clone()
}

fn call_id(items: &[Value]) -> String {
    items
        .iter()
        .find(|i| i["type"] == "function_call")
        .and_then(|i| i["call_id"].as_str())
        .expect("a function call")
        .to_owned()
}

/// The Agents SDK's default handoff: the forecaster's first request carries triage's history
/// (the user message, triage's handoff call and its output) under the forecaster's instructions;
/// its next request adds its own tool call. Under `continuation` every turn is served from the
/// forecaster's script in triage's conversation, and the run passes.
#[tokio::test]
async fn an_agents_sdk_handoff_is_served_with_and_without_nested_history() {
    let running = serve(HANDOFF, Options::default()).await;
    let user = json!({"role": "user", "content": "What's the weather in Rome?"});
    let (status, _, body) = post(
        &running,
        "/v1/responses",
        responses(TRIAGE, json!([user.clone()])),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let handoff = output(&body);
    let handoff_output = json!({"type": "function_call_output", "call_id": call_id(&handoff),
                                "output": "{\"assistant\": \"Forecaster\"}"});
    let mut input = vec![user.clone()];
    input.extend(handoff.iter().cloned());
    input.push(handoff_output);
    let (status, _, body) = post(
        &running,
        "/v1/responses",
        responses(FORECASTER, Value::Array(input.clone())),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let forecast = output(&body);
    assert_eq!(forecast[0]["name"], "get_forecast", "{body}");
    assert_ne!(call_id(&forecast), call_id(&handoff), "ids stay unique");
    input.extend(forecast.iter().cloned());
    input.push(
        json!({"type": "function_call_output", "call_id": call_id(&forecast),
                      "output": "sunny, 24 C"}),
    );
    let (status, _, body) = post(
        &running,
        "/v1/responses",
        responses(FORECASTER, Value::Array(input)),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("Sunny in Rome, 24 C."), "{body}");

    // `nest_handoff_history=True`: the forecaster gets one assistant message summing up the
    // history, and no user message.
    let user = json!({"role": "user", "content": "And tomorrow?"});
    let (status, _, body) = post(&running, "/v1/responses", responses(TRIAGE, json!([user]))).await;
    assert_eq!(status, 200, "{body}");
    let nested = json!([{"role": "assistant", "content": format!(
        "For context, here is the conversation so far between the user and the previous agent:\n<CONVERSATION HISTORY>\n1. user: And tomorrow?\n2. function_call: transfer_to_forecaster ({})\n</CONVERSATION HISTORY>",
        call_id(&output(&body)))}]);
    let (status, _, body) = post(&running, "/v1/responses", responses(FORECASTER, nested)).await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("Sunny in Rome, as I said."), "{body}");
    let report = finish(running).await;
    assert!(report.passed, "{}", report.text());
    assert_eq!(report.conversations, 3, "{}", report.text());
}

/// `nest_handoff_history=True` with a tool loop after the handoff, as the OpenAI Agents SDK sends
/// it (tests/clients/agents_sdk_clients.py): the forecaster's second request replays its own
/// summary message right before the tool calls the server sent. Over Responses the two are
/// separate items (which the server reads as one assistant turn); over Chat Completions the SDK
/// merges them into one assistant message (the summary as its content, the server's calls as its
/// `tool_calls`). The client's own text in front of a served turn is the client's, not a
/// rewrite of that turn: no violation.
#[tokio::test]
async fn a_nested_handoff_summary_before_the_served_tool_calls_is_the_clients_own() {
    let summary = "For context, here is the conversation so far between the user and the previous agent:\n<CONVERSATION HISTORY>\n1. user: What's the weather in Rome?\n</CONVERSATION HISTORY>";
    // Responses: the summary item, then the function call items the server sent.
    let running = serve(HANDOFF, Options::default()).await;
    let nested = json!({"role": "assistant", "content": summary});
    let (status, _, body) = post(
        &running,
        "/v1/responses",
        responses(FORECASTER, json!([nested.clone()])),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let forecast = output(&body);
    assert_eq!(forecast[0]["name"], "get_forecast", "{body}");
    let mut input = vec![nested];
    input.extend(forecast.iter().cloned());
    input.push(
        json!({"type": "function_call_output", "call_id": call_id(&forecast),
                      "output": "sunny, 24 C"}),
    );
    let (status, _, body) = post(
        &running,
        "/v1/responses",
        responses(FORECASTER, Value::Array(input)),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("Sunny in Rome, 24 C."), "{body}");
    let report = finish(running).await;
    // Only the forecaster's two replies are served (triage's are left, as unused entries).
    assert!(
        report.violations.is_empty() && report.misses.is_empty(),
        "{}",
        report.text()
    );

    // Chat Completions: one assistant message, the summary as content and the calls after it.
    let running = serve(HANDOFF, Options::default()).await;
    let chat = |messages: Value| {
        json!({"model": "gpt-4.1", "messages": messages,
               "tools": [{"type": "function", "function": {"name": "get_forecast", "parameters": {}}}]})
    };
    let system = json!({"role": "system", "content": FORECASTER});
    let (status, _, body) = post(
        &running,
        "/v1/chat/completions",
        chat(json!([system.clone(), {"role": "assistant", "content": summary}])),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let calls = parse(&body)["choices"][0]["message"]["tool_calls"].clone();
    let id = calls[0]["id"].as_str().expect("a tool call id").to_owned();
    let (status, _, body) = post(
        &running,
        "/v1/chat/completions",
        chat(json!([system,
                    {"role": "assistant", "content": summary, "tool_calls": calls},
                    {"role": "tool", "tool_call_id": id, "content": "sunny, 24 C"}])),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("Sunny in Rome, 24 C."), "{body}");
    let report = finish(running).await;
    // Only the forecaster's two replies are served (triage's are left, as unused entries).
    assert!(
        report.violations.is_empty() && report.misses.is_empty(),
        "{}",
        report.text()
    );
}

/// The issue's report, kept: under the default `exact`, the handed-off history is refused, and
/// the message says which policy takes it.
#[tokio::test]
async fn under_exact_a_handoff_is_refused_with_the_policy_that_takes_it() {
    let running = serve(
        &HANDOFF.replace("history: continuation\n", ""),
        Options::default(),
    )
    .await;
    let user = json!({"role": "user", "content": "What's the weather in Rome?"});
    let (_, _, body) = post(
        &running,
        "/v1/responses",
        responses(TRIAGE, json!([user.clone()])),
    )
    .await;
    let handoff = output(&body);
    let mut input = vec![user];
    input.extend(handoff.iter().cloned());
    input.push(
        json!({"type": "function_call_output", "call_id": call_id(&handoff), "output": "{}"}),
    );
    let (status, _, body) = post(
        &running,
        "/v1/responses",
        responses(FORECASTER, Value::Array(input)),
    )
    .await;
    assert_eq!(status, 422, "{body}");
    assert!(
        body.contains("give `forecaster` `history: continuation`"),
        "{body}"
    );
    let report = finish(running).await;
    assert_eq!(report.violations.len(), 1, "{}", report.text());
    assert_eq!(report.violations[0].invariant, Some("replayed-history"));
}

/// langgraph-supervisor over Chat Completions: the supervisor and its worker share one message
/// list; the library adds "Transferring back to supervisor" (an assistant message with a
/// `transfer_back_to_supervisor` call and its result) that no model wrote.
#[tokio::test]
async fn a_langgraph_supervisor_round_trip_passes() {
    let yaml = r#"
name: langgraph supervisor
agents:
  supervisor: { kind: agent, history: continuation, match: { system_contains: "You are a supervisor" } }
  weather_expert: { kind: agent, history: continuation, match: { system_contains: "You are a weather expert" } }
llm:
  supervisor:
    - tool_use: { name: transfer_to_weather_expert, input: {} }
    - Rome is sunny today.
  weather_expert:
    - tool_use: { name: get_weather, input: { city: Rome } }
    - Sunny, 24 C.
"#;
    let running = serve(yaml, Options::default()).await;
    let chat = |system: &str, messages: &[Value]| {
        let mut all = vec![json!({"role": "system", "content": system})];
        all.extend(messages.iter().cloned());
        json!({"model": "gpt-4o", "messages": all,
               "tools": [{"type": "function", "function": {"name": "transfer_to_weather_expert", "parameters": {}}},
                         {"type": "function", "function": {"name": "get_weather", "parameters": {}}}]})
    };
    let calls = |body: &str| -> (Value, String) {
        let message = parse(body)["choices"][0]["message"].clone();
        let id = message["tool_calls"][0]["id"]
            .as_str()
            .expect("a tool call")
            .to_owned();
        (message, id)
    };
    let sup = "You are a supervisor managing a weather expert.";
    let expert = "You are a weather expert.";
    let mut shared = vec![json!({"role": "user", "content": "Weather in Rome?"})];
    let (status, _, body) = post(&running, "/v1/chat/completions", chat(sup, &shared)).await;
    assert_eq!(status, 200, "{body}");
    let (message, id) = calls(&body);
    shared.push(message);
    shared.push(json!({"role": "tool", "tool_call_id": id,
                       "content": "Successfully transferred to weather_expert"}));
    let (status, _, body) = post(&running, "/v1/chat/completions", chat(expert, &shared)).await;
    assert_eq!(status, 200, "{body}");
    let (message, id) = calls(&body);
    shared.push(message);
    shared.push(json!({"role": "tool", "tool_call_id": id, "content": "sunny, 24 C"}));
    let (status, _, body) = post(&running, "/v1/chat/completions", chat(expert, &shared)).await;
    assert_eq!(status, 200, "{body}");
    shared.push(parse(&body)["choices"][0]["message"].clone());
    // The library's own messages.
    shared.push(
        json!({"role": "assistant", "content": "Transferring back to supervisor",
        "tool_calls": [{"id": "call_lg_back", "type": "function",
                        "function": {"name": "transfer_back_to_supervisor", "arguments": "{}"}}]}),
    );
    shared.push(json!({"role": "tool", "tool_call_id": "call_lg_back",
                       "content": "Successfully transferred back to supervisor"}));
    let (status, _, body) = post(&running, "/v1/chat/completions", chat(sup, &shared)).await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("Rome is sunny today."), "{body}");
    let report = finish(running).await;
    assert!(report.passed, "{}", report.text());
    assert_eq!(report.conversations, 1, "{}", report.text());
}

/// `lenient` takes a compacted history (a summary in place of the first turns) and compares
/// nothing, but still checks the request's tool pairing with the provider's own 400.
#[tokio::test]
async fn lenient_serves_a_compacted_history_and_still_checks_tool_pairing() {
    let yaml = r#"
name: compacting runtime
history: lenient
agents:
  main: { model: claude-main }
llm:
  main:
    - First answer.
    - Second answer.
"#;
    let running = serve(yaml, Options::default()).await;
    let ask =
        |messages: Value| json!({"model": "claude-main", "max_tokens": 100, "messages": messages});
    let (status, _, body) = post(
        &running,
        "/v1/messages",
        ask(json!([{"role": "user", "content": "Hello"}])),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let compacted = json!([
        {"role": "user", "content": "<summary>The user said hello; you answered.</summary> Go on."}
    ]);
    let (status, _, body) = post(&running, "/v1/messages", ask(compacted)).await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("Second answer."), "{body}");
    let orphan = json!([
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_x", "content": "ok"}]}
    ]);
    let (status, _, body) = post(&running, "/v1/messages", ask(orphan)).await;
    assert_eq!(status, 400, "{body}");
    let report = finish(running).await;
    assert_eq!(report.violations.len(), 1, "{}", report.text());
    assert_eq!(report.violations[0].invariant, Some("tool-pairing"));
}

/// A bad `history:` value, in the file or in an agent, is a located load error naming the
/// values.
#[test]
fn a_bad_history_value_is_a_located_load_error() {
    for (yaml, line) in [
        ("name: t\nhistory: shared\nllm: { main: [hi] }\n", 2),
        (
            "name: t\nagents:\n  main:\n    history: loose\nllm: { main: [hi] }\n",
            4,
        ),
        ("name: t\nhistory: [exact]\nllm: { main: [hi] }\n", 2),
        ("name: t\nhistory: 3\nllm: { main: [hi] }\n", 2),
    ] {
        let e = scenario::parse(yaml, Path::new("t.yaml"))
            .expect_err(yaml)
            .to_string();
        assert!(e.starts_with(&format!("t.yaml:{line}:")), "{yaml}: {e}");
        assert!(
            e.contains("exact") && e.contains("continuation") && e.contains("lenient"),
            "{yaml}: {e}"
        );
    }
    // Written back, the policies stay.
    let s = scenario::parse(HANDOFF, Path::new("h.yaml")).expect("loads");
    let written = scenario::write::to_yaml(&s);
    assert!(written.contains("history: continuation"), "{written}");
    let again = scenario::parse(&written, Path::new("w.yaml")).expect("the written file loads");
    assert_eq!(again.history, s.history);
}

/// A weather loop for the Vercel AI SDK's `openai(model)` (the Responses API).
const AI_SDK: &str = r#"
name: ai sdk responses
agents:
  main: { model: gpt-4.1 }
llm:
  main:
    - text: Let me check.
      tool_use: { name: get_weather, input: { city: Paris } }
    - It is 18 C in Paris.
    - You are welcome.
"#;

fn ai_sdk(input: Value) -> Value {
    json!({"model": "gpt-4.1", "input": input,
           "tools": [{"type": "function", "name": "get_weather", "strict": false,
                      "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}]})
}

fn user_text(text: &str) -> Value {
    json!({"role": "user", "content": [{"type": "input_text", "text": text}]})
}

/// The items of a Responses stream's `response.output_item.done` events.
fn streamed_items(body: &str) -> Vec<Value> {
    body.split("\n\n")
        .filter_map(|event| {
            let data = event.lines().find_map(|l| l.strip_prefix("data: "))?;
            let data = parse(data);
            (data["type"] == "response.output_item.done").then(|| data["item"].clone())
        })
        .collect()
}

/// With `store: true` (its default) the AI SDK replays a reply's text and function call as
/// `item_reference`s to the ids the server streamed; they resolve to what was sent, the turn
/// goes on, and a reference to an id the server never sent gets the API's own 404.
#[tokio::test]
async fn the_ai_sdks_item_references_resolve_to_the_items_sent() {
    let running = serve(AI_SDK, Options::default()).await;
    let mut first = ai_sdk(json!([user_text("Weather in Paris?")]));
    first["stream"] = true.into();
    let (status, _, body) = post(&running, "/v1/responses", first).await;
    assert_eq!(status, 200, "{body}");
    let items = streamed_items(&body);
    assert_eq!(items.len(), 2, "{body}");
    let (message, call) = (&items[0], &items[1]);
    assert_eq!(
        (&message["type"], &call["type"]),
        (&json!("message"), &json!("function_call"))
    );
    let input = json!([
        user_text("Weather in Paris?"),
        {"type": "item_reference", "id": message["id"]},
        {"type": "item_reference", "id": call["id"]},
        {"type": "function_call_output", "call_id": call["call_id"], "output": "{\"temp\":18}"}
    ]);
    let (status, _, body) = post(&running, "/v1/responses", ai_sdk(input)).await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("It is 18 C in Paris."), "{body}");
    let unknown =
        json!([user_text("Weather in Paris?"), {"type": "item_reference", "id": "msg_never_sent"}]);
    let (status, _, body) = post(&running, "/v1/responses", ai_sdk(unknown)).await;
    assert_eq!(status, 404, "{body}");
    assert_eq!(
        parse(&body),
        json!({"error": {"message": "Item with id 'msg_never_sent' not found.",
                         "type": "invalid_request_error", "param": "input", "code": null}})
    );
    let report = finish(running).await;
    assert_eq!(report.violations.len(), 1, "{}", report.text());
    assert_eq!(report.violations[0].invariant, Some("replayed-history"));
    assert!(
        report.violations[0].message.contains("msg_never_sent"),
        "{}",
        report.text()
    );
    assert_eq!(report.unused.len(), 1, "the third reply: {}", report.text());
}

/// `previous_response_id`: the request continues the response with that id (its input is
/// appended to that response's history, back to the first); an id the server never gave gets the
/// API's own 400.
#[tokio::test]
async fn previous_response_id_continues_the_response_it_names() {
    let running = serve(AI_SDK, Options::default()).await;
    let (status, _, body) = post(
        &running,
        "/v1/responses",
        ai_sdk(json!("Weather in Paris?")),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let first = parse(&body);
    let call = first["output"][1]["call_id"].clone();
    let mut second = ai_sdk(json!([
        {"type": "function_call_output", "call_id": call, "output": "{\"temp\":18}"}
    ]));
    second["previous_response_id"] = first["id"].clone();
    let (status, _, body) = post(&running, "/v1/responses", second).await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("It is 18 C in Paris."), "{body}");
    let mut third = ai_sdk(json!([user_text("Thanks!")]));
    third["previous_response_id"] = parse(&body)["id"].clone();
    let (status, _, body) = post(&running, "/v1/responses", third).await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("You are welcome."), "{body}");
    let mut unknown = ai_sdk(json!("Again?"));
    unknown["previous_response_id"] = "resp_never_sent".into();
    let (status, _, body) = post(&running, "/v1/responses", unknown).await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(
        parse(&body),
        json!({"error": {"message": "Previous response with id 'resp_never_sent' not found.",
                         "type": "invalid_request_error", "param": "previous_response_id",
                         "code": "previous_response_not_found"}})
    );
    let report = finish(running).await;
    assert_eq!(report.violations.len(), 1, "{}", report.text());
    assert!(report.unused.is_empty(), "{}", report.text());
    assert_eq!(report.conversations, 1, "{}", report.text());
}
