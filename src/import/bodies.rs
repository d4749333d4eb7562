//! Provider request bodies (an Anthropic `{system, tools, messages}`, an OpenAI Chat
//! `{messages, tools}`, a Responses `{input, instructions, tools}`), one or a JSON list of them,
//! read into exchanges: each assistant turn of a body is the reply to the request that came before
//! it (the body cut just before that turn), so a body of N assistant turns is N exchanges. Bodies
//! of one conversation (each the next request of the one before) give the same exchanges again,
//! kept once; two bodies that answer the same history differently contradict each other, an error
//! at the second.

use std::collections::HashMap;
use std::path::Path;

use serde_json::Value;

use super::{Exchange, ImportError, Outcome, Skip};
use crate::model::transcript::Role;
use crate::wire::{self, Provider};

/// The exchanges of one body or a list of bodies, and what is skipped.
pub(super) fn read(bytes: &[u8], path: &Path) -> Result<(Vec<Exchange>, Vec<Skip>), ImportError> {
    let text = std::str::from_utf8(bytes).map_err(|e| {
        let line = 1 + bytes[..e.valid_up_to()]
            .iter()
            .filter(|&&b| b == b'\n')
            .count();
        ImportError::at(
            path,
            line,
            "the input is not UTF-8: a request body is JSON text",
        )
    })?;
    let value: Value = serde_json::from_str(text).map_err(|e| {
        ImportError::at(
            path,
            e.line(),
            format!("the input is neither mock-llm's journal (JSON lines with an `exchange`) nor a JSON request body: {e}"),
        )
    })?;
    let bodies: Vec<Value> = match value {
        // A bare list of messages is one conversation.
        Value::Array(items) if items.first().is_some_and(|m| m.get("role").is_some()) => {
            vec![serde_json::json!({ "messages": items })]
        }
        Value::Array(items) => items,
        body @ Value::Object(_) => vec![body],
        _ => {
            return Err(ImportError::at(
                path,
                1,
                "a request body is a JSON object (or a list of them)",
            ))
        }
    };
    let mut exchanges: Vec<Exchange> = Vec::new();
    let mut skipped = Vec::new();
    // The requests seen, by their text, to the exchange that answered them.
    let mut seen: HashMap<String, usize> = HashMap::new();
    let mut unanswered: Vec<(usize, String, Value)> = Vec::new();
    for (i, body) in bodies.iter().enumerate() {
        let place = i + 1;
        let err = |message: String| ImportError::at(path, place, message);
        if !body.is_object() {
            return Err(err(format!(
                "item {place} is not a JSON object: a request body is one"
            )));
        }
        let provider = provider_of(body).ok_or_else(|| {
            err("not a request body: it has neither `messages` nor `input`".to_owned())
        })?;
        let request = wire::validate(provider, body).map_err(|r| {
            err(format!(
                "body {place} ({provider:?}) is one the provider refuses: {}",
                r.message()
            ))
        })?;
        let list_key = if provider == Provider::OpenAiResponses {
            "input"
        } else {
            "messages"
        };
        let mut answered_last = false;
        for (m, message) in request.messages.iter().enumerate() {
            if message.role != Role::Assistant {
                answered_last = false;
                continue;
            }
            answered_last = true;
            let cut = request.origin.message(m);
            // The request it answers ends before the turn's reasoning (a Responses reasoning
            // item comes before the output it led to).
            let mut before = body.clone();
            if let Some(list) = before.get_mut(list_key).and_then(Value::as_array_mut) {
                list.truncate(turn_start(&request, m));
            }
            let asked = match wire::validate(provider, &before) {
                Ok(asked) => asked,
                Err(r) => {
                    // A history that begins with an assistant turn (a restored child) has no
                    // request before it that a provider takes.
                    skipped.push(Skip {
                        line: place,
                        reason: format!(
                            "its assistant message {} answers no request a provider takes ({}): kept only as history",
                            cut + 1,
                            r.message()
                        ),
                    });
                    continue;
                }
            };
            let blocks: Vec<_> = message.content.iter().cloned().collect();
            let thinking = reasoning_of(provider, body, &request, m, place, &mut skipped);
            // The same history asked again (by a later body of the conversation), whatever the
            // other settings of the body (`max_tokens`, `stream`).
            let key = history_key(&asked);
            if let Some(&at) = seen.get(&key) {
                let Outcome::Reply { blocks: known, .. } = &exchanges[at].outcome else {
                    unreachable!("bodies give replies only")
                };
                if *known != blocks {
                    return Err(err(format!(
                        "body {place} answers the history of body {} (message {}) with another assistant turn: the bodies contradict each other",
                        exchanges[at].line,
                        cut + 1
                    )));
                }
                continue;
            }
            seen.insert(key, exchanges.len());
            exchanges.push(Exchange {
                line: place,
                item: true,
                number: exchanges.len() as u64 + 1,
                provider,
                body: before,
                request: asked,
                agent_header: None,
                address: None,
                outcome: Outcome::Reply {
                    blocks,
                    usage: None,
                    thinking,
                },
            });
        }
        if !answered_last && !request.messages.is_empty() {
            unanswered.push((place, history_key(&request), body.clone()));
        }
    }
    // A body whose request a later body answers (the next request of its conversation) is
    // answered.
    // The others are requests of the log too (their agent's, with the tool results they carry
    // back), which no reply answers.
    for (place, key, value) in unanswered {
        if seen.contains_key(&key) {
            continue;
        }
        skipped.push(Skip {
            line: place,
            reason: "its last message has no reply in the input (the request it makes is not scripted; add the reply you expect to its agent's script)".to_owned(),
        });
        let provider = provider_of(&value).expect("read before");
        let request = wire::validate(provider, &value).expect("validated before");
        exchanges.push(Exchange {
            line: place,
            item: true,
            number: exchanges.len() as u64 + 1,
            provider,
            body: value,
            request,
            agent_header: None,
            address: None,
            outcome: Outcome::Unanswered,
        });
    }
    Ok((exchanges, skipped))
}

/// The wire format of a body, by its keys and the shapes of its tools and messages.
fn provider_of(body: &Value) -> Option<Provider> {
    if body.get("input").is_some() || body.get("instructions").is_some() {
        return Some(Provider::OpenAiResponses);
    }
    let messages = body.get("messages")?.as_array()?;
    let tools = body.get("tools").and_then(Value::as_array);
    if tools.is_some_and(|t| t.iter().any(|t| t.get("function").is_some())) {
        return Some(Provider::OpenAiChat);
    }
    if body.get("system").is_some()
        || tools.is_some_and(|t| t.iter().any(|t| t.get("input_schema").is_some()))
    {
        return Some(Provider::Anthropic);
    }
    let chat_only = messages.iter().any(|m| {
        matches!(
            m.get("role").and_then(Value::as_str),
            Some("system" | "developer" | "tool")
        ) || m.get("tool_calls").is_some()
    });
    let anthropic_only = messages.iter().any(|m| {
        m.get("content").and_then(Value::as_array).is_some_and(|c| {
            c.iter().any(|b| {
                matches!(
                    b.get("type").and_then(Value::as_str),
                    Some("tool_use" | "tool_result")
                )
            })
        })
    });
    Some(if anthropic_only && !chat_only {
        Provider::Anthropic
    } else if chat_only || body.get("max_tokens").is_none() {
        Provider::OpenAiChat
    } else {
        Provider::Anthropic
    })
}

/// What a request asks, for telling the same request in two bodies: its model, system prompt and
/// history.
fn history_key(request: &crate::wire::Request) -> String {
    format!(
        "{:?}\u{0}{:?}\u{0}{:?}",
        request.model, request.system, request.messages
    )
}

/// The reasoning of assistant message `m` of a body: the thinking blocks of its Anthropic
/// messages, or the Responses reasoning items from the end of the message before it to the start
/// of the next (a reasoning item comes before the output it led to).
fn reasoning_of(
    provider: Provider,
    body: &Value,
    request: &wire::Request,
    m: usize,
    place: usize,
    skipped: &mut Vec<Skip>,
) -> Vec<super::Thought> {
    let key = if provider == Provider::OpenAiResponses {
        "input"
    } else {
        "messages"
    };
    let list = body
        .get(key)
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let low = turn_start(request, m);
    let end = request
        .origin
        .messages
        .get(m + 1)
        .copied()
        .unwrap_or(list.len())
        .min(list.len());
    let span = list.get(low..end).unwrap_or_default();
    let reply = match provider {
        Provider::Anthropic => {
            let content: Vec<Value> = span
                .iter()
                .flat_map(|message| match message.get("content") {
                    Some(Value::Array(blocks)) => blocks.clone(),
                    Some(Value::String(text)) => {
                        vec![serde_json::json!({"type": "text", "text": text})]
                    }
                    _ => Vec::new(),
                })
                .collect();
            serde_json::json!({ "content": content })
        }
        Provider::OpenAiChat => return Vec::new(),
        Provider::OpenAiResponses => serde_json::json!({ "output": span }),
    };
    match crate::wire::reply::reasoning(provider, &reply) {
        Ok(found) => super::thoughts(
            found,
            place,
            &format!("body {place}: its assistant turn"),
            skipped,
        ),
        Err(_) => Vec::new(),
    }
}

/// Where assistant message `m`'s turn starts in the body's list: past the last item of the
/// message before it (so a Responses reasoning item before its output is the turn's).
fn turn_start(request: &wire::Request, m: usize) -> usize {
    let start = request.origin.message(m);
    match m {
        0 => 0,
        _ => request
            .origin
            .blocks
            .get(m - 1)
            .into_iter()
            .flatten()
            .map(|&(item, _)| item + 1)
            .max()
            .unwrap_or(start),
    }
    .min(start)
}
