//! Requests encoded, pure: agentsim's conversation as the body a provider expects (the other way
//! from the decoders beside it), for drivers that call a real model API or `agentsim mock-llm`.
//! The decoders read every encoded body back into the same conversation
//! (`tests/wire_roundtrip.rs`).
//!
//! - **Anthropic Messages**: `system`, `messages` of `text`, `tool_use` and `tool_result` blocks
//!   (with `is_error`), `tools` with `input_schema`, `max_tokens`, `stream`.
//! - **OpenAI Chat Completions**: a `system` message, then each user turn's tool results as
//!   `tool` messages (first, as the API requires) and its text as a `user` message, each
//!   assistant turn as one message with `content` and `tool_calls` (arguments as JSON text);
//!   `tools` as functions; a failed tool's result is sent as its text (Chat has no error flag);
//!   streams ask for the usage chunk.
//! - **OpenAI Responses**: `instructions`, `input` items (`message`, `function_call`,
//!   `function_call_output`), `tools` as functions.

use serde_json::{json, Map, Value};

use super::Provider;
use crate::model::transcript::{Block, Message, Role};

/// A tool offered to the model.
#[derive(Clone, Copy, Debug)]
pub struct ToolSpec<'a> {
    /// Its name.
    pub name: &'a str,
    /// What it does.
    pub description: &'a str,
    /// Its input's JSON Schema.
    pub schema: &'a Value,
}

/// What a request says.
#[derive(Clone, Copy, Debug)]
pub struct Outgoing<'a> {
    /// The model name.
    pub model: &'a str,
    /// The system prompt (left out when empty).
    pub system: &'a str,
    /// The conversation.
    pub messages: &'a [Message],
    /// The tools offered.
    pub tools: &'a [ToolSpec<'a>],
    /// The most tokens the reply may use (Anthropic requires it).
    pub max_tokens: u32,
    /// Ask for a server-sent-event stream.
    pub stream: bool,
}

/// The body of `request` in `provider`'s format.
pub fn request(provider: Provider, request: &Outgoing<'_>) -> Value {
    match provider {
        Provider::Anthropic => anthropic(request),
        Provider::OpenAiChat => chat(request),
        Provider::OpenAiResponses => responses(request),
    }
}

fn role(r: Role) -> &'static str {
    match r {
        Role::User => "user",
        Role::Assistant => "assistant",
    }
}

fn anthropic(r: &Outgoing<'_>) -> Value {
    let messages: Vec<Value> = r
        .messages
        .iter()
        .map(|m| {
            let content: Vec<Value> = m
                .content
                .iter()
                .map(|b| match b {
                    Block::Text { text } => json!({"type": "text", "text": &**text}),
                    Block::ToolUse { id, name, input } => {
                        json!({"type": "tool_use", "id": &**id, "name": &**name, "input": &**input})
                    }
                    Block::ToolResult {
                        tool_use_id,
                        content,
                        is_error,
                    } => json!({"type": "tool_result", "tool_use_id": &**tool_use_id,
                                "content": &**content, "is_error": is_error}),
                })
                .collect();
            json!({"role": role(m.role), "content": content})
        })
        .collect();
    let mut body = json!({"model": r.model, "max_tokens": r.max_tokens, "messages": messages});
    if !r.system.is_empty() {
        body["system"] = r.system.into();
    }
    if !r.tools.is_empty() {
        body["tools"] = r
            .tools
            .iter()
            .map(
                |t| json!({"name": t.name, "description": t.description, "input_schema": t.schema}),
            )
            .collect();
    }
    if r.stream {
        body["stream"] = true.into();
    }
    body
}

/// The text blocks of a message, joined.
fn text_of(m: &Message) -> Option<String> {
    let texts: Vec<&str> = m
        .content
        .iter()
        .filter_map(|b| match b {
            Block::Text { text } => Some(&**text),
            _ => None,
        })
        .collect();
    (!texts.is_empty()).then(|| texts.concat())
}

fn chat(r: &Outgoing<'_>) -> Value {
    let mut messages = Vec::new();
    if !r.system.is_empty() {
        messages.push(json!({"role": "system", "content": r.system}));
    }
    for m in r.messages {
        match m.role {
            Role::User => {
                for b in &m.content {
                    if let Block::ToolResult {
                        tool_use_id,
                        content,
                        ..
                    } = b
                    {
                        messages.push(json!({"role": "tool", "tool_call_id": &**tool_use_id,
                                             "content": &**content}));
                    }
                }
                if let Some(text) = text_of(m) {
                    messages.push(json!({"role": "user", "content": text}));
                }
            }
            Role::Assistant => {
                let mut msg = Map::new();
                msg.insert("role".into(), "assistant".into());
                msg.insert("content".into(), text_of(m).into());
                let calls: Vec<Value> = m
                    .content
                    .iter()
                    .filter_map(|b| match b {
                        Block::ToolUse { id, name, input } => Some(json!({
                            "id": &**id, "type": "function",
                            "function": {"name": &**name, "arguments": input.to_string()},
                        })),
                        _ => None,
                    })
                    .collect();
                if !calls.is_empty() {
                    msg.insert("tool_calls".into(), calls.into());
                }
                messages.push(Value::Object(msg));
            }
        }
    }
    let mut body =
        json!({"model": r.model, "messages": messages, "max_completion_tokens": r.max_tokens});
    if !r.tools.is_empty() {
        body["tools"] = r
            .tools
            .iter()
            .map(|t| {
                json!({"type": "function", "function": {"name": t.name,
                            "description": t.description, "parameters": t.schema}})
            })
            .collect();
    }
    if r.stream {
        body["stream"] = true.into();
        body["stream_options"] = json!({"include_usage": true});
    }
    body
}

fn responses(r: &Outgoing<'_>) -> Value {
    let mut input = Vec::new();
    for m in r.messages {
        // Results first within a user turn, as in the other formats.
        for b in &m.content {
            match b {
                Block::ToolResult {
                    tool_use_id,
                    content,
                    ..
                } => input.push(json!({"type": "function_call_output",
                                       "call_id": &**tool_use_id, "output": &**content})),
                Block::ToolUse { id, name, input: i } => input.push(json!({
                    "type": "function_call", "call_id": &**id, "name": &**name,
                    "arguments": i.to_string(),
                })),
                Block::Text { .. } => {}
            }
        }
        if let Some(text) = text_of(m) {
            // An assistant's text comes before its calls in the turn.
            let item = json!({"type": "message", "role": role(m.role), "content": text});
            if m.role == Role::Assistant {
                let calls = m
                    .content
                    .iter()
                    .filter(|b| matches!(b, Block::ToolUse { .. }))
                    .count();
                let at = input.len() - calls;
                input.insert(at, item);
            } else {
                input.push(item);
            }
        }
    }
    let mut body = json!({"model": r.model, "input": input, "max_output_tokens": r.max_tokens});
    if !r.system.is_empty() {
        body["instructions"] = r.system.into();
    }
    if !r.tools.is_empty() {
        body["tools"] = r
            .tools
            .iter()
            .map(|t| {
                json!({"type": "function", "name": t.name, "description": t.description,
                            "parameters": t.schema})
            })
            .collect();
    }
    if r.stream {
        body["stream"] = true.into();
    }
    body
}
