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

use std::fmt::Write as _;

use serde::Serialize;
use serde_json::{json, Map, Value};

use super::Provider;
use crate::model::llm::{LlmErrorKind, Usage};
use crate::model::transcript::Block;

/// The creation time written into every body: fixed, so that bodies are a function of the
/// scenario (2026-01-01T00:00:00Z).
pub const CREATED: u64 = 1_767_225_600;

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
            OutBlock::ToolUse { .. } => None,
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
        OutBlock::Text(_) => String::new(),
    }
}

/// An empty JSON object (a streamed tool use's `input` before its fragments).
fn empty_object() -> &'static Value {
    static EMPTY: std::sync::OnceLock<Value> = std::sync::OnceLock::new();
    EMPTY.get_or_init(|| Value::Object(Map::new()))
}

// The bodies and events are typed, in each API's own field order, and serialized straight to
// text: building `Value` trees and printing them cost a third of the mock server's time per
// request. `()` is JSON `null`.

// ---- Anthropic Messages ----

fn anthropic_stop(stop: Stop) -> &'static str {
    match stop {
        Stop::EndTurn => "end_turn",
        Stop::ToolUse => "tool_use",
        Stop::MaxTokens => "max_tokens",
    }
}

#[derive(Serialize)]
struct AnthropicMessage<'a> {
    id: &'a str,
    #[serde(rename = "type")]
    kind: &'static str,
    role: &'static str,
    model: &'a str,
    content: Vec<AnthropicBlock<'a>>,
    stop_reason: Option<&'static str>,
    stop_sequence: (),
    usage: AnthropicUsage,
}

#[derive(Serialize)]
struct AnthropicUsage {
    input_tokens: u64,
    cache_creation_input_tokens: u64,
    cache_read_input_tokens: u64,
    output_tokens: u64,
}

#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum AnthropicBlock<'a> {
    Text {
        text: String,
    },
    ToolUse {
        id: &'a str,
        name: &'a str,
        input: &'a Value,
    },
}

#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum AnthropicDelta<'a> {
    TextDelta { text: &'a str },
    InputJsonDelta { partial_json: &'a str },
}

#[derive(Serialize)]
struct AnthropicStop {
    stop_reason: &'static str,
    stop_sequence: (),
}

#[derive(Serialize)]
struct AnthropicOutputUsage {
    output_tokens: u64,
}

#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum AnthropicEvent<'a> {
    MessageStart {
        message: AnthropicMessage<'a>,
    },
    ContentBlockStart {
        index: usize,
        content_block: AnthropicBlock<'a>,
    },
    Ping,
    ContentBlockDelta {
        index: usize,
        delta: AnthropicDelta<'a>,
    },
    ContentBlockStop {
        index: usize,
    },
    MessageDelta {
        delta: AnthropicStop,
        usage: AnthropicOutputUsage,
    },
    MessageStop,
}

impl AnthropicEvent<'_> {
    fn name(&self) -> &'static str {
        match self {
            AnthropicEvent::MessageStart { .. } => "message_start",
            AnthropicEvent::ContentBlockStart { .. } => "content_block_start",
            AnthropicEvent::Ping => "ping",
            AnthropicEvent::ContentBlockDelta { .. } => "content_block_delta",
            AnthropicEvent::ContentBlockStop { .. } => "content_block_stop",
            AnthropicEvent::MessageDelta { .. } => "message_delta",
            AnthropicEvent::MessageStop => "message_stop",
        }
    }

    fn sse(&self, delay_ms: u64) -> Sse {
        let mut e = Sse::named(self.name(), self);
        e.delay_ms = delay_ms;
        e
    }
}

fn anthropic_message(reply: &Reply, done: bool) -> AnthropicMessage<'_> {
    let content = if done {
        reply
            .blocks
            .iter()
            .map(|b| match b {
                OutBlock::Text(_) => AnthropicBlock::Text {
                    text: b.joined().unwrap_or_default(),
                },
                OutBlock::ToolUse {
                    id, name, input, ..
                } => AnthropicBlock::ToolUse { id, name, input },
            })
            .collect()
    } else {
        Vec::new()
    };
    AnthropicMessage {
        id: &reply.id,
        kind: "message",
        role: "assistant",
        model: &reply.model,
        content,
        stop_reason: done.then(|| anthropic_stop(reply.stop)),
        stop_sequence: (),
        usage: AnthropicUsage {
            input_tokens: reply.usage.input_tokens,
            cache_creation_input_tokens: 0,
            cache_read_input_tokens: 0,
            output_tokens: if done { reply.usage.output_tokens } else { 1 },
        },
    }
}

fn anthropic_events(reply: &Reply) -> Vec<Sse> {
    let mut out = vec![AnthropicEvent::MessageStart {
        message: anthropic_message(reply, false),
    }
    .sse(0)];
    for (index, block) in reply.blocks.iter().enumerate() {
        match block {
            OutBlock::Text(pieces) => {
                let start = AnthropicEvent::ContentBlockStart {
                    index,
                    content_block: AnthropicBlock::Text {
                        text: String::new(),
                    },
                };
                out.push(start.sse(pieces.first().map_or(0, |p| p.0)));
                if index == 0 {
                    out.push(AnthropicEvent::Ping.sse(0));
                }
                for (i, (delay, piece)) in pieces.iter().enumerate() {
                    let delta = AnthropicEvent::ContentBlockDelta {
                        index,
                        delta: AnthropicDelta::TextDelta { text: piece },
                    };
                    out.push(delta.sse(if i > 0 { *delay } else { 0 }));
                }
            }
            OutBlock::ToolUse {
                after_ms, id, name, ..
            } => {
                let start = AnthropicEvent::ContentBlockStart {
                    index,
                    content_block: AnthropicBlock::ToolUse {
                        id,
                        name,
                        input: empty_object(),
                    },
                };
                out.push(start.sse(*after_ms));
                if index == 0 {
                    out.push(AnthropicEvent::Ping.sse(0));
                }
                let text = block_input(block);
                for piece in std::iter::once("").chain(fragments(&text)) {
                    let delta = AnthropicEvent::ContentBlockDelta {
                        index,
                        delta: AnthropicDelta::InputJsonDelta {
                            partial_json: piece,
                        },
                    };
                    out.push(delta.sse(0));
                }
            }
        }
        out.push(AnthropicEvent::ContentBlockStop { index }.sse(0));
    }
    if reply.blocks.is_empty() {
        out.push(AnthropicEvent::Ping.sse(0));
    }
    out.push(
        AnthropicEvent::MessageDelta {
            delta: AnthropicStop {
                stop_reason: anthropic_stop(reply.stop),
                stop_sequence: (),
            },
            usage: AnthropicOutputUsage {
                output_tokens: reply.usage.output_tokens,
            },
        }
        .sse(0),
    );
    out.push(AnthropicEvent::MessageStop.sse(0));
    out
}

// ---- OpenAI Chat Completions ----

fn chat_finish(stop: Stop) -> &'static str {
    match stop {
        Stop::EndTurn => "stop",
        Stop::ToolUse => "tool_calls",
        Stop::MaxTokens => "length",
    }
}

#[derive(Serialize)]
struct ChatUsage {
    prompt_tokens: u64,
    completion_tokens: u64,
    total_tokens: u64,
}

fn chat_usage(usage: Usage) -> ChatUsage {
    ChatUsage {
        prompt_tokens: usage.input_tokens,
        completion_tokens: usage.output_tokens,
        total_tokens: usage.input_tokens.saturating_add(usage.output_tokens),
    }
}

fn text_of_reply(reply: &Reply) -> Option<String> {
    let mut text: Option<String> = None;
    for b in &reply.blocks {
        if let Some(t) = b.joined() {
            text.get_or_insert_with(String::new).push_str(&t);
        }
    }
    text
}

#[derive(Serialize)]
struct ChatCompletion<'a> {
    id: &'a str,
    object: &'static str,
    created: u64,
    model: &'a str,
    choices: [ChatChoice<'a>; 1],
    usage: ChatUsage,
    system_fingerprint: (),
}

#[derive(Serialize)]
struct ChatChoice<'a> {
    index: u32,
    message: ChatMessage<'a>,
    logprobs: (),
    finish_reason: &'static str,
}

#[derive(Serialize)]
struct ChatMessage<'a> {
    role: &'static str,
    content: Option<String>,
    refusal: (),
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tool_calls: Vec<ChatCall<'a>>,
}

#[derive(Serialize)]
struct ChatCall<'a> {
    id: &'a str,
    #[serde(rename = "type")]
    kind: &'static str,
    function: ChatFunction<'a>,
}

#[derive(Serialize)]
struct ChatFunction<'a> {
    name: &'a str,
    arguments: String,
}

fn chat_completion(reply: &Reply) -> ChatCompletion<'_> {
    let tool_calls = reply
        .blocks
        .iter()
        .filter_map(|b| match b {
            OutBlock::ToolUse {
                id, name, input, ..
            } => Some(ChatCall {
                id,
                kind: "function",
                function: ChatFunction {
                    name,
                    arguments: input_text(input),
                },
            }),
            OutBlock::Text(_) => None,
        })
        .collect();
    ChatCompletion {
        id: &reply.id,
        object: "chat.completion",
        created: CREATED,
        model: &reply.model,
        choices: [ChatChoice {
            index: 0,
            message: ChatMessage {
                role: "assistant",
                content: text_of_reply(reply),
                refusal: (),
                tool_calls,
            },
            logprobs: (),
            finish_reason: chat_finish(reply.stop),
        }],
        usage: chat_usage(reply.usage),
        system_fingerprint: (),
    }
}

/// A chunk's delta: only the fields given are sent.
#[derive(Serialize, Default)]
struct ChatDelta<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    role: Option<&'static str>,
    /// `Some(None)` is `content: null`.
    #[serde(skip_serializing_if = "Option::is_none")]
    content: Option<Option<&'a str>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_calls: Option<[ChatCallDelta<'a>; 1]>,
    /// `Some(())` is `refusal: null`.
    #[serde(skip_serializing_if = "Option::is_none")]
    refusal: Option<()>,
}

#[derive(Serialize)]
struct ChatCallDelta<'a> {
    index: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    id: Option<&'a str>,
    #[serde(rename = "type", skip_serializing_if = "Option::is_none")]
    kind: Option<&'static str>,
    function: ChatFunctionDelta<'a>,
}

#[derive(Serialize)]
struct ChatFunctionDelta<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    name: Option<&'a str>,
    arguments: &'a str,
}

#[derive(Serialize)]
struct ChatChunk<'a> {
    id: &'a str,
    object: &'static str,
    created: u64,
    model: &'a str,
    system_fingerprint: (),
    choices: Vec<ChatChunkChoice<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    usage: Option<ChatUsage>,
}

#[derive(Serialize)]
struct ChatChunkChoice<'a> {
    index: u32,
    delta: ChatDelta<'a>,
    logprobs: (),
    finish_reason: Option<&'static str>,
}

fn chat_chunk(reply: &Reply, delta: ChatDelta<'_>, finish: Option<&'static str>) -> Sse {
    let chunk = ChatChunk {
        id: &reply.id,
        object: "chat.completion.chunk",
        created: CREATED,
        model: &reply.model,
        system_fingerprint: (),
        choices: vec![ChatChunkChoice {
            index: 0,
            delta,
            logprobs: (),
            finish_reason: finish,
        }],
        usage: None,
    };
    Sse::unnamed(serde_json::to_string(&chunk).expect("a chunk is JSON"))
}

fn chat_events(reply: &Reply, include_usage: bool) -> Vec<Sse> {
    let has_text = reply.blocks.iter().any(|b| matches!(b, OutBlock::Text(_)));
    let mut out = Vec::new();
    if has_text || reply.blocks.is_empty() {
        out.push(chat_chunk(
            reply,
            ChatDelta {
                role: Some("assistant"),
                content: Some(Some("")),
                refusal: Some(()),
                ..ChatDelta::default()
            },
            None,
        ));
    }
    let mut call_index = 0usize;
    for block in &reply.blocks {
        match block {
            OutBlock::Text(pieces) => {
                for (delay, piece) in pieces {
                    let mut chunk = chat_chunk(
                        reply,
                        ChatDelta {
                            content: Some(Some(piece)),
                            ..ChatDelta::default()
                        },
                        None,
                    );
                    chunk.delay_ms = *delay;
                    out.push(chunk);
                }
            }
            OutBlock::ToolUse {
                after_ms, id, name, ..
            } => {
                let head = ChatCallDelta {
                    index: call_index,
                    id: Some(id),
                    kind: Some("function"),
                    function: ChatFunctionDelta {
                        name: Some(name),
                        arguments: "",
                    },
                };
                // The first chunk of a reply that starts with a tool call also carries the role.
                let delta = if out.is_empty() {
                    ChatDelta {
                        role: Some("assistant"),
                        content: Some(None),
                        tool_calls: Some([head]),
                        refusal: Some(()),
                    }
                } else {
                    ChatDelta {
                        tool_calls: Some([head]),
                        ..ChatDelta::default()
                    }
                };
                let mut chunk = chat_chunk(reply, delta, None);
                chunk.delay_ms = *after_ms;
                out.push(chunk);
                let text = block_input(block);
                for piece in fragments(&text) {
                    let fragment = ChatCallDelta {
                        index: call_index,
                        id: None,
                        kind: None,
                        function: ChatFunctionDelta {
                            name: None,
                            arguments: piece,
                        },
                    };
                    out.push(chat_chunk(
                        reply,
                        ChatDelta {
                            tool_calls: Some([fragment]),
                            ..ChatDelta::default()
                        },
                        None,
                    ));
                }
                call_index += 1;
            }
        }
    }
    out.push(chat_chunk(
        reply,
        ChatDelta::default(),
        Some(chat_finish(reply.stop)),
    ));
    if include_usage {
        let chunk = ChatChunk {
            id: &reply.id,
            object: "chat.completion.chunk",
            created: CREATED,
            model: &reply.model,
            system_fingerprint: (),
            choices: Vec::new(),
            usage: Some(chat_usage(reply.usage)),
        };
        out.push(Sse::unnamed(
            serde_json::to_string(&chunk).expect("a chunk is JSON"),
        ));
    }
    out.push(Sse::unnamed("[DONE]".into()));
    out
}

// ---- OpenAI Responses ----

/// The item id of a function call whose `call_id` is `call_id` (`fc_` and what follows the
/// call id's first underscore).
pub fn function_item_id(call_id: &str) -> String {
    let tail = call_id.split_once('_').map_or(call_id, |(_, t)| t);
    format!("fc_{tail}")
}

fn message_item_id(reply: &Reply, index: usize) -> String {
    let tail = reply.id.split_once('_').map_or(&*reply.id, |(_, t)| t);
    format!("msg_{tail}_{index}")
}

#[derive(Serialize)]
struct ResponsesUsage {
    input_tokens: u64,
    input_tokens_details: CachedTokens,
    output_tokens: u64,
    output_tokens_details: ReasoningTokens,
    total_tokens: u64,
}

#[derive(Serialize)]
struct CachedTokens {
    cached_tokens: u64,
}

#[derive(Serialize)]
struct ReasoningTokens {
    reasoning_tokens: u64,
}

#[derive(Serialize)]
struct OutputText<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    text: &'a str,
    annotations: [(); 0],
}

fn output_text(text: &str) -> OutputText<'_> {
    OutputText {
        kind: "output_text",
        text,
        annotations: [],
    }
}

#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum OutputItem<'a> {
    Message {
        id: String,
        status: &'static str,
        role: &'static str,
        content: Vec<OutputText<'a>>,
    },
    FunctionCall {
        id: String,
        call_id: &'a str,
        name: &'a str,
        arguments: String,
        status: &'static str,
    },
}

#[derive(Serialize)]
struct Incomplete {
    reason: &'static str,
}

#[derive(Serialize)]
struct ResponseObject<'a> {
    id: &'a str,
    object: &'static str,
    created_at: u64,
    status: &'a str,
    error: (),
    incomplete_details: Option<Incomplete>,
    instructions: (),
    model: &'a str,
    output: Vec<OutputItem<'a>>,
    parallel_tool_calls: bool,
    tool_choice: &'static str,
    tools: [(); 0],
    metadata: Empty,
    temperature: (),
    top_p: (),
    usage: Option<ResponsesUsage>,
}

/// `{}`.
#[derive(Serialize)]
struct Empty {}

fn output_item<'a>(
    reply: &Reply,
    index: usize,
    block: &'a OutBlock,
    text: &'a str,
    done: bool,
) -> OutputItem<'a> {
    let status = if done { "completed" } else { "in_progress" };
    match block {
        OutBlock::Text(_) => OutputItem::Message {
            id: message_item_id(reply, index),
            status,
            role: "assistant",
            content: if done {
                vec![output_text(text)]
            } else {
                Vec::new()
            },
        },
        OutBlock::ToolUse {
            id, name, input, ..
        } => OutputItem::FunctionCall {
            id: function_item_id(id),
            call_id: id,
            name,
            arguments: if done {
                input_text(input)
            } else {
                String::new()
            },
            status,
        },
    }
}

/// The joined texts of `reply`'s blocks (empty for a tool use), borrowed by its output items.
fn block_texts(reply: &Reply) -> Vec<String> {
    reply
        .blocks
        .iter()
        .map(|b| b.joined().unwrap_or_default())
        .collect()
}

fn response<'a>(reply: &'a Reply, status: &'a str, done: bool) -> ResponseWith<'a> {
    ResponseWith {
        texts: if done { block_texts(reply) } else { Vec::new() },
        reply,
        status,
        done,
    }
}

/// A response object with the texts its output items borrow.
struct ResponseWith<'a> {
    reply: &'a Reply,
    texts: Vec<String>,
    status: &'a str,
    done: bool,
}

impl Serialize for ResponseWith<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let reply = self.reply;
        let incomplete = self.done && reply.stop == Stop::MaxTokens;
        let output = if self.done {
            reply
                .blocks
                .iter()
                .zip(&self.texts)
                .enumerate()
                .map(|(i, (b, t))| output_item(reply, i, b, t, true))
                .collect()
        } else {
            Vec::new()
        };
        ResponseObject {
            id: &reply.id,
            object: "response",
            created_at: CREATED,
            status: if incomplete {
                "incomplete"
            } else {
                self.status
            },
            error: (),
            incomplete_details: incomplete.then_some(Incomplete {
                reason: "max_output_tokens",
            }),
            instructions: (),
            model: &reply.model,
            output,
            parallel_tool_calls: true,
            tool_choice: "auto",
            tools: [],
            metadata: Empty {},
            temperature: (),
            top_p: (),
            usage: self.done.then(|| ResponsesUsage {
                input_tokens: reply.usage.input_tokens,
                input_tokens_details: CachedTokens { cached_tokens: 0 },
                output_tokens: reply.usage.output_tokens,
                output_tokens_details: ReasoningTokens {
                    reasoning_tokens: 0,
                },
                total_tokens: reply
                    .usage
                    .input_tokens
                    .saturating_add(reply.usage.output_tokens),
            }),
        }
        .serialize(s)
    }
}

/// A Responses event: its type, its fields, and the sequence number added when it is sent.
#[derive(Serialize)]
struct ResponsesEvent<T: Serialize> {
    #[serde(rename = "type")]
    kind: &'static str,
    #[serde(flatten)]
    fields: T,
    sequence_number: usize,
}

#[derive(Serialize)]
struct WithResponse<'a> {
    response: ResponseWith<'a>,
}

#[derive(Serialize)]
struct ItemEvent<'a> {
    output_index: usize,
    item: OutputItem<'a>,
}

#[derive(Serialize)]
struct PartEvent<'a> {
    item_id: &'a str,
    output_index: usize,
    content_index: u32,
    part: OutputText<'a>,
}

#[derive(Serialize)]
struct TextDeltaEvent<'a> {
    item_id: &'a str,
    output_index: usize,
    content_index: u32,
    delta: &'a str,
    logprobs: [(); 0],
}

#[derive(Serialize)]
struct TextDoneEvent<'a> {
    item_id: &'a str,
    output_index: usize,
    content_index: u32,
    text: &'a str,
    logprobs: [(); 0],
}

#[derive(Serialize)]
struct ArgumentsDeltaEvent<'a> {
    item_id: &'a str,
    output_index: usize,
    delta: &'a str,
}

#[derive(Serialize)]
struct ArgumentsDoneEvent<'a> {
    item_id: &'a str,
    output_index: usize,
    arguments: &'a str,
    name: &'a str,
}

fn responses_events(reply: &Reply) -> Vec<Sse> {
    fn push<T: Serialize>(out: &mut Vec<Sse>, delay: u64, kind: &'static str, fields: T) {
        let event = ResponsesEvent {
            kind,
            fields,
            sequence_number: out.len(),
        };
        let mut sse = Sse::named(kind, &event);
        sse.delay_ms = delay;
        out.push(sse);
    }
    let mut out = Vec::new();
    for kind in ["response.created", "response.in_progress"] {
        let fields = WithResponse {
            response: response(reply, "in_progress", false),
        };
        push(&mut out, 0, kind, fields);
    }
    for (index, block) in reply.blocks.iter().enumerate() {
        let first_delay = match block {
            OutBlock::Text(pieces) => pieces.first().map_or(0, |p| p.0),
            OutBlock::ToolUse { after_ms, .. } => *after_ms,
        };
        let item = output_item(reply, index, block, "", false);
        push(
            &mut out,
            first_delay,
            "response.output_item.added",
            ItemEvent {
                output_index: index,
                item,
            },
        );
        let text = match block {
            OutBlock::Text(pieces) => {
                let item_id = message_item_id(reply, index);
                push(
                    &mut out,
                    0,
                    "response.content_part.added",
                    PartEvent {
                        item_id: &item_id,
                        output_index: index,
                        content_index: 0,
                        part: output_text(""),
                    },
                );
                for (i, (delay, piece)) in pieces.iter().enumerate() {
                    push(
                        &mut out,
                        if i == 0 { 0 } else { *delay },
                        "response.output_text.delta",
                        TextDeltaEvent {
                            item_id: &item_id,
                            output_index: index,
                            content_index: 0,
                            delta: piece,
                            logprobs: [],
                        },
                    );
                }
                let text = block.joined().unwrap_or_default();
                push(
                    &mut out,
                    0,
                    "response.output_text.done",
                    TextDoneEvent {
                        item_id: &item_id,
                        output_index: index,
                        content_index: 0,
                        text: &text,
                        logprobs: [],
                    },
                );
                push(
                    &mut out,
                    0,
                    "response.content_part.done",
                    PartEvent {
                        item_id: &item_id,
                        output_index: index,
                        content_index: 0,
                        part: output_text(&text),
                    },
                );
                text
            }
            OutBlock::ToolUse { id, name, .. } => {
                let item_id = function_item_id(id);
                let text = block_input(block);
                for piece in fragments(&text) {
                    push(
                        &mut out,
                        0,
                        "response.function_call_arguments.delta",
                        ArgumentsDeltaEvent {
                            item_id: &item_id,
                            output_index: index,
                            delta: piece,
                        },
                    );
                }
                push(
                    &mut out,
                    0,
                    "response.function_call_arguments.done",
                    ArgumentsDoneEvent {
                        item_id: &item_id,
                        output_index: index,
                        arguments: &text,
                        name,
                    },
                );
                String::new()
            }
        };
        push(
            &mut out,
            0,
            "response.output_item.done",
            ItemEvent {
                output_index: index,
                item: output_item(reply, index, block, &text, true),
            },
        );
    }
    let last = if reply.stop == Stop::MaxTokens {
        "response.incomplete"
    } else {
        "response.completed"
    };
    let fields = WithResponse {
        response: response(reply, "completed", true),
    };
    push(&mut out, 0, last, fields);
    out
}

// ---- decoding ----

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

// ---- errors ----

/// An error a provider answers with: a status and the provider's envelope.
#[derive(Clone, Debug, PartialEq)]
pub struct ErrorReply {
    /// The HTTP status.
    pub status: u16,
    /// The body.
    pub body: Value,
}

/// Which error, in the provider's terms.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorKind {
    /// 429 Too Many Requests.
    RateLimit,
    /// Anthropic 529, OpenAI 503.
    Overloaded,
    /// 500.
    Server,
    /// 400, a request the API would not take.
    InvalidRequest,
    /// 404, an unknown path or model.
    NotFound,
    /// 413, a body over the size limit.
    TooLarge,
    /// 422, a request the mock server has no reply for (agentsim's own status: the SDKs do not
    /// retry it).
    NoReply,
}

impl ErrorKind {
    /// The error kind of a scripted model error.
    pub fn of(kind: LlmErrorKind) -> ErrorKind {
        match kind {
            LlmErrorKind::RateLimit => ErrorKind::RateLimit,
            LlmErrorKind::Overloaded => ErrorKind::Overloaded,
            LlmErrorKind::Network | LlmErrorKind::Other => ErrorKind::Server,
        }
    }

    /// The HTTP status for `provider`.
    pub fn status(self, provider: Provider) -> u16 {
        match self {
            ErrorKind::RateLimit => 429,
            ErrorKind::Overloaded if provider == Provider::Anthropic => 529,
            ErrorKind::Overloaded => 503,
            ErrorKind::Server => 500,
            ErrorKind::InvalidRequest => 400,
            ErrorKind::NotFound => 404,
            ErrorKind::TooLarge => 413,
            ErrorKind::NoReply => 422,
        }
    }

    /// The provider's message when none is given.
    pub fn default_message(self, provider: Provider) -> &'static str {
        match (self, provider) {
            (ErrorKind::RateLimit, Provider::Anthropic) => {
                "This request would exceed the rate limit for your organization. Please try again later."
            }
            (ErrorKind::RateLimit, _) => "Rate limit reached for requests. Please try again later.",
            (ErrorKind::Overloaded, Provider::Anthropic) => "Overloaded",
            (ErrorKind::Overloaded, _) => "The server is overloaded or not ready yet.",
            (ErrorKind::Server, Provider::Anthropic) => "Internal server error",
            (ErrorKind::Server, _) => {
                "The server had an error while processing your request. Sorry about that!"
            }
            (ErrorKind::InvalidRequest, _) => "invalid request",
            (ErrorKind::NotFound, _) => "not found",
            (ErrorKind::TooLarge, _) => "Request exceeds the maximum allowed size.",
            (ErrorKind::NoReply, _) => "no scripted reply",
        }
    }

    fn anthropic_type(self) -> &'static str {
        match self {
            ErrorKind::RateLimit => "rate_limit_error",
            ErrorKind::Overloaded => "overloaded_error",
            ErrorKind::Server => "api_error",
            ErrorKind::InvalidRequest | ErrorKind::NoReply => "invalid_request_error",
            ErrorKind::NotFound => "not_found_error",
            ErrorKind::TooLarge => "request_too_large",
        }
    }

    fn openai_type_code(self) -> (&'static str, Option<&'static str>) {
        match self {
            ErrorKind::RateLimit => ("requests", Some("rate_limit_exceeded")),
            ErrorKind::Overloaded | ErrorKind::Server => ("server_error", None),
            ErrorKind::InvalidRequest | ErrorKind::NoReply | ErrorKind::TooLarge => {
                ("invalid_request_error", None)
            }
            ErrorKind::NotFound => ("invalid_request_error", Some("unknown_url")),
        }
    }
}

/// The error body of `provider` for `kind`, with `message` (the provider's usual text when
/// `None`); `request_id` goes into Anthropic's envelope.
pub fn error(
    provider: Provider,
    kind: ErrorKind,
    message: Option<&str>,
    request_id: &str,
) -> ErrorReply {
    let message = message.unwrap_or_else(|| kind.default_message(provider));
    let body = match provider {
        Provider::Anthropic => {
            let mut body = anthropic_error(kind, message);
            body["request_id"] = request_id.into();
            body
        }
        Provider::OpenAiChat | Provider::OpenAiResponses => openai_error(kind, message),
    };
    ErrorReply {
        status: kind.status(provider),
        body,
    }
}

/// The event a provider sends for an error in the middle of a stream.
pub fn stream_error(provider: Provider, kind: ErrorKind, message: Option<&str>) -> Sse {
    let message = message.unwrap_or_else(|| kind.default_message(provider));
    match provider {
        Provider::Anthropic => Sse::named("error", &anthropic_error(kind, message)),
        Provider::OpenAiChat => Sse::unnamed(openai_error(kind, message).to_string()),
        Provider::OpenAiResponses => {
            let (_, code) = kind.openai_type_code();
            Sse::named(
                "error",
                &json!({"type": "error", "code": code.unwrap_or("server_error"),
                        "message": message, "param": null}),
            )
        }
    }
}

/// Anthropic's error object: `{"type":"error","error":{"type","message"}}`.
fn anthropic_error(kind: ErrorKind, message: &str) -> Value {
    json!({"type": "error", "error": {"type": kind.anthropic_type(), "message": message}})
}

/// OpenAI's error object: `{"error":{"message","type","param","code"}}`.
fn openai_error(kind: ErrorKind, message: &str) -> Value {
    let (kind_type, code) = kind.openai_type_code();
    json!({"error": {"message": message, "type": kind_type, "param": null, "code": code}})
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reply(blocks: Vec<OutBlock>, stop: Stop) -> Reply {
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

    fn tool(id: &str) -> OutBlock {
        OutBlock::ToolUse {
            after_ms: 0,
            id: id.into(),
            name: "get_weather".into(),
            input: json!({"location": "Paris, France", "unit": "celsius"}),
        }
    }

    fn data(events: &[Sse]) -> Vec<Value> {
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
    fn fragments_cut_at_char_boundaries_and_join_back() {
        let text = r#"{"city":"Zürich — östlich, très loin"}"#;
        let parts = fragments(text);
        assert!(parts.len() > 2);
        assert_eq!(parts.concat(), text);
        assert!(parts.iter().all(|p| !p.is_empty()));
        assert!(fragments("").is_empty());
    }

    #[test]
    fn anthropic_stream_names_every_event_and_rebuilds_the_body() {
        let r = reply(
            vec![OutBlock::text("Let me check."), tool("toolu_a")],
            Stop::ToolUse,
        );
        let events = events(Provider::Anthropic, &r, false);
        for (e, d) in events.iter().zip(data(&events)) {
            assert_eq!(e.event.as_deref(), d["type"].as_str(), "event name = type");
        }
        let kinds: Vec<_> = events.iter().map(|e| e.event.clone().unwrap()).collect();
        assert_eq!(kinds[0], "message_start");
        assert_eq!(kinds[1], "content_block_start");
        assert_eq!(kinds[2], "ping");
        assert_eq!(kinds.last().unwrap(), "message_stop");
        // Rebuild the final message the way the SDK accumulates it.
        let mut text = String::new();
        let mut json_text = String::new();
        for d in data(&events) {
            match d["type"].as_str().unwrap() {
                "content_block_delta" if d["delta"]["type"] == "text_delta" => {
                    text.push_str(d["delta"]["text"].as_str().unwrap())
                }
                "content_block_delta" => {
                    assert_eq!(d["index"], 1);
                    json_text.push_str(d["delta"]["partial_json"].as_str().unwrap())
                }
                "message_delta" => {
                    assert_eq!(d["delta"]["stop_reason"], "tool_use");
                    assert_eq!(d["usage"]["output_tokens"], 5);
                }
                _ => {}
            }
        }
        let full = body(Provider::Anthropic, &r);
        assert_eq!(full["content"][0]["text"], text);
        assert_eq!(
            full["content"][1]["input"],
            serde_json::from_str::<Value>(&json_text).unwrap()
        );
        assert_eq!(full["stop_reason"], "tool_use");
        assert_eq!(full["usage"]["input_tokens"], 10);
    }

    #[test]
    fn chat_stream_sends_tool_call_headers_then_fragments_then_done() {
        let r = reply(vec![tool("call_a"), tool("call_b")], Stop::ToolUse);
        let events = events(Provider::OpenAiChat, &r, true);
        assert!(events.iter().all(|e| e.event.is_none()));
        assert_eq!(events.last().unwrap().data, "[DONE]");
        let chunks = data(&events);
        assert!(chunks
            .iter()
            .all(|c| c["object"] == "chat.completion.chunk"));
        assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant");
        assert_eq!(
            chunks[0]["choices"][0]["delta"]["tool_calls"][0]["id"],
            "call_a"
        );
        let mut args = [String::new(), String::new()];
        let mut ids = Vec::new();
        for c in &chunks {
            for call in c["choices"][0]["delta"]["tool_calls"]
                .as_array()
                .into_iter()
                .flatten()
            {
                let i = call["index"].as_u64().unwrap() as usize;
                if let Some(id) = call["id"].as_str() {
                    ids.push(id.to_owned());
                    assert_eq!(call["function"]["arguments"], "");
                }
                args[i].push_str(call["function"]["arguments"].as_str().unwrap());
            }
        }
        assert_eq!(ids, ["call_a", "call_b"]);
        for a in &args {
            assert_eq!(
                serde_json::from_str::<Value>(a).unwrap()["location"],
                "Paris, France"
            );
        }
        let n = chunks.len();
        assert_eq!(chunks[n - 2]["choices"][0]["finish_reason"], "tool_calls");
        assert_eq!(chunks[n - 1]["choices"], json!([]));
        assert_eq!(chunks[n - 1]["usage"]["total_tokens"], 15);
        let without = events_without_usage(&r);
        assert_eq!(without, n - 1);
    }

    fn events_without_usage(r: &Reply) -> usize {
        data(&events(Provider::OpenAiChat, r, false)).len()
    }

    #[test]
    fn chat_body_has_text_or_null_and_calls_as_json_strings() {
        let r = reply(vec![tool("call_a")], Stop::ToolUse);
        let b = body(Provider::OpenAiChat, &r);
        assert_eq!(b["choices"][0]["message"]["content"], Value::Null);
        let args = b["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"]
            .as_str()
            .unwrap();
        assert_eq!(
            serde_json::from_str::<Value>(args).unwrap()["unit"],
            "celsius"
        );
        let t = reply(vec![OutBlock::text("hi")], Stop::EndTurn);
        let b = body(Provider::OpenAiChat, &t);
        assert_eq!(b["choices"][0]["message"]["content"], "hi");
        assert_eq!(b["choices"][0]["finish_reason"], "stop");
        assert!(b["choices"][0]["message"].get("tool_calls").is_none());
    }

    #[test]
    fn responses_stream_is_numbered_and_ends_with_the_completed_response() {
        let r = reply(
            vec![OutBlock::text("Checking."), tool("call_xyz")],
            Stop::ToolUse,
        );
        let events = events(Provider::OpenAiResponses, &r, false);
        let all = data(&events);
        for (i, (e, d)) in events.iter().zip(&all).enumerate() {
            assert_eq!(d["sequence_number"], i);
            assert_eq!(e.event.as_deref(), d["type"].as_str());
        }
        assert_eq!(all[0]["type"], "response.created");
        assert_eq!(all[1]["type"], "response.in_progress");
        let last = all.last().unwrap();
        assert_eq!(last["type"], "response.completed");
        assert_eq!(last["response"]["output"][1]["call_id"], "call_xyz");
        assert_eq!(last["response"]["output"][1]["id"], "fc_xyz");
        let done = all
            .iter()
            .find(|d| d["type"] == "response.function_call_arguments.done")
            .unwrap();
        assert_eq!(done["item_id"], "fc_xyz");
        assert_eq!(done["name"], "get_weather");
        assert_eq!(
            body(Provider::OpenAiResponses, &r)["output"],
            last["response"]["output"]
        );
    }

    #[test]
    fn error_envelopes_are_each_providers_own() {
        let a = error(Provider::Anthropic, ErrorKind::Overloaded, None, "req_x");
        assert_eq!(a.status, 529);
        assert_eq!(a.body["error"]["type"], "overloaded_error");
        assert_eq!(a.body["request_id"], "req_x");
        let o = error(
            Provider::OpenAiChat,
            ErrorKind::RateLimit,
            Some("slow"),
            "req_x",
        );
        assert_eq!(o.status, 429);
        assert_eq!(o.body["error"]["message"], "slow");
        assert_eq!(o.body["error"]["code"], "rate_limit_exceeded");
        assert_eq!(
            error(Provider::OpenAiResponses, ErrorKind::Overloaded, None, "").status,
            503
        );
        let e = stream_error(Provider::Anthropic, ErrorKind::Overloaded, None);
        assert_eq!(e.event.as_deref(), Some("error"));
        let mut wire = String::new();
        e.write(&mut wire);
        assert!(wire.starts_with("event: error\ndata: {"));
        assert!(wire.ends_with("}\n\n"));
    }
}
