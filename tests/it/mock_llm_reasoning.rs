//! mock-llm's scripted reasoning: Anthropic `thinking` blocks (with a signature) and OpenAI
//! Responses `reasoning` items, served whole and streamed with their own events; replayed
//! reasoning is held to what the server sent (left out is fine, altered or invented breaks
//! `replayed-history`); OpenAI Chat gets the reply without it; bad values are located load
//! errors. Over a real port on loopback with reqwest; the helpers are `mock_llm.rs`'s.
#![cfg(feature = "mock-server")]

use std::path::Path;

use agentsim::mock_llm::server::Options;
use agentsim::scenario;
use serde_json::{json, Value};

use super::mock_llm::{finish, post, serve, sse};

const THINKS: &str = r#"
name: a model that thinks before it acts
agents:
  main: { model: thinker }
llm:
  main:
    - thinking: The user wants Paris; get_weather takes a city.
      tool_use: { name: get_weather, input: { city: Paris } }
    - It is 18 C in Paris.
"#;

fn user() -> Value {
    json!({"role": "user", "content": "Weather in Paris?"})
}

fn tools() -> Value {
    json!([{"name": "get_weather", "input_schema": {"type": "object"}}])
}

fn anthropic(messages: Vec<Value>, stream: bool) -> Value {
    json!({"model": "thinker", "max_tokens": 1000, "stream": stream, "tools": tools(),
           "thinking": {"type": "enabled", "budget_tokens": 500}, "messages": messages})
}

fn parse(body: &str) -> Value {
    serde_json::from_str(body).unwrap_or_else(|e| panic!("not JSON ({e}): {body}"))
}

/// The assistant turn as the SDK replays it, with the thinking block given, and the tool result.
fn second_turn(assistant: Value, tool_id: &str) -> Value {
    anthropic(
        vec![
            user(),
            json!({"role": "assistant", "content": assistant}),
            json!({"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": tool_id, "content": "18 C"}]}),
        ],
        false,
    )
}

#[tokio::test]
async fn anthropic_thinking_is_served_with_a_signature_and_held_to_it_when_replayed() {
    let running = serve(THINKS, Options::default()).await;
    let (status, _, body) = post(&running, "/v1/messages", anthropic(vec![user()], false)).await;
    assert_eq!(status, 200, "{body}");
    let reply = parse(&body);
    let content = reply["content"].as_array().unwrap().clone();
    assert_eq!(content[0]["type"], "thinking");
    assert_eq!(
        content[0]["thinking"],
        "The user wants Paris; get_weather takes a city."
    );
    let signature = content[0]["signature"].as_str().unwrap().to_owned();
    assert!(!signature.is_empty());
    assert_eq!(content[1]["type"], "tool_use");
    let tool_id = content[1]["id"].as_str().unwrap().to_owned();

    // Altered text under the server's signature: replayed-history, the turn not served.
    let mut altered = content.clone();
    altered[0]["thinking"] = json!("I will make something up.");
    let (status, _, body) = post(
        &running,
        "/v1/messages",
        second_turn(json!(altered), &tool_id),
    )
    .await;
    assert_eq!(status, 422, "{body}");
    assert!(
        body.contains("replays a thinking block at messages.1.content.0 whose text differs from what the server sent"),
        "{body}"
    );
    // A thinking block the server never sent.
    let mut invented = content.clone();
    invented[0]["signature"] = json!("EqQBCkgIARABGAIiQL");
    let (status, _, body) = post(
        &running,
        "/v1/messages",
        second_turn(json!(invented), &tool_id),
    )
    .await;
    assert_eq!(status, 422, "{body}");
    assert!(
        body.contains("with the signature \\\"EqQBCkgIARABGAIiQL\\\", which the server never sent"),
        "{body}"
    );
    let redacted = json!([{"type": "redacted_thinking", "data": "xyz"}, content[1].clone()]);
    let (status, _, body) = post(&running, "/v1/messages", second_turn(redacted, &tool_id)).await;
    assert_eq!(status, 422, "{body}");
    assert!(body.contains("redacted"), "{body}");

    // Replayed as sent, it passes; so would a history that leaves the thinking out.
    let (status, _, body) = post(
        &running,
        "/v1/messages",
        second_turn(json!(content), &tool_id),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("It is 18 C in Paris."), "{body}");
    let report = finish(running).await;
    assert_eq!(report.violations.len(), 3, "{}", report.text());
    assert!(report
        .violations
        .iter()
        .all(|v| v.invariant == Some("replayed-history")));
    assert!(report.unused.is_empty(), "{}", report.text());

    let running = serve(THINKS, Options::default()).await;
    post(&running, "/v1/messages", anthropic(vec![user()], false)).await;
    let dropped = json!([content[1].clone()]);
    let (status, _, body) = post(&running, "/v1/messages", second_turn(dropped, &tool_id)).await;
    assert_eq!(
        status, 200,
        "a history without the thinking block is fine: {body}"
    );
    let report = finish(running).await;
    assert!(report.passed, "{}", report.text());
}

#[tokio::test]
async fn anthropic_streams_thinking_deltas_then_a_signature_delta() {
    let transcript = Options {
        transcript: true,
        ..Options::default()
    };
    let running = serve(THINKS, transcript).await;
    let (status, _, text) = post(&running, "/v1/messages", anthropic(vec![user()], true)).await;
    assert_eq!(status, 200, "{text}");
    let events: Vec<Value> = sse(&text).iter().map(|(_, d)| parse(d)).collect();
    let start = events
        .iter()
        .find(|e| e["type"] == "content_block_start")
        .unwrap();
    assert_eq!(start["index"], 0);
    assert_eq!(
        start["content_block"],
        json!({"type": "thinking", "thinking": "", "signature": ""})
    );
    let deltas: Vec<&Value> = events
        .iter()
        .filter(|e| e["type"] == "content_block_delta" && e["index"] == 0)
        .map(|e| &e["delta"])
        .collect();
    let kinds: Vec<&str> = deltas.iter().map(|d| d["type"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["thinking_delta", "signature_delta"]);
    assert_eq!(
        deltas[0]["thinking"],
        "The user wants Paris; get_weather takes a city."
    );
    let signature = deltas[1]["signature"].as_str().unwrap();
    // The streamed block is the block a body would hold: the same signature, accepted back.
    let tool_start = events
        .iter()
        .find(|e| e["type"] == "content_block_start" && e["index"] == 1)
        .unwrap();
    let tool_id = tool_start["content_block"]["id"].as_str().unwrap();
    let assistant = json!([
        {"type": "thinking", "thinking": "The user wants Paris; get_weather takes a city.", "signature": signature},
        {"type": "tool_use", "id": tool_id, "name": "get_weather", "input": {"city": "Paris"}}]);
    let (status, _, body) = post(&running, "/v1/messages", second_turn(assistant, tool_id)).await;
    assert_eq!(status, 200, "{body}");
    // The transcript shows the thought before the tool use.
    let transcript = running.transcript();
    assert!(
        transcript.contains(r#"main ← llm: thinking "The user wants Paris; get_weather takes a city." + tool_use get_weather"#),
        "{transcript}"
    );
    let report = finish(running).await;
    assert!(report.passed, "{}", report.text());
}

fn responses(input: Value, stream: bool) -> Value {
    json!({"model": "thinker", "stream": stream, "input": input,
           "tools": [{"type": "function", "name": "get_weather", "parameters": {"type": "object"}}]})
}

#[tokio::test]
async fn responses_reasoning_items_are_served_streamed_and_checked_when_replayed() {
    let transcript = Options {
        transcript: true,
        ..Options::default()
    };
    let running = serve(THINKS, transcript).await;
    let input = json!([{"role": "user", "content": "Weather in Paris?"}]);
    let (status, _, text) = post(&running, "/v1/responses", responses(input.clone(), true)).await;
    assert_eq!(status, 200, "{text}");
    let events: Vec<Value> = sse(&text).iter().map(|(_, d)| parse(d)).collect();
    for (i, e) in events.iter().enumerate() {
        assert_eq!(e["sequence_number"], i, "{e}");
    }
    let kinds: Vec<&str> = events.iter().map(|e| e["type"].as_str().unwrap()).collect();
    assert_eq!(
        kinds[2..8],
        [
            "response.output_item.added",
            "response.reasoning_summary_part.added",
            "response.reasoning_summary_text.delta",
            "response.reasoning_summary_text.done",
            "response.reasoning_summary_part.done",
            "response.output_item.done",
        ]
    );
    let added = &events[2]["item"];
    let id = added["id"].as_str().unwrap().to_owned();
    assert!(id.starts_with("rs_"), "{id}");
    assert_eq!(added["summary"], json!([]));
    assert_eq!(
        events[4]["delta"],
        "The user wants Paris; get_weather takes a city."
    );
    assert_eq!(events[4]["item_id"], id.as_str());
    assert_eq!(events[4]["summary_index"], 0);
    let output = events.last().unwrap()["response"]["output"].clone();
    assert_eq!(
        output[0],
        json!({"type": "reasoning", "id": id, "summary": [
            {"type": "summary_text", "text": "The user wants Paris; get_weather takes a city."}]})
    );
    assert_eq!(events[7]["item"], output[0]);
    let call_id = output[1]["call_id"].as_str().unwrap().to_owned();
    let turn = |reasoning: Value| {
        let mut items = input.as_array().unwrap().clone();
        items.push(reasoning);
        items.push(output[1].clone());
        items.push(json!({"type": "function_call_output", "call_id": call_id, "output": "18 C"}));
        responses(Value::Array(items), false)
    };
    let mut altered = output[0].clone();
    altered["summary"][0]["text"] = json!("Something else.");
    let (status, _, body) = post(&running, "/v1/responses", turn(altered)).await;
    assert_eq!(status, 422, "{body}");
    assert!(
        body.contains("replays a reasoning item at input[1] whose text differs"),
        "{body}"
    );
    // By reference (the AI SDK's default with `store: true`), it resolves to the item sent.
    let (status, _, body) = post(
        &running,
        "/v1/responses",
        turn(json!({"type": "item_reference", "id": id})),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("It is 18 C in Paris."), "{body}");
    let transcript = running.transcript();
    assert!(
        transcript.contains(r#"main ← llm: thinking "The user wants Paris; get_weather takes a city." + tool_use get_weather"#),
        "{transcript}"
    );
    let report = finish(running).await;
    assert_eq!(report.violations.len(), 1, "{}", report.text());
}

#[tokio::test]
async fn openai_chat_gets_the_reply_without_its_reasoning() {
    let running = serve(THINKS, Options::default()).await;
    let body = json!({"model": "thinker", "messages": [{"role": "user", "content": "Weather in Paris?"}],
        "tools": [{"type": "function", "function": {"name": "get_weather", "parameters": {}}}]});
    let (status, _, text) = post(&running, "/v1/chat/completions", body).await;
    assert_eq!(status, 200, "{text}");
    let message = &parse(&text)["choices"][0]["message"];
    assert_eq!(message["content"], Value::Null, "{text}");
    assert_eq!(message["tool_calls"][0]["function"]["name"], "get_weather");
    assert!(!text.contains("The user wants Paris"), "{text}");
    finish(running).await;
}

#[test]
fn bad_thinking_values_are_located_load_errors_and_good_ones_write_back() {
    let cases = [
        ("- thinking: Hmm.", "goes with `text`, `tool_use`"),
        (
            "- { thinking: Hmm., error: rate_limit }",
            "goes with `text`, `tool_use`",
        ),
        (
            "- { thinking: \"\", text: Hi }",
            "`thinking: \"\"` says nothing",
        ),
        (
            "- chunks: [{ thinking: Hmm., text: Hi }]",
            "exactly one of `thinking` (not empty), `text` or `tool_use`",
        ),
        (
            "- chunks: [{ thinking: \"\" }]",
            "exactly one of `thinking` (not empty)",
        ),
        ("- { thinking: [a], text: Hi }", "expected string scalar"),
    ];
    for (entry, wanted) in cases {
        let yaml = format!("name: t\nllm:\n  main:\n    {entry}\n");
        let e = scenario::parse(&yaml, Path::new("t.yaml"))
            .expect_err(&format!("`{entry}` loads"))
            .to_string();
        assert!(e.starts_with("t.yaml:4:"), "{entry}: {e}");
        assert!(e.contains(wanted), "{entry}: wanted {wanted:?} in {e}");
    }
    let yaml = "name: t\nllm:\n  main:\n    - { thinking: Hmm., text: Hi }\n    - chunks: [{ thinking: Let me see. }, Hello]\n";
    let s = scenario::parse(yaml, Path::new("t.yaml")).expect("loads");
    let written = scenario::write::to_yaml(&s);
    let again = scenario::parse(&written, Path::new("w.yaml")).expect("written back, it loads");
    assert_eq!(again.scripts, s.scripts);
}

/// The simulator's runtime never sees reasoning: a scripted thought leaves the reply as it was.
#[test]
fn the_simulator_serves_the_reply_without_its_thinking() {
    let run = agentsim::harness::run_yaml(
        r#"
name: simulator and thinking
llm:
  main:
    - thinking: They said hi.
      text: Hello!
steps:
  - user: hi
  - expect: { sent: [Hello!] }
"#,
    )
    .expect("loads");
    run.assert_passed();
}
