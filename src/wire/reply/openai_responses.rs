//! OpenAI Responses replies: the response object, and its event stream (`response.created`,
//! `response.in_progress`, per output item `response.output_item.added`, its parts and deltas,
//! `response.output_item.done`, then `response.completed`; every event named and numbered by
//! `sequence_number`, no `[DONE]`). A function call has two ids: the item's (`fc_…`) and the
//! `call_id` the client echoes.

use serde::Serialize;

use super::{block_input, fragments, input_text, OutBlock, Reply, Sse, Stop, CREATED};

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

/// A reasoning summary part (`{"type": "summary_text", "text": ...}`).
#[derive(Serialize)]
struct SummaryText<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    text: &'a str,
}

fn summary_text(text: &str) -> SummaryText<'_> {
    SummaryText {
        kind: "summary_text",
        text,
    }
}

#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum OutputItem<'a> {
    Reasoning {
        id: &'a str,
        summary: Vec<SummaryText<'a>>,
    },
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
        OutBlock::Thinking { id, .. } => OutputItem::Reasoning {
            id,
            summary: if done {
                vec![summary_text(text)]
            } else {
                Vec::new()
            },
        },
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
        .map(|b| b.joined().or_else(|| b.reasoning()).unwrap_or_default())
        .collect()
}

pub(super) fn response<'a>(reply: &'a Reply, status: &'a str, done: bool) -> ResponseWith<'a> {
    ResponseWith {
        texts: if done { block_texts(reply) } else { Vec::new() },
        reply,
        status,
        done,
    }
}

/// A response object with the texts its output items borrow.
pub(super) struct ResponseWith<'a> {
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
struct SummaryPartEvent<'a> {
    item_id: &'a str,
    output_index: usize,
    summary_index: u32,
    part: SummaryText<'a>,
}

#[derive(Serialize)]
struct SummaryDeltaEvent<'a> {
    item_id: &'a str,
    output_index: usize,
    summary_index: u32,
    delta: &'a str,
}

#[derive(Serialize)]
struct SummaryDoneEvent<'a> {
    item_id: &'a str,
    output_index: usize,
    summary_index: u32,
    text: &'a str,
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

pub(super) fn responses_events(reply: &Reply) -> Vec<Sse> {
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
            OutBlock::Text(pieces) | OutBlock::Thinking { pieces, .. } => {
                pieces.first().map_or(0, |p| p.0)
            }
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
            OutBlock::Thinking { id, pieces } => {
                let part = |text| SummaryPartEvent {
                    item_id: id,
                    output_index: index,
                    summary_index: 0,
                    part: summary_text(text),
                };
                push(
                    &mut out,
                    0,
                    "response.reasoning_summary_part.added",
                    part(""),
                );
                for (i, (delay, piece)) in pieces.iter().enumerate() {
                    push(
                        &mut out,
                        if i == 0 { 0 } else { *delay },
                        "response.reasoning_summary_text.delta",
                        SummaryDeltaEvent {
                            item_id: id,
                            output_index: index,
                            summary_index: 0,
                            delta: piece,
                        },
                    );
                }
                let text = block.reasoning().unwrap_or_default();
                push(
                    &mut out,
                    0,
                    "response.reasoning_summary_text.done",
                    SummaryDoneEvent {
                        item_id: id,
                        output_index: index,
                        summary_index: 0,
                        text: &text,
                    },
                );
                push(
                    &mut out,
                    0,
                    "response.reasoning_summary_part.done",
                    part(&text),
                );
                text
            }
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

#[cfg(test)]
mod tests {
    use crate::wire::reply::tests::{data, reply, tool};
    use crate::wire::reply::*;
    use crate::wire::Provider;

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
}
