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
    fn named(event: &str, data: &Value) -> Sse {
        Sse {
            delay_ms: 0,
            event: Some(event.to_owned()),
            data: data.to_string(),
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

/// The non-streaming body of `reply` for `provider`.
pub fn body(provider: Provider, reply: &Reply) -> Value {
    match provider {
        Provider::Anthropic => anthropic_message(reply, true),
        Provider::OpenAiChat => chat_completion(reply),
        Provider::OpenAiResponses => response(reply, "completed", true),
    }
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

// ---- Anthropic Messages ----

fn anthropic_stop(stop: Stop) -> &'static str {
    match stop {
        Stop::EndTurn => "end_turn",
        Stop::ToolUse => "tool_use",
        Stop::MaxTokens => "max_tokens",
    }
}

fn anthropic_usage(input: u64, output: u64) -> Value {
    json!({
        "input_tokens": input,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
        "output_tokens": output,
    })
}

fn anthropic_message(reply: &Reply, done: bool) -> Value {
    let content: Vec<Value> = if done {
        reply
            .blocks
            .iter()
            .map(|b| match b {
                OutBlock::Text(_) => json!({"type": "text", "text": b.joined()}),
                OutBlock::ToolUse {
                    id, name, input, ..
                } => json!({"type": "tool_use", "id": id, "name": name, "input": input}),
            })
            .collect()
    } else {
        Vec::new()
    };
    json!({
        "id": reply.id,
        "type": "message",
        "role": "assistant",
        "model": reply.model,
        "content": content,
        "stop_reason": if done { Value::from(anthropic_stop(reply.stop)) } else { Value::Null },
        "stop_sequence": null,
        "usage": anthropic_usage(reply.usage.input_tokens, if done { reply.usage.output_tokens } else { 1 }),
    })
}

fn anthropic_events(reply: &Reply) -> Vec<Sse> {
    let mut out = vec![Sse::named(
        "message_start",
        &json!({"type": "message_start", "message": anthropic_message(reply, false)}),
    )];
    for (index, block) in reply.blocks.iter().enumerate() {
        match block {
            OutBlock::Text(pieces) => {
                let mut start = Sse::named(
                    "content_block_start",
                    &json!({"type": "content_block_start", "index": index,
                            "content_block": {"type": "text", "text": ""}}),
                );
                start.delay_ms = pieces.first().map_or(0, |p| p.0);
                out.push(start);
                if index == 0 {
                    out.push(Sse::named("ping", &json!({"type": "ping"})));
                }
                for (i, (delay, piece)) in pieces.iter().enumerate() {
                    let mut delta = Sse::named(
                        "content_block_delta",
                        &json!({"type": "content_block_delta", "index": index,
                                "delta": {"type": "text_delta", "text": piece}}),
                    );
                    if i > 0 {
                        delta.delay_ms = *delay;
                    }
                    out.push(delta);
                }
            }
            OutBlock::ToolUse {
                after_ms, id, name, ..
            } => {
                let mut start = Sse::named(
                    "content_block_start",
                    &json!({"type": "content_block_start", "index": index,
                            "content_block": {"type": "tool_use", "id": id, "name": name, "input": {}}}),
                );
                start.delay_ms = *after_ms;
                out.push(start);
                if index == 0 {
                    out.push(Sse::named("ping", &json!({"type": "ping"})));
                }
                let text = block_input(block);
                for piece in std::iter::once("").chain(fragments(&text)) {
                    out.push(Sse::named(
                        "content_block_delta",
                        &json!({"type": "content_block_delta", "index": index,
                                "delta": {"type": "input_json_delta", "partial_json": piece}}),
                    ));
                }
            }
        }
        out.push(Sse::named(
            "content_block_stop",
            &json!({"type": "content_block_stop", "index": index}),
        ));
    }
    if reply.blocks.is_empty() {
        out.push(Sse::named("ping", &json!({"type": "ping"})));
    }
    out.push(Sse::named(
        "message_delta",
        &json!({"type": "message_delta",
                "delta": {"stop_reason": anthropic_stop(reply.stop), "stop_sequence": null},
                "usage": {"output_tokens": reply.usage.output_tokens}}),
    ));
    out.push(Sse::named("message_stop", &json!({"type": "message_stop"})));
    out
}

fn block_input(block: &OutBlock) -> String {
    match block {
        OutBlock::ToolUse { input, .. } => input_text(input),
        OutBlock::Text(_) => String::new(),
    }
}

// ---- OpenAI Chat Completions ----

fn chat_finish(stop: Stop) -> &'static str {
    match stop {
        Stop::EndTurn => "stop",
        Stop::ToolUse => "tool_calls",
        Stop::MaxTokens => "length",
    }
}

fn chat_usage(usage: Usage) -> Value {
    json!({
        "prompt_tokens": usage.input_tokens,
        "completion_tokens": usage.output_tokens,
        "total_tokens": usage.input_tokens + usage.output_tokens,
    })
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

fn chat_completion(reply: &Reply) -> Value {
    let mut message = Map::new();
    message.insert("role".into(), "assistant".into());
    message.insert("content".into(), text_of_reply(reply).into());
    message.insert("refusal".into(), Value::Null);
    let calls: Vec<Value> = reply
        .blocks
        .iter()
        .filter_map(|b| match b {
            OutBlock::ToolUse {
                id, name, input, ..
            } => Some(json!({"id": id, "type": "function",
                             "function": {"name": name, "arguments": input_text(input)}})),
            OutBlock::Text(_) => None,
        })
        .collect();
    if !calls.is_empty() {
        message.insert("tool_calls".into(), calls.into());
    }
    json!({
        "id": reply.id,
        "object": "chat.completion",
        "created": CREATED,
        "model": reply.model,
        "choices": [{
            "index": 0,
            "message": message,
            "logprobs": null,
            "finish_reason": chat_finish(reply.stop),
        }],
        "usage": chat_usage(reply.usage),
        "system_fingerprint": null,
    })
}

fn chat_chunk(reply: &Reply, delta: Value, finish: Option<&str>) -> Sse {
    chat_chunk_with(
        reply,
        json!([{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish}]),
        None,
    )
}

/// A chunk with these `choices`, and `usage` when given (the last chunk of
/// `stream_options.include_usage`, with no choices).
fn chat_chunk_with(reply: &Reply, choices: Value, usage: Option<Value>) -> Sse {
    let mut chunk = json!({
        "id": reply.id,
        "object": "chat.completion.chunk",
        "created": CREATED,
        "model": reply.model,
        "system_fingerprint": null,
        "choices": choices,
    });
    if let Some(usage) = usage {
        chunk["usage"] = usage;
    }
    Sse::unnamed(chunk.to_string())
}

fn chat_events(reply: &Reply, include_usage: bool) -> Vec<Sse> {
    let has_text = reply.blocks.iter().any(|b| matches!(b, OutBlock::Text(_)));
    let mut out = Vec::new();
    if has_text || reply.blocks.is_empty() {
        out.push(chat_chunk(
            reply,
            json!({"role": "assistant", "content": "", "refusal": null}),
            None,
        ));
    }
    let mut call_index = 0usize;
    for block in &reply.blocks {
        match block {
            OutBlock::Text(pieces) => {
                for (delay, piece) in pieces {
                    let mut chunk = chat_chunk(reply, json!({"content": piece}), None);
                    chunk.delay_ms = *delay;
                    out.push(chunk);
                }
            }
            OutBlock::ToolUse {
                after_ms, id, name, ..
            } => {
                let head = json!({"index": call_index, "id": id, "type": "function",
                                  "function": {"name": name, "arguments": ""}});
                let delta = if out.is_empty() {
                    json!({"role": "assistant", "content": null, "tool_calls": [head], "refusal": null})
                } else {
                    json!({"tool_calls": [head]})
                };
                let mut chunk = chat_chunk(reply, delta, None);
                chunk.delay_ms = *after_ms;
                out.push(chunk);
                let text = block_input(block);
                for piece in fragments(&text) {
                    out.push(chat_chunk(
                        reply,
                        json!({"tool_calls": [{"index": call_index, "function": {"arguments": piece}}]}),
                        None,
                    ));
                }
                call_index += 1;
            }
        }
    }
    out.push(chat_chunk(reply, json!({}), Some(chat_finish(reply.stop))));
    if include_usage {
        out.push(chat_chunk_with(
            reply,
            json!([]),
            Some(chat_usage(reply.usage)),
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

fn responses_usage(usage: Usage) -> Value {
    json!({
        "input_tokens": usage.input_tokens,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": usage.output_tokens,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": usage.input_tokens + usage.output_tokens,
    })
}

fn output_item(reply: &Reply, index: usize, block: &OutBlock, done: bool) -> Value {
    let status = if done { "completed" } else { "in_progress" };
    match block {
        OutBlock::Text(_) => {
            let content = if done {
                json!([{"type": "output_text", "text": block.joined(), "annotations": []}])
            } else {
                json!([])
            };
            json!({"type": "message", "id": message_item_id(reply, index), "status": status,
                   "role": "assistant", "content": content})
        }
        OutBlock::ToolUse {
            id, name, input, ..
        } => json!({
            "type": "function_call",
            "id": function_item_id(id),
            "call_id": id,
            "name": name,
            "arguments": if done { input_text(input) } else { String::new() },
            "status": status,
        }),
    }
}

fn response(reply: &Reply, status: &str, done: bool) -> Value {
    let output: Vec<Value> = if done {
        reply
            .blocks
            .iter()
            .enumerate()
            .map(|(i, b)| output_item(reply, i, b, true))
            .collect()
    } else {
        Vec::new()
    };
    let incomplete = if done && reply.stop == Stop::MaxTokens {
        json!({"reason": "max_output_tokens"})
    } else {
        Value::Null
    };
    let status = if done && reply.stop == Stop::MaxTokens {
        "incomplete"
    } else {
        status
    };
    json!({
        "id": reply.id,
        "object": "response",
        "created_at": CREATED,
        "status": status,
        "error": null,
        "incomplete_details": incomplete,
        "instructions": null,
        "model": reply.model,
        "output": output,
        "parallel_tool_calls": true,
        "tool_choice": "auto",
        "tools": [],
        "metadata": {},
        "temperature": null,
        "top_p": null,
        "usage": if done { responses_usage(reply.usage) } else { Value::Null },
    })
}

fn responses_events(reply: &Reply) -> Vec<Sse> {
    let mut out = Vec::new();
    let push = |out: &mut Vec<Sse>, delay: u64, mut data: Value| {
        let kind = data["type"].as_str().unwrap_or_default().to_owned();
        data["sequence_number"] = out.len().into();
        let mut event = Sse::named(&kind, &data);
        event.delay_ms = delay;
        out.push(event);
    };
    push(
        &mut out,
        0,
        json!({"type": "response.created", "response": response(reply, "in_progress", false)}),
    );
    push(
        &mut out,
        0,
        json!({"type": "response.in_progress", "response": response(reply, "in_progress", false)}),
    );
    for (index, block) in reply.blocks.iter().enumerate() {
        let first_delay = match block {
            OutBlock::Text(pieces) => pieces.first().map_or(0, |p| p.0),
            OutBlock::ToolUse { after_ms, .. } => *after_ms,
        };
        push(
            &mut out,
            first_delay,
            json!({"type": "response.output_item.added", "output_index": index,
                   "item": output_item(reply, index, block, false)}),
        );
        match block {
            OutBlock::Text(pieces) => {
                let item_id = message_item_id(reply, index);
                push(
                    &mut out,
                    0,
                    json!({"type": "response.content_part.added", "item_id": item_id,
                           "output_index": index, "content_index": 0,
                           "part": {"type": "output_text", "text": "", "annotations": []}}),
                );
                for (i, (delay, piece)) in pieces.iter().enumerate() {
                    push(
                        &mut out,
                        if i == 0 { 0 } else { *delay },
                        json!({"type": "response.output_text.delta", "item_id": item_id,
                               "output_index": index, "content_index": 0, "delta": piece,
                               "logprobs": []}),
                    );
                }
                let text = block.joined();
                push(
                    &mut out,
                    0,
                    json!({"type": "response.output_text.done", "item_id": item_id,
                           "output_index": index, "content_index": 0, "text": text,
                           "logprobs": []}),
                );
                push(
                    &mut out,
                    0,
                    json!({"type": "response.content_part.done", "item_id": item_id,
                           "output_index": index, "content_index": 0,
                           "part": {"type": "output_text", "text": text, "annotations": []}}),
                );
            }
            OutBlock::ToolUse { id, name, .. } => {
                let item_id = function_item_id(id);
                let text = block_input(block);
                for piece in fragments(&text) {
                    push(
                        &mut out,
                        0,
                        json!({"type": "response.function_call_arguments.delta",
                               "item_id": item_id, "output_index": index, "delta": piece}),
                    );
                }
                push(
                    &mut out,
                    0,
                    json!({"type": "response.function_call_arguments.done", "item_id": item_id,
                           "output_index": index, "arguments": text, "name": name}),
                );
            }
        }
        push(
            &mut out,
            0,
            json!({"type": "response.output_item.done", "output_index": index,
                   "item": output_item(reply, index, block, true)}),
        );
    }
    let last = if reply.stop == Stop::MaxTokens {
        "response.incomplete"
    } else {
        "response.completed"
    };
    push(
        &mut out,
        0,
        json!({"type": last, "response": response(reply, "completed", true)}),
    );
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
