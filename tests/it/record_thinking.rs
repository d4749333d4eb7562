//! Reasoning and mid-stream errors carried from real traffic into imported scripts: a bare
//! upstream answers with thinking blocks and reasoning items under signatures and ids no script
//! generates, and breaks a stream with a rate limit error; recorded through `agentsim record`,
//! the written file has `thinking:` and `error: { kind: rate_limit, mid_stream: true }`, and
//! served by `agentsim mock-llm` to the same client (which replays what it was sent) it gives the
//! same reasoning, the same replies and a passing report. And mock-llm's own journal of a
//! scripted run with both imports into the same script.
#![cfg(all(feature = "http-model", feature = "mock-server"))]

use std::path::Path;

use agentsim::import;
use agentsim::mock_llm::server::{self, Options};
use agentsim::record;
use agentsim::scenario;
use serde_json::{json, Value};

const SIGNATURE: &str = "EqQBCkgIARABGAIiQLkPdZ3real+signature/from/a/provider==";
const REASONING_ID: &str = "rs_68b7f3c0real";

/// The SSE text of `events` (each a JSON object with its `type`).
fn sse(events: &[Value], named: bool) -> String {
    events
        .iter()
        .map(|e| {
            let name = e["type"].as_str().unwrap_or("");
            if named {
                format!("event: {name}\ndata: {e}\n\n")
            } else {
                format!("data: {e}\n\n")
            }
        })
        .collect()
}

fn anthropic_answer(
    body: &Value,
    attempts: &std::sync::atomic::AtomicU32,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    let messages = body["messages"].as_array().cloned().unwrap_or_default();
    let first = messages[0]["content"].as_str().unwrap_or("").to_owned();
    let stream = body["stream"] == json!(true);
    let answered = messages.len() > 1;
    if answered {
        // The client replays the thinking block as it was sent, signature and all.
        let replayed = &messages[1]["content"][0];
        assert_eq!(replayed["type"], "thinking", "{body}");
        assert_eq!(replayed["signature"], SIGNATURE, "{body}");
    }
    let content = if answered {
        json!([{"type": "text", "text": "It is 18 C in Paris."}])
    } else {
        json!([
            {"type": "thinking", "thinking": "The user wants Paris; get_weather takes a city.", "signature": SIGNATURE},
            {"type": "tool_use", "id": "toolu_01RealId", "name": "get_weather", "input": {"city": "Paris"}}
        ])
    };
    let stop = if answered { "end_turn" } else { "tool_use" };
    if !stream {
        let message = json!({"id": "msg_real", "type": "message", "role": "assistant", "model": "thinker",
            "content": content, "stop_reason": stop, "stop_sequence": null,
            "usage": {"input_tokens": 20, "output_tokens": 9}});
        return axum::Json(message).into_response();
    }
    let mut events = vec![
        json!({"type": "message_start", "message": {"id": "msg_real", "type": "message",
        "role": "assistant", "model": "thinker", "content": [], "stop_reason": null,
        "usage": {"input_tokens": 20, "output_tokens": 1}}}),
    ];
    // The first answer to "mid-stream" breaks with a rate limit error after its first block.
    let breaks = first.contains("mid-stream")
        && attempts.fetch_add(1, std::sync::atomic::Ordering::SeqCst) == 0;
    for (i, block) in content.as_array().unwrap().iter().enumerate() {
        match block["type"].as_str().unwrap() {
            "thinking" => {
                events.push(json!({"type": "content_block_start", "index": i, "content_block": {"type": "thinking", "thinking": "", "signature": ""}}));
                for piece in ["The user wants Paris; ", "get_weather takes a city."] {
                    events.push(json!({"type": "content_block_delta", "index": i, "delta": {"type": "thinking_delta", "thinking": piece}}));
                }
                events.push(json!({"type": "content_block_delta", "index": i, "delta": {"type": "signature_delta", "signature": SIGNATURE}}));
            }
            "text" => {
                events.push(json!({"type": "content_block_start", "index": i, "content_block": {"type": "text", "text": ""}}));
                events.push(json!({"type": "content_block_delta", "index": i, "delta": {"type": "text_delta", "text": block["text"]}}));
            }
            _ => {
                events.push(json!({"type": "content_block_start", "index": i, "content_block": {"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}}));
                events.push(json!({"type": "content_block_delta", "index": i, "delta": {"type": "input_json_delta", "partial_json": block["input"].to_string()}}));
            }
        }
        events.push(json!({"type": "content_block_stop", "index": i}));
        if breaks {
            events.push(json!({"type": "error", "error": {"type": "rate_limit_error", "message": "Slow down please."}}));
            break;
        }
    }
    if !breaks {
        events.push(json!({"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": null}, "usage": {"output_tokens": 9}}));
        events.push(json!({"type": "message_stop"}));
    }
    ([("content-type", "text/event-stream")], sse(&events, true)).into_response()
}

fn responses_answer(body: &Value) -> axum::response::Response {
    use axum::response::IntoResponse;
    let input = body["input"].as_array().cloned().unwrap_or_default();
    let answered = input.iter().any(|i| i["type"] == "function_call_output");
    if answered {
        let replayed = input
            .iter()
            .find(|i| i["type"] == "reasoning")
            .expect("replayed");
        assert_eq!(replayed["id"], REASONING_ID, "{body}");
    }
    let output = if answered {
        json!([{"type": "message", "id": "msg_real", "status": "completed", "role": "assistant",
            "content": [{"type": "output_text", "text": "It is 18 C in Paris.", "annotations": []}]}])
    } else {
        json!([
            {"type": "reasoning", "id": REASONING_ID, "summary": [{"type": "summary_text", "text": "Paris, so get_weather."}]},
            {"type": "function_call", "id": "fc_real", "call_id": "call_RealId", "name": "get_weather", "arguments": "{\"city\":\"Paris\"}", "status": "completed"}
        ])
    };
    let response = json!({"id": "resp_real", "object": "response", "created_at": 1, "status": "completed",
        "model": "thinker", "output": output,
        "usage": {"input_tokens": 20, "output_tokens": 9, "total_tokens": 29}});
    if body["stream"] != json!(true) {
        return axum::Json(response).into_response();
    }
    let events = vec![
        json!({"type": "response.created", "sequence_number": 0, "response": {"id": "resp_real", "status": "in_progress", "output": []}}),
        json!({"type": "response.completed", "sequence_number": 1, "response": response}),
    ];
    ([("content-type", "text/event-stream")], sse(&events, true)).into_response()
}

/// A provider that thinks, under signatures and ids of its own.
async fn thinking_upstream() -> std::net::SocketAddr {
    let attempts = std::sync::Arc::new(std::sync::atomic::AtomicU32::new(0));
    let app = axum::Router::new()
        .route(
            "/v1/messages",
            axum::routing::post(move |axum::Json(body): axum::Json<Value>| {
                let attempts = attempts.clone();
                async move { anthropic_answer(&body, &attempts) }
            }),
        )
        .route(
            "/v1/responses",
            axum::routing::post(|axum::Json(body): axum::Json<Value>| async move {
                responses_answer(&body)
            }),
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    addr
}

/// The data of each event of an SSE text.
fn events_of(text: &str) -> Vec<Value> {
    text.lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .filter_map(|d| serde_json::from_str(d.trim()).ok())
        .collect()
}

/// An Anthropic stream read back into its message's `content` (thinking with its signature), or
/// the error event that broke it.
fn anthropic_content(text: &str) -> Result<Value, Value> {
    let mut content: Vec<Value> = Vec::new();
    let mut partial: Vec<String> = Vec::new();
    for e in events_of(text) {
        match e["type"].as_str().unwrap_or("") {
            "error" => return Err(e["error"].clone()),
            "content_block_start" => {
                content.push(e["content_block"].clone());
                partial.push(String::new());
            }
            "content_block_delta" => {
                let i = e["index"].as_u64().unwrap() as usize;
                let d = &e["delta"];
                let b = &mut content[i];
                match d["type"].as_str().unwrap() {
                    "text_delta" => {
                        b["text"] = format!(
                            "{}{}",
                            b["text"].as_str().unwrap(),
                            d["text"].as_str().unwrap()
                        )
                        .into()
                    }
                    "thinking_delta" => {
                        b["thinking"] = format!(
                            "{}{}",
                            b["thinking"].as_str().unwrap(),
                            d["thinking"].as_str().unwrap()
                        )
                        .into()
                    }
                    "signature_delta" => b["signature"] = d["signature"].clone(),
                    "input_json_delta" => partial[i].push_str(d["partial_json"].as_str().unwrap()),
                    _ => {}
                }
            }
            "content_block_stop" => {
                let i = e["index"].as_u64().unwrap() as usize;
                if content[i]["type"] == "tool_use" && !partial[i].is_empty() {
                    content[i]["input"] = serde_json::from_str(&partial[i]).unwrap();
                }
            }
            _ => {}
        }
    }
    Ok(Value::Array(content))
}

/// What a client saw, with the ids and signatures left out (a served file sends its own).
fn seen(content: &Value) -> Vec<String> {
    content
        .as_array()
        .unwrap()
        .iter()
        .map(|b| match b["type"].as_str().unwrap() {
            "thinking" => format!("thinking {}", b["thinking"]),
            "reasoning" => format!("reasoning {}", b["summary"]),
            "text" => format!("text {}", b["text"]),
            "output_text" => format!("text {}", b["text"]),
            "message" => format!("message {}", b["content"][0]["text"]),
            "tool_use" => format!("tool_use {} {}", b["name"], b["input"]),
            "function_call" => format!("function_call {} {}", b["name"], b["arguments"]),
            other => format!("{other}?"),
        })
        .collect()
}

/// Three conversations through `addr`, each client replaying the reasoning it was sent: Anthropic
/// (not streamed, then streamed, the latter with a retry after a mid-stream error) and OpenAI
/// Responses (not streamed, then streamed). What each request was answered, as [`seen`].
async fn drive(addr: std::net::SocketAddr) -> Vec<Vec<String>> {
    let client = reqwest::Client::new();
    let tools = json!([{"name": "get_weather", "description": "The weather.", "input_schema": {"type": "object"}}]);
    let mut out = Vec::new();
    for (first, stream) in [
        ("weather in Paris?", false),
        ("weather, mid-stream please", true),
    ] {
        let mut messages = vec![json!({"role": "user", "content": first})];
        for _ in 0..4 {
            let body = json!({"model": "thinker", "max_tokens": 100, "system": "You are a weather assistant.",
                "tools": tools, "messages": messages, "stream": stream});
            let r = client
                .post(format!("http://{addr}/v1/messages"))
                .json(&body)
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), 200);
            let text = r.text().await.unwrap();
            let content = if stream {
                match anthropic_content(&text) {
                    Ok(c) => c,
                    Err(error) => {
                        out.push(vec![format!("error {}", error["type"])]);
                        continue;
                    }
                }
            } else {
                serde_json::from_str::<Value>(&text).unwrap()["content"].clone()
            };
            out.push(seen(&content));
            let tool = content
                .as_array()
                .unwrap()
                .iter()
                .find(|b| b["type"] == "tool_use")
                .cloned();
            messages.push(json!({"role": "assistant", "content": content}));
            match tool {
                Some(t) => messages.push(json!({"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": t["id"], "content": "18 C"}]})),
                None => break,
            }
        }
    }
    for stream in [false, true] {
        let mut input =
            vec![json!({"role": "user", "content": format!("Paris weather, stream {stream}")})];
        for _ in 0..2 {
            let body = json!({"model": "thinker", "instructions": "You are a weather assistant.",
                "tools": [{"type": "function", "name": "get_weather", "parameters": {"type": "object"}}],
                "input": input, "stream": stream});
            let r = client
                .post(format!("http://{addr}/v1/responses"))
                .json(&body)
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), 200);
            let text = r.text().await.unwrap();
            let response = if stream {
                events_of(&text)
                    .into_iter()
                    .find(|e| e["type"] == "response.completed")
                    .expect("completed")["response"]
                    .clone()
            } else {
                serde_json::from_str::<Value>(&text).unwrap()
            };
            let output = response["output"].as_array().unwrap().clone();
            out.push(seen(&Value::Array(output.clone())));
            let call = output
                .iter()
                .find(|i| i["type"] == "function_call")
                .cloned();
            input.extend(output);
            match call {
                Some(c) => input.push(json!({"type": "function_call_output", "call_id": c["call_id"], "output": "18 C"})),
                None => break,
            }
        }
    }
    out
}

#[tokio::test]
async fn reasoning_and_a_mid_stream_error_recorded_from_a_provider_are_scripted_and_served_back() {
    let upstream = thinking_upstream().await;
    let proxy = record::start(record::Options {
        upstream: format!("http://{upstream}"),
        ..record::Options::default()
    })
    .await
    .unwrap();
    let recorded = drive(proxy.addr).await;
    proxy.stop();
    let journal = proxy.finish(std::future::pending()).await.unwrap();
    assert_eq!(
        recorded[2],
        vec!["error \"rate_limit_error\"".to_owned()],
        "the upstream broke the first stream: {recorded:?}"
    );
    assert!(
        journal.contains("\"error_kind\":\"rate_limit\""),
        "{journal}"
    );
    let imported = import::import(journal.as_bytes(), Path::new("recorded"), "recorded")
        .unwrap_or_else(|e| panic!("{e}\n{journal}"));
    assert!(imported.skipped.is_empty(), "{:?}", imported.skipped);
    let yaml = &imported.yaml;
    for expected in [
        "thinking: \"The user wants Paris; get_weather takes a city.\"",
        "thinking: Paris, so get_weather.",
        "error: { kind: rate_limit, message: Slow down please., mid_stream: true }\n    # line 4",
    ] {
        assert!(
            yaml.contains(expected),
            "{expected:?} missing from:\n{yaml}"
        );
    }
    // The provider's signatures and ids stay out of the file, and no history check is loosened.
    assert!(
        !yaml.contains(SIGNATURE) && !yaml.contains(REASONING_ID),
        "{yaml}"
    );
    assert!(!yaml.contains("history: lenient"), "{yaml}");
    let served =
        scenario::parse(yaml, Path::new("recorded.yaml")).unwrap_or_else(|e| panic!("{e}\n{yaml}"));
    let again = server::start(&served, Options::default()).await.unwrap();
    // The client replays the server's own signatures and ids, which mock-llm's
    // `replayed-history` checks.
    let replayed = drive(again.addr).await;
    again.stop();
    let report = again.finish(std::future::pending()).await.unwrap();
    assert!(report.passed, "{}\n{yaml}", report.text());
    assert_eq!(replayed, recorded, "{yaml}");
}

#[tokio::test]
async fn mock_llms_journal_of_reasoning_and_a_mid_stream_rate_limit_imports_into_the_same_script() {
    let original = r#"
name: thinking and a broken stream
agents:
  main: { system: "You are a weather assistant.", model: thinker }
llm:
  main:
    - thinking: The user wants Paris; get_weather takes a city.
      tool_use: { name: get_weather, input: { city: Paris } }
    - It is 18 C in Paris.
    - error: { kind: rate_limit, message: Slow down please., mid_stream: true }
    - thinking: The user wants Paris; get_weather takes a city.
      tool_use: { name: get_weather, input: { city: Paris } }
    - It is 18 C in Paris.
    - thinking: Paris, so get_weather.
      tool_use: { name: get_weather, input: { city: Paris } }
    - It is 18 C in Paris.
    - thinking: Paris, so get_weather.
      tool_use: { name: get_weather, input: { city: Paris } }
    - It is 18 C in Paris.
"#;
    let dir = std::env::temp_dir().join(format!("agentsim-thinking-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let journal_path = dir.join("journal.jsonl");
    let scenario = scenario::parse(original, Path::new("original.yaml")).unwrap();
    let running = server::start(
        &scenario,
        Options {
            journal: Some(journal_path.clone()),
            ..Options::default()
        },
    )
    .await
    .unwrap();
    let first = drive(running.addr).await;
    running.stop();
    let report = running.finish(std::future::pending()).await.unwrap();
    assert!(report.passed, "{}", report.text());
    let journal = std::fs::read(&journal_path).unwrap();
    let imported = import::import(&journal, &journal_path, "again")
        .unwrap_or_else(|e| panic!("{e}\n{}", String::from_utf8_lossy(&journal)));
    assert!(imported.skipped.is_empty(), "{:?}", imported.skipped);
    let yaml = &imported.yaml;
    assert!(
        yaml.contains("error: { kind: rate_limit, message: Slow down please., mid_stream: true }"),
        "{yaml}"
    );
    assert_eq!(yaml.matches("thinking: ").count(), 4, "{yaml}");
    let served = scenario::parse(yaml, Path::new("again.yaml")).unwrap();
    let again = server::start(&served, Options::default()).await.unwrap();
    let second = drive(again.addr).await;
    again.stop();
    let report = again.finish(std::future::pending()).await.unwrap();
    assert!(report.passed, "{}\n{yaml}", report.text());
    assert_eq!(second, first, "{yaml}");
}

#[test]
fn reasoning_in_provider_bodies_is_written_as_thinking() {
    let anthropic = json!({"model": "thinker", "system": "You are a weather assistant.",
        "tools": [{"name": "get_weather", "input_schema": {"type": "object"}}],
        "messages": [
            {"role": "user", "content": "weather in Paris?"},
            {"role": "assistant", "content": [
                {"type": "thinking", "thinking": "Paris needs get_weather.", "signature": SIGNATURE},
                {"type": "tool_use", "id": "toolu_01RealId", "name": "get_weather", "input": {"city": "Paris"}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_01RealId", "content": "18 C"}]},
            {"role": "assistant", "content": "It is 18 C in Paris."}]});
    let responses = json!({"model": "thinker", "instructions": "You are a weather assistant.",
        "tools": [{"type": "function", "name": "get_weather", "parameters": {"type": "object"}}],
        "input": [
            {"role": "user", "content": "Paris weather?"},
            {"type": "reasoning", "id": REASONING_ID, "summary": [{"type": "summary_text", "text": "Paris, so get_weather."}]},
            {"type": "function_call", "call_id": "call_RealId", "name": "get_weather", "arguments": "{\"city\":\"Paris\"}"},
            {"type": "function_call_output", "call_id": "call_RealId", "output": "18 C"},
            {"role": "assistant", "content": "It is 18 C in Paris."}]});
    for (body, thought) in [
        (anthropic, "thinking: Paris needs get_weather."),
        (responses, "thinking: Paris, so get_weather."),
    ] {
        let text = body.to_string();
        let imported = import::import(text.as_bytes(), Path::new("body.json"), "b")
            .unwrap_or_else(|e| panic!("{e}"));
        let yaml = &imported.yaml;
        assert!(
            yaml.contains(&format!("    - {thought}\n      tool_use: ")),
            "{yaml}"
        );
        assert_eq!(yaml.matches("thinking:").count(), 1, "{yaml}");
        assert!(
            !yaml.contains(SIGNATURE) && !yaml.contains(REASONING_ID),
            "{yaml}"
        );
        assert!(!yaml.contains("history: lenient"), "{yaml}");
    }
}
