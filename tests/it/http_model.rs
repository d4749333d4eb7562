//! The HTTP model clients (Anthropic Messages, OpenAI Chat; streamed and not) against
//! `agentsim mock-llm` on loopback: a tool loop whose replies read back as the scripted blocks,
//! whose second request the server finds replays its first reply exactly, and errors sorted as
//! the runtime sorts them (a scripted rate limit, an error in the middle of a stream, a stream
//! cut short).
#![cfg(all(feature = "http-model", feature = "mock-server"))]

use std::path::Path;
use std::time::Duration;

use agentsim::drive::http::HttpModel;
use agentsim::mock_llm::server::{self, Options};
use agentsim::model::llm::LlmErrorKind;
use agentsim::model::transcript::{Block, Message, Role};
use agentsim::scenario;
use agentsim::wire::encode::{Outgoing, ToolSpec};
use agentsim::wire::Provider;
use serde_json::json;

const LOOP: &str = r#"
name: http clients
agents:
  main: { model: weather, script: per_conversation }
llm:
  main:
    - text: Let me check.
      tool_use: { name: get_weather, input: { city: Paris } }
    - It is sunny in Paris.
"#;

fn user(text: &str) -> Message {
    Message {
        role: Role::User,
        content: smallvec::smallvec![Block::text(text)],
    }
}

#[tokio::test]
async fn a_tool_loop_reads_back_in_each_format_streamed_or_not() {
    let scenario = scenario::parse(LOOP, Path::new("loop.yaml")).unwrap();
    let running = server::start(&scenario, Options::default()).await.unwrap();
    let base = format!("http://{}", running.addr);
    let schema = json!({"type": "object", "properties": {"city": {"type": "string"}}});
    let tools = [ToolSpec {
        name: "get_weather",
        description: "Weather now.",
        schema: &schema,
    }];
    for provider in [Provider::Anthropic, Provider::OpenAiChat] {
        for stream in [false, true] {
            let client = HttpModel::new(provider, &base, "key", Duration::from_secs(10)).unwrap();
            let mut messages = vec![user(&format!("weather? ({provider:?}, stream {stream})"))];
            let mut pieces = Vec::new();
            let out = Outgoing {
                model: "weather",
                system: "You are a weather assistant.",
                messages: &messages,
                tools: &tools,
                max_tokens: 100,
                stream,
            };
            let first = client
                .call(&out, |t| pieces.push(t.to_owned()))
                .await
                .unwrap_or_else(|e| panic!("{provider:?} stream {stream}: {e}"));
            assert_eq!(
                first.blocks.len(),
                2,
                "{provider:?} {stream}: {:?}",
                first.blocks
            );
            assert!(matches!(&first.blocks[0], Block::Text { text } if &**text == "Let me check."));
            let Block::ToolUse { id, name, input } = first.blocks[1].clone() else {
                panic!("a tool use: {:?}", first.blocks)
            };
            assert_eq!(
                (&*name, input["city"].as_str()),
                ("get_weather", Some("Paris"))
            );
            assert!(first.usage.output_tokens > 0);
            if stream {
                assert_eq!(pieces.concat(), "Let me check.");
            } else {
                assert!(pieces.is_empty());
            }
            messages.push(Message {
                role: Role::Assistant,
                content: first.blocks.iter().cloned().collect(),
            });
            messages.push(Message {
                role: Role::User,
                content: smallvec::smallvec![Block::tool_result(id, "sunny", false)],
            });
            let out = Outgoing {
                model: "weather",
                system: "You are a weather assistant.",
                messages: &messages,
                tools: &tools,
                max_tokens: 100,
                stream,
            };
            let second = client.call(&out, |_| {}).await.unwrap();
            assert!(
                matches!(&second.blocks[..], [Block::Text { text }] if &**text == "It is sunny in Paris."),
                "{:?}",
                second.blocks
            );
        }
    }
    let report = running.report();
    running.stop();
    assert!(report.passed, "{}", report.text());
    assert_eq!(report.exchanges, 8);
}

#[tokio::test]
async fn errors_are_sorted_as_the_runtime_sorts_them() {
    let yaml = r#"
name: errors
agents:
  main: { model: m }
llm:
  main:
    - error: rate_limit
    - error: { kind: overloaded, mid_stream: true }
    - error: { kind: network, mid_stream: true }
    - Fine.
"#;
    let scenario = scenario::parse(yaml, Path::new("errors.yaml")).unwrap();
    let messages = [user("hi")];
    let out = Outgoing {
        model: "m",
        system: "",
        messages: &messages,
        tools: &[],
        max_tokens: 10,
        stream: true,
    };
    for provider in [Provider::Anthropic, Provider::OpenAiChat] {
        let running = server::start(&scenario, Options::default()).await.unwrap();
        let base = format!("http://{}/v1", running.addr);
        let client = HttpModel::new(provider, &base, "key", Duration::from_secs(10)).unwrap();
        let e = client.call(&out, |_| {}).await.unwrap_err();
        assert_eq!(
            (e.kind, e.status),
            (LlmErrorKind::RateLimit, Some(429)),
            "{e}"
        );
        let e = client.call(&out, |_| {}).await.unwrap_err();
        assert_eq!(e.kind, LlmErrorKind::Overloaded, "{e}");
        let e = client.call(&out, |_| {}).await.unwrap_err();
        assert_eq!(e.kind, LlmErrorKind::Network, "{e}");
        assert!(
            e.message.contains("ended before the reply was complete"),
            "{e}"
        );
        let ok = client.call(&out, |_| {}).await.unwrap();
        assert!(matches!(&ok.blocks[..], [Block::Text { text }] if &**text == "Fine."));
        running.stop();
    }
    // Nothing listens here: a network error, never a panic.
    let client = HttpModel::new(
        Provider::OpenAiChat,
        "http://127.0.0.1:9",
        "k",
        Duration::from_secs(5),
    )
    .unwrap();
    let e = client.call(&out, |_| {}).await.unwrap_err();
    assert_eq!(e.kind, LlmErrorKind::Network);
}
