//! mock-llm's event streams against the shapes of streams recorded from the real APIs, which the
//! official SDKs keep as test fixtures (`../shared/research/real-clients.md`):
//!
//! - `anthropics/anthropic-sdk-python`, `tests/lib/streaming/fixtures/basic_response.txt` (text in
//!   three deltas, a `ping` after the first block start) and `tool_use_response.txt` (text, then a
//!   tool use whose input comes as `input_json_delta`s starting with an empty one);
//! - `openai/openai-python`, `.inline-snapshot/external/038a5c69….bin` (plain text, usage chunk,
//!   `[DONE]`) and `24aaf306….bin` (one tool call: the role, `content: null` and the call's head
//!   in the first chunk, then argument fragments, `finish_reason: tool_calls` on an empty delta);
//! - for the Responses API, the event order the OpenAI Agents SDK's own fake model streams
//!   (`openai-agents-python`, `tests/fake_model.py`) with the field shapes of `openai-python`'s
//!   `tests/lib/responses/test_function_call_done_event.py`.
//!
//! The shapes below are written from reading those files (event by event: its name, and the
//! fields and discriminating values the SDKs read), not copied from them. A step marked `+` is
//! one or more events of that shape in a row. Each check also rebuilds the reply from our events
//! and compares it with the scripted one.

use agentsim::wire::reply::{events, OutBlock, Reply, Sse, Stop};
use agentsim::wire::Provider;
use serde_json::{json, Value};

/// One step of a recorded stream: the SSE `event:` name (`None`: no name line), whether it
/// repeats, and claims on its data: `path=value` (a JSON literal, or else a string) or
/// `path:kind` with kind `s` (string), `n` (number), `null`, `{}` (object), `[]` (array).
struct Step {
    event: Option<&'static str>,
    repeats: bool,
    claims: &'static [&'static str],
}

const fn one(event: Option<&'static str>, claims: &'static [&'static str]) -> Step {
    Step {
        event,
        repeats: false,
        claims,
    }
}

const fn many(event: Option<&'static str>, claims: &'static [&'static str]) -> Step {
    Step {
        event,
        repeats: true,
        claims,
    }
}

fn at<'a>(value: &'a Value, path: &str) -> Option<&'a Value> {
    path.split('.')
        .try_fold(value, |v, key| match key.parse::<usize>() {
            Ok(i) => v.get(i),
            Err(_) => v.get(key),
        })
}

fn holds(data: &Value, claim: &str) -> Result<(), String> {
    if let Some((path, want)) = claim.split_once('=') {
        let want: Value = serde_json::from_str(want).unwrap_or(Value::String(want.to_owned()));
        return match at(data, path) {
            Some(got) if *got == want => Ok(()),
            got => Err(format!("{path} should be {want}, is {got:?}")),
        };
    }
    let (path, kind) = claim
        .split_once(':')
        .expect("a claim is path=value or path:kind");
    let got = at(data, path);
    let ok = matches!(
        (kind, got),
        ("s", Some(Value::String(_)))
            | ("n", Some(Value::Number(_)))
            | ("null", Some(Value::Null))
            | ("{}", Some(Value::Object(_)))
            | ("[]", Some(Value::Array(_)))
    );
    if ok {
        Ok(())
    } else {
        Err(format!("{path} should be of kind {kind}, is {got:?}"))
    }
}

fn matches(step: &Step, sse: &Sse) -> Result<(), String> {
    if sse.event.as_deref() != step.event {
        return Err(format!(
            "event name {:?}, recorded {:?}",
            sse.event, step.event
        ));
    }
    if step.claims.is_empty() && sse.data == "[DONE]" {
        return Ok(());
    }
    let data: Value = serde_json::from_str(&sse.data)
        .map_err(|e| format!("data is not JSON ({e}): {}", sse.data))?;
    for claim in step.claims {
        holds(&data, claim)?;
    }
    Ok(())
}

/// Checks `ours` step by step against `recorded`, naming the first event that differs.
fn check(name: &str, ours: &[Sse], recorded: &[Step]) {
    let mut i = 0;
    for (n, step) in recorded.iter().enumerate() {
        let Some(sse) = ours.get(i) else {
            panic!(
                "{name}: our stream ends before recorded step {n} ({:?})",
                step.event
            );
        };
        if let Err(e) = matches(step, sse) {
            panic!(
                "{name}: event {i} ({}) does not match recorded step {n}: {e}",
                sse.data
            );
        }
        i += 1;
        while step.repeats && ours.get(i).is_some_and(|s| matches(step, s).is_ok()) {
            i += 1;
        }
    }
    assert_eq!(
        i,
        ours.len(),
        "{name}: our stream has events the recording has not, from {}",
        ours.get(i).map_or("", |s| s.data.as_str())
    );
}

fn reply(blocks: Vec<OutBlock>, stop: Stop) -> Reply {
    Reply {
        id: "msg_as_a_a".into(),
        model: "model-x".into(),
        blocks,
        usage: agentsim::model::llm::Usage {
            input_tokens: 11,
            output_tokens: 6,
        },
        stop,
    }
}

fn weather(id: &str) -> OutBlock {
    OutBlock::ToolUse {
        after_ms: 0,
        id: id.into(),
        name: "get_weather".into(),
        input: json!({"location": "Paris, France"}),
    }
}

fn pieces(parts: &[&str]) -> OutBlock {
    OutBlock::Text(parts.iter().map(|p| (0, (*p).to_owned())).collect())
}

const A_START: Step = one(
    Some("message_start"),
    &[
        "type=message_start",
        "message.id:s",
        "message.type=message",
        "message.role=assistant",
        "message.model:s",
        "message.content:[]",
        "message.stop_reason:null",
        "message.stop_sequence:null",
        "message.usage.input_tokens:n",
        "message.usage.output_tokens:n",
    ],
);
const A_TEXT_START: Step = one(
    Some("content_block_start"),
    &[
        "type=content_block_start",
        "index:n",
        "content_block.type=text",
        "content_block.text=\"\"",
    ],
);
const A_PING: Step = one(Some("ping"), &["type=ping"]);
const A_TEXT_DELTA: Step = many(
    Some("content_block_delta"),
    &[
        "type=content_block_delta",
        "index:n",
        "delta.type=text_delta",
        "delta.text:s",
    ],
);
const A_BLOCK_STOP: Step = one(
    Some("content_block_stop"),
    &["type=content_block_stop", "index:n"],
);
const A_STOP: Step = one(Some("message_stop"), &["type=message_stop"]);

#[test]
fn anthropic_text_matches_the_recorded_basic_response() {
    let ours = events(
        Provider::Anthropic,
        &reply(vec![pieces(&["Hello", " there", "!"])], Stop::EndTurn),
        false,
    );
    let recorded = [
        A_START,
        A_TEXT_START,
        A_PING,
        A_TEXT_DELTA,
        A_BLOCK_STOP,
        one(
            Some("message_delta"),
            &[
                "type=message_delta",
                "delta.stop_reason=end_turn",
                "delta.stop_sequence:null",
                "usage.output_tokens:n",
            ],
        ),
        A_STOP,
    ];
    check("anthropic basic_response", &ours, &recorded);
    assert_eq!(
        ours.iter()
            .filter(|e| e.data.contains("text_delta"))
            .count(),
        3,
        "one delta per scripted piece, as recorded"
    );
}

#[test]
fn anthropic_text_then_tool_use_matches_the_recorded_tool_use_response() {
    let ours = events(
        Provider::Anthropic,
        &reply(
            vec![
                pieces(&["I", "'ll check the current weather in Paris for you."]),
                weather("toolu_as_a_a_a"),
            ],
            Stop::ToolUse,
        ),
        false,
    );
    let recorded = [
        A_START,
        A_TEXT_START,
        A_PING,
        A_TEXT_DELTA,
        A_BLOCK_STOP,
        one(
            Some("content_block_start"),
            &[
                "index=1",
                "content_block.type=tool_use",
                "content_block.id:s",
                "content_block.name=get_weather",
                "content_block.input:{}",
            ],
        ),
        // The first fragment is empty, as recorded.
        one(
            Some("content_block_delta"),
            &[
                "index=1",
                "delta.type=input_json_delta",
                "delta.partial_json=\"\"",
            ],
        ),
        many(
            Some("content_block_delta"),
            &[
                "index=1",
                "delta.type=input_json_delta",
                "delta.partial_json:s",
            ],
        ),
        one(Some("content_block_stop"), &["index=1"]),
        one(
            Some("message_delta"),
            &[
                "delta.stop_reason=tool_use",
                "delta.stop_sequence:null",
                "usage.output_tokens:n",
            ],
        ),
        A_STOP,
    ];
    check("anthropic tool_use_response", &ours, &recorded);
    let input: String = ours
        .iter()
        .filter_map(|e| serde_json::from_str::<Value>(&e.data).ok())
        .filter_map(|d| d["delta"]["partial_json"].as_str().map(str::to_owned))
        .collect();
    assert_eq!(
        serde_json::from_str::<Value>(&input).unwrap(),
        json!({"location": "Paris, France"})
    );
}

const C_COMMON: [&str; 4] = [
    "id:s",
    "object=chat.completion.chunk",
    "created:n",
    "model:s",
];

macro_rules! chat {
    ($($claim:expr),* $(,)?) => {
        &[C_COMMON[0], C_COMMON[1], C_COMMON[2], C_COMMON[3], $($claim),*]
    };
}

const C_USAGE: Step = one(
    None,
    chat!(
        "choices=[]",
        "usage.prompt_tokens:n",
        "usage.completion_tokens:n",
        "usage.total_tokens:n"
    ),
);
const C_DONE: Step = one(None, &[]);

#[test]
fn openai_chat_text_matches_the_recorded_text_stream() {
    let ours = events(
        Provider::OpenAiChat,
        &reply(
            vec![pieces(&["I'm", " unable", " to", " provide", "."])],
            Stop::EndTurn,
        ),
        true,
    );
    let recorded = [
        one(
            None,
            chat!(
                "choices.0.index=0",
                "choices.0.delta.role=assistant",
                "choices.0.delta.content=\"\"",
                "choices.0.delta.refusal:null",
                "choices.0.logprobs:null",
                "choices.0.finish_reason:null"
            ),
        ),
        many(
            None,
            chat!(
                "choices.0.delta.content:s",
                "choices.0.logprobs:null",
                "choices.0.finish_reason:null"
            ),
        ),
        one(
            None,
            chat!("choices.0.delta={}", "choices.0.finish_reason=stop"),
        ),
        C_USAGE,
        C_DONE,
    ];
    check("openai chat text", &ours, &recorded);
    assert_eq!(ours.last().unwrap().data, "[DONE]");
}

#[test]
fn openai_chat_tool_call_matches_the_recorded_tool_stream() {
    let ours = events(
        Provider::OpenAiChat,
        &reply(vec![weather("call_as_a_a_a")], Stop::ToolUse),
        true,
    );
    let recorded = [
        one(
            None,
            chat!(
                "choices.0.delta.role=assistant",
                "choices.0.delta.content:null",
                "choices.0.delta.refusal:null",
                "choices.0.delta.tool_calls.0.index=0",
                "choices.0.delta.tool_calls.0.id:s",
                "choices.0.delta.tool_calls.0.type=function",
                "choices.0.delta.tool_calls.0.function.name=get_weather",
                "choices.0.delta.tool_calls.0.function.arguments=\"\"",
                "choices.0.finish_reason:null"
            ),
        ),
        many(
            None,
            chat!(
                "choices.0.delta.tool_calls.0.index=0",
                "choices.0.delta.tool_calls.0.function.arguments:s",
                "choices.0.finish_reason:null"
            ),
        ),
        one(
            None,
            chat!("choices.0.delta={}", "choices.0.finish_reason=tool_calls"),
        ),
        C_USAGE,
        C_DONE,
    ];
    check("openai chat tool call", &ours, &recorded);
    // Later fragments carry only the index and the arguments, as recorded.
    let second: Value = serde_json::from_str(&ours[1].data).unwrap();
    let call = &second["choices"][0]["delta"]["tool_calls"][0];
    assert!(call.get("id").is_none() && call["function"].get("name").is_none());
}

#[test]
fn openai_responses_function_call_matches_the_agents_sdk_order() {
    let ours = events(
        Provider::OpenAiResponses,
        &reply(vec![weather("call_as_a_a_a")], Stop::ToolUse),
        false,
    );
    let recorded = [
        one(
            Some("response.created"),
            &[
                "type=response.created",
                "response.id:s",
                "response.object=response",
                "response.status=in_progress",
                "response.output=[]",
                "sequence_number=0",
            ],
        ),
        one(
            Some("response.in_progress"),
            &["type=response.in_progress", "sequence_number=1"],
        ),
        one(
            Some("response.output_item.added"),
            &[
                "output_index=0",
                "item.type=function_call",
                "item.id:s",
                "item.call_id=call_as_a_a_a",
                "item.name=get_weather",
                "item.arguments=\"\"",
                "item.status=in_progress",
            ],
        ),
        many(
            Some("response.function_call_arguments.delta"),
            &[
                "item_id:s",
                "output_index=0",
                "delta:s",
                "sequence_number:n",
            ],
        ),
        one(
            Some("response.function_call_arguments.done"),
            &["item_id:s", "output_index=0", "arguments:s"],
        ),
        one(
            Some("response.output_item.done"),
            &[
                "item.type=function_call",
                "item.status=completed",
                "item.call_id=call_as_a_a_a",
            ],
        ),
        one(
            Some("response.completed"),
            &[
                "response.status=completed",
                "response.output.0.type=function_call",
                "response.usage.input_tokens:n",
                "response.usage.output_tokens:n",
            ],
        ),
    ];
    check("openai responses function call", &ours, &recorded);
    // Every event carries an increasing sequence number, and there is no [DONE].
    let numbers: Vec<u64> = ours
        .iter()
        .map(|e| {
            serde_json::from_str::<Value>(&e.data).unwrap()["sequence_number"]
                .as_u64()
                .unwrap()
        })
        .collect();
    assert!(numbers.windows(2).all(|w| w[1] == w[0] + 1), "{numbers:?}");
    // Two ids per call: the item id (fc_…) in the deltas, the call id in the item.
    let delta: Value = serde_json::from_str(&ours[3].data).unwrap();
    assert!(delta["item_id"].as_str().unwrap().starts_with("fc_"));
}

/// A Responses stream cut by an error event (mock-llm's mid-stream faults): the error event is
/// numbered in sequence with the events before it, as the SDKs' `ResponseErrorEvent` requires
/// (without it the AI SDK raised a type-validation error instead of the API error).
#[test]
fn a_responses_stream_cut_by_an_error_numbers_the_error_event_too() {
    let mut ours = events(
        Provider::OpenAiResponses,
        &reply(vec![pieces(&["Hel", "lo"])], Stop::EndTurn),
        false,
    );
    ours.truncate(ours.len() / 2);
    let at = ours.len();
    ours.push(agentsim::wire::reply::stream_error(
        Provider::OpenAiResponses,
        agentsim::wire::reply::ErrorKind::Overloaded,
        None,
        at,
    ));
    let last: Value = serde_json::from_str(&ours[at].data).unwrap();
    assert_eq!(ours[at].event.as_deref(), Some("error"));
    for key in ["code", "message", "param", "sequence_number"] {
        assert!(last.get(key).is_some(), "{key} missing from {last}");
    }
    let numbers: Vec<u64> = ours
        .iter()
        .map(|e| {
            serde_json::from_str::<Value>(&e.data).unwrap()["sequence_number"]
                .as_u64()
                .unwrap()
        })
        .collect();
    assert_eq!(numbers, (0..ours.len() as u64).collect::<Vec<_>>());
}

#[test]
fn the_checker_catches_a_stream_that_differs_from_the_recording() {
    // A stream without the ping, and one whose message_delta forgets the stop reason, both fail.
    let mut ours = events(
        Provider::Anthropic,
        &reply(vec![pieces(&["Hello"])], Stop::EndTurn),
        false,
    );
    let recorded = [
        A_START,
        A_TEXT_START,
        A_PING,
        A_TEXT_DELTA,
        A_BLOCK_STOP,
        one(Some("message_delta"), &["delta.stop_reason=end_turn"]),
        A_STOP,
    ];
    check("sound", &ours, &recorded);
    let mut without_ping = ours.clone();
    without_ping.retain(|e| e.event.as_deref() != Some("ping"));
    let r = std::panic::catch_unwind(|| check("no ping", &without_ping, &recorded));
    assert!(r.is_err());
    let n = ours.len() - 2;
    ours[n].data = ours[n].data.replace("end_turn", "tool_use");
    let r = std::panic::catch_unwind(|| check("wrong stop", &ours, &recorded));
    assert!(r.is_err());
}
