//! Anthropic Messages replies: the message body, and its event stream (`message_start` with
//! `content: []` and `usage`, then per block `content_block_start`, its deltas and
//! `content_block_stop`, a `ping` after the first block's start, `message_delta` with the stop
//! reason and the output tokens, `message_stop`; every event named as the `type` in its data).

use serde::Serialize;
use serde_json::Value;

use super::{block_input, empty_object, fragments, OutBlock, Reply, Sse, Stop};

fn anthropic_stop(stop: Stop) -> &'static str {
    match stop {
        Stop::EndTurn => "end_turn",
        Stop::ToolUse => "tool_use",
        Stop::MaxTokens => "max_tokens",
    }
}

#[derive(Serialize)]
pub(super) struct AnthropicMessage<'a> {
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
    Thinking {
        thinking: String,
        signature: &'a str,
    },
    Text {
        text: String,
    },
    ToolUse {
        id: &'a str,
        name: &'a str,
        input: &'a Value,
    },
}

// The variants are named as the API names the deltas.
#[allow(clippy::enum_variant_names)]
#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum AnthropicDelta<'a> {
    ThinkingDelta { thinking: &'a str },
    SignatureDelta { signature: &'a str },
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

pub(super) fn anthropic_message(reply: &Reply, done: bool) -> AnthropicMessage<'_> {
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
                OutBlock::Thinking { id, .. } => AnthropicBlock::Thinking {
                    thinking: b.reasoning().unwrap_or_default(),
                    signature: id,
                },
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

pub(super) fn anthropic_events(reply: &Reply) -> Vec<Sse> {
    let mut out = vec![AnthropicEvent::MessageStart {
        message: anthropic_message(reply, false),
    }
    .sse(0)];
    for (index, block) in reply.blocks.iter().enumerate() {
        match block {
            // The block starts empty, its text comes in `thinking_delta`s and its signature in
            // one `signature_delta` before the block stops.
            OutBlock::Thinking { id, pieces } => {
                let start = AnthropicEvent::ContentBlockStart {
                    index,
                    content_block: AnthropicBlock::Thinking {
                        thinking: String::new(),
                        signature: "",
                    },
                };
                out.push(start.sse(pieces.first().map_or(0, |p| p.0)));
                if index == 0 {
                    out.push(AnthropicEvent::Ping.sse(0));
                }
                for (i, (delay, piece)) in pieces.iter().enumerate() {
                    let delta = AnthropicEvent::ContentBlockDelta {
                        index,
                        delta: AnthropicDelta::ThinkingDelta { thinking: piece },
                    };
                    out.push(delta.sse(if i > 0 { *delay } else { 0 }));
                }
                let signature = AnthropicEvent::ContentBlockDelta {
                    index,
                    delta: AnthropicDelta::SignatureDelta { signature: id },
                };
                out.push(signature.sse(0));
            }
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

#[cfg(test)]
mod tests {
    use serde_json::Value;

    use crate::wire::reply::tests::{data, reply, tool};
    use crate::wire::reply::*;
    use crate::wire::Provider;

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
}
