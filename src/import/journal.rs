//! mock-llm's journal (`--journal FILE`, one JSON exchange a line) read into exchanges: the
//! request as the server checked it, where it was routed, and the reply, fault or stall that
//! answered it. Every line is checked: a line that is not whole JSON, not UTF-8 or too long is an
//! error at its line; a record of a kind this reader does not know, or an exchange that is no
//! model call the script answered (a miss, a refused request), is a listed skip.

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::Value;

use super::{Exchange, Fault, ImportError, Outcome, Skip};
use crate::mock_llm::book::Address;
use crate::model::llm::LlmErrorKind;
use crate::wire::reply::{self, ErrorKind};
use crate::wire::{self, Provider};

/// The exchanges of a journal, in the order the server numbered them, and what is skipped.
pub(super) fn read(bytes: &[u8], path: &Path) -> Result<(Vec<Exchange>, Vec<Skip>), ImportError> {
    let mut exchanges = Vec::new();
    let mut skipped = Vec::new();
    let mut seen: BTreeMap<u64, usize> = BTreeMap::new();
    for (i, raw) in bytes.split(|&b| b == b'\n').enumerate() {
        let line = i + 1;
        let err = |message: String| ImportError::at(path, line, message);
        let Some(text) = super::line_text(path, line, raw, "a journal")? else {
            continue;
        };
        let record: Value = serde_json::from_str(text).map_err(|e| {
            let what = if e.is_eof() {
                "the line ends before its JSON does (a truncated journal?)"
            } else {
                "the line is not JSON"
            };
            err(format!("{what}: {e}"))
        })?;
        let Some(number) = record.get("exchange").and_then(Value::as_u64) else {
            return Err(err(
                "the line has no `exchange` number: it is not a line of mock-llm's journal".into(),
            ));
        };
        if let Some(first) = seen.insert(number, line) {
            return Err(err(format!(
                "exchange {number} is journaled twice (also at line {first})"
            )));
        }
        if let Some(exchange) = exchange(&record, line, number, path, &mut skipped)? {
            exchanges.push(exchange);
        }
    }
    // The server numbers exchanges as they arrive and journals them as they end: its book saw
    // them in the order of their numbers.
    exchanges.sort_by_key(|e| e.number);
    Ok((exchanges, skipped))
}

fn provider_of(path: &str) -> Option<Provider> {
    Provider::from_path(path)
}

/// One line read: an exchange to replay, or `None` when it is skipped (and listed).
fn exchange(
    record: &Value,
    line: usize,
    number: u64,
    path: &Path,
    skipped: &mut Vec<Skip>,
) -> Result<Option<Exchange>, ImportError> {
    let err = |message: String| ImportError::at(path, line, message);
    let mut skip = |reason: String| {
        skipped.push(Skip { line, reason });
        Ok(None)
    };
    let outcome = record.get("outcome").and_then(Value::as_str).unwrap_or("");
    let at = record.get("path").and_then(Value::as_str).unwrap_or("");
    let message = record
        .pointer("/response/error/message")
        .and_then(Value::as_str)
        .unwrap_or("");
    match outcome {
        "reply" | "fault" | "stall" | "miss" | "invalid" => {}
        "unknown-path" => {
            return skip(format!(
                "exchange {number}: a request to {at}, which mock-llm does not serve"
            ))
        }
        "unsupported" => {
            return skip(format!(
                "exchange {number}: refused as unsupported: {message}"
            ))
        }
        "upstream-error" => {
            let status = record.get("status").and_then(Value::as_u64).unwrap_or(0);
            return skip(format!(
                "exchange {number}: the upstream answered {status}, not a reply or a provider's retryable error: {message}"
            ));
        }
        "incomplete" => {
            return skip(format!(
                "exchange {number}: the client went away before its stream ended"
            ))
        }
        "" => return skip(format!("exchange {number}: a record without an `outcome`")),
        other => {
            return skip(format!(
                "exchange {number}: a record of an unknown kind (outcome `{other}`)"
            ))
        }
    }
    let Some(provider) = provider_of(at) else {
        return skip(format!(
            "exchange {number}: a {outcome} at {at:?}, not a model API path"
        ));
    };
    let address = match record.get("address") {
        None | Some(Value::Null) => None,
        Some(a) => Some(address(a).ok_or_else(|| {
            err(format!(
                "exchange {number}: `address` is not {{agent, conversation, turn, entry}}: {a}"
            ))
        })?),
    };
    if matches!(outcome, "miss" | "invalid") {
        let what = match record.get("violation").and_then(Value::as_str) {
            Some(rule) => format!("broke `{rule}`"),
            None => "had no scripted reply".to_owned(),
        };
        let _ = skip(format!("exchange {number}: the request {what}: {message}"));
        // A request the book addressed changed what it knows (a conversation opened, a turn
        // planned): it is asked again when the file is checked; any other is left out.
        if address.is_none() {
            return Ok(None);
        }
    }
    if record.get("unresolved").and_then(Value::as_bool) == Some(true) {
        return skip(format!(
            "exchange {number}: its Responses history refers to items or a response the recording never saw (`item_reference`, `previous_response_id`): it lives upstream"
        ));
    }
    let Some(mut body) = record.get("request").cloned() else {
        return skip(format!(
            "exchange {number}: the journal kept no request (it is written only with --journal)"
        ));
    };
    if let (Some(input), Some(fields)) = (record.get("resolved_input"), body.as_object_mut()) {
        fields.insert("input".into(), input.clone());
    }
    let request = match wire::validate(provider, &body) {
        Ok(r) => r,
        Err(_) if matches!(outcome, "miss" | "invalid") => return Ok(None),
        Err(rejection) => {
            return Err(err(format!(
                "exchange {number}: the journal says it was answered ({outcome}), but its request is one the server refuses: {}",
                rejection.message()
            )))
        }
    };
    let outcome = match outcome {
        "reply" => {
            let response = record.get("response").unwrap_or(&Value::Null);
            let body = if record.get("stream").and_then(Value::as_bool) == Some(true) {
                response.get("body").unwrap_or(&Value::Null)
            } else {
                response
            };
            let (blocks, usage) = reply::decode(provider, body).map_err(|m| {
                err(format!(
                    "exchange {number}: its reply is not a {provider:?} response: {}: {}",
                    m.path, m.message
                ))
            })?;
            let found = reply::reasoning(provider, body).map_err(|m| {
                err(format!(
                    "exchange {number}: its reply's reasoning is not a {provider:?} response's: {}: {}",
                    m.path, m.message
                ))
            })?;
            let thinking = super::thoughts(
                found,
                line,
                &format!("exchange {number}: its reply"),
                skipped,
            );
            Outcome::Reply {
                blocks,
                usage: Some(usage),
                thinking,
            }
        }
        "fault" => match fault(record, provider) {
            Ok(f) => {
                let unknown_kind = record.pointer("/faults/injected").is_none()
                    && record.pointer("/response/fault").and_then(Value::as_str)
                        == Some("mid_stream_error")
                    && record.pointer("/response/error_kind").is_none();
                if unknown_kind {
                    skipped.push(Skip {
                        line,
                        reason: format!("exchange {number}: the journal does not say which error broke its stream: written as `overloaded`"),
                    });
                }
                Outcome::Fault(f)
            }
            Err(reason) => return skip(format!("exchange {number}: {reason}")),
        },
        "stall" => Outcome::Stall,
        _ => Outcome::Unanswered,
    };
    Ok(Some(Exchange {
        line,
        item: false,
        number,
        provider,
        body,
        request,
        agent_header: record
            .get("agent_header")
            .and_then(Value::as_str)
            .map(str::to_owned),
        address,
        outcome,
    }))
}

fn address(v: &Value) -> Option<Address> {
    let conversation = usize::try_from(v.get("conversation")?.as_u64()?).ok()?;
    let turn = usize::try_from(v.get("turn")?.as_u64()?).ok()?;
    let agent = v.get("agent")?.as_str()?;
    // A name a scenario can declare (a fork's `main#1` aside, checked with its agent).
    if conversation == 0 || agent.trim().is_empty() || agent.contains(':') {
        return None;
    }
    Some(Address {
        agent: agent.to_owned(),
        conversation,
        turn,
        entry: match v.get("entry") {
            None | Some(Value::Null) => None,
            Some(e) => Some(usize::try_from(e.as_u64()?).ok()?),
        },
    })
}

/// The error a fault line answered with, as a script's `error:` writes it.
fn fault(record: &Value, provider: Provider) -> Result<Fault, String> {
    let status = record.get("status").and_then(Value::as_u64).unwrap_or(0);
    let response = record.get("response").unwrap_or(&Value::Null);
    let injected = record.pointer("/faults/injected").and_then(Value::as_str);
    let streamed = response.get("fault").and_then(Value::as_str);
    let (kind, mid_stream) = match (injected, streamed) {
        (Some("rate_limit"), _) => (LlmErrorKind::RateLimit, false),
        (Some("overloaded"), _) => (LlmErrorKind::Overloaded, false),
        (Some("server_error"), _) => (LlmErrorKind::Other, false),
        (Some("connection_dropped"), _) | (None, Some("connection dropped")) => {
            (LlmErrorKind::Network, false)
        }
        (Some("stream_error"), _) => (LlmErrorKind::Overloaded, true),
        // The kind of the error event, as the journal names it (older journals do not say:
        // `overloaded`, listed).
        (None, Some("mid_stream_error")) => match response.get("error_kind") {
            None => (LlmErrorKind::Overloaded, true),
            Some(name) => match serde_json::from_value::<LlmErrorKind>(name.clone()) {
                Ok(LlmErrorKind::Network) | Err(_) => {
                    return Err(format!(
                        "a stream broken by an error of an unknown kind {name}"
                    ))
                }
                Ok(kind) => (kind, true),
            },
        },
        (Some("stream_cut"), _) | (None, Some("mid_stream_cut")) => (LlmErrorKind::Network, true),
        (Some(other), _) => return Err(format!("an injected fault of an unknown kind `{other}`")),
        (None, Some(other)) => return Err(format!("a fault of an unknown kind `{other}`")),
        (None, None) => match status {
            429 => (LlmErrorKind::RateLimit, false),
            529 | 503 => (LlmErrorKind::Overloaded, false),
            500 => (LlmErrorKind::Other, false),
            other => {
                return Err(format!(
                    "a fault with status {other}, which no scripted error gives"
                ))
            }
        },
    };
    let message = if mid_stream {
        response.get("error_message").and_then(Value::as_str)
    } else {
        response.pointer("/error/message").and_then(Value::as_str)
    }
    .filter(|m| *m != ErrorKind::of(kind).default_message(provider))
    .filter(|m| *m != kind.default_message())
    .filter(|_| kind != LlmErrorKind::Network)
    .map(str::to_owned);
    Ok(Fault {
        kind,
        message,
        mid_stream,
        retry_after_ms: record.get("retry_after_ms").and_then(Value::as_u64),
    })
}
