//! `agentsim record` over loopback, with a second server as its upstream: `agentsim mock-llm`
//! (the conversations of `import.rs` recorded through the proxy, the recording imported and
//! served back to the same requests: the same replies, a passing report), and a bare upstream that
//! shows what the proxy forwards (the keys) and what it refuses to forward.
#![cfg(all(feature = "http-model", feature = "mock-server"))]

use std::path::Path;
use std::sync::{Arc, Mutex};

use agentsim::import;
use agentsim::mock_llm::server::{self, Options};
use agentsim::record;
use agentsim::scenario;
use serde_json::{json, Value};

use super::import::{drive, ORIGINAL};

#[tokio::test]
async fn traffic_recorded_through_a_mock_llm_upstream_is_served_back_the_same() {
    let original = scenario::parse(ORIGINAL, Path::new("original.yaml")).unwrap();
    let upstream = server::start(&original, Options::default()).await.unwrap();
    let proxy = record::start(record::Options {
        upstream: format!("http://{}", upstream.addr),
        ..record::Options::default()
    })
    .await
    .unwrap();
    let (_, recorded) = drive(proxy.addr).await;
    proxy.stop();
    let journal = proxy.finish(std::future::pending()).await.unwrap();
    upstream.stop();
    let report = upstream.finish(std::future::pending()).await.unwrap();
    assert!(
        report.passed,
        "the upstream saw every request as sent: {}",
        report.text()
    );
    assert_eq!(journal.lines().count(), 16, "{journal}");
    assert!(
        !journal.contains("sk-secret"),
        "a key was journaled: {journal}"
    );
    let imported = import::import(journal.as_bytes(), Path::new("recorded"), "recorded")
        .unwrap_or_else(|e| panic!("{e}\n{journal}"));
    assert!(imported.skipped.is_empty(), "{:?}", imported.skipped);
    assert!(!imported.yaml.contains("sk-secret"));
    // Served back, the recording answers the same requests with the same replies and passes.
    let served = scenario::parse(&imported.yaml, Path::new("recorded.yaml"))
        .unwrap_or_else(|e| panic!("{e}\n{}", imported.yaml));
    let again = server::start(&served, Options::default()).await.unwrap();
    let (_, replayed) = drive(again.addr).await;
    again.stop();
    let report = again.finish(std::future::pending()).await.unwrap();
    assert!(report.passed, "{}\n{}", report.text(), imported.yaml);
    assert_eq!(replayed, recorded, "{}", imported.yaml);
}

/// A bare upstream: it keeps the headers of each request and answers one Anthropic reply.
async fn bare_upstream() -> (std::net::SocketAddr, Arc<Mutex<Vec<axum::http::HeaderMap>>>) {
    let seen: Arc<Mutex<Vec<axum::http::HeaderMap>>> = Arc::default();
    let kept = seen.clone();
    let app = axum::Router::new().route(
        "/v1/messages",
        axum::routing::post(move |headers: axum::http::HeaderMap| {
            let kept = kept.clone();
            async move {
                kept.lock().unwrap().push(headers);
                axum::Json(
                    json!({"id": "msg_01", "type": "message", "role": "assistant",
                    "model": "claude-x", "content": [{"type": "text", "text": "Hello."}],
                    "stop_reason": "end_turn", "usage": {"input_tokens": 7, "output_tokens": 2}}),
                )
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (addr, seen)
}

#[tokio::test]
async fn keys_are_forwarded_never_kept_and_broken_requests_never_forwarded() {
    let (addr, seen) = bare_upstream().await;
    let proxy = record::start(record::Options {
        upstream: format!("http://{addr}/v1"),
        ..record::Options::default()
    })
    .await
    .unwrap();
    let client = reqwest::Client::new();
    let post = |body: Value| {
        client
            .post(format!("http://{}/v1/messages", proxy.addr))
            .header("x-api-key", "sk-ant-secret")
            .header("authorization", "Bearer sk-secret")
            .header("anthropic-version", "2023-06-01")
            .json(&body)
            .send()
    };
    let hello = post(json!({"model": "claude-x", "max_tokens": 10,
        "messages": [{"role": "user", "content": "hi"}]}))
    .await
    .unwrap();
    assert_eq!(hello.status(), 200);
    let reply: Value = hello.json().await.unwrap();
    assert_eq!(reply["id"], "msg_01", "the answer passes through unchanged");
    // A request whose tool result pairs with no tool use: the provider's own 400, not forwarded.
    let broken = post(json!({"model": "claude-x", "max_tokens": 10, "messages": [
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_x", "content": "r"}]}]}))
    .await
    .unwrap();
    assert_eq!(broken.status(), 400);
    {
        let seen = seen.lock().unwrap();
        assert_eq!(seen.len(), 1, "only the valid request went upstream");
        assert_eq!(seen[0]["x-api-key"], "sk-ant-secret");
        assert_eq!(seen[0]["authorization"], "Bearer sk-secret");
        assert_eq!(seen[0]["anthropic-version"], "2023-06-01");
    }
    proxy.stop();
    let journal = proxy.finish(std::future::pending()).await.unwrap();
    assert!(!journal.contains("secret"), "{journal}");
    let imported = import::import(journal.as_bytes(), Path::new("recorded"), "r").unwrap();
    // The upstream's usage is not what mock-llm would estimate: it is written.
    assert!(
        imported
            .yaml
            .contains("usage: { input_tokens: 7, output_tokens: 2 }"),
        "{}",
        imported.yaml
    );
    let reasons: Vec<&str> = imported.skipped.iter().map(|s| s.reason.as_str()).collect();
    assert_eq!(reasons.len(), 1, "{reasons:?}");
    assert!(
        reasons[0].starts_with("exchange 2: the request broke `tool-pairing`"),
        "{reasons:?}"
    );
}

/// Two Responses requests, the second continuing the first by `previous_response_id`, sent to
/// `addr`: the two answers.
async fn responses_pair(addr: std::net::SocketAddr) -> Vec<Value> {
    let client = reqwest::Client::new();
    let url = format!("http://{addr}/v1/responses");
    let tools = json!([{"type": "function", "name": "noted", "parameters": {"type": "object"}}]);
    let first: Value = client
        .post(&url)
        .json(&json!({"model": "writer", "input": "Write it down", "tools": tools}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let call = first["output"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["type"] == "function_call")
        .unwrap_or_else(|| panic!("{first}"))["call_id"]
        .clone();
    let second: Value = client
        .post(&url)
        .json(
            &json!({"model": "writer", "previous_response_id": first["id"], "tools": tools,
            "input": [{"type": "function_call_output", "call_id": call, "output": "noted"}]}),
        )
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    vec![first, second]
}

#[tokio::test]
async fn a_responses_history_continued_by_previous_response_id_is_recorded_whole() {
    let yaml = "name: writer\nagents:\n  writer: { kind: agent }\nllm:\n  writer:\n    - tool_use: { name: noted, input: {} }\n    - Done.\n";
    let original = scenario::parse(yaml, Path::new("w.yaml")).unwrap();
    let upstream = server::start(&original, Options::default()).await.unwrap();
    let proxy = record::start(record::Options {
        upstream: format!("http://{}", upstream.addr),
        ..record::Options::default()
    })
    .await
    .unwrap();
    let recorded = responses_pair(proxy.addr).await;
    assert_eq!(
        recorded[1]["output"][0]["content"][0]["text"], "Done.",
        "{recorded:?}"
    );
    proxy.stop();
    let journal = proxy.finish(std::future::pending()).await.unwrap();
    upstream.stop();
    assert!(
        upstream
            .finish(std::future::pending())
            .await
            .unwrap()
            .passed
    );
    assert!(journal.contains("\"resolved_input\""), "{journal}");
    let imported = import::import(journal.as_bytes(), Path::new("recorded"), "r")
        .unwrap_or_else(|e| panic!("{e}\n{journal}"));
    assert!(imported.skipped.is_empty(), "{:?}", imported.skipped);
    // Served back, the same two requests (the second naming the first's response) get the same
    // answers.
    let served = scenario::parse(&imported.yaml, Path::new("r.yaml")).unwrap();
    let again = server::start(&served, Options::default()).await.unwrap();
    let replayed = responses_pair(again.addr).await;
    again.stop();
    let report = again.finish(std::future::pending()).await.unwrap();
    assert!(report.passed, "{}\n{}", report.text(), imported.yaml);
    assert_eq!(replayed, recorded, "{}", imported.yaml);
}
