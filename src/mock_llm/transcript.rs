//! The transcript of `agentsim mock-llm`: its journal's exchanges in agentsim's rendering, pure.
//!
//! Each exchange is a heading (its number, method and path, the agent, conversation, turn and
//! script entry it was routed to) and what went each way, in the blocks and arrows of the
//! simulator's transcripts:
//!
//! ```text
//! #1 POST /v1/messages → main, conversation 1, turn 0, entry 1
//!    main → llm: 1 messages, tools [get_weather]; last: user text "What is the weather in Paris?"
//!    main ← llm: text "Let me check." + tool_use get_weather toolu_as_a_a_a {"location":"Paris"} [tokens 20 in, 9 out]
//! ```
//!
//! It is built from the journal's lines only, so a journal file renders to the same transcript.

use serde_json::Value;

use crate::model::transcript::Message;
use crate::report::{block, printable};
use crate::wire::{self, reply, Provider};

/// The provider whose format `path` speaks, if it is one of the served paths.
pub fn provider_of(path: &str) -> Option<Provider> {
    match path {
        "/v1/messages" => Some(Provider::Anthropic),
        "/v1/chat/completions" => Some(Provider::OpenAiChat),
        "/v1/responses" => Some(Provider::OpenAiResponses),
        _ => None,
    }
}

/// One journal line as transcript lines, each ending with a newline.
pub fn render(line: &Value) -> String {
    let str_of = |key: &str| line.get(key).and_then(Value::as_str).unwrap_or("");
    let n = line.get("exchange").and_then(Value::as_u64).unwrap_or(0);
    let path = str_of("path");
    let mut out = format!("#{n} {} {}", str_of("method"), printable(path));
    if line.get("stream").and_then(Value::as_bool) == Some(true) {
        out.push_str(" (stream)");
    }
    let address = line.get("address").filter(|a| a.is_object());
    let who = match address {
        Some(a) => {
            let agent = a.get("agent").and_then(Value::as_str).unwrap_or("?");
            out.push_str(&format!(
                " → {}, conversation {}, turn {}",
                printable(agent),
                a.get("conversation").unwrap_or(&Value::Null),
                a.get("turn").unwrap_or(&Value::Null)
            ));
            if let Some(e) = a.get("entry").filter(|e| !e.is_null()) {
                out.push_str(&format!(", entry {e}"));
            }
            printable(agent).into_owned()
        }
        None => "(not routed)".to_owned(),
    };
    out.push('\n');
    let provider = provider_of(path);
    if let (Some(provider), Some(request)) = (provider, line.get("request")) {
        // A Responses request's item references and previous response, as the server resolved
        // them (the journal keeps the request as it came).
        let resolved = line.get("resolved_input").map(|input| {
            let mut r = request.clone();
            r["input"] = input.clone();
            if let Some(o) = r.as_object_mut() {
                o.remove("previous_response_id");
            }
            r
        });
        if let Ok(decoded) = wire::decode(provider, resolved.as_ref().unwrap_or(request)) {
            out.push_str(&format!(
                "   {who} → llm: {} messages, tools [{}]",
                decoded.messages.len(),
                decoded.tools.join(", ")
            ));
            if let Some(last) = decoded.messages.last() {
                out.push_str(&format!("; last: {}", message(last)));
            }
            out.push('\n');
        }
    }
    let status = line.get("status").and_then(Value::as_u64);
    let response = line.get("response");
    let error_message = || {
        response
            .and_then(|r| {
                r.pointer("/error/message")
                    .or_else(|| r.pointer("/message"))
                    .and_then(Value::as_str)
            })
            .unwrap_or("")
            .to_owned()
    };
    let injected = line
        .pointer("/faults/injected")
        .and_then(Value::as_str)
        .map(|f| format!(" (injected fault {f})"))
        .unwrap_or_default();
    match str_of("outcome") {
        "reply" => {
            let body = response.map(|r| r.get("body").unwrap_or(r));
            match (provider, body) {
                (Some(provider), Some(body)) => match reply::decode(provider, body) {
                    Ok((blocks, usage)) => {
                        let parts: Vec<String> = reasoning_of(body)
                            .into_iter()
                            .map(|t| format!("thinking {:?}", crate::mock_llm::book::clip(&t, 60)))
                            .chain(blocks.iter().map(block))
                            .collect();
                        let content = if parts.is_empty() {
                            "empty".to_owned()
                        } else {
                            parts.join(" + ")
                        };
                        out.push_str(&format!(
                            "   {who} ← llm: {content} [tokens {} in, {} out]\n",
                            usage.input_tokens, usage.output_tokens
                        ));
                    }
                    Err(e) => out.push_str(&format!(
                        "   {who} ← llm: a reply that does not decode ({}: {})\n",
                        e.path, e.message
                    )),
                },
                _ => out.push_str(&format!("   {who} ← llm: a reply\n")),
            }
        }
        "fault" => {
            let what = match response
                .and_then(|r| r.get("fault"))
                .and_then(Value::as_str)
            {
                Some(fault) => format!("{fault}, status {}", status.unwrap_or(0)),
                None => format!("{}: {}", status.unwrap_or(0), error_message()),
            };
            out.push_str(&format!("   {who} ← llm fault {what}{injected}\n"));
        }
        "stall" => out.push_str(&format!(
            "   {who} ← llm: no answer (it stalls until the server stops)\n"
        )),
        "miss" => out.push_str(&format!(
            "   no reply ({}): {}\n",
            status.unwrap_or(0),
            error_message()
        )),
        "invalid" => {
            let rule = line
                .get("violation")
                .and_then(Value::as_str)
                .map_or("refused".to_owned(), |v| format!("violation [{v}]"));
            out.push_str(&format!(
                "   {rule} ({}): {}\n",
                status.unwrap_or(0),
                error_message()
            ));
        }
        other => out.push_str(&format!(
            "   {} ({}): {}\n",
            if other.is_empty() { "?" } else { other },
            status.unwrap_or(0),
            error_message()
        )),
    }
    out
}

/// The reasoning texts of a reply body: an Anthropic message's `thinking` blocks, a Responses
/// object's `reasoning` items (their summaries joined).
fn reasoning_of(body: &Value) -> Vec<String> {
    let list = body
        .get("content")
        .or_else(|| body.get("output"))
        .and_then(Value::as_array);
    list.into_iter()
        .flatten()
        .filter_map(|b| match b.get("type").and_then(Value::as_str) {
            Some("thinking") => b.get("thinking").and_then(Value::as_str).map(str::to_owned),
            Some("reasoning") => Some(
                b.get("summary")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .filter_map(|p| p.get("text").and_then(Value::as_str))
                    .collect(),
            ),
            _ => None,
        })
        .collect()
}

/// A journal (JSON lines) as a transcript; a line that is not JSON is named, never skipped.
pub fn render_journal(journal: &str) -> String {
    let mut out = String::new();
    for (i, line) in journal.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        match serde_json::from_str::<Value>(line) {
            Ok(v) => out.push_str(&render(&v)),
            Err(e) => out.push_str(&format!("line {}: not a journal entry: {e}\n", i + 1)),
        }
    }
    out
}

fn message(m: &Message) -> String {
    let role = match m.role {
        crate::model::transcript::Role::User => "user",
        crate::model::transcript::Role::Assistant => "assistant",
    };
    let content = if m.content.is_empty() {
        "empty".to_owned()
    } else {
        m.content.iter().map(block).collect::<Vec<_>>().join(" + ")
    };
    format!("{role} {content}")
}
