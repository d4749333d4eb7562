//! Every conversation agentsim can hold, encoded for each provider (`wire::encode`), is a request
//! that provider's rules accept, and decodes back into the same conversation (a failed tool's
//! error flag aside for the OpenAI formats, which have none).

use agentsim::model::transcript::{Block, Message, Role};
use agentsim::wire::encode::{request, Outgoing, ToolSpec};
use agentsim::wire::{validate, Provider};
use proptest::prelude::*;
use proptest::test_runner::FileFailurePersistence;
use serde_json::json;

/// A valid conversation: user turns and assistant turns alternating, every tool use answered in
/// the next user turn, in order, before that turn's text.
fn conversation() -> impl Strategy<Value = Vec<Message>> {
    let turn = (
        proptest::option::of("[a-z ]{1,12}"),
        0usize..3,
        proptest::option::of("[a-z]{1,8}"),
        any::<bool>(),
    );
    (
        1usize..4,
        proptest::collection::vec(turn, 0..4),
        "[a-z]{1,10}",
    )
        .prop_map(|(_, turns, first)| {
            let mut messages = vec![Message {
                role: Role::User,
                content: smallvec::smallvec![Block::text(first)],
            }];
            let mut next_id = 0;
            for (i, (text, calls, after, failed)) in turns.into_iter().enumerate() {
                let mut reply = smallvec::SmallVec::new();
                if let Some(t) = text.filter(|t| !t.trim().is_empty()) {
                    reply.push(Block::text(t));
                }
                let ids: Vec<String> = (0..calls)
                    .map(|_| {
                        next_id += 1;
                        format!("toolu_{next_id:02}")
                    })
                    .collect();
                for id in &ids {
                    reply.push(Block::tool_use(
                        id.as_str(),
                        "search",
                        json!({"q": id, "n": i}),
                    ));
                }
                if reply.is_empty() {
                    reply.push(Block::text("ok"));
                }
                messages.push(Message {
                    role: Role::Assistant,
                    content: reply,
                });
                let mut user = smallvec::SmallVec::new();
                for id in &ids {
                    user.push(Block::tool_result(
                        id.as_str(),
                        format!("found {id}"),
                        failed,
                    ));
                }
                if let Some(t) = after.filter(|t| !t.trim().is_empty()) {
                    user.push(Block::text(t));
                }
                if user.is_empty() {
                    user.push(Block::text("go on"));
                }
                messages.push(Message {
                    role: Role::User,
                    content: user,
                });
            }
            messages
        })
}

fn without_error_flags(messages: &[Message]) -> Vec<Message> {
    messages
        .iter()
        .map(|m| Message {
            role: m.role,
            content: m
                .content
                .iter()
                .map(|b| match b {
                    Block::ToolResult {
                        tool_use_id,
                        content,
                        ..
                    } => Block::tool_result(tool_use_id.clone(), content.to_string(), false),
                    other => other.clone(),
                })
                .collect(),
        })
        .collect()
}

proptest! {
    // The saved failures sit beside this file (`wire_roundtrip.proptest-regressions`). Proptest's
    // default would look for them under `tests/proptest-regressions/`, because `tests/it/` holds
    // the test crate's `main.rs`.
    #![proptest_config(ProptestConfig {
        failure_persistence: Some(Box::new(FileFailurePersistence::WithSource("proptest-regressions"))),
        ..ProptestConfig::with_cases(
            std::env::var("AGENTSIM_FUZZ_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(300)
        )
    })]

    #[test]
    fn encoded_requests_are_valid_and_decode_back(messages in conversation(), stream in any::<bool>()) {
        let schema = json!({"type": "object", "properties": {"q": {"type": "string"}}});
        let tools = [ToolSpec { name: "search", description: "Search the web.", schema: &schema }];
        let out = Outgoing {
            model: "model-x",
            system: "You are terse.",
            messages: &messages,
            tools: &tools,
            max_tokens: 512,
            stream,
        };
        for provider in [Provider::Anthropic, Provider::OpenAiChat, Provider::OpenAiResponses] {
            let body = request(provider, &out);
            let decoded = validate(provider, &body)
                .unwrap_or_else(|r| panic!("{provider:?} refused its own encoding: {}\n{body:#}", r.message()));
            prop_assert_eq!(decoded.model.as_deref(), Some("model-x"));
            prop_assert_eq!(decoded.system.as_deref(), Some("You are terse."));
            prop_assert_eq!(decoded.stream, stream);
            prop_assert_eq!(&decoded.tools, &vec!["search".to_owned()]);
            let want = if provider == Provider::Anthropic {
                messages.clone()
            } else {
                without_error_flags(&messages)
            };
            prop_assert_eq!(&decoded.messages, &want, "{:?}: {:#}", provider, body);
        }
    }
}
