//! Provider responses, pure: a reply in agentsim's terms encoded as each provider's JSON body or
//! server-sent-event stream, and each provider's error envelope.
//!
//! The event sequences are the ones the official SDKs parse (research: `anchors-mock-llm.md`
//! section B, `real-clients.md`):
//!
//! - **Anthropic Messages**: `message_start` (with `content: []` and `usage`), then per block
//!   `content_block_start`, its deltas (`text_delta`; `input_json_delta`, the first one `""`) and
//!   `content_block_stop`, a `ping` after the first block's start, `message_delta` with the stop
//!   reason and the output tokens, `message_stop`. Every event has its `event:` line, equal to
//!   the `type` inside its data.
//! - **OpenAI Chat Completions**: unnamed `data:` chunks of `object: "chat.completion.chunk"`:
//!   the role first, text deltas, each tool call's first fragment with `index`, `id`, `type`,
//!   `name` and `arguments: ""` then argument fragments, the finish reason on an empty delta, a
//!   usage chunk with `choices: []` when `stream_options.include_usage` asks for it, `[DONE]`.
//! - **OpenAI Responses**: `response.created`, `response.in_progress`, per output item
//!   `response.output_item.added`, its parts and deltas, `response.output_item.done`, then
//!   `response.completed`; every event named and numbered by `sequence_number`, no `[DONE]`. A
//!   function call has two ids: the item's (`fc_…`) and the `call_id` the client echoes.
//!
//! This file holds what the providers share (the [`Reply`] to encode, its blocks, [`Sse`]) and
//! chooses a provider's encoding; each provider's bodies and events are a file of their own
//! (`anthropic.rs`, `openai_chat.rs`, `openai_responses.rs`), and so are the error envelopes
//! (`errors.rs`). The bodies and events are typed, in each API's own field order, and serialized
//! straight to text: building `Value` trees and printing them cost a third of the mock server's
//! time per request. `()` is JSON `null`.

mod anthropic;
mod errors;
mod openai_chat;
mod openai_responses;

use std::fmt::Write as _;

use serde::Serialize;
use serde_json::{json, Map, Value};

use super::Provider;
use crate::model::llm::Usage;
use crate::model::transcript::Block;

use anthropic::{anthropic_events, anthropic_message};
pub use errors::{error, stream_error, ErrorKind, ErrorReply};
use openai_chat::{chat_completion, chat_events};
pub use openai_responses::function_item_id;
use openai_responses::{response, responses_events};

/// The creation time written into every body: fixed, so that bodies are a function of the
/// scenario (2026-01-01T00:00:00Z).
pub(crate) const CREATED: u64 = 1_767_225_600;

/// Why a reply stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stop {
    /// The model finished its turn.
    EndTurn,
    /// The model asks for tool runs.
    ToolUse,
    /// The reply was cut at the token limit.
    MaxTokens,
}

/// One block of a reply, with the pieces a stream sends it in.
#[derive(Clone, Debug, PartialEq)]
pub enum OutBlock {
    /// Text, streamed as these pieces (each with its delay in ms before it is sent).
    Text(Vec<(u64, String)>),
    /// A tool use.
    ToolUse {
        /// Delay in ms before the block is sent, when streamed.
        after_ms: u64,
        /// The call id (`toolu_…` or `call_…`).
        id: String,
        /// The tool's name.
        name: String,
        /// The input, a JSON object.
        input: Value,
    },
    /// The model's reasoning: an Anthropic `thinking` block, whose `signature` is `id`, or an
    /// OpenAI Responses `reasoning` item, whose `id` it is, its text as a summary part. OpenAI
    /// Chat has no place for it: its encoding leaves it out.
    Thinking {
        /// The signature (Anthropic) or the item id (`rs_…`, Responses).
        id: String,
        /// The text, streamed as these pieces (each with its delay in ms before it is sent).
        pieces: Vec<(u64, String)>,
    },
}

impl OutBlock {
    /// A text block sent as one piece.
    pub fn text(text: impl Into<String>) -> OutBlock {
        OutBlock::Text(vec![(0, text.into())])
    }

    /// The whole text of a text block.
    pub fn joined(&self) -> Option<String> {
        match self {
            OutBlock::Text(pieces) => Some(pieces.iter().map(|(_, p)| p.as_str()).collect()),
            OutBlock::ToolUse { .. } | OutBlock::Thinking { .. } => None,
        }
    }

    /// The whole text of a reasoning block.
    pub fn reasoning(&self) -> Option<String> {
        match self {
            OutBlock::Thinking { pieces, .. } => {
                Some(pieces.iter().map(|(_, p)| p.as_str()).collect())
            }
            _ => None,
        }
    }
}

/// A reply to encode.
#[derive(Clone, Debug, PartialEq)]
pub struct Reply {
    /// The reply's id (`msg_…`, `chatcmpl-…` or `resp_…`).
    pub id: String,
    /// The model name, echoed from the request.
    pub model: String,
    /// Text and tool uses, in order.
    pub blocks: Vec<OutBlock>,
    /// Token usage.
    pub usage: Usage,
    /// Why it stopped.
    pub stop: Stop,
}

/// One server-sent event.
#[derive(Clone, Debug, PartialEq)]
pub struct Sse {
    /// Delay in ms before it is sent.
    pub delay_ms: u64,
    /// The `event:` name, if the provider names its events.
    pub event: Option<String>,
    /// The `data:` payload (one line of JSON, or `[DONE]`).
    pub data: String,
}

impl Sse {
    fn named(event: &str, data: &impl Serialize) -> Sse {
        Sse {
            delay_ms: 0,
            event: Some(event.to_owned()),
            data: serde_json::to_string(data).expect("an event is JSON"),
        }
    }

    fn unnamed(data: String) -> Sse {
        Sse {
            delay_ms: 0,
            event: None,
            data,
        }
    }

    /// The event as it goes on the wire, ending with its blank line.
    pub fn write(&self, out: &mut String) {
        if let Some(event) = &self.event {
            let _ = writeln!(out, "event: {event}");
        }
        let _ = write!(out, "data: {}\n\n", self.data);
    }
}

/// The non-streaming body of `reply` for `provider`, as a JSON value (for journals and tests;
/// [`body_text`] writes the same body without building the value).
pub fn body(provider: Provider, reply: &Reply) -> Value {
    let value = match provider {
        Provider::Anthropic => serde_json::to_value(anthropic_message(reply, true)),
        Provider::OpenAiChat => serde_json::to_value(chat_completion(reply)),
        Provider::OpenAiResponses => serde_json::to_value(response(reply, "completed", true)),
    };
    value.expect("a reply body is JSON")
}

/// The non-streaming body of `reply` for `provider`, as the JSON text sent.
pub fn body_text(provider: Provider, reply: &Reply) -> String {
    let text = match provider {
        Provider::Anthropic => serde_json::to_string(&anthropic_message(reply, true)),
        Provider::OpenAiChat => serde_json::to_string(&chat_completion(reply)),
        Provider::OpenAiResponses => serde_json::to_string(&response(reply, "completed", true)),
    };
    text.expect("a reply body is JSON")
}

/// The event stream of `reply` for `provider`; `include_usage` is Chat Completions'
/// `stream_options.include_usage`.
pub fn events(provider: Provider, reply: &Reply, include_usage: bool) -> Vec<Sse> {
    match provider {
        Provider::Anthropic => anthropic_events(reply),
        Provider::OpenAiChat => chat_events(reply, include_usage),
        Provider::OpenAiResponses => responses_events(reply),
    }
}

/// Splits a tool input's JSON text into the fragments a stream sends it in (at most 16 bytes
/// each, cut at character boundaries).
pub fn fragments(json: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut rest = json;
    while !rest.is_empty() {
        let mut cut = rest.len().min(16);
        while !rest.is_char_boundary(cut) {
            cut += 1;
        }
        let (head, tail) = rest.split_at(cut);
        out.push(head);
        rest = tail;
    }
    out
}

fn input_text(input: &Value) -> String {
    input.to_string()
}

fn block_input(block: &OutBlock) -> String {
    match block {
        OutBlock::ToolUse { input, .. } => input_text(input),
        OutBlock::Text(_) | OutBlock::Thinking { .. } => String::new(),
    }
}

/// An empty JSON object (a streamed tool use's `input` before its fragments).
fn empty_object() -> &'static Value {
    static EMPTY: std::sync::OnceLock<Value> = std::sync::OnceLock::new();
    EMPTY.get_or_init(|| Value::Object(Map::new()))
}

/// A reply body of `provider` read back into agentsim's blocks and usage: an Anthropic message's
/// `content`, a Chat completion's first `choices` message, a Responses `output`. Each is an
/// assistant turn in that provider's request format, so the request decoders read it.
pub fn decode(provider: Provider, body: &Value) -> Result<(Vec<Block>, Usage), super::Malformed> {
    let (request, usage) = match provider {
        Provider::Anthropic => (
            json!({"messages": [{"role": "assistant", "content": body.get("content").cloned().unwrap_or(Value::Null)}]}),
            (
                body.pointer("/usage/input_tokens"),
                body.pointer("/usage/output_tokens"),
            ),
        ),
        Provider::OpenAiChat => (
            json!({"messages": [body.pointer("/choices/0/message").cloned().unwrap_or(Value::Null)]}),
            (
                body.pointer("/usage/prompt_tokens"),
                body.pointer("/usage/completion_tokens"),
            ),
        ),
        Provider::OpenAiResponses => (
            json!({"input": body.get("output").cloned().unwrap_or(Value::Null)}),
            (
                body.pointer("/usage/input_tokens"),
                body.pointer("/usage/output_tokens"),
            ),
        ),
    };
    let decoded = super::decode(provider, &request)?;
    let blocks = decoded
        .messages
        .into_iter()
        .flat_map(|m| m.content.into_iter())
        .collect();
    let usage = Usage {
        input_tokens: usage.0.and_then(Value::as_u64).unwrap_or(0),
        output_tokens: usage.1.and_then(Value::as_u64).unwrap_or(0),
    };
    Ok((blocks, usage))
}

/// The reasoning of a reply body (Anthropic `thinking` and `redacted_thinking` blocks, OpenAI
/// Responses `reasoning` items; OpenAI Chat has none), in order, each with how many of the
/// blocks [`decode`] reads from the same body come before it.
pub fn reasoning(
    provider: Provider,
    body: &Value,
) -> Result<Vec<(usize, super::Reasoning)>, super::Malformed> {
    let request = match provider {
        Provider::Anthropic => {
            json!({"messages": [{"role": "assistant", "content": body.get("content").cloned().unwrap_or(Value::Null)}]})
        }
        Provider::OpenAiChat => return Ok(Vec::new()),
        Provider::OpenAiResponses => {
            json!({"input": body.get("output").cloned().unwrap_or(Value::Null)})
        }
    };
    let decoded = super::decode(provider, &request)?;
    // Where each block came from: its content index (Anthropic, one message) or its item index.
    let places: Vec<usize> = decoded
        .origin
        .blocks
        .iter()
        .flatten()
        .map(|&(item, block)| match provider {
            Provider::Anthropic => block,
            _ => item,
        })
        .collect();
    Ok(decoded
        .reasoning
        .into_iter()
        .map(|r| {
            // `messages.0.content.3` or `input[3]`.
            let place = r
                .path
                .rsplit(['.', '['])
                .next()
                .and_then(|n| n.trim_end_matches(']').parse::<usize>().ok())
                .unwrap_or(usize::MAX);
            (places.iter().filter(|&&p| p < place).count(), r)
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(super) fn reply(blocks: Vec<OutBlock>, stop: Stop) -> Reply {
        Reply {
            id: "msg_agentsim_a".into(),
            model: "m".into(),
            blocks,
            usage: Usage {
                input_tokens: 10,
                output_tokens: 5,
            },
            stop,
        }
    }

    pub(super) fn tool(id: &str) -> OutBlock {
        OutBlock::ToolUse {
            after_ms: 0,
            id: id.into(),
            name: "get_weather".into(),
            input: json!({"location": "Paris, France", "unit": "celsius"}),
        }
    }

    pub(super) fn data(events: &[Sse]) -> Vec<Value> {
        events
            .iter()
            .filter(|e| e.data != "[DONE]")
            .map(|e| serde_json::from_str(&e.data).expect("every data line is JSON"))
            .collect()
    }

    #[test]
    fn every_body_decodes_back_to_its_blocks_and_usage() {
        let r = reply(
            vec![OutBlock::text("Let me check."), tool("toolu_a")],
            Stop::ToolUse,
        );
        for provider in [
            Provider::Anthropic,
            Provider::OpenAiChat,
            Provider::OpenAiResponses,
        ] {
            let (blocks, usage) = decode(provider, &body(provider, &r)).expect("decodes");
            assert_eq!(usage, r.usage, "{provider:?}");
            assert_eq!(blocks.len(), 2, "{provider:?}: {blocks:?}");
            assert!(matches!(&blocks[0], Block::Text { text } if &**text == "Let me check."));
            assert!(
                matches!(&blocks[1], Block::ToolUse { id, name, input }
                    if &**id == "toolu_a" && &**name == "get_weather" && input["unit"] == "celsius"),
                "{provider:?}: {blocks:?}"
            );
        }
        assert!(decode(Provider::Anthropic, &json!({"content": 3})).is_err());
    }

    #[test]
    fn reasoning_is_a_thinking_block_a_reasoning_item_and_nothing_in_chat() {
        let thought = OutBlock::Thinking {
            id: "sig_a".into(),
            pieces: vec![(0, "Paris, ".into()), (5, "so a city.".into())],
        };
        let r = reply(vec![thought, tool("toolu_a")], Stop::ToolUse);
        let a = body(Provider::Anthropic, &r);
        assert_eq!(
            a["content"][0],
            json!({"type": "thinking", "thinking": "Paris, so a city.", "signature": "sig_a"})
        );
        let o = body(Provider::OpenAiResponses, &r);
        assert_eq!(
            o["output"][0],
            json!({"type": "reasoning", "id": "sig_a", "summary": [{"type": "summary_text", "text": "Paris, so a city."}]})
        );
        let c = body(Provider::OpenAiChat, &r);
        assert_eq!(c["choices"][0]["message"]["content"], Value::Null);
        assert!(!events(Provider::OpenAiChat, &r, true)
            .iter()
            .any(|e| e.data.contains("Paris")));
        // Read back, the reasoning is no block of the conversation.
        for provider in [Provider::Anthropic, Provider::OpenAiResponses] {
            let (blocks, _) = decode(provider, &body(provider, &r)).expect("decodes");
            assert_eq!(blocks.len(), 1, "{provider:?}: {blocks:?}");
        }
        // The stream keeps the pieces' delays.
        let e = events(Provider::Anthropic, &r, false);
        let second = e
            .iter()
            .find(|e| e.data.contains("so a city."))
            .expect("the second piece");
        assert_eq!(second.delay_ms, 5);
    }

    #[test]
    fn replayed_reasoning_is_decoded_aside_from_the_messages() {
        let anthropic = crate::wire::anthropic::decode(&json!({"messages": [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": [
                {"type": "thinking", "thinking": "t", "signature": "s"},
                {"type": "redacted_thinking", "data": "x"},
                {"type": "text", "text": "hello"}]}]}))
        .unwrap();
        assert_eq!(anthropic.messages[1].content.len(), 1);
        let got: Vec<_> = anthropic
            .reasoning
            .iter()
            .map(|r| (r.path.as_str(), r.id.as_deref(), r.text.as_deref()))
            .collect();
        assert_eq!(
            got,
            [
                ("messages.1.content.0", Some("s"), Some("t")),
                ("messages.1.content.1", None, None)
            ]
        );
        let responses = crate::wire::openai_responses::decode(&json!({"input": [
            {"role": "user", "content": "hi"},
            {"type": "reasoning", "id": "rs_1", "summary": [
                {"type": "summary_text", "text": "a"}, {"type": "summary_text", "text": "b"}]}]}))
        .unwrap();
        assert_eq!(responses.messages.len(), 1);
        assert_eq!(responses.reasoning[0].path, "input[1]");
        assert_eq!(responses.reasoning[0].id.as_deref(), Some("rs_1"));
        assert_eq!(responses.reasoning[0].text.as_deref(), Some("ab"));
    }

    #[test]
    fn fragments_cut_at_char_boundaries_and_join_back() {
        let text = r#"{"city":"Zürich — östlich, très loin"}"#;
        let parts = fragments(text);
        assert!(parts.len() > 2);
        assert_eq!(parts.concat(), text);
        assert!(parts.iter().all(|p| !p.is_empty()));
        assert!(fragments("").is_empty());
    }
}
