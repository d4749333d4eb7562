//! OpenAI Chat Completions replies: the `chat.completion` body, and its stream of unnamed
//! `chat.completion.chunk`s (the role first, text deltas, each tool call's first fragment with
//! its `index`, `id`, `type`, `name` and `arguments: ""` then argument fragments, the finish reason
//! on an empty delta, a usage chunk when `stream_options.include_usage` asks for it, `[DONE]`).

use serde::Serialize;

use super::{block_input, fragments, input_text, OutBlock, Reply, Sse, Stop, CREATED};
use crate::model::llm::Usage;

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
pub(super) struct ChatCompletion<'a> {
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

pub(super) fn chat_completion(reply: &Reply) -> ChatCompletion<'_> {
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
            OutBlock::Text(_) | OutBlock::Thinking { .. } => None,
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

pub(super) fn chat_events(reply: &Reply, include_usage: bool) -> Vec<Sse> {
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
            // Chat has no reasoning content: the server never builds one for it.
            OutBlock::Thinking { .. } => {}
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

#[cfg(test)]
mod tests {
    use serde_json::{json, Value};

    use crate::wire::reply::tests::{data, reply, tool};
    use crate::wire::reply::*;
    use crate::wire::Provider;

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
}
